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

// Three schedulers, each on its own pool, run a job every second limited to 3
// runs: 3 slots run across them, each once, the next is recorded limit, and
// every scheduler's loop of the job ends.
func TestSchedulersRunLimitOnSQL(t *testing.T) {
	t.Parallel()
	onBoth(t, "limitsched", testSchedulersRunLimit)
}

func testSchedulersRunLimit(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("limited")
	var (
		mu     sync.Mutex
		ran    = map[int64]int{}
		scheds []*scheduler.Scheduler
	)
	for _, inst := range []string{"a", "b", "c"} {
		_, b := open(t)
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, time.Second, func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			defer mu.Unlock()
			ran[r.Slot.UnixMilli()]++
			return nil
		}, scheduler.WithMaxRuns(3), scheduler.WithMaxLate(900*time.Millisecond)))
		scheds = append(scheds, sc)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	require.Eventually(t, func() bool {
		for _, sc := range scheds {
			if !sc.Jobs()[0].LimitReached {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every loop ends")
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(stopCtx))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ran, 3, "three slots ran: %v", ran)
	for slot, n := range ran {
		assert.Equal(t, 1, n, "slot %d ran once", slot)
	}
	_, reader := open(t)
	hist, err := reader.History(ctx, job, 100)
	require.NoError(t, err)
	st := map[backend.Status]int{}
	for _, r := range hist {
		st[r.Status]++
		if r.Status == backend.StatusLimit {
			for slot := range ran {
				assert.Greater(t, r.Slot.UnixMilli(), slot, "a slot recorded limit after the runs: %+v", r)
			}
		}
	}
	assert.Equal(t, 3, st[backend.StatusOK], "%v", st)
	assert.Equal(t, len(hist), st[backend.StatusOK]+st[backend.StatusLimit], "ok and limit only: %v", st)
}
