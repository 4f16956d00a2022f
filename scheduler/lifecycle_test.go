package scheduler_test

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// TestLifecycleMessages: every call in a state that refuses it says which state,
// and Stop with nothing to stop says so in the log.
func TestLifecycleMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Hour) // between slots
		noop := func(context.Context, scheduler.Run) error { return nil }
		logs := newCaptureLog()
		s := newScheduler(t, memory.New(), "A", func(c *scheduler.Config) { c.Logger = slog.New(logs) })
		require.NoError(t, s.Every("j", time.Hour, noop))

		// Stop before Start: nil, and the log says it was a no-op that ends the
		// scheduler.
		require.NoError(t, s.Stop(t.Context()))
		require.NoError(t, s.Stop(t.Context()), "again")
		var said []string
		for _, l := range logs.all() {
			said = append(said, l.level.String()+" "+l.msg)
		}
		assert.Equal(t, []string{
			"INFO Stop before Start: nothing was running; the scheduler cannot be started now",
			"DEBUG Stop again: the scheduler was stopped already",
		}, said)

		err := s.Start(t.Context())
		require.ErrorIs(t, err, scheduler.ErrStopped)
		assert.EqualError(t, err, "scheduler: stopped: Start after Stop (a scheduler starts once: make a new one)")
		err = s.Every("k", time.Hour, noop)
		require.ErrorIs(t, err, scheduler.ErrStopped)
		assert.EqualError(t, err, `job "k": scheduler: stopped: no job is registered once the scheduler was stopped`)
		err = s.Cron("bad cron", "61 * * * *", noop)
		require.ErrorIs(t, err, scheduler.ErrStopped, "the state is the first thing wrong")
		err = s.Every("bad interval", -time.Second, noop)
		require.ErrorIs(t, err, scheduler.ErrStopped, "the state is the first thing wrong")
		_, err = s.RunNow(t.Context(), "j")
		require.ErrorIs(t, err, scheduler.ErrNotStarted)
		assert.EqualError(t, err, `run "j" now: scheduler: not started: the scheduler was stopped`)

		// Before Start and while started.
		s = newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("j", time.Hour, noop))
		_, err = s.RunNow(t.Context(), "j")
		assert.EqualError(t, err, `run "j" now: scheduler: not started: call Start first`)
		require.NoError(t, s.Start(t.Context()))
		err = s.Start(t.Context())
		require.ErrorIs(t, err, scheduler.ErrStarted)
		assert.EqualError(t, err, "scheduler: already started: Start was called before (a scheduler starts once)")
		require.NoError(t, s.Cron("k", "0 9 * * *", noop), "a job registered while started")
		require.ErrorIs(t, s.Cron("k", "0 9 * * *", noop), scheduler.ErrJobExists)
		require.NoError(t, s.Stop(t.Context()))
		err = s.Every("k", time.Hour, noop)
		assert.EqualError(t, err, `job "k": scheduler: stopped: no job is registered once the scheduler was stopped`)
	})
}

// stuckBackend is a memory backend whose Init, PrepareJob or Pauses waits for its
// context to end.
type stuckBackend struct {
	*memory.Backend
	stuck string // "init", "prepare" or "pauses"
}

func (b stuckBackend) wait(ctx context.Context, call string) error {
	if b.stuck != call {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (b stuckBackend) Init(ctx context.Context) error {
	if err := b.wait(ctx, "init"); err != nil {
		return err
	}
	return b.Backend.Init(ctx)
}

func (b stuckBackend) PrepareJob(ctx context.Context, j backend.JobLimits) error {
	if err := b.wait(ctx, "prepare"); err != nil {
		return err
	}
	return b.Backend.PrepareJob(ctx, j)
}

func (b stuckBackend) Pauses(ctx context.Context) ([]scheduler.Pause, error) {
	if err := b.wait(ctx, "pauses"); err != nil {
		return nil, err
	}
	return b.Backend.Pauses(ctx)
}

// TestStartContext: Start's context bounds its own calls (Init, PrepareJob, the
// first read of the pauses), each by Config.CallTimeout when it has no deadline;
// the loops do not end with it.
func TestStartContext(t *testing.T) {
	noop := func(context.Context, scheduler.Run) error { return nil }
	for _, stuck := range []string{"init", "prepare", "pauses"} {
		t.Run(stuck, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := stuckBackend{memory.New(), stuck}
				s := newScheduler(t, b, "A", func(c *scheduler.Config) { c.CallTimeout = 3 * time.Second })
				require.NoError(t, s.Every("j", time.Hour, noop))
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				t0 := time.Now()
				err := s.Start(ctx)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, time.Second, time.Since(t0), "bounded by ctx's deadline")

				s = newScheduler(t, b, "A", func(c *scheduler.Config) { c.CallTimeout = 3 * time.Second })
				require.NoError(t, s.Every("j", time.Hour, noop))
				t0 = time.Now()
				err = s.Start(t.Context())
				require.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, 3*time.Second, time.Since(t0), "no deadline: bounded by CallTimeout")
			})
		})
	}

	synctest.Test(t, func(t *testing.T) {
		time.Sleep(30 * time.Minute) // between slots
		runs := make(chan scheduler.Run, 10)
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("j", time.Hour, func(_ context.Context, r scheduler.Run) error {
			runs <- r
			return nil
		}))
		ctx, cancel := context.WithCancel(t.Context())
		require.NoError(t, s.Start(ctx))
		cancel() // after Start returned: stops nothing
		time.Sleep(time.Hour)
		synctest.Wait()
		assert.Len(t, runs, 1, "the slot after Start's context ended ran")
		require.NoError(t, s.Stop(t.Context()))
	})
}
