package integration

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// Pause and resume over JetStream: the pause is stored in the lease bucket, every
// replica's watch sees it, slots falling while paused are recorded paused once, and
// a pause with an end ends by itself.
func TestPauseOnJetStream(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	const job = "paused-tick"
	l := newLedger()
	var mu sync.Mutex
	seen := map[string]time.Time{} // instance → when its watch delivered the pause
	var scheds []*scheduler.Scheduler
	for _, id := range []string{"a", "b", "c"} {
		s, err := scheduler.New(scheduler.Config{
			Backend: leased(t, natstest.Conn(t, srv), 1), Instance: id,
			OnEvent: func(e scheduler.Event) {
				if e.Kind == scheduler.EventPauseChanged && e.Pause != nil && e.Job == job {
					mu.Lock()
					if _, ok := seen[id]; !ok {
						seen[id] = time.Now()
					}
					mu.Unlock()
				}
			},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(ctxT(t, 10*time.Second)) })
		require.NoError(t, s.Every(job, time.Second, l.handler))
		require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
		scheds = append(scheds, s)
	}
	untilSlot(t, time.Second, 1500*time.Millisecond)
	sleepCtx(t, 300*time.Millisecond)
	asked := time.Now()
	require.NoError(t, scheds[0].Pause(ctxT(t, 5*time.Second), job, scheduler.PauseOptions{Reason: "load test", By: "ops", Until: time.Now().Add(3 * time.Second)}))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 3 {
			break
		}
		sleepCtx(t, 10*time.Millisecond)
	}
	mu.Lock()
	var props []time.Duration
	for _, at := range seen {
		props = append(props, at.Sub(asked))
	}
	mu.Unlock()
	require.Len(t, props, 3, "every replica saw the pause")
	sort.Slice(props, func(i, j int) bool { return props[i] < props[j] })
	t.Logf("pause propagation (request to each replica's watch): %v", props)
	assert.Less(t, props[2], time.Second, "every replica honours a pause within a second")

	pausedFrom := asked.Truncate(time.Second).Add(time.Second)
	sleepCtx(t, 5*time.Second) // the pause ends by itself at asked+3s
	stopAll(t, scheds)

	hist, err := scheds[0].History(ctxT(t, 5*time.Second), job, 50)
	require.NoError(t, err)
	bySlot := map[int64]scheduler.Status{}
	for _, r := range hist {
		_, dup := bySlot[r.Slot.UnixMilli()]
		assert.False(t, dup, "one record per slot: %s", r.Slot)
		bySlot[r.Slot.UnixMilli()] = r.Status
	}
	var paused, ranAfter int
	for s := pausedFrom; s.Before(asked.Add(4500 * time.Millisecond)); s = s.Add(time.Second) {
		st := bySlot[s.UnixMilli()]
		runs := len(l.runs[job][s.UnixMilli()])
		if s.Before(asked.Add(3 * time.Second)) {
			assert.Equal(t, scheduler.StatusPaused, st, "slot %s fell while paused", s.Format(time.TimeOnly))
			assert.Zero(t, runs, "slot %s did not run", s.Format(time.TimeOnly))
			paused++
		} else if s.After(asked.Add(3*time.Second + 200*time.Millisecond)) {
			assert.Equal(t, 1, runs, "slot %s ran once after the pause ended", s.Format(time.TimeOnly))
			ranAfter++
		}
	}
	t.Logf("%d slots recorded paused, %d ran after the pause ended by itself", paused, ranAfter)
	assert.GreaterOrEqual(t, paused, 2)
	assert.GreaterOrEqual(t, ranAfter, 1)
}
