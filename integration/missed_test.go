package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Every replica down for 6 s of a job every second: three replicas that come
// back together on kvlease record each slot that fell missed, once across the
// fleet, run none of them, and send one EventMissed per record. The job's
// history has one record per slot from the first to the last, with no gap.
func TestMissedSlotsOnKV(t *testing.T) {
	onR1AndR3(t, func(t *testing.T, n node) {
		tally := &eventTally{}
		n.onEvent = tally.add
		job := "missed"
		var ran atomic.Int32
		var downFrom, downTo atomic.Int64
		handler := func(_ context.Context, r scheduler.Run) error {
			if ms := r.Slot.UnixMilli(); ms > downFrom.Load() && ms < downTo.Load() {
				ran.Add(1)
			}
			return nil
		}
		a, _ := n.open(t, "A")
		require.NoError(t, a.Every(job, time.Second, handler))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(3 * time.Second)
		require.NoError(t, a.Stop(t.Context()))
		downFrom.Store(time.Now().UnixMilli())
		time.Sleep(6 * time.Second)
		downTo.Store(time.Now().Add(-time.Second).UnixMilli()) // the loop's own: within the max lateness

		var fleet []*scheduler.Scheduler
		for _, name := range []string{"B", "C", "D"} {
			s, _ := n.open(t, name)
			require.NoError(t, s.Every(job, time.Second, handler))
			fleet = append(fleet, s)
		}
		for _, s := range fleet {
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(4 * time.Second)
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}

		hist, err := fleet[0].History(t.Context(), job, 100)
		require.NoError(t, err)
		bySlot := map[int64][]scheduler.RunRecord{}
		var first, last int64
		for _, r := range hist {
			s := r.Slot.Unix()
			bySlot[s] = append(bySlot[s], r)
			if first == 0 || s < first {
				first = s
			}
			last = max(last, s)
		}
		missed := 0
		for s := first; s <= last; s++ {
			rs := bySlot[s]
			if !assert.Len(t, rs, 1, "slot %d has one record: %+v", s-first, rs) {
				continue
			}
			if rs[0].Status == backend.StatusMissed {
				missed++
				assert.Contains(t, []string{"B", "C", "D"}, rs[0].Instance)
				assert.True(t, rs[0].StartedAt.IsZero())
				continue
			}
			assert.Equal(t, backend.StatusOK, rs[0].Status, "slot %d", s-first)
		}
		assert.GreaterOrEqual(t, missed, 4, "the slots of the 6 s nobody was up, but those within the max lateness of the start")
		assert.Zero(t, ran.Load(), "no missed slot ran")
		events := tally.of(func(e scheduler.Event) bool { return e.Kind == scheduler.EventMissed && e.Job == job })
		assert.Len(t, events, missed, "one event per record:\n%s", tally.dump())
	})
}
