package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Three replicas on kvlease judge each slot of a job every second with a 3 s
// deadline: every second slot runs 5 s. Each slow slot gets one deadline
// record, stored once across the fleet and told by the replica that stored it;
// no slot that ended ok by its deadline gets one.
func TestDeadlinesOnKV(t *testing.T) {
	onR1AndR3(t, func(t *testing.T, n node) {
		tally := &eventTally{}
		n.onEvent = tally.add
		const job, deadline = "deadline", 3 * time.Second
		slow := func(slot time.Time) bool { return slot.Unix()%2 == 0 }
		handler := func(ctx context.Context, r scheduler.Run) error {
			if slow(r.Slot) {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
			return nil
		}
		var fleet []*scheduler.Scheduler
		for _, name := range []string{"A", "B", "C"} {
			s, _ := n.open(t, name)
			require.NoError(t, s.Every(job, time.Second, handler, scheduler.WithDeadline(deadline), scheduler.WithLease(3*time.Second)))
			fleet = append(fleet, s)
		}
		start := time.Now()
		for _, s := range fleet {
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(6 * time.Second)
		last := time.Now() // the slots judged: those due by now
		time.Sleep(deadline + 3*time.Second)
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}

		hist, err := fleet[0].History(t.Context(), job, 1000)
		require.NoError(t, err)
		judged := map[int64]scheduler.RunRecord{}
		okBy := map[int64]bool{}
		for _, r := range hist {
			ms := r.Slot.UnixMilli()
			switch {
			case r.Status == backend.StatusDeadline:
				_, dup := judged[ms]
				assert.False(t, dup, "one deadline record per slot: %+v", r)
				judged[ms] = r
			case r.Status == backend.StatusOK && !r.FinishedAt.After(r.Slot.Add(deadline)):
				okBy[ms] = true
			}
		}
		slots := 0
		for slot := start.Truncate(time.Second).Add(time.Second); slot.Before(last); slot = slot.Add(time.Second) {
			ms := slot.UnixMilli()
			r, ok := judged[ms]
			if slow(slot) {
				slots++
				if assert.True(t, ok, "slow slot %v judged", slot) {
					assert.Regexp(t, `^not ended ok by its deadline \S+ \(3s after the slot\): (still running on [ABC] \(attempt 1\)|ended ok on [ABC] \(attempt 1\) at \S+, after its deadline)$`, r.Error)
					assert.Contains(t, []string{"A", "B", "C"}, r.Instance)
				}
			}
			assert.False(t, ok && okBy[ms], "slot %v ended ok by its deadline, yet judged: %+v", slot, r)
		}
		require.Positive(t, slots)
		evs := tally.of(func(e scheduler.Event) bool { return e.Kind == scheduler.EventDeadlineMissed })
		assert.Len(t, evs, len(judged), "one event per record: %s", tally.dump())
		for _, e := range evs {
			assert.Equal(t, judged[e.Slot.UnixMilli()].Instance, e.Instance, "told by the replica that stored it")
		}
	})
}
