package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

type startLog struct {
	mu     sync.Mutex
	starts []scheduler.Run
	at     []time.Time
}

func (l *startLog) add(r scheduler.Run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts = append(l.starts, r)
	l.at = append(l.at, time.Now())
}

func (l *startLog) get() ([]scheduler.Run, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]scheduler.Run(nil), l.starts...), append([]time.Time(nil), l.at...)
}

func startThree(t *testing.T, b *memory.Backend, register func(s *scheduler.Scheduler) error) ([]*scheduler.Scheduler, []*faultView) {
	t.Helper()
	var scheds []*scheduler.Scheduler
	var views []*faultView
	for _, id := range []string{"A", "B", "C"} {
		v := &faultView{Backend: b}
		s := newScheduler(t, v, id)
		require.NoError(t, register(s))
		require.NoError(t, s.Start(t.Context()))
		scheds = append(scheds, s)
		views = append(views, v)
	}
	return scheds, views
}

// A winner that crashes mid-run is taken over by exactly one backup once its
// lease expires.
func TestBackupTakesOverFromACrashedWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &startLog{}
		time.Sleep(90 * time.Second) // between slots
		f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				log.add(r)
				if r.Attempt == 1 {
					<-ctx.Done() // its work never completes
					return context.Cause(ctx)
				}
				return nil
			}, scheduler.WithLease(2*time.Second))
		}})
		slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot)
		winner := f.Holder("job", slot)
		require.NotNil(t, winner)
		winner.Kill()
		anarchontest.Advance(time.Minute)

		starts, at := log.get()
		require.Len(t, starts, 2, "the slot ran twice: the dead winner, then exactly one backup")
		assert.Equal(t, 1, starts[0].Attempt)
		assert.Equal(t, winner.Name(), starts[0].Instance)
		assert.Equal(t, 2, starts[1].Attempt)
		assert.NotEqual(t, starts[0].Instance, starts[1].Instance)
		assert.True(t, starts[0].Slot.Equal(starts[1].Slot))
		assert.Greater(t, starts[1].Fence, starts[0].Fence, "the backup's fence is higher")
		assert.Empty(t, starts[0].Previous, "a first attempt took nothing over")
		assert.Equal(t, starts[0].Instance, starts[1].Previous, "the takeover names whose attempt it took over")
		delay := at[1].Sub(at[0])
		assert.LessOrEqual(t, delay, 2*time.Second+time.Second, "takeover within lease + 1s, took %v", delay)

		hist, err := f.History(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, hist, 2, "history shows both attempts:\n%s", anarchontest.Describe(hist))
		assert.Equal(t, 2, hist[0].Attempt)
		assert.Equal(t, starts[1].Instance, hist[0].Instance)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status)
		assert.Equal(t, 1, hist[1].Attempt)
		assert.Equal(t, starts[0].Instance, hist[1].Instance)
		assert.Equal(t, scheduler.StatusLost, hist[1].Status)
	})
}

// A winner stopped gracefully mid-run hands the run over: a backup starts at
// once, not after the lease.
func TestGracefulStopHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &startLog{}
		time.Sleep(90 * time.Second)
		f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				log.add(r)
				if r.Attempt == 1 {
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}, scheduler.WithLease(10*time.Second))
		}})
		slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot)
		winner := f.Holder("job", slot)
		require.NotNil(t, winner)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		assert.Error(t, winner.Stop(ctx), "the handler had to be cancelled") // hand-over: cancel, then release
		anarchontest.Advance(5 * time.Second)

		starts, at := log.get()
		require.Len(t, starts, 2)
		assert.Equal(t, winner.Name(), starts[0].Instance)
		assert.NotEqual(t, winner.Name(), starts[1].Instance)
		delay := at[1].Sub(at[0])
		assert.Less(t, delay, time.Second+100*time.Millisecond, "a backup starts within 1s of the hand-over, not after the 10s lease: %v", delay)
		hist, err := f.History(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, hist, 2)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status)
		assert.Equal(t, scheduler.StatusCancelled, hist[1].Status)
	})
}

func TestOverlapForbiddenSkipsTheNextSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var running, maxRunning atomic.Int32
		var runs atomic.Int32
		time.Sleep(1500 * time.Millisecond)
		scheds, _ := startThree(t, b, func(s *scheduler.Scheduler) error {
			return s.Every("long", 10*time.Second, func(ctx context.Context, r scheduler.Run) error {
				n := running.Add(1)
				defer running.Add(-1)
				for {
					m := maxRunning.Load()
					if n <= m || maxRunning.CompareAndSwap(m, n) {
						break
					}
				}
				runs.Add(1)
				select { // each run takes 25s: two later slots fall inside it
				case <-time.After(25 * time.Second):
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(3*time.Second), scheduler.WithMaxLate(time.Second))
		})
		time.Sleep(59 * time.Second) // slots at 10…60: run at 10 (till 35), skip 20, 30, run 40, skip 50, 60
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		assert.EqualValues(t, 1, maxRunning.Load(), "never two runs at once")
		hist, err := scheds[0].History(t.Context(), "long", 20)
		require.NoError(t, err)
		statuses := map[int64]scheduler.Status{}
		for _, r := range hist {
			_, dup := statuses[r.Slot.Unix()]
			assert.False(t, dup, "one record per slot: %+v", hist)
			statuses[r.Slot.Unix()] = r.Status
		}
		base := time.Unix(946684800, 0).Unix() // 2000-01-01
		assert.Equal(t, map[int64]scheduler.Status{
			base + 10: scheduler.StatusOK, base + 20: scheduler.StatusSkipped, base + 30: scheduler.StatusSkipped,
			base + 40: scheduler.StatusOK, base + 50: scheduler.StatusSkipped, base + 60: scheduler.StatusSkipped,
		}, statuses)
		assert.EqualValues(t, 2, runs.Load())
	})
}

func TestCatchUpAfterAllInstancesWereDown(t *testing.T) {
	for _, tc := range []struct {
		policy scheduler.CatchUpPolicy
		want   int
	}{{scheduler.CatchUpNone, 0}, {scheduler.CatchUpLatest, 1}, {scheduler.CatchUpAll, 3}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				ran := map[int64]int{}
				setup := func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Minute, func(_ context.Context, r scheduler.Run) error {
						mu.Lock()
						ran[r.Slot.Unix()]++
						mu.Unlock()
						return nil
					}, scheduler.WithCatchUp(tc.policy, 10*time.Minute), scheduler.WithMaxLate(5*time.Second))
				}
				// Up for the 00:01 slot, then all down for 00:02, 00:03, 00:04.
				time.Sleep(30 * time.Second)
				f := anarchontest.Start(t, anarchontest.Config{Setup: setup})
				anarchontest.Advance(time.Minute)
				for _, r := range f.Replicas() {
					require.NoError(t, r.Stop(t.Context()))
				}
				anarchontest.Advance(3*time.Minute + 10*time.Second) // 00:04:40
				for _, r := range f.Replicas() {
					require.NoError(t, r.Restart(t.Context()))
				}
				anarchontest.Advance(time.Second)

				mu.Lock()
				defer mu.Unlock()
				missed := 0
				for _, m := range []int64{2, 3, 4} {
					n := ran[946684800+60*m]
					assert.LessOrEqual(t, n, 1, "slot 00:0%d ran %d times", m, n)
					missed += n
				}
				assert.Equal(t, tc.want, missed, "policy %s: %v", tc.policy, ran)
				assert.Equal(t, 1, ran[946684800+60], "the slot before the outage ran once")
				if tc.policy == scheduler.CatchUpLatest {
					assert.Equal(t, 1, ran[946684800+240], "latest is the newest missed slot")
				}
			})
		})
	}
}

func TestLeaseLostCancelsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		v := &faultView{Backend: b}
		s := newScheduler(t, v, "solo")
		var cause error
		time.Sleep(90 * time.Second)
		require.NoError(t, s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
			v.hangHeartbeats.Store(true)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		}, scheduler.WithLease(3*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		require.Error(t, cause)
		assert.True(t, errors.Is(cause, scheduler.ErrLeaseLost), "cause %v", cause)
	})
}
