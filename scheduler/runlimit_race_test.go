package scheduler_test

import (
	"fmt"
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

// eventCount counts every event a fleet reports.
type eventCount struct {
	mu sync.Mutex
	n  int
}

func (c *eventCount) hook(scheduler.Event) { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *eventCount) get() int             { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// Ten instances, their clocks skewed both ways within the allowance, claiming a
// job due every second (so the instances claim the n-th and n+1-th slots at
// the same instants): exactly n scheduled slots run fleet-wide, each once, no
// slot is recorded limit before the n-th ran, every loop ends, and once they
// have nothing more is claimed or reported.
func TestMaxRunsSkewedFleetOfTen(t *testing.T) {
	for _, p := range []scheduler.OverlapPolicy{scheduler.OverlapAllow, scheduler.OverlapSkip,
		scheduler.OverlapBufferOne, scheduler.OverlapBufferAll, scheduler.OverlapCancelOther} {
		t.Run(p.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { skewedLimitFleet(t, p) })
		})
	}
}

func skewedLimitFleet(t *testing.T, p scheduler.OverlapPolicy) {
	const n = 5
	time.Sleep(300 * time.Millisecond)
	b := memory.New()
	log := newRunLog()
	ev := &limitEvents{by: map[string]int{}}
	all := &eventCount{}
	offsets := []time.Duration{-2 * time.Second, -1500 * time.Millisecond, -time.Second, -1, 0, 1, time.Second, 1500 * time.Millisecond, 2 * time.Second, 1999 * time.Millisecond}
	var scheds []*scheduler.Scheduler
	for i, off := range offsets {
		s := newScheduler(t, b, fmt.Sprintf("I%d", i), func(c *scheduler.Config) {
			c.Clock = backend.OffsetClock{Offset: off}
			c.OnEvent = func(e scheduler.Event) { ev.hook(e); all.hook(e) }
		})
		require.NoError(t, s.Every("limited", time.Second, log.handler,
			scheduler.WithMaxRuns(n), scheduler.WithOverlap(p), scheduler.WithHistory(1000, 0)))
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		require.NoError(t, s.Start(t.Context()))
	}
	time.Sleep(time.Minute)
	synctest.Wait()

	slots, times := slotsOf(log.snapshot())
	assert.Len(t, slots, n, "exactly %d slots ran fleet-wide: %v", n, slots)
	for ms, k := range times {
		assert.Equal(t, 1, k, "slot %v ran %d times", time.UnixMilli(ms).UTC(), k)
	}
	got := ev.get()
	for _, s := range scheds {
		assert.True(t, s.Jobs()[0].LimitReached, "%s: the loop ended", s.Instance())
		assert.Equal(t, 1, got[s.Instance()], "%s is told once", s.Instance())
	}
	st, lastRun, firstLimit := limitStatuses(t, scheds[0], "limited")
	assert.Equal(t, n, st[scheduler.StatusOK], "history: %v", st)
	if !firstLimit.IsZero() {
		assert.True(t, firstLimit.After(lastRun), "no slot recorded limit before the last run: %v, %v", lastRun, firstLimit)
	}

	before := all.get()
	time.Sleep(5 * time.Minute)
	synctest.Wait()
	assert.Equal(t, before, all.get(), "no claims and no events once every loop ended")
	again, _, _ := limitStatuses(t, scheds[0], "limited")
	assert.Equal(t, st, again)
	stopAll(t, scheds)
}
