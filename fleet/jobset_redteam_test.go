package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// TestJobRegisteredAfterServeCannotSwallowTheFleet: Serve refuses a replica
// whose job "ops" would have its stream listen on anarchon.ops.> under the
// fleet prefix anarchon.ops (TestServeRefusesOverlappingSubjects). Registered
// after Serve, the same job must not reach the fleet's subjects either: the
// fleet's requests about other jobs are still answered by the fleet, never by
// the job stream's publish acknowledgement.
func TestJobRegisteredAfterServeCannotSwallowTheFleet(t *testing.T) {
	const prefix = "anarchon.ops"
	f := startFleet(t, fleetSetup{
		instances: []string{"A"},
		quiet:     true,
		serve:     []fleet.Option{fleet.WithPrefix(prefix)},
		client:    []fleet.Option{fleet.WithPrefix(prefix)},
		backendFor: func(t testing.TB, nc *nats.Conn) backend.Backend {
			b, err := jetstream.New(natstest.JetStream(t, nc))
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close(context.Background()) })
			return b
		},
		jobs: func(string) []testJob { return []testJob{every(jobReport, time.Hour)} },
	})
	ctx := requestCtx(t)
	s := f.replicas[0].s
	err := s.Every("ops", time.Hour, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithStartAt(f.start))
	require.ErrorIs(t, err, fleet.ErrSubjectsOverlap, "refused at the registration, before its stream exists")
	assert.NotContains(t, jobNamesOf(s), "ops")
	for i := range 20 {
		h, err := f.client.History(ctx, jobReport, 10)
		require.NoError(t, err, "request %d: the fleet answers, not a stream", i)
		assert.Equal(t, jobReport, h.Job, "request %d", i)
		fl, err := f.client.Jobs(ctx)
		require.NoError(t, err, "request %d", i)
		require.Len(t, fl.Replicas, 1, "request %d", i)
	}
}

func jobNamesOf(s *scheduler.Scheduler) []string {
	var names []string
	for _, j := range s.Jobs() {
		names = append(names, j.Job)
	}
	return names
}

// TestStopWhileJobsAreRegistered: a job registered while the service stops is
// either served and unsubscribed by Stop, or never served: once Stop returned,
// a request about any job gets no responders at once, never waits unanswered
// until the client's timeout on a subscription nobody reads.
func TestStopWhileJobsAreRegistered(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, quiet: true})
	r := f.replicas[0]
	h := func(context.Context, scheduler.Run) error { return nil }
	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if err := r.s.Every(fmt.Sprint("late-", i), time.Hour, h, scheduler.WithStartAt(f.start)); err != nil {
				t.Errorf("register %d: %v", i, err)
				return
			}
		}
	}()
	// Stop while the service follows the registrations.
	require.Eventually(t, func() bool { return len(r.s.Jobs()) > 50 }, 10*time.Second, time.Millisecond)
	require.NoError(t, r.svc.Stop(context.Background()))
	wg.Wait()

	for i := n - 1; i >= 0; i-- {
		subject := "anarchon.HISTORY." + fleet.JobToken(fmt.Sprint("late-", i))
		_, err := f.nc.Request(subject, []byte(`{"v":1}`), time.Second)
		require.True(t, errors.Is(err, nats.ErrNoResponders),
			"job %d: a request after Stop gets no responders at once, not %v", i, err)
	}
}

// TestConflictClearedWhenAJobIsRedeclared: C declares report differently from
// A and B; once C removes it and registers it again as A and B declare it, C's
// last job_conflict event for report says it cleared (a metric that follows
// the events must not stay at 1), as A's and B's do.
func TestConflictClearedWhenAJobIsRedeclared(t *testing.T) {
	f := startFleet(t, fleetSetup{jobs: disagreeing, quiet: true})
	c := f.replicas[2]
	for _, r := range f.replicas {
		f.waitConflict(t, r, jobReport, "schedule: ", 5*time.Second)
	}
	require.NoError(t, c.s.RemoveJob(jobReport))
	require.Eventually(t, func() bool {
		fl, err := f.client.Jobs(requestCtx(t))
		return err == nil && len(fl.Registered) == 3 && len(fl.Registered[2].Jobs) == 0
	}, 10*time.Second, 20*time.Millisecond, "C's registry entry no longer declares report")
	require.NoError(t, c.s.Every(jobReport, time.Hour, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithStartAt(f.start)))
	require.Eventually(t, func() bool {
		fl, err := f.client.Jobs(requestCtx(t))
		if err != nil {
			return false
		}
		return len(fl.Registered) == 3 && len(fl.Registered[2].Jobs) == 1 &&
			fl.Registered[2].Jobs[0].Schedule == fl.Registered[0].Jobs[0].Schedule
	}, 10*time.Second, 20*time.Millisecond, "C's registry entry declares report hourly")
	for _, r := range f.replicas {
		f.waitConflict(t, r, jobReport, "", 5*time.Second)
	}
	assert.Empty(t, c.svc.Conflicts())
}

// TestThousandJobsComeAndGo: a replica registers 1,000 jobs with long names
// after Serve (its registry entry grows from one value into parts), then
// removes all but one (back to one value): the other replica's view and the
// client's follow, with no conflict reported, and each job is served while
// registered.
func TestThousandJobsComeAndGo(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A", "B"}, quiet: true,
		jobs: func(string) []testJob { return []testJob{every(jobReport, time.Hour)} }})
	a, b := f.replicas[0], f.replicas[1]
	h := func(context.Context, scheduler.Run) error { return nil }
	name := func(i int) string { return fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 200)) }
	const n = 1000
	for i := range n {
		for _, r := range []*replica{a, b} {
			require.NoError(t, r.s.Every(name(i), time.Hour, h, scheduler.WithStartAt(f.start)))
		}
	}
	on := func(want int) func() bool {
		return func() bool {
			fl, err := f.client.Jobs(requestCtx(t))
			if err != nil || len(fl.Unreadable) > 0 || len(fl.Registered) != 2 {
				return false
			}
			for _, reg := range fl.Registered {
				if len(reg.Jobs) != want {
					return false
				}
			}
			return len(fl.Jobs) == want
		}
	}
	require.Eventually(t, on(n+1), 30*time.Second, 100*time.Millisecond, "both entries list every job")
	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	for _, reg := range fl.Registered {
		assert.Equal(t, 2, reg.Format, "%s: an entry of 1,000 long names is in parts", reg.Instance)
	}
	_, err = f.client.History(requestCtx(t), name(n-1), 1)
	require.NoError(t, err, "the last job registered is served")
	assert.Empty(t, a.svc.Conflicts())
	assert.Empty(t, b.svc.Conflicts())

	for i := range n {
		require.NoError(t, a.s.RemoveJob(name(i)))
	}
	require.Eventually(t, func() bool {
		fl, err := f.client.Jobs(requestCtx(t))
		if err != nil || len(fl.Registered) != 2 {
			return false
		}
		return fl.Registered[0].Instance == "A" && len(fl.Registered[0].Jobs) == 1 && fl.Registered[0].Format == 1
	}, 30*time.Second, 100*time.Millisecond, "A's entry is one value again")
	for i := range n {
		for range 3 { // the queue group may pick either replica: B answers
			_, err := f.client.History(requestCtx(t), name(i), 1)
			require.NoError(t, err, "job %d is served by B", i)
		}
	}
	assert.Empty(t, a.svc.Conflicts())
	assert.Empty(t, b.svc.Conflicts())
}

// TestRequestsDuringRemovalAreNeverUnknown: B declares "flip" throughout; A
// registers and removes it over and over while clients ask for its active
// runs. An answer from A in the moment after its removal may say "ask again"
// (503), never that the job is unknown (404): B declares it.
func TestRequestsDuringRemovalAreNeverUnknown(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A", "B"}, quiet: true})
	a, b := f.replicas[0], f.replicas[1]
	h := func(context.Context, scheduler.Run) error { return nil }
	const job = "flip"
	require.NoError(t, b.s.Every(job, time.Hour, h, scheduler.WithStartAt(f.start)))
	servedBy := func(want string) func() bool {
		return func() bool {
			fl, err := f.client.Jobs(requestCtx(t))
			if err != nil {
				return false
			}
			for _, j := range fl.Jobs {
				if j.Name == job {
					return slices.Contains(j.Replicas, want)
				}
			}
			return false
		}
	}
	require.Eventually(t, servedBy("B"), 10*time.Second, 10*time.Millisecond)
	var unknown atomic.Int32
	for round := range 20 {
		require.NoError(t, a.s.Every(job, time.Hour, h, scheduler.WithStartAt(f.start)))
		require.Eventually(t, servedBy("A"), 10*time.Second, 10*time.Millisecond, "round %d", round)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := f.client.Active(requestCtx(t), job)
					if errors.Is(err, fleet.ErrUnknownJob) {
						unknown.Add(1)
						t.Logf("round %d: %v", round, err)
					}
				}
			})
		}
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, a.s.RemoveJob(job))
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
	}
	assert.Zero(t, unknown.Load(), "answers that said a job B declares is unknown")
}
