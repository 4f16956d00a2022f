package scheduler_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// records returns job's history by slot second, oldest attempt first.
func records(t *testing.T, s *scheduler.Scheduler, job string) map[int64][]scheduler.RunRecord {
	t.Helper()
	hist, err := s.History(t.Context(), job, 1000)
	require.NoError(t, err)
	out := map[int64][]scheduler.RunRecord{}
	for i := len(hist) - 1; i >= 0; i-- {
		r := hist[i]
		out[r.Slot.Unix()] = append(out[r.Slot.Unix()], r)
	}
	return out
}

// TestResumeCatchesUpPausedSlots: slots 3, 4 and 5 fall while the job is paused on
// three instances; once the pause ends (Resume, or its Until), catch-up runs the
// paused slots its policy asks for, each once across the fleet, as attempt 2 of
// the slot recorded paused; none for CatchUpNone.
func TestResumeCatchesUpPausedSlots(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy scheduler.CatchUpPolicy
		until  bool  // the pause ends by its Until instead of Resume
		ran    []int // the paused slots that run once the pause ended
	}{
		{"none", scheduler.CatchUpNone, false, nil},
		{"latest", scheduler.CatchUpLatest, false, []int{5}},
		{"all", scheduler.CatchUpAll, false, []int{3, 4, 5}},
		{"all, pause ends by its until", scheduler.CatchUpAll, true, []int{3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				var runs slotRuns
				var scheds []*scheduler.Scheduler
				for _, id := range []string{"A", "B", "C"} {
					s := newScheduler(t, b, id)
					require.NoError(t, s.Every("tick", time.Second, runs.handler,
						scheduler.WithCatchUp(tc.policy, time.Minute)))
					require.NoError(t, s.Start(t.Context()))
					scheds = append(scheds, s)
				}
				base := time.Now().Unix()
				time.Sleep(2500 * time.Millisecond) // slots 0, 1, 2 run
				opts := scheduler.PauseOptions{Reason: "maintenance"}
				if tc.until {
					opts.Until = time.Now().Add(3 * time.Second) // 5.5
				}
				require.NoError(t, scheds[1].Pause(t.Context(), "tick", opts))
				time.Sleep(3 * time.Second) // slots 3, 4, 5 fall while paused
				if !tc.until {
					require.NoError(t, scheds[2].Resume(t.Context(), "tick"))
				}
				time.Sleep(2 * time.Second) // catch-up, and slots 6, 7
				for _, s := range scheds {
					require.NoError(t, s.Stop(t.Context()))
				}
				recs := records(t, scheds[0], "tick")
				for sec := int64(0); sec <= 7; sec++ {
					paused := sec >= 3 && sec <= 5
					caught := false
					for _, r := range tc.ran {
						caught = caught || int64(r) == sec
					}
					switch {
					case !paused:
						assert.Equal(t, 1, runs.get(base+sec), "slot %d ran once", sec)
						if assert.Len(t, recs[base+sec], 1, "slot %d", sec) {
							assert.Equal(t, scheduler.StatusOK, recs[base+sec][0].Status)
						}
					case caught:
						assert.Equal(t, 1, runs.get(base+sec), "paused slot %d ran once after the pause", sec)
						if assert.Len(t, recs[base+sec], 2, "slot %d: paused, then run", sec) {
							assert.Equal(t, scheduler.StatusPaused, recs[base+sec][0].Status)
							assert.Equal(t, 1, recs[base+sec][0].Attempt)
							assert.Equal(t, scheduler.StatusOK, recs[base+sec][1].Status)
							assert.Equal(t, 2, recs[base+sec][1].Attempt)
						}
					default:
						assert.Zero(t, runs.get(base+sec), "paused slot %d stays unrun", sec)
						if assert.Len(t, recs[base+sec], 1, "slot %d", sec) {
							assert.Equal(t, scheduler.StatusPaused, recs[base+sec][0].Status)
						}
					}
				}
			})
		})
	}
}

// TestStartWhilePausedDoesNotReopen: an instance started while the job is still
// paused runs none of the paused slots (its catch-up claims do not reopen them),
// and adds no record.
func TestStartWhilePausedDoesNotReopen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var runs slotRuns
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("tick", time.Second, runs.handler, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Minute)))
		require.NoError(t, a.Start(t.Context()))
		base := time.Now().Unix()
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, a.Pause(t.Context(), "tick", scheduler.PauseOptions{Reason: "hold"}))
		time.Sleep(3 * time.Second) // slots 1, 2, 3 paused
		late := newScheduler(t, b, "B")
		require.NoError(t, late.Every("tick", time.Second, runs.handler, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Minute)))
		require.NoError(t, late.Start(t.Context()))
		time.Sleep(time.Second)
		require.NoError(t, late.Stop(t.Context()))
		require.NoError(t, a.Stop(t.Context()))
		recs := records(t, a, "tick")
		for sec := int64(1); sec <= 4; sec++ {
			assert.Zero(t, runs.get(base+sec), "slot %d", sec)
			if assert.Len(t, recs[base+sec], 1, "slot %d", sec) {
				assert.Equal(t, scheduler.StatusPaused, recs[base+sec][0].Status)
			}
		}
	})
}
