package jetstream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/scheduler"
)

// Red team (issue 20, repair on read, mixed fleet): History on a started
// scheduler with leases ends a record left running "by an attempt that can no
// longer end it", judged from its run store. In a mixed fleet (a rolling upgrade),
// a slot run by an instance without leases is decided by the slot's claim: the
// leased instance's own lease of it was finished skipped there (claimed
// elsewhere). A History read on the leased instance, once the plain run's record
// is older than the grace (3 x CallTimeout), takes that skipped for the plain run's
// ending and stores it ("ended skipped in the run store, whose result was never
// stored") while the run is still going on the plain instance, alive; every
// reader then sees skipped until the run's own result comes (an instance started
// after the slot's deadline, with nothing in its store, stores it lost instead). A
// run that is still running must stay running.
func TestMixedFleetHistoryKeepsAPlainRunRunning(t *testing.T) {
	s := startServer(t, embedded.Options{})
	ctx := ctxFor(t)
	job := jobName("mixed-repair")

	release := make(chan struct{})
	var once sync.Once
	started := make(chan time.Time, 1)
	plain, err := scheduler.New(scheduler.Config{Backend: newBackend(t, connect(t, s)), Instance: "plain"})
	require.NoError(t, err)
	require.NoError(t, plain.Every(job, 4*time.Second, func(ctx context.Context, r scheduler.Run) error {
		first := false
		once.Do(func() { first = true })
		if first {
			started <- r.Slot
			<-release // a long run, alive
		}
		return nil
	}, scheduler.WithMaxLate(500*time.Millisecond)))
	require.NoError(t, plain.Start(ctx))
	defer func() {
		once.Do(func() {})
		require.NoError(t, plain.Stop(context.Background()))
	}()
	defer close(release)
	var slot time.Time
	select {
	case slot = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the plain instance did not run a slot")
	}

	lb, err := NewLeased(connect(t, s), scheduler.NewMemoryRunStore(scheduler.SystemClock{}))
	require.NoError(t, err)
	leased, err := scheduler.New(scheduler.Config{Backend: lb, Instance: "leased", CallTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, leased.Every(job, 4*time.Second, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithMaxLate(500*time.Millisecond)))
	require.NoError(t, leased.Start(ctx))
	defer func() { require.NoError(t, leased.Stop(context.Background())) }()

	// Past the leased instance's grace (3 x its CallTimeout) after the claim.
	time.Sleep(time.Until(slot.Add(3500 * time.Millisecond)))
	status := func(sc *scheduler.Scheduler) scheduler.RunRecord {
		recs, err := sc.History(ctx, job, 0)
		require.NoError(t, err)
		for _, r := range recs {
			if r.Slot.Equal(slot) {
				return r
			}
		}
		t.Fatalf("no record of slot %v: %+v", slot, recs)
		return scheduler.RunRecord{}
	}
	r := status(leased)
	assert.Equal(t, scheduler.StatusRunning, r.Status, "read on the leased instance: %s %q", r.Status, r.Error)
	r = status(plain)
	assert.Equal(t, scheduler.StatusRunning, r.Status, "read again on the plain instance: %s %q", r.Status, r.Error)
}
