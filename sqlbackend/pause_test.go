package sqlbackend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// A pause stored by one replica stops the job on the others: slots inside the pause
// are recorded paused, none runs, and after Resume slots run again.
func TestPauseReachesOtherReplicas(t *testing.T) {
	t.Parallel()
	onBoth(t, "pause", testPause)
}

func testPause(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("paused")
	var (
		mu  sync.Mutex
		ran = map[int64]time.Time{} // slot → when its handler started
	)
	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b"} {
		_, b := open(t)
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, 500*time.Millisecond, func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			ran[r.Slot.UnixMilli()] = time.Now()
			mu.Unlock()
			return nil
		}))
		scheds = append(scheds, sc)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(ran) }
	require.Eventually(t, func() bool { return count() >= 2 }, 10*time.Second, 10*time.Millisecond)

	// Replica a pauses; b must see it.
	require.NoError(t, scheds[0].Pause(ctx, job, scheduler.PauseOptions{Reason: "maintenance"}))
	require.Eventually(t, func() bool { _, ok := scheds[1].Paused(job); return ok }, 5*time.Second, 10*time.Millisecond,
		"replica b sees the pause stored by a")
	seen := time.Now()
	// Slots that fall from now on are recorded paused on whichever replica.
	var paused []backend.RunRecord
	require.Eventually(t, func() bool {
		hist, err := scheds[1].History(ctx, job, 20)
		require.NoError(t, err)
		paused = paused[:0]
		for _, r := range hist {
			if r.Status == backend.StatusPaused && r.Slot.After(seen) {
				paused = append(paused, r)
			}
		}
		return len(paused) >= 2
	}, 10*time.Second, 50*time.Millisecond, "slots inside the pause are recorded paused")
	mu.Lock()
	for slot, at := range ran {
		assert.False(t, time.UnixMilli(slot).After(seen), "slot %s ran at %s, inside the pause", time.UnixMilli(slot).UTC(), at)
	}
	mu.Unlock()

	require.NoError(t, scheds[1].Resume(ctx, job))
	resumed := time.Now()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for slot := range ran {
			if time.UnixMilli(slot).After(resumed) {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "slots run again after Resume")
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(ctx))
	}
}
