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

func TestBackupTakesOverFromACrashedWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := &startLog{}
		var views []*faultView
		var mu sync.Mutex
		byInstance := map[string]*faultView{}
		time.Sleep(90 * time.Second) // between slots
		scheds, vs := startThree(t, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				log.add(r)
				if r.Attempt == 1 {
					mu.Lock()
					byInstance[r.Instance].hangHeartbeats.Store(true) // the winner "dies": no more heartbeats
					mu.Unlock()
					<-ctx.Done() // and its work never completes
					return context.Cause(ctx)
				}
				return nil
			}, scheduler.WithLease(2*time.Second))
		})
		views = vs
		mu.Lock()
		for i, id := range []string{"A", "B", "C"} {
			byInstance[id] = views[i]
		}
		mu.Unlock()
		time.Sleep(time.Hour) // reach the slot at 01:00
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		starts, at := log.get()
		require.Len(t, starts, 2, "the slot ran twice: the dead winner, then exactly one backup")
		assert.Equal(t, 1, starts[0].Attempt)
		assert.Equal(t, 2, starts[1].Attempt)
		assert.NotEqual(t, starts[0].Instance, starts[1].Instance)
		assert.True(t, starts[0].Slot.Equal(starts[1].Slot))
		assert.Greater(t, starts[1].Fence, starts[0].Fence, "the backup's fence is higher")
		assert.Empty(t, starts[0].Previous, "a first attempt took nothing over")
		assert.Equal(t, starts[0].Instance, starts[1].Previous, "the takeover names whose attempt it took over")
		delay := at[1].Sub(at[0])
		assert.LessOrEqual(t, delay, 2*time.Second+time.Second, "takeover within lease + 1s, took %v", delay)
		t.Logf("takeover delay (synctest time): %v", delay)

		hist, err := scheds[0].History(t.Context(), "job", 10)
		require.NoError(t, err)
		require.Len(t, hist, 2, "history shows both attempts: %+v", hist)
		assert.Equal(t, 2, hist[0].Attempt)
		assert.Equal(t, starts[1].Instance, hist[0].Instance)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status)
		assert.Equal(t, 1, hist[1].Attempt)
		assert.Equal(t, starts[0].Instance, hist[1].Instance)
		assert.Contains(t, []scheduler.Status{scheduler.StatusLost, scheduler.StatusSuperseded}, hist[1].Status)
	})
}

func TestGracefulStopHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := &startLog{}
		firstStarted := make(chan string, 1)
		time.Sleep(90 * time.Second)
		scheds, _ := startThree(t, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				log.add(r)
				if r.Attempt == 1 {
					firstStarted <- r.Instance
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}, scheduler.WithLease(10*time.Second))
		})
		winner := <-firstStarted
		idx := map[string]int{"A": 0, "B": 1, "C": 2}[winner]
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		stopErr := scheds[idx].Stop(ctx) // hand-over: cancel, then release
		assert.Error(t, stopErr, "the handler had to be cancelled")
		time.Sleep(5 * time.Second)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		starts, at := log.get()
		require.Len(t, starts, 2)
		assert.NotEqual(t, winner, starts[1].Instance)
		delay := at[1].Sub(at[0])
		assert.Less(t, delay, time.Second+100*time.Millisecond, "a backup starts within 1s of the hand-over, not after the 10s lease: %v", delay)
		hist, err := scheds[0].History(t.Context(), "job", 10)
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
				b := memory.New()
				var mu sync.Mutex
				ran := map[int64]int{}
				register := func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Minute, func(_ context.Context, r scheduler.Run) error {
						mu.Lock()
						ran[r.Slot.Unix()]++
						mu.Unlock()
						return nil
					}, scheduler.WithCatchUp(tc.policy, 10*time.Minute), scheduler.WithMaxLate(5*time.Second))
				}
				// Up for the 00:01 slot, then all down for 00:02, 00:03, 00:04.
				time.Sleep(30 * time.Second)
				scheds, _ := startThree(t, b, register)
				time.Sleep(time.Minute)
				for _, s := range scheds {
					require.NoError(t, s.Stop(t.Context()))
				}
				time.Sleep(3*time.Minute + 10*time.Second) // 00:04:40
				scheds, _ = startThree(t, b, register)
				time.Sleep(time.Second)
				for _, s := range scheds {
					require.NoError(t, s.Stop(t.Context()))
				}
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
