package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// A trigger follows the job's overlap policy fleet-wide: while a scheduled run of
// an overlap-forbidden job is going on (on any instance), every manual run is
// refused with ErrJobBusy and none starts; while a manual run is going on, the
// job's next slot is skipped.
func TestTriggersFollowOverlapSkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var running, most, manual atomic.Int32
		handler := func(ctx context.Context, r scheduler.Run) error {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if r.Manual {
				manual.Add(1)
			}
			time.Sleep(90 * time.Second)
			return nil
		}
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			s := newScheduler(t, mem, id)
			require.NoError(t, s.Every("report", 2*time.Minute, handler,
				scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(10*time.Second), scheduler.WithMaxLate(10*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		defer func() {
			for _, s := range scheds {
				require.NoError(t, s.Stop(t.Context()))
			}
		}()
		time.Sleep(2*time.Minute + 5*time.Second) // the slot at 0:02 runs until 0:03:30
		require.Equal(t, int32(1), running.Load())
		for i := range 10 {
			_, err := scheds[i%3].RunNow(t.Context(), "report", scheduler.RequestedBy("ops"))
			require.ErrorIs(t, err, scheduler.ErrJobBusy, "trigger %d", i)
		}
		assert.Zero(t, manual.Load(), "no manual run started during the scheduled one")

		time.Sleep(90 * time.Second) // 0:03:35: the scheduled run ended
		done := make(chan struct{})
		go func() {
			defer close(done)
			rec, err := scheds[1].RunNow(context.Background(), "report")
			assert.NoError(t, err)
			assert.Equal(t, scheduler.StatusOK, rec.Status)
			assert.NotZero(t, rec.Fence, "a manual run holds a lease")
		}()
		synctest.Wait()
		active, err := scheds[2].Active(t.Context(), "report")
		require.NoError(t, err)
		require.Len(t, active, 1, "the manual run is active for every instance")
		assert.True(t, active[0].Manual)
		assert.Equal(t, "B", active[0].Instance)
		<-done // 0:05:05; the slot at 0:04 fell during it
		assert.Equal(t, int32(1), most.Load(), "never two runs of the job at once")
		got := byStatus(t, scheds[0], "report")
		assert.Equal(t, 1, got[scheduler.StatusSkipped], "the slot at 0:04 was skipped: %v", got)
	})
}

// A manual run whose instance died is ended lost by an instance that finds its
// lease expired (here, one that starts afterwards), never run again.
func TestDeadManualRunIsEndedLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var starts atomic.Int32
		a := &failingFinish{Backend: mem}
		sa := newScheduler(t, a, "A")
		require.NoError(t, sa.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
			starts.Add(1)
			a.dead.Store(true) // A dies: no more heartbeats, finishes or results
			<-ctx.Done()
			return context.Cause(ctx)
		}, scheduler.WithLease(2*time.Second)))
		time.Sleep(10 * time.Minute)
		require.NoError(t, sa.Start(t.Context()))
		go func() { _, _ = sa.RunNow(context.Background(), "job") }()
		time.Sleep(5 * time.Second)

		sb := newScheduler(t, mem, "B")
		require.NoError(t, sb.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
			starts.Add(1)
			return nil
		}, scheduler.WithLease(2*time.Second)))
		require.NoError(t, sb.Start(t.Context()))
		time.Sleep(10 * time.Second)
		require.NoError(t, sb.Stop(t.Context()))
		stop, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = sa.Stop(stop) // the dead process: its last writes fail

		assert.Equal(t, int32(1), starts.Load(), "the manual run is not run again")
		active, err := sb.Active(t.Context(), "job")
		require.NoError(t, err)
		assert.Empty(t, active)
		recs, err := sb.History(t.Context(), "job", 0)
		require.NoError(t, err)
		require.Len(t, recs, 1, "%+v", recs)
		assert.True(t, recs[0].Manual)
		assert.Contains(t, []scheduler.Status{scheduler.StatusLost, scheduler.StatusSuperseded}, recs[0].Status)
	})
}
