package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// Backfill of a cancel-other job with BackfillConcurrency(4), nothing else
// running: the taken slots never run beside each other, and a backfilled slot
// never asks another run to end: a slot that meets one is stored skipped and
// reported so.
func TestCancelOtherBackfillCancelsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		scheds := startN(t, 2, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, tr.handler(func(r scheduler.Run) time.Duration { return 10 * time.Minute }, time.Second),
				scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second))
		})
		time.Sleep(30 * time.Minute) // the 00:00 slot ran and ended
		from := time.Now().Add(-10 * time.Hour)
		res, err := scheds[0].Backfill(context.Background(), "job", from, time.Now().Add(-time.Hour), scheduler.BackfillConcurrency(4))
		require.NoError(t, err)
		cancelled := 0
		outcome := map[string]scheduler.BackfillOutcome{}
		for _, s := range res.Slots {
			outcome[s.Slot.UTC().Format(time.RFC3339)] = s.Outcome
		}
		for _, s := range res.Slots {
			if s.Status == scheduler.StatusCancelled {
				for asker, o := range outcome {
					if strings.Contains(s.Error, "slot "+asker+" asked") {
						assert.Equal(t, scheduler.BackfillRan, o, "slot %s was cancelled for slot %s, which then did not run", s.Slot.Format("15:04"), asker)
					}
				}
			}
			t.Logf("%s %s %s %q", s.Slot.Format("15:04"), s.Outcome, s.Status, s.Error)
			if s.Status == scheduler.StatusCancelled {
				cancelled++
			}
		}
		stopAll(t, scheds)
		tr.check(t)
		assert.Zero(t, cancelled, "backfilled slots cancelled by the backfill's own later slots")
	})
}
