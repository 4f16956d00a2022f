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

// onlyRecord returns the one history record of job.
func onlyRecord(t *testing.T, s *scheduler.Scheduler, job string) scheduler.RunRecord {
	t.Helper()
	recs, err := s.History(context.Background(), job, 0)
	require.NoError(t, err)
	require.Len(t, recs, 1, "%+v", recs)
	return recs[0]
}

// A holder that dies mid-run leaves its attempt running in History (read from
// the run store's Active) until a backup takes it over, which records it lost
// in the same step: one record per attempt, written by no reader.
func TestDeadHolderRecordedLostByTheTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		a := &failingFinish{Backend: mem}
		var starts atomic.Int32
		handler := func(dies bool) scheduler.Handler {
			return func(ctx context.Context, r scheduler.Run) error {
				starts.Add(1)
				if dies {
					a.dead.Store(true) // A dies: no heartbeat, no settle
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}
		}
		opts := []scheduler.JobOption{scheduler.WithLease(3 * time.Second), scheduler.WithJitter(0)}
		sa := newScheduler(t, a, "A", callTimeout(time.Second))
		require.NoError(t, sa.Every("job", time.Hour, handler(true), opts...))
		time.Sleep(59*time.Minute + 59*time.Second)
		require.NoError(t, sa.Start(t.Context()))
		time.Sleep(2 * time.Second) // A holds the slot at 1:00 and dies

		sb := newScheduler(t, mem, "B", callTimeout(time.Second))
		require.NoError(t, sb.Every("job", time.Hour, handler(false), opts...))
		r := onlyRecord(t, sb, "job")
		assert.Equal(t, scheduler.StatusRunning, r.Status, "the dead holder's attempt shows running")
		assert.Equal(t, "A", r.Instance)
		require.NoError(t, sb.Start(t.Context()))
		time.Sleep(10 * time.Second) // A's lease expires; B adopts the run
		require.NoError(t, sb.Stop(t.Context()))
		stop, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = sa.Stop(stop)

		recs, err := mem.History(t.Context(), "job", 0)
		require.NoError(t, err)
		require.Len(t, recs, 2, "one record per attempt: %+v", recs)
		assert.Equal(t, []scheduler.Status{scheduler.StatusOK, scheduler.StatusLost}, []scheduler.Status{recs[0].Status, recs[1].Status})
		assert.Equal(t, []string{"B", "A"}, []string{recs[0].Instance, recs[1].Instance})
		assert.Contains(t, recs[1].Error, "taken over by B")
		assert.EqualValues(t, 2, starts.Load())
	})
}

// A cancel-other run whose holder is killed: the later slot asked it to end,
// and once its lease has expired the next claim ends it cancelled with its
// record. Its slot stays in History; nobody has to read History in time.
func TestCancelOtherHolderKilledStaysInHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		a := &failingFinish{Backend: mem}
		var starts atomic.Int32
		opts := []scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(30 * time.Second),
			scheduler.WithJitter(0), scheduler.WithMaxLate(15 * time.Second)}
		sa := newScheduler(t, a, "A", callTimeout(time.Second))
		require.NoError(t, sa.Every("refresh", 20*time.Second, func(ctx context.Context, r scheduler.Run) error {
			starts.Add(1)
			a.dead.Store(true) // A is killed holding the slot at 0:20
			<-ctx.Done()
			return context.Cause(ctx)
		}, opts...))
		time.Sleep(19 * time.Second)
		require.NoError(t, sa.Start(t.Context()))
		time.Sleep(2 * time.Second) // 0:21: A holds the slot at 0:20, dead

		sb := newScheduler(t, mem, "B", callTimeout(time.Second))
		require.NoError(t, sb.Every("refresh", 20*time.Second, func(ctx context.Context, r scheduler.Run) error {
			starts.Add(1)
			return nil
		}, opts...))
		require.NoError(t, sb.Start(t.Context()))
		// 0:40 asks 0:20 to end; 0:20's lease ends at 0:50 and is ended
		// cancelled; 0:40 runs then, 1:00 on time.
		time.Sleep(45 * time.Second)
		require.NoError(t, sb.Stop(t.Context()))
		stop, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = sa.Stop(stop)

		recs, err := mem.History(t.Context(), "refresh", 0)
		require.NoError(t, err)
		bySlot := map[int]scheduler.RunRecord{}
		for _, r := range recs {
			_, dup := bySlot[r.Slot.Second()+60*r.Slot.Minute()]
			assert.False(t, dup, "one attempt per slot here, one record each: %+v", recs)
			bySlot[r.Slot.Second()+60*r.Slot.Minute()] = r
		}
		require.Contains(t, bySlot, 20, "the killed holder's slot is in History: %+v", recs)
		assert.Equal(t, scheduler.StatusCancelled, bySlot[20].Status)
		assert.Equal(t, "A", bySlot[20].Instance)
		assert.Equal(t, scheduler.StatusOK, bySlot[40].Status)
		assert.Equal(t, scheduler.StatusOK, bySlot[60].Status)
	})
}

// Without leases a run with a timeout whose result has not come within it is
// shown lost; without a timeout nothing can tell, and it shows running.
func TestHistoryShowsAPlainRunPastItsTimeoutLost(t *testing.T) {
	for _, timeout := range []time.Duration{0, 30 * time.Second} {
		t.Run(timeout.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				a := &flakyHistory{Backend: mem, failSaves: 1 << 30}
				opts := []scheduler.JobOption{scheduler.WithMaxLate(time.Second)}
				if timeout > 0 {
					opts = append(opts, scheduler.WithTimeout(timeout))
				}
				sa := newScheduler(t, plainOf{a}, "A", callTimeout(time.Second))
				require.NoError(t, sa.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }, opts...))
				time.Sleep(59 * time.Minute)
				require.NoError(t, sa.Start(t.Context()))
				time.Sleep(2 * time.Minute)
				stop, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				_ = sa.Stop(stop)

				sb := newScheduler(t, plainOf{&flakyHistory{Backend: mem}}, "B", callTimeout(time.Second))
				require.NoError(t, sb.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }, opts...))
				require.NoError(t, sb.Start(t.Context()))
				defer func() { require.NoError(t, sb.Stop(t.Context())) }()
				r := onlyRecord(t, sb, "job")
				if timeout == 0 {
					assert.Equal(t, scheduler.StatusRunning, r.Status)
					return
				}
				assert.Equal(t, scheduler.StatusLost, r.Status)
				assert.Contains(t, r.Error, "timeout")
			})
		})
	}
}
