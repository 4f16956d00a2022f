package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// The edges around the slot state machine, on a real server: every slot ends with
// its one terminal record whatever happens to the writes that complete it, a pause
// holds every attempt, and a trigger follows the job's overlap policy. The same
// scenarios run on the memory store under synctest in package scheduler.

// waitSlotStart sleeps until just after the start of the next slot of an interval
// that is at least lead away.
func waitSlotStart(t *testing.T, interval, lead time.Duration) time.Time {
	t.Helper()
	now := time.Now()
	slot := now.Truncate(interval).Add(interval)
	if slot.Sub(now) < lead {
		slot = slot.Add(interval)
	}
	sleepCtx(t, time.Until(slot))
	return slot
}

// statusesOf is the job's history as a slot → statuses map (manual runs under the
// key -1).
func statusesOf(t *testing.T, b backend.Backend, job string) map[int64][]scheduler.Status {
	t.Helper()
	recs, err := b.History(ctxT(t, 10*time.Second), job, 0)
	require.NoError(t, err)
	out := map[int64][]scheduler.Status{}
	for _, r := range recs {
		k := r.Slot.UnixMilli()
		if r.Manual {
			k = -1
		}
		out[k] = append(out[k], r.Status)
	}
	return out
}

// A handler that ends while its instance is cut off from the server for 3 s (call
// timeout 1 s) has its result stored once the connection is back, for the backend
// without leases and with them, for the scheduled run and for a manual run.
func TestResultStoredAfterPartitionNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	for _, withLeases := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "leases"}[withLeases]
		t.Run(name, func(t *testing.T) {
			proxy := startFaultProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
			nc := faultDial(t, "partitioned", proxy.URL(), nats.IgnoreDiscoveredServers())
			var b backend.Backend = plainBackend(t, nc)
			if withLeases {
				b = leased(t, nc, 1)
			}
			s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "partitioned", CallTimeout: time.Second})
			require.NoError(t, err)
			job := "partition-" + name
			require.NoError(t, s.Every(job, 5*time.Second, func(ctx context.Context, _ scheduler.Run) error {
				time.Sleep(2 * time.Second)
				return nil
			}, scheduler.WithLease(10*time.Second), scheduler.WithMaxLate(time.Second)))
			require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
			defer func() { require.NoError(t, s.Stop(ctxT(t, 20*time.Second))) }()

			slot := waitSlotStart(t, 5*time.Second, time.Second)
			go func() { _, _ = s.RunNow(context.Background(), job) }()
			sleepCtx(t, time.Until(slot.Add(time.Second)))
			proxy.partition(3 * time.Second) // both handlers end inside it
			sleepCtx(t, time.Until(slot.Add(4*time.Second)))

			observer := plainBackend(t, dial(t, srv.ClientURL()))
			var got map[int64][]scheduler.Status
			require.Eventually(t, func() bool {
				got = statusesOf(t, observer, job)
				return len(got[slot.UnixMilli()]) == 1 && got[slot.UnixMilli()][0] == scheduler.StatusOK &&
					len(got[-1]) == 1 && got[-1][0] == scheduler.StatusOK
			}, 20*time.Second, 100*time.Millisecond, "the scheduled and the manual run end ok in history")
			t.Logf("%s: after a 3 s partition: %v", name, got)
		})
	}
}

// flakyResults is a backend whose first failSaves result writes fail (a leader
// election on the result stream), and whose first failClaims claims fail (the claim
// that picks who records a slot that did not run).
type flakyResults struct {
	*jetstream.LeasedBackend
	failSaves, failClaims atomic.Int32
}

var errElection = errors.New("test: no leader (an election on the stream)")

func (f *flakyResults) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	if f.failSaves.Add(-1) >= 0 {
		return errElection
	}
	return f.LeasedBackend.SaveResult(ctx, job, r, keep)
}

func (f *flakyResults) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	if f.failClaims.Add(-1) >= 0 {
		return false, errElection
	}
	return f.LeasedBackend.Claim(ctx, in)
}

// One failed result write, and one failed claim of a skipped slot's record, are
// written again: the run ends ok and the skipped slot has its record.
func TestFailedWritesAreRetriedNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	nc := dial(t, srv.ClientURL())
	b := &flakyResults{LeasedBackend: leased(t, nc, 1)}
	b.failSaves.Store(1)
	b.failClaims.Store(1)
	s := newSched(t, b, "A", nil)
	job := "retried-writes"
	require.NoError(t, s.Every(job, 2*time.Second, func(ctx context.Context, _ scheduler.Run) error {
		time.Sleep(2500 * time.Millisecond) // into the next slot, which is skipped
		return nil
	}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(2*time.Second), scheduler.WithMaxLate(time.Second)))
	slot := waitSlotStart(t, 2*time.Second, time.Second)
	require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	// Stop once the run (to +2.5s) and the skipped slot at +2s are settled, and
	// before the slot at +4s is due (a slot claimed as Stop comes stays running).
	sleepCtx(t, time.Until(slot.Add(3500*time.Millisecond)))
	require.NoError(t, s.Stop(ctxT(t, 20*time.Second)))

	got := statusesOf(t, b, job)
	// The slot at start ran (its result's first write failed), the next was
	// skipped (its record's first claim failed), and so on: one record each.
	assert.Equal(t, []scheduler.Status{scheduler.StatusOK}, got[slot.UnixMilli()], "%v", got)
	assert.Equal(t, []scheduler.Status{scheduler.StatusSkipped}, got[slot.Add(2*time.Second).UnixMilli()], "%v", got)
	for k, sts := range got {
		assert.Len(t, sts, 1, "slot %d: %v", k, sts)
		for _, st := range sts {
			assert.NotEqual(t, scheduler.StatusRunning, st, "slot %d", k)
		}
	}
}

// An error longer than the server's max payload is stored cut, never left running.
func TestErrorLongerThanMaxPayloadNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	nc := dial(t, srv.ClientURL())
	b := leased(t, nc, 1)
	huge := strings.Repeat("x", 2*int(nc.MaxPayload()))
	s := newSched(t, b, "A", nil)
	// No scheduled slot (one due at Start, in the first minute of an hour, would be a
	// second record): the one run is RunNow's.
	require.NoError(t, s.Every("huge-error", time.Hour, func(context.Context, scheduler.Run) error { return errors.New(huge) },
		scheduler.WithStartAt(time.Now().Add(time.Hour))))
	require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	rec, err := s.RunNow(ctxT(t, 10*time.Second), "huge-error")
	require.NoError(t, err)
	require.NoError(t, s.Stop(ctxT(t, 10*time.Second)))
	assert.Equal(t, scheduler.StatusError, rec.Status)
	hist, err := b.History(ctxT(t, 10*time.Second), "huge-error", 0)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	assert.Equal(t, scheduler.StatusError, hist[0].Status)
	assert.LessOrEqual(t, len(hist[0].Error), scheduler.MaxErrorText)
	assert.Contains(t, hist[0].Error, "cut from")
}

// failingPausedFinish is a leased backend whose run store fails the first Finish
// that stores a paused slot.
type failingPausedFinish struct {
	*jetstream.LeasedBackend
	fail atomic.Int32
}

func (f *failingPausedFinish) Runs() backend.RunStore {
	return pausedFinishRuns{f.LeasedBackend.Runs(), f}
}

type pausedFinishRuns struct {
	backend.RunStore
	f *failingPausedFinish
}

func (r pausedFinishRuns) Finish(ctx context.Context, key backend.RunKey, status scheduler.Status) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if status == scheduler.StatusPaused && r.f.fail.Add(-1) >= 0 {
		return errElection
	}
	return r.RunStore.Finish(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}, status)
}

func (r pausedFinishRuns) Settle(ctx context.Context, st backend.Settlement) error {
	if st.Status == scheduler.StatusPaused && r.f.fail.Add(-1) >= 0 {
		return errElection
	}
	return r.RunStore.(backend.Settler).Settle(ctx, st)
}

func (r pausedFinishRuns) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	return r.RunStore.(backend.LeaseWatcher).WatchRun(ctx, job, slot)
}

// A slot that falls while its job is paused is not run, also when the winner's
// Finish(paused) fails once: three instances on kvlease, each failing its first.
func TestPausedSlotNeverRunsNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	var ran atomic.Int32
	job := "paused-finish"
	var scheds []*scheduler.Scheduler
	var backend backend.Backend
	for _, id := range []string{"A", "B", "C"} {
		b := &failingPausedFinish{LeasedBackend: leased(t, dial(t, srv.ClientURL()), 1)}
		b.fail.Store(1)
		backend = b
		s := newSched(t, b, id, nil)
		require.NoError(t, s.Every(job, time.Second, func(context.Context, scheduler.Run) error {
			ran.Add(1)
			return nil
		}, scheduler.WithLease(2*time.Second)))
		scheds = append(scheds, s)
	}
	require.NoError(t, scheds[0].Pause(ctxT(t, 10*time.Second), job, scheduler.PauseOptions{Reason: "freeze"}))
	for _, s := range scheds {
		require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	}
	sleepCtx(t, 5*time.Second)
	stopAll(t, scheds)
	assert.Zero(t, ran.Load(), "a paused job ran")
	got := statusesOf(t, backend, job)
	require.NotEmpty(t, got)
	for slot, sts := range got {
		assert.Equal(t, []scheduler.Status{scheduler.StatusPaused}, sts, "slot %d", slot)
	}
}

// A trigger of a job that forbids overlap is refused while a scheduled run of it is
// going on, on any instance: ten triggers during the run start nothing.
func TestTriggersFollowOverlapSkipNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	var mu sync.Mutex
	var running, most, manual int
	job := "no-overlap-trigger"
	f := startFleet(t, srv.ClientURL(), func(s *scheduler.Scheduler) error {
		return s.Every(job, 5*time.Second, func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			running++
			most = max(most, running)
			if r.Manual {
				manual++
			}
			mu.Unlock()
			time.Sleep(3 * time.Second)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(2*time.Second), scheduler.WithMaxLate(time.Second))
	})
	slot := waitSlotStart(t, 5*time.Second, time.Second)
	sleepCtx(t, time.Until(slot.Add(500*time.Millisecond)))
	for i := range 10 {
		_, err := f.scheds[i%3].RunNow(ctxT(t, 10*time.Second), job)
		require.ErrorIs(t, err, scheduler.ErrJobBusy, "trigger %d", i)
	}
	sleepCtx(t, time.Until(slot.Add(3500*time.Millisecond)))
	rec, err := f.scheds[1].RunNow(ctxT(t, 10*time.Second), job)
	require.NoError(t, err, "once the run ended, a trigger runs")
	assert.Equal(t, scheduler.StatusOK, rec.Status)
	stopAll(t, f.scheds)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, most, "never two runs of the job at once")
	assert.Equal(t, 1, manual, "only the trigger after the run ran")
}
