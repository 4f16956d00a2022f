package sqlbackend_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// Every replica down for 6 s of a job every second: three replicas that come
// back together record each slot that fell missed, once across the fleet, run
// none of them, and send one EventMissed per record. The job's history has one
// record per slot from the first to the last, with no gap.
func TestMissedSlotsSQL(t *testing.T) {
	onBoth(t, "missed", func(t *testing.T, open opener) {
		ctx := backendtest.Context(t)
		tally := &eventTally{}
		r := replicas{open: open, onEvent: tally.add}
		job := "missed"
		var ran atomic.Int32
		var downFrom, downTo atomic.Int64
		handler := func(_ context.Context, run scheduler.Run) error {
			if ms := run.Slot.UnixMilli(); ms > downFrom.Load() && ms < downTo.Load() {
				ran.Add(1)
			}
			return nil
		}
		a, _ := r.replica(t, "a")
		require.NoError(t, a.Every(job, time.Second, handler))
		require.NoError(t, a.Start(ctx))
		time.Sleep(3 * time.Second)
		require.NoError(t, a.Stop(ctx))
		downFrom.Store(time.Now().UnixMilli())
		time.Sleep(6 * time.Second)
		downTo.Store(time.Now().Add(-time.Second).UnixMilli()) // the loop's own: within the max lateness

		var fleet []*scheduler.Scheduler
		for _, name := range []string{"b", "c", "d"} {
			s, _ := r.replica(t, name)
			require.NoError(t, s.Every(job, time.Second, handler))
			fleet = append(fleet, s)
		}
		for _, s := range fleet {
			require.NoError(t, s.Start(ctx))
		}
		time.Sleep(4 * time.Second)
		stopAll(t, fleet)

		recs := recordsBySlot(t, fleet[0], job)
		var first, last int64
		for slot := range recs {
			if first == 0 || slot < first {
				first = slot
			}
			last = max(last, slot)
		}
		missed := 0
		for slot := first; slot <= last; slot += 1000 {
			rs := recs[slot]
			if !assert.Len(t, rs, 1, "slot %dms has one record: %+v", slot-first, rs) {
				continue
			}
			if rs[0].Status == backend.StatusMissed {
				missed++
				assert.Contains(t, []string{"b", "c", "d"}, rs[0].Instance)
				assert.True(t, rs[0].StartedAt.IsZero())
				continue
			}
			assert.Equal(t, backend.StatusOK, rs[0].Status, "slot %dms", slot-first)
		}
		assert.GreaterOrEqual(t, missed, 4, "the slots of the 6 s nobody was up, but those within the max lateness of the start")
		assert.Zero(t, ran.Load(), "no missed slot ran")
		events := tally.of(func(e scheduler.Event) bool { return e.Kind == scheduler.EventMissed && e.Job == job })
		assert.Len(t, events, missed, "one event per record:\n%s", tally.dump())
	})
}
