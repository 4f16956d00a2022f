package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// concurrencyFleet runs job every minute on three replicas for 6 minutes, each
// run 150 s, with opts; it returns the most runs at once and the records by
// slot (minutes from the start).
func concurrencyFleet(t *testing.T, opts ...scheduler.JobOption) (int32, map[int][]scheduler.RunRecord) {
	t.Helper()
	b := memory.New()
	base := time.Now()
	var running, most atomic.Int32
	handler := func(ctx context.Context, r scheduler.Run) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(150 * time.Second):
			return nil
		}
	}
	var fleet []*scheduler.Scheduler
	for _, name := range []string{"A", "B", "C"} {
		s := newScheduler(t, b, name)
		require.NoError(t, s.Every("job", time.Minute, handler, opts...))
		require.NoError(t, s.Start(t.Context()))
		fleet = append(fleet, s)
	}
	time.Sleep(6*time.Minute + 10*time.Second)
	for _, s := range fleet {
		require.NoError(t, s.Stop(t.Context()))
	}
	out := map[int][]scheduler.RunRecord{}
	for slot, rs := range records(t, fleet[0], "job") {
		out[int(time.Unix(slot, 0).Sub(base)/time.Minute)] = rs
	}
	return most.Load(), out
}

// Up to two slots at once under skip: a third that finds two running is
// skipped, and the next runs once one of them ended.
func TestConcurrencySkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		most, recs := concurrencyFleet(t, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithConcurrency(2))
		assert.Equal(t, int32(2), most, "never more than two at once, and two did run together")
		// 0:00 runs to 2:30, 0:01 to 3:30: 0:02 finds both; 0:03 finds 0:01,
		// 0:04 finds 0:03 (to 5:30), 0:05 finds 0:03 and 0:04 (to 6:30).
		for m, want := range map[int]scheduler.Status{0: scheduler.StatusOK, 1: scheduler.StatusOK, 2: scheduler.StatusSkipped,
			3: scheduler.StatusOK, 4: scheduler.StatusOK, 5: scheduler.StatusSkipped} {
			require.NotEmpty(t, recs[m], "slot 0:%02d", m)
			assert.Equal(t, want, recs[m][len(recs[m])-1].Status, "slot 0:%02d: %+v", m, recs[m])
		}
	})
}

// Up to two at once under buffer-all: the slot that finds two running waits
// and runs, oldest first, once one of them ended.
func TestConcurrencyBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		most, recs := concurrencyFleet(t, scheduler.WithOverlap(scheduler.OverlapBufferAll), scheduler.WithConcurrency(2))
		assert.Equal(t, int32(2), most)
		for m := range 4 {
			require.NotEmpty(t, recs[m], "slot 0:%02d", m)
			r := recs[m][len(recs[m])-1]
			assert.Equal(t, scheduler.StatusOK, r.Status, "slot 0:%02d: %+v", m, recs[m])
		}
		// 0:02 waited for 0:00's end (2:30); 0:03 for 0:01's (3:30).
		assert.Equal(t, 150*time.Second, recs[2][0].StartedAt.Sub(recs[0][0].StartedAt).Round(time.Second))
		assert.Equal(t, 150*time.Second, recs[3][0].StartedAt.Sub(recs[1][0].StartedAt).Round(time.Second))
	})
}

// WithConcurrency is refused where it cannot apply.
func TestConcurrencyRefused(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	noop := func(context.Context, scheduler.Run) error { return nil }
	for name, opts := range map[string][]scheduler.JobOption{
		"zero":         {scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithConcurrency(0)},
		"above max":    {scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithConcurrency(1001)},
		"allow":        {scheduler.WithConcurrency(2)},
		"cancel-other": {scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithConcurrency(2)},
	} {
		assert.ErrorIs(t, s.Every("job", time.Minute, noop, opts...), scheduler.ErrInvalidOption, name)
	}
	assert.NoError(t, s.Every("one", time.Minute, noop, scheduler.WithConcurrency(1)), "one: the default, with any policy")
}
