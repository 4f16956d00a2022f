package scheduler_test

import (
	"context"
	"strings"
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

// A holder that finished its run in the run store but died before its result was
// stored leaves a record that says running; another instance's History ends it
// from the run store and stores that ending.
func TestHistoryEndsARunWhoseResultWasNeverStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		a := &flakyHistory{Backend: mem, failSaves: 1 << 30}
		sa := newScheduler(t, a, "A", callTimeout(time.Second))
		require.NoError(t, sa.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		time.Sleep(59 * time.Minute)
		require.NoError(t, sa.Start(t.Context()))
		time.Sleep(2 * time.Minute) // the slot at 1:00 ran on A; its result waits in A's outbox
		stop, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		require.Error(t, sa.Stop(stop), "A stops with its result unstored")

		sb := newScheduler(t, mem, "B", callTimeout(time.Second))
		require.NoError(t, sb.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		before, err := mem.History(t.Context(), "job", 0)
		require.NoError(t, err)
		require.Len(t, before, 1)
		require.Equal(t, scheduler.StatusRunning, before[0].Status)
		require.NoError(t, sb.Start(t.Context()))
		defer func() { require.NoError(t, sb.Stop(t.Context())) }()

		r := onlyRecord(t, sb, "job")
		assert.Equal(t, scheduler.StatusOK, r.Status)
		assert.Equal(t, "A", r.Instance)
		assert.Contains(t, r.Error, "in the run store")
		synctest.Wait()
		stored, err := mem.History(t.Context(), "job", 0)
		require.NoError(t, err)
		require.Len(t, stored, 1)
		assert.Equal(t, scheduler.StatusOK, stored[0].Status, "the ending is stored")
	})
}

// A takeover whose note that the attempt before it was lost was never stored (its
// instance died too) leaves attempt 1 running; a reader ends it lost.
func TestHistoryEndsAnAttemptTakenOverUnnoted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var starts atomic.Int32
		a := &failingFinish{Backend: mem}
		b := &flakyHistory{Backend: mem, failSaves: 1 << 30}
		handler := func(ctx context.Context, r scheduler.Run) error {
			starts.Add(1)
			if r.Instance == "A" {
				a.dead.Store(true)
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return nil
		}
		sa := newScheduler(t, a, "A", callTimeout(time.Second))
		require.NoError(t, sa.Every("job", time.Hour, handler, scheduler.WithLease(2*time.Second)))
		sb := newScheduler(t, b, "B", callTimeout(time.Second))
		require.NoError(t, sb.Every("job", time.Hour, handler, scheduler.WithLease(2*time.Second)))
		time.Sleep(59 * time.Minute)
		require.NoError(t, sa.Start(t.Context()))
		time.Sleep(time.Minute + 500*time.Millisecond)
		require.NoError(t, sb.Start(t.Context())) // B claims after A: a backup
		time.Sleep(2 * time.Minute)
		for _, s := range []*scheduler.Scheduler{sa, sb} {
			stop, cancel := context.WithTimeout(t.Context(), time.Second)
			_ = s.Stop(stop)
			cancel()
		}
		require.Equal(t, int32(2), starts.Load(), "A's attempt, then B's takeover")

		sc := newScheduler(t, mem, "C", callTimeout(time.Second))
		require.NoError(t, sc.Every("job", time.Hour, handler, scheduler.WithLease(2*time.Second)))
		require.NoError(t, sc.Start(t.Context()))
		defer func() { require.NoError(t, sc.Stop(t.Context())) }()
		recs, err := sc.History(t.Context(), "job", 0)
		require.NoError(t, err)
		byAttempt := map[int]scheduler.RunRecord{}
		for _, r := range recs {
			byAttempt[r.Attempt] = r
		}
		require.Len(t, byAttempt, 2, "%+v", recs)
		assert.Equal(t, scheduler.StatusLost, byAttempt[1].Status, "%+v", byAttempt[1])
		assert.Equal(t, scheduler.StatusOK, byAttempt[2].Status, "%+v", byAttempt[2])
		assert.True(t, strings.Contains(byAttempt[1].Error, "attempt 2"), byAttempt[1].Error)
	})
}

// Without leases a run with a timeout whose result has not come within it is ended
// lost by a reader; without a timeout nothing can tell, and it stays running.
func TestHistoryEndsAPlainRunPastItsTimeout(t *testing.T) {
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
