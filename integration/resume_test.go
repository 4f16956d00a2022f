package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// Resume with catch-up over JetStream: three replicas of a job with CatchUpAll; the
// slots that fall while it is paused are recorded paused once; after Resume each of
// them runs exactly once across the fleet, as attempt 2 of its slot, and no slot
// runs twice.
func TestResumeCatchesUpOnJetStream(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	const job = "resumed-tick"
	l := newLedger()
	var scheds []*scheduler.Scheduler
	for _, id := range []string{"a", "b", "c"} {
		s, err := scheduler.New(scheduler.Config{Backend: leased(t, natstest.Conn(t, srv), 1), Instance: id})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(ctxT(t, 10*time.Second)) })
		require.NoError(t, s.Every(job, time.Second, l.handler, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Minute)))
		require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
		scheds = append(scheds, s)
	}
	untilSlot(t, time.Second, 1500*time.Millisecond)
	sleepCtx(t, 300*time.Millisecond)
	require.NoError(t, scheds[0].Pause(ctxT(t, 5*time.Second), job, scheduler.PauseOptions{Reason: "maintenance", By: "ops"}))
	sleepCtx(t, 3500*time.Millisecond) // three or four slots fall while paused
	require.NoError(t, scheds[1].Resume(ctxT(t, 5*time.Second), job))
	sleepCtx(t, 3*time.Second) // catch-up, and the slots after
	stopAll(t, scheds)

	hist, err := scheds[2].History(ctxT(t, 5*time.Second), job, 100)
	require.NoError(t, err)
	bySlot := map[int64][]scheduler.RunRecord{}
	for i := len(hist) - 1; i >= 0; i-- {
		bySlot[hist[i].Slot.UnixMilli()] = append(bySlot[hist[i].Slot.UnixMilli()], hist[i])
	}
	caught := 0
	for ms, recs := range bySlot {
		runs := len(l.runs[job][ms])
		slot := time.UnixMilli(ms).Format(time.TimeOnly)
		assert.LessOrEqual(t, runs, 1, "slot %s ran at most once", slot)
		if recs[0].Status != scheduler.StatusPaused {
			continue
		}
		caught++
		assert.Equal(t, 1, runs, "paused slot %s ran once after the resume", slot)
		if assert.Len(t, recs, 2, "slot %s: paused, then run", slot) {
			assert.Equal(t, 1, recs[0].Attempt)
			assert.Equal(t, scheduler.StatusOK, recs[1].Status, "slot %s", slot)
			assert.Equal(t, 2, recs[1].Attempt, "slot %s", slot)
			assert.Greater(t, recs[1].Fence, uint64(0))
		}
	}
	t.Logf("%d paused slots ran once after Resume", caught)
	assert.GreaterOrEqual(t, caught, 3)
}
