package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// seedShaped is a backend whose run store has the seed's shape: the five
// methods and a watch, no Settler. Its decisions are stored apart from the
// backend's history, so every record there is one the scheduler wrote beside
// the store's calls (the fallback).
type seedShaped struct {
	*memory.Backend
	runs backend.RunStore
	dead *atomic.Bool // the instance's calls hang while set
}

func newSeedShaped(shared *memory.RunStore, history *memory.Backend) seedShaped {
	return seedShaped{Backend: history, runs: shared, dead: &atomic.Bool{}}
}

func (b seedShaped) Runs() backend.RunStore { return seedRuns{b.runs, b.dead} }

type seedRuns struct {
	backend.RunStore
	dead *atomic.Bool
}

func (r seedRuns) wait(ctx context.Context) error {
	if r.dead.Load() {
		<-ctx.Done()
		return errDead
	}
	return nil
}

func (r seedRuns) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if err := r.wait(ctx); err != nil {
		return backend.ClaimResult{}, err
	}
	return r.RunStore.Claim(ctx, in)
}

func (r seedRuns) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	return r.RunStore.Heartbeat(ctx, key, lease)
}

func (r seedRuns) Finish(ctx context.Context, key backend.RunKey, st backend.Status) error {
	if err := r.wait(ctx); err != nil {
		return err
	}
	return r.RunStore.Finish(ctx, key, st)
}

func (r seedRuns) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	return r.RunStore.(backend.LeaseWatcher).WatchRun(ctx, job, slot)
}

// A run store of the seed's shape is driven through the fallback: each
// attempt's record is written beside the store's calls, once: a run, a slot
// skipped, a takeover of a dead holder's run.
func TestSeedShapedRunStoreRecordsEachAttemptOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runs, history := memory.NewRunStore(backend.SystemClock{}), memory.New()
		a, b := newSeedShaped(runs, history), newSeedShaped(runs, history)
		var starts atomic.Int32
		handler := func(ctx context.Context, r scheduler.Run) error {
			starts.Add(1)
			if r.Slot.Minute() == 2 && r.Instance == "A" {
				a.dead.Store(true) // A dies holding the slot at 0:02
				<-ctx.Done()
				return context.Cause(ctx)
			}
			if r.Slot.Minute() == 0 {
				time.Sleep(90 * time.Second) // 0:01 falls during it: skipped
			}
			return nil
		}
		opts := []scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(5 * time.Second), scheduler.WithJitter(0)}
		sa := newScheduler(t, a, "A", callTimeout(time.Second))
		require.NoError(t, sa.Every("job", time.Minute, handler, opts...))
		require.NoError(t, sa.Start(t.Context()))
		time.Sleep(119 * time.Second) // 0:01:59: A alone ran 0:00 and skipped 0:01
		sb := newScheduler(t, b, "B", callTimeout(time.Second))
		require.NoError(t, sb.Every("job", time.Minute, handler, opts...))
		time.Sleep(1500 * time.Millisecond) // A won 0:02 and died
		require.NoError(t, sb.Start(t.Context()))
		time.Sleep(30 * time.Second) // B took 0:02 over
		require.NoError(t, sb.Stop(t.Context()))
		stop, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = sa.Stop(stop)

		recs, err := history.History(t.Context(), "job", 0)
		require.NoError(t, err)
		got := map[string]scheduler.Status{}
		for _, r := range recs {
			key := r.Slot.Format("15:04") + "#" + string(rune('0'+r.Attempt))
			_, dup := got[key]
			assert.False(t, dup, "one record per attempt: %+v", recs)
			got[key] = r.Status
		}
		assert.Equal(t, map[string]scheduler.Status{
			"00:00#1": scheduler.StatusOK, "00:01#1": scheduler.StatusSkipped,
			"00:02#1": scheduler.StatusLost, "00:02#2": scheduler.StatusOK,
		}, got)
		assert.EqualValues(t, 3, starts.Load())
	})
}
