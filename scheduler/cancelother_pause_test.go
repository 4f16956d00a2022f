package scheduler_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// A run already going when the pause arrives finishes, nothing is cancelled, and
// a slot that falls while its job is paused is recorded paused, not run: under
// cancel-other the paused slot asks the running one nothing.
func TestCancelOtherPausedSlotCancelsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		tr := newTracker()
		scheds := startN(t, 2, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", 10*time.Minute, tr.handler(func(r scheduler.Run) time.Duration { return 15 * time.Minute }, time.Second),
				scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(3*time.Second))
		})
		first := time.Now().Truncate(10 * time.Minute).Add(10 * time.Minute)
		time.Sleep(time.Until(first.Add(5 * time.Minute))) // the first slot runs (15 min)
		require.NoError(t, scheds[0].Pause(context.Background(), "job", scheduler.PauseOptions{Reason: "maintenance"}))
		time.Sleep(10 * time.Minute) // the second slot falls during the pause
		stopAll(t, scheds)
		hist := historyOf(t, scheds[1], "job")
		second := first.Add(10 * time.Minute)
		t.Logf("first: %s %q; second: %s %q", hist[first.UnixMilli()].Status, hist[first.UnixMilli()].Error,
			hist[second.UnixMilli()].Status, hist[second.UnixMilli()].Error)
		assert.Equal(t, scheduler.StatusPaused, hist[second.UnixMilli()].Status, "the slot that fell during the pause")
		assert.Equal(t, scheduler.StatusOK, hist[first.UnixMilli()].Status,
			"the run going when the pause arrived finishes; nothing is cancelled: %+v", hist[first.UnixMilli()])
	})
}
