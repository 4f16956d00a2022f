package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// cancelTracker watches the handlers of one cancel-other job across instances.
type cancelTracker struct {
	mu        sync.Mutex
	cur, max  int
	overlaps  []string
	running   map[string]string // token -> slot
	starts    map[int64]int
	cancelled map[int64]bool // the slot's handler was asked to end
	again     []string       // a slot started again after it was asked to end
}

func newTracker() *cancelTracker {
	return &cancelTracker{running: map[string]string{}, starts: map[int64]int{}, cancelled: map[int64]bool{}}
}

// handler holds each run for hold(r), honours its context, and takes stop to stop.
func (tr *cancelTracker) handler(hold func(scheduler.Run) time.Duration, stop time.Duration) scheduler.Handler {
	return func(ctx context.Context, r scheduler.Run) error {
		ms := r.Slot.UnixMilli()
		tr.mu.Lock()
		if tr.cancelled[ms] {
			tr.again = append(tr.again, fmt.Sprintf("slot %s attempt %d on %s", r.Slot.Format(time.TimeOnly), r.Attempt, r.Instance))
		}
		tr.cur++
		if tr.cur > tr.max {
			tr.max = tr.cur
		}
		if tr.cur > 1 {
			others := []string{}
			for _, s := range tr.running {
				others = append(others, s)
			}
			tr.overlaps = append(tr.overlaps, fmt.Sprintf("at %s slot %s (manual %v) started beside %v", time.Now().Format(time.TimeOnly), r.Slot.Format("15:04:05.000"), r.Manual, others))
		}
		tr.running[r.Token] = r.Slot.Format("15:04:05.000")
		tr.starts[ms]++
		tr.mu.Unlock()
		defer func() {
			tr.mu.Lock()
			tr.cur--
			delete(tr.running, r.Token)
			tr.mu.Unlock()
		}()
		t := time.NewTimer(hold(r))
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), scheduler.ErrOverlapCancelled) {
				tr.mu.Lock()
				tr.cancelled[ms] = true
				tr.mu.Unlock()
			}
			time.Sleep(stop) // honours its context, but takes this long to stop
			return ctx.Err()
		}
	}
}

func (tr *cancelTracker) check(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	assert.Equal(t, 1, tr.max, "never two handlers of a cancel-other job at once: %v", tr.overlaps)
	assert.Empty(t, tr.again, "a run asked to end is never run again")
	t.Logf("starts per slot: %v; asked to end: %d", tr.starts, len(tr.cancelled))
}

// checkHistory asserts every due slot in [from, to] has a terminal record.
func checkHistory(t *testing.T, s *scheduler.Scheduler, job string, from, to time.Time, every time.Duration) {
	t.Helper()
	hist, err := s.History(context.Background(), job, 1000)
	require.NoError(t, err)
	bySlot := map[int64][]scheduler.RunRecord{}
	for _, r := range hist {
		bySlot[r.Slot.UnixMilli()] = append(bySlot[r.Slot.UnixMilli()], r)
		assert.NotEqual(t, scheduler.StatusRunning, r.Status, "nothing left running after Stop: %+v", r)
	}
	for at := from; !at.After(to); at = at.Add(every) {
		assert.NotEmpty(t, bySlot[at.UnixMilli()], "due slot %s has no record", at.Format(time.TimeOnly))
	}
}

func startN(t *testing.T, n int, b *memory.Backend, register func(*scheduler.Scheduler) error) []*scheduler.Scheduler {
	var out []*scheduler.Scheduler
	for i := range n {
		s := newScheduler(t, b, fmt.Sprintf("i%d", i))
		require.NoError(t, register(s))
		require.NoError(t, s.Start(t.Context()))
		out = append(out, s)
	}
	return out
}

func stopAll(t *testing.T, scheds []*scheduler.Scheduler) {
	for _, s := range scheds {
		// Handlers still going are cancelled by Stop after a second.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.Stop(ctx)
		cancel()
	}
}

// A job interval shorter than the time its handler takes to stop: each slot asks
// the one before it to end while that one is still stopping.
func TestCancelOtherSlowStopShortInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		first := time.Now().Truncate(time.Minute).Add(time.Minute)
		scheds := startN(t, 3, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Minute, tr.handler(func(scheduler.Run) time.Duration { return 5 * time.Minute }, 90*time.Second),
				scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second))
		})
		time.Sleep(12 * time.Minute)
		stopAll(t, scheds)
		tr.check(t)
		checkHistory(t, scheds[0], "job", first, first.Add(9*time.Minute), time.Minute)
	})
}

// Ten instances, runs of random length, a minute apart.
func TestCancelOtherTenInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		first := time.Now().Truncate(time.Minute).Add(time.Minute)
		scheds := startN(t, 10, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Minute, tr.handler(func(r scheduler.Run) time.Duration {
				return time.Duration(30+(r.Slot.Unix()/60*37)%150) * time.Second
			}, 5*time.Second), scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second))
		})
		time.Sleep(20 * time.Minute)
		stopAll(t, scheds)
		tr.check(t)
		checkHistory(t, scheds[0], "job", first, first.Add(18*time.Minute), time.Minute)
	})
}

// Many RunNow at once, from every instance, while a scheduled run runs.
func TestCancelOtherManyRunNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		scheds := startN(t, 5, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, tr.handler(func(r scheduler.Run) time.Duration {
				if r.Manual {
					return 10 * time.Second
				}
				return 50 * time.Minute
			}, 2*time.Second), scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second))
		})
		time.Sleep(time.Hour + time.Minute - time.Duration(time.Now().UnixNano()%int64(time.Hour)))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var results []string
		for i := range 20 {
			wg.Go(func() {
				rec, err := scheds[i%len(scheds)].RunNow(context.Background(), "job")
				mu.Lock()
				results = append(results, fmt.Sprintf("%v %v", rec.Status, err))
				mu.Unlock()
			})
		}
		wg.Wait()
		t.Logf("RunNow results: %v", results)
		time.Sleep(time.Minute)
		stopAll(t, scheds)
		tr.check(t)
		noneRunning(t, scheds[0], "job")
	})
}

// Catch-up of every missed slot at Start, with cancel-other.
func TestCancelOtherCatchUpAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		reg := func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Minute, tr.handler(func(scheduler.Run) time.Duration { return 150 * time.Second }, 20*time.Second),
				scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second),
				scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour), scheduler.WithCatchUpConcurrency(4))
		}
		scheds := startN(t, 3, b, reg)
		time.Sleep(3 * time.Minute)
		stopAll(t, scheds)
		time.Sleep(10 * time.Minute)
		scheds = startN(t, 3, b, reg)
		time.Sleep(8 * time.Minute)
		stopAll(t, scheds)
		tr.check(t)
		noneRunning(t, scheds[0], "job")
	})
}

// Backfill of past slots, several at once, and reruns, while a scheduled run runs.
func TestCancelOtherBackfill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		scheds := startN(t, 3, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Minute, tr.handler(func(r scheduler.Run) time.Duration {
				if r.Backfill {
					return 20 * time.Second
				}
				return 40 * time.Second
			}, 5*time.Second), scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second))
		})
		start := time.Now()
		time.Sleep(10*time.Minute + 10*time.Second)
		for _, opts := range [][]scheduler.BackfillOption{{scheduler.BackfillConcurrency(4)}, {scheduler.BackfillRerun(), scheduler.BackfillConcurrency(4)}} {
			res, err := scheds[1].Backfill(context.Background(), "job", start.Add(-30*time.Minute), time.Now(), opts...)
			t.Logf("backfill: %+v err %v", res.Slots, err)
		}
		time.Sleep(time.Minute)
		stopAll(t, scheds)
		tr.check(t)
		noneRunning(t, scheds[0], "job")
	})
}

// Pause while a request is pending; resume later.
func TestCancelOtherPauseWhilePending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		first := time.Now().Truncate(10 * time.Minute).Add(10 * time.Minute)
		scheds := startN(t, 3, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", 10*time.Minute, tr.handler(func(scheduler.Run) time.Duration { return time.Hour }, 30*time.Second),
				scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second))
		})
		time.Sleep(time.Until(first.Add(10*time.Minute + 5*time.Second)))
		require.NoError(t, scheds[2].Pause(context.Background(), "job", scheduler.PauseOptions{Reason: "maintenance", Until: time.Now().Add(12 * time.Minute)}))
		time.Sleep(30 * time.Minute)
		stopAll(t, scheds)
		tr.check(t)
		checkHistory(t, scheds[0], "job", first, first.Add(30*time.Minute), 10*time.Minute)
	})
}

// noneRunning asserts that no record of job in s's history is left running.
func noneRunning(t *testing.T, s *scheduler.Scheduler, job string) {
	t.Helper()
	hist, err := s.History(context.Background(), job, 1000)
	require.NoError(t, err)
	for _, r := range hist {
		assert.NotEqual(t, scheduler.StatusRunning, r.Status, "%+v", r)
	}
}
