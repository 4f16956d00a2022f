package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// causeLog keeps the cause that ended each slot's handler, by slot.
type causeLog struct {
	mu     sync.Mutex
	causes map[int64]error
}

func (l *causeLog) set(slot time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.causes == nil {
		l.causes = map[int64]error{}
	}
	l.causes[slot.UnixMilli()] = err
}

func (l *causeLog) of(slot time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.causes[slot.UnixMilli()]
}

// blockFirst is a handler that blocks in the job's slot first until its context
// ends (returning its error), and returns at once in every other slot.
func blockFirst(log *startLog, causes *causeLog, first time.Time) scheduler.Handler {
	return func(ctx context.Context, r scheduler.Run) error {
		log.add(r)
		if !r.Slot.Equal(first) {
			return nil
		}
		<-ctx.Done()
		causes.set(r.Slot, context.Cause(ctx))
		return ctx.Err()
	}
}

func historyOf(t *testing.T, s *scheduler.Scheduler, job string) map[int64]scheduler.RunRecord {
	t.Helper()
	hist, err := s.History(t.Context(), job, 50)
	require.NoError(t, err)
	out := map[int64]scheduler.RunRecord{}
	for _, r := range hist {
		out[r.Slot.UnixMilli()] = r
	}
	return out
}

// The slot due while the run before it still runs, on another instance, cancels
// it: the holder learns it at once through its watch of the run (at its next
// heartbeat on a store without one), its handler's context ends with
// a cause naming the slot that asked, its record says cancelled and by whom, and
// the new slot starts once the old run ended.
func TestCancelOtherReplacesALongRun(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(map[bool]string{true: "watch", false: "heartbeats only"}[watch], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testCancelOtherReplaces(t, watch) })
		})
	}
}

// noWatch is a leased backend whose run store has no watch: holders learn of a
// cancel request at their heartbeats, waiters poll.
type noWatch struct{ *memory.Backend }

func (n *noWatch) Runs() backend.RunStore {
	r := n.Backend.Runs()
	return struct {
		backend.RunStore
		backend.OverlapCanceller
	}{r, r.(backend.OverlapCanceller)}
}

func testCancelOtherReplaces(t *testing.T, watch bool) {
	var b backend.Backend = memory.New()
	if !watch {
		b = &noWatch{memory.New()}
	}
	log, causes := &startLog{}, &causeLog{}
	events := newEventLog(scheduler.EventCancelRequested)
	first := time.Now()
	var scheds []*scheduler.Scheduler
	for _, id := range []string{"A", "B", "C"} {
		s := newScheduler(t, b, id, func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("job", 10*time.Minute, blockFirst(log, causes, first),
			scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		scheds = append(scheds, s)
	}
	second := first.Add(10 * time.Minute)
	time.Sleep(10*time.Minute + 30*time.Second)
	for _, s := range scheds {
		require.NoError(t, s.Stop(t.Context()))
	}
	starts, at := log.get()
	require.Len(t, starts, 2, "the first slot, then the second: %+v", starts)
	assert.True(t, starts[0].Slot.Equal(first))
	assert.True(t, starts[1].Slot.Equal(second))
	if watch {
		assert.Zero(t, at[1].Sub(second), "the holder's watch of its run tells it at once; the new slot starts on time")
	} else {
		assert.LessOrEqual(t, at[1].Sub(second), 3*time.Second/3+3*time.Second/2, "within a heartbeat (lease/3) and a poll (lease/2)")
	}

	cause := causes.of(first)
	require.ErrorIs(t, cause, scheduler.ErrOverlapCancelled, "the first run's context ended because the second asked")
	asked := events.of(scheduler.EventCancelRequested)
	require.Len(t, asked, 1, "told once: %+v", asked)
	assert.Equal(t, starts[0].Instance, asked[0].Instance, "told on the instance that ran it")
	assert.True(t, asked[0].Next.Equal(second), "the slot that asked")

	hist := historyOf(t, scheds[0], "job")
	old := hist[first.UnixMilli()]
	assert.Equal(t, scheduler.StatusCancelled, old.Status, "%+v", old)
	assert.Contains(t, old.Error, "cancel-other")
	assert.Contains(t, old.Error, "slot "+second.UTC().Format(time.RFC3339Nano)+" asked from instance ")
	assert.Equal(t, scheduler.StatusOK, hist[second.UnixMilli()].Status)
}

// A handler that ignores its context keeps its run: the slot that asked waits, and
// is recorded late once its max lateness passed, saying why.
func TestCancelOtherIgnoredIsLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		first := time.Now()
		var runs sync.Map
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", 10*time.Minute, func(ctx context.Context, r scheduler.Run) error {
			runs.Store(r.Slot.UnixMilli(), true)
			if r.Slot.Equal(first) {
				time.Sleep(12 * time.Minute) // ignores its context
			}
			return nil
		}, scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(13 * time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		second := first.Add(10 * time.Minute)
		_, ran := runs.Load(second.UnixMilli())
		assert.False(t, ran, "the second slot never ran beside the first")
		hist := historyOf(t, s, "job")
		assert.Equal(t, scheduler.StatusOK, hist[first.UnixMilli()].Status, "the first run ended on its own")
		late := hist[second.UnixMilli()]
		assert.Equal(t, scheduler.StatusLate, late.Status, "%+v", late)
		assert.Contains(t, late.Error, "asked to end (overlap policy cancel-other) had not ended by the slot's deadline")
	})
}

// A run asked to end whose holder died is not taken over: the backup that finds
// its lease expired ends it cancelled, and the slot that asked runs, once.
func TestCancelOtherHolderDied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		first := time.Now()
		// A holder that won the first slot, with a long lease, and died at once.
		res, err := b.Runs().Claim(t.Context(), backend.RunClaim{Job: "job", Slot: first, Token: "dead", Instance: "D",
			Lease: 10*time.Minute + 30*time.Second, Deadline: first.Add(time.Minute), Overlap: backend.OverlapCancelOther})
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeWon, res.Outcome)
		log := &startLog{}
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", 10*time.Minute, func(_ context.Context, r scheduler.Run) error {
			log.add(r)
			return nil
		}, scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second)))
		require.NoError(t, s.Start(t.Context())) // stands by for the first slot
		time.Sleep(11 * time.Minute)             // the second slot asks at 00:10; the lease ends at 00:10:30
		require.NoError(t, s.Stop(t.Context()))
		second := first.Add(10 * time.Minute)
		starts, at := log.get()
		require.Len(t, starts, 1, "%+v", starts)
		assert.True(t, starts[0].Slot.Equal(second), "only the second slot ran")
		ended := first.Add(10*time.Minute + 30*time.Second)
		assert.False(t, at[0].Before(ended), "not before the dead holder's lease ended: %v", at[0])
		assert.LessOrEqual(t, at[0].Sub(ended), 3*time.Second, "within a lease of its end: %v", at[0])

		d, err := b.Runs().Claim(t.Context(), backend.RunClaim{Job: "job", Slot: first, Token: "probe", Instance: "P",
			Lease: 3 * time.Second, Deadline: time.Now().Add(time.Minute), Overlap: backend.OverlapCancelOther})
		require.NoError(t, err)
		assert.Equal(t, backend.OutcomeDone, d.Outcome)
		assert.Equal(t, backend.StatusCancelled, d.Status, "the dead holder's run ended cancelled, not taken over: %+v", d)
	})
}

// RunNow of a cancel-other job asks the run in progress to end, waits for it and
// then runs.
func TestRunNowCancelsOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log, causes := &startLog{}, &causeLog{}
		first := time.Now()
		a, bb := newScheduler(t, b, "A"), newScheduler(t, b, "B")
		for _, s := range []*scheduler.Scheduler{a, bb} {
			require.NoError(t, s.Every("job", time.Hour, blockFirst(log, causes, first),
				scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second)))
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(time.Minute)
		starts, _ := log.get()
		require.Len(t, starts, 1)
		other := map[string]*scheduler.Scheduler{"A": bb, "B": a}[starts[0].Instance]
		rec, err := other.RunNow(t.Context(), "job", scheduler.RequestedBy("ana"))
		require.NoError(t, err)
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		assert.True(t, rec.Manual)
		assert.ErrorIs(t, causes.of(first), scheduler.ErrOverlapCancelled)
		starts, at := log.get()
		require.Len(t, starts, 2)
		assert.Zero(t, at[1].Sub(at[0].Add(time.Minute)), "the manual run starts at once")
		for _, s := range []*scheduler.Scheduler{a, bb} {
			require.NoError(t, s.Stop(t.Context()))
		}
		assert.Equal(t, scheduler.StatusCancelled, historyOf(t, a, "job")[first.UnixMilli()].Status)

		// A caller that stops waiting gets its context's error, and nothing runs.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = other.RunNow(ctx, "job")
		assert.Error(t, err)
	})
}

// Registration refuses cancel-other on a run store that cannot store the request,
// and on a backend without leases.
func TestCancelOtherNeedsTheStore(t *testing.T) {
	nopHandler := func(context.Context, scheduler.Run) error { return nil }
	s := newScheduler(t, &noRetrier{memory.New()}, "A")
	err := s.Every("job", time.Hour, nopHandler, scheduler.WithOverlap(scheduler.OverlapCancelOther))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.ErrorContains(t, err, "backend.OverlapCanceller")

	plain := newScheduler(t, struct{ backend.Backend }{memory.New()}, "B")
	err = plain.Every("job", time.Hour, nopHandler, scheduler.WithOverlap(scheduler.OverlapCancelOther))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.ErrorContains(t, err, "needs a backend with leases")
}

// A request stored as the handler starts, before its instance watches the run,
// still ends the handler at once: the holder beats once its watch is taken.
func TestCancelOtherAskedAsItStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		var waited atomic.Int64
		waited.Store(-1)
		require.NoError(t, s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
			res, err := b.Runs().Claim(context.Background(), backend.RunClaim{Job: "job", Slot: r.Slot.Add(time.Minute), Token: "asker",
				Instance: "B", Lease: 3 * time.Second, Deadline: time.Now().Add(time.Minute), Overlap: backend.OverlapCancelOther})
			if err != nil || res.Outcome != backend.OutcomeRunning {
				return fmt.Errorf("the asking claim: %+v, %v", res, err)
			}
			start := time.Now()
			<-ctx.Done()
			waited.Store(int64(time.Since(start)))
			return ctx.Err()
		}, scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(30*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		assert.Zero(t, waited.Load(), "the handler's context ended at once, not at the heartbeat 10 s later")
	})
}
