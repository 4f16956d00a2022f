package sqlbackend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestSchedulersRunEntries runs three schedulers, each on its own pool, that
// declare one job; entries added through one of them run on the fleet, each
// (entry, slot) once, and a removed entry stops.
func TestSchedulersRunEntries(t *testing.T) {
	t.Parallel()
	onBoth(t, "entries", testSchedulersRunEntries)
}

func testSchedulersRunEntries(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("entries")
	var (
		mu   sync.Mutex
		runs = map[string]map[int64][]string{}
	)
	h := func(_ context.Context, run scheduler.Run) error {
		mu.Lock()
		defer mu.Unlock()
		if runs[run.Entry] == nil {
			runs[run.Entry] = map[int64][]string{}
		}
		runs[run.Entry][run.Slot.UnixMilli()] = append(runs[run.Entry][run.Slot.UnixMilli()], run.Instance)
		return nil
	}
	var fleet []*scheduler.Scheduler
	for i := range 3 {
		_, b := open(t)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: fmt.Sprint("r", i)})
		require.NoError(t, err)
		require.NoError(t, s.Declare(job, h, scheduler.WithMaxLate(900*time.Millisecond)))
		require.NoError(t, s.Start(ctx))
		require.NoError(t, s.EntriesLoaded(ctx))
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		fleet = append(fleet, s)
	}
	for i := range 4 {
		_, err := fleet[i%3].AddEntry(ctx, job, fmt.Sprint("e", i), scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
	}
	count := func(entry string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(runs[entry])
	}
	require.Eventually(t, func() bool {
		for i := range 4 {
			if count(fmt.Sprint("e", i)) < 3 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "every entry runs on the fleet")
	require.NoError(t, fleet[2].RemoveEntry(ctx, job, "e0", 0))
	require.Eventually(t, func() bool {
		for _, s := range fleet {
			if n, _ := s.EntryCounts(); n != 3 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "every replica follows the removal")
	removedAt := count("e0")
	n1 := count("e1")
	require.Eventually(t, func() bool { return count("e1") >= n1+2 }, 20*time.Second, 50*time.Millisecond)
	assert.LessOrEqual(t, count("e0"), removedAt+1, "a removed entry starts no slot after every replica saw the removal (one already claimed may finish)")
	for _, s := range fleet {
		require.NoError(t, s.Stop(ctx))
	}
	mu.Lock()
	defer mu.Unlock()
	for entry, slots := range runs {
		for slot, who := range slots {
			assert.Len(t, who, 1, "entry %s slot %d ran once: %v", entry, slot, who)
		}
	}
	hist, err := fleet[0].EntryHistory(ctx, job, "e1", 100)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(hist), n1+2)
	for _, r := range hist {
		assert.Equal(t, "e1", r.Entry)
	}
}
