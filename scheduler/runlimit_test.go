package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// limitEvents counts EventLimitReached by instance.
type limitEvents struct {
	mu sync.Mutex
	by map[string]int
}

func (l *limitEvents) hook(e scheduler.Event) {
	if e.Kind != scheduler.EventLimitReached {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by[e.Instance]++
}

func (l *limitEvents) get() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.by {
		out[k] = v
	}
	return out
}

// limitStatuses counts the job's history records by status, and returns the newest
// scheduled slot that ran and the oldest stored limit.
func limitStatuses(t *testing.T, s *scheduler.Scheduler, job string) (map[scheduler.Status]int, time.Time, time.Time) {
	t.Helper()
	recs, err := s.History(t.Context(), job, 100)
	require.NoError(t, err)
	out := map[scheduler.Status]int{}
	var lastRun, firstLimit time.Time
	for _, r := range recs {
		if r.Manual {
			continue
		}
		out[r.Status]++
		switch {
		case r.Status == scheduler.StatusLimit && (firstLimit.IsZero() || r.Slot.Before(firstLimit)):
			firstLimit = r.Slot
		case r.Status == scheduler.StatusOK && r.Slot.After(lastRun):
			lastRun = r.Slot
		}
	}
	return out, lastRun, firstLimit
}

// Three instances of a job limited to 3 runs: exactly 3 slots run fleet-wide,
// later slots are recorded limit, every instance's loop ends (one event each, no
// next slot), and RunNow still runs the job. An instance started afterwards ends
// its loop at its first claim.
func TestMaxRunsFleetWide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(5 * time.Second) // between slots
		b := memory.New()
		log := newRunLog()
		ev := &limitEvents{by: map[string]int{}}
		start := func(id string) *scheduler.Scheduler {
			s := newScheduler(t, b, id, func(c *scheduler.Config) { c.OnEvent = ev.hook })
			require.NoError(t, s.Every("limited", 10*time.Second, log.handler,
				scheduler.WithMaxRuns(3), scheduler.WithJitter(time.Second)))
			require.NoError(t, s.Start(t.Context()))
			return s
		}
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			scheds = append(scheds, start(id))
		}
		assert.False(t, scheds[0].Jobs()[0].Next.IsZero(), "before the limit, a next slot")
		assert.Equal(t, 3, scheds[0].Jobs()[0].MaxRuns)
		time.Sleep(2 * time.Minute)
		synctest.Wait()

		slots, times := slotsOf(log.snapshot())
		require.Len(t, slots, 3, "three slots ran fleet-wide: %v", slots)
		for ms, n := range times {
			assert.Equal(t, 1, n, "slot %v ran %d times", time.UnixMilli(ms).UTC(), n)
		}
		assert.Equal(t, map[string]int{"A": 1, "B": 1, "C": 1}, ev.get(), "each instance is told once")
		for _, s := range scheds {
			info := s.Jobs()[0]
			assert.True(t, info.LimitReached, "%s: the loop ended", s.Instance())
			assert.True(t, info.Next.IsZero(), "%s: no next slot once the limit is reached: %v", s.Instance(), info.Next)
		}
		st, lastRun, firstLimit := limitStatuses(t, scheds[0], "limited")
		assert.Equal(t, 3, st[scheduler.StatusOK], "history: %v", st)
		require.GreaterOrEqual(t, st[scheduler.StatusLimit], 1, "the slot after the third is recorded limit: %v", st)
		assert.Len(t, st, 2, "ok and limit only: %v", st)
		assert.True(t, firstLimit.After(lastRun), "no slot recorded limit before the third ran: %v, %v", lastRun, firstLimit)

		// The loops ended: nothing more is claimed or recorded.
		time.Sleep(time.Minute)
		synctest.Wait()
		again, _, _ := limitStatuses(t, scheds[0], "limited")
		assert.Equal(t, st, again, "no further claims once every loop ended")

		rec, err := scheds[1].RunNow(t.Context(), "limited")
		require.NoError(t, err, "RunNow still runs an ended job")
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		assert.True(t, rec.Manual)

		// A restarted instance: its first claim finds the limit, its loop ends.
		d := start("D")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.True(t, d.Jobs()[0].LimitReached, "the first claim ends the loop")
		assert.Equal(t, 1, ev.get()["D"])
		after, _, _ := limitStatuses(t, scheds[0], "limited")
		assert.Equal(t, st[scheduler.StatusLimit]+1, after[scheduler.StatusLimit], "one slot claimed, recorded limit: %v", after)
		assert.Len(t, log.snapshot(), 4, "three scheduled runs and the manual one")
		stopAll(t, append(scheds, d))
	})
}

// A slot buffered behind a running one is counted: with a limit of 2, a run
// that outlasts its slot and the buffered slot are the two runs, and the
// buffering claims end the loops.
func TestMaxRunsCountsBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(5 * time.Second)
		b := memory.New()
		var mu sync.Mutex
		var ran []time.Time
		slow := func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			ran = append(ran, r.Slot)
			mu.Unlock()
			time.Sleep(15 * time.Second)
			return nil
		}
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("buffered", 10*time.Second, slow,
				scheduler.WithMaxRuns(2), scheduler.WithOverlap(scheduler.OverlapBufferOne)))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		mu.Lock()
		assert.Len(t, ran, 2, "the first slot and the buffered one: %v", ran)
		mu.Unlock()
		st, _, _ := limitStatuses(t, scheds[0], "buffered")
		// Every claimer of the buffered slot is told it was the last counted:
		// no loop claims a further slot.
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 2}, st)
		for _, s := range scheds {
			assert.True(t, s.Jobs()[0].LimitReached, "%s", s.Instance())
		}
		stopAll(t, scheds)
	})
}

// WithMaxRuns is refused below 1, without leases, and with a run store that
// does not count runs.
func TestMaxRunsRefused(t *testing.T) {
	noop := func(context.Context, scheduler.Run) error { return nil }
	s := newScheduler(t, memory.New(), "A")
	for _, n := range []int{0, -1} {
		err := s.Every("job", time.Minute, noop, scheduler.WithMaxRuns(n))
		require.ErrorIs(t, err, scheduler.ErrInvalidOption, "max runs %d", n)
	}
	err := newScheduler(t, noBuffers{memory.New()}, "A").Every("job", time.Minute, noop, scheduler.WithMaxRuns(3))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "backend.RunCounter")
	err = newScheduler(t, withoutLeases{memory.New()}, "A").Every("job", time.Minute, noop, scheduler.WithMaxRuns(3))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "needs a backend with leases")
	err = newScheduler(t, countsNotBuffered{memory.New()}, "A").Every("job", time.Minute, noop, scheduler.WithMaxRuns(3), scheduler.WithOverlap(scheduler.OverlapBufferOne))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "backend.BufferedRunCounter")
	require.NoError(t, newScheduler(t, countsNotBuffered{memory.New()}, "A").Every("job", time.Minute, noop, scheduler.WithMaxRuns(3), scheduler.WithOverlap(scheduler.OverlapSkip)))
	require.NoError(t, s.Every("job", time.Minute, noop, scheduler.WithMaxRuns(1)))
	assert.Equal(t, 1, s.Jobs()[0].MaxRuns)
}

// countsNotBuffered is a leased backend whose run store counts runs and buffers
// slots but does not count a buffered slot as it stores it (as kvlease).
type countsNotBuffered struct{ *memory.Backend }

func (n countsNotBuffered) Runs() backend.RunStore {
	r := n.Backend.Runs().(*memory.RunStore)
	return struct {
		backend.RunStore
		backend.RunCounter
		backend.OverlapBufferer
	}{r, r, r}
}

var _ backend.RunCounter = (*memory.RunStore)(nil)
