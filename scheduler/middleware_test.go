package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// trace records what middleware and handlers saw, in order.
type trace struct {
	mu    sync.Mutex
	steps []string
	runs  []scheduler.Run
}

func (tr *trace) add(step string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.steps = append(tr.steps, step)
}

func (tr *trace) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.steps...)
}

// named is a middleware that records entering and leaving, with the run's kind.
func (tr *trace) named(name string) scheduler.Middleware {
	return func(next scheduler.Handler) scheduler.Handler {
		return func(ctx context.Context, run scheduler.Run) error {
			tr.mu.Lock()
			tr.runs = append(tr.runs, run)
			tr.mu.Unlock()
			tr.add(fmt.Sprintf("%s> manual=%t", name, run.Manual))
			err := next(ctx, run)
			tr.add(fmt.Sprintf("%s< %v", name, err))
			return err
		}
	}
}

// Config.Middleware wraps every job's handler, scheduled and manual runs alike,
// the first outermost, and each middleware is handed the run the handler gets.
func TestMiddlewareWrapsScheduledAndManualRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &trace{}
		var handled []scheduler.Run
		s := newScheduler(t, memory.New(), "A", func(c *scheduler.Config) {
			c.Middleware = []scheduler.Middleware{tr.named("outer"), tr.named("inner")}
		})
		require.NoError(t, s.Every("tick", time.Hour, func(_ context.Context, r scheduler.Run) error {
			tr.add("handler")
			handled = append(handled, r)
			return nil
		}))
		time.Sleep(30 * time.Minute) // between slots
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(31 * time.Minute) // the slot at 01:00 ran
		_, err := s.RunNow(t.Context(), "tick")
		require.NoError(t, err)
		require.NoError(t, s.Stop(t.Context()))

		assert.Equal(t, []string{
			"outer> manual=false", "inner> manual=false", "handler", "inner< <nil>", "outer< <nil>",
			"outer> manual=true", "inner> manual=true", "handler", "inner< <nil>", "outer< <nil>",
		}, tr.get())
		require.Len(t, handled, 2)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		assert.Equal(t, []scheduler.Run{handled[0], handled[0], handled[1], handled[1]}, tr.runs, "each middleware gets the handler's run")
	})
}

// The run ends with what the outermost middleware returns; a handler's panic
// reaches the middleware as an error matching ErrHandlerPanic, and a
// middleware's own panic is recovered like a handler's.
func TestMiddlewareDecidesTheOutcome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler scheduler.Handler
		mw      scheduler.Middleware
		status  scheduler.Status
		seen    error // what the middleware got from the handler
	}{
		{
			name:    "a middleware's error fails a run the handler ended well",
			handler: func(context.Context, scheduler.Run) error { return nil },
			mw: func(next scheduler.Handler) scheduler.Handler {
				return func(ctx context.Context, r scheduler.Run) error {
					if err := next(ctx, r); err != nil {
						return err
					}
					return errors.New("refused by the middleware")
				}
			},
			status: scheduler.StatusError,
		},
		{
			name:    "a middleware that swallows the handler's error ends it ok",
			handler: func(context.Context, scheduler.Run) error { return errors.New("boom") },
			mw: func(next scheduler.Handler) scheduler.Handler {
				return func(ctx context.Context, r scheduler.Run) error { _ = next(ctx, r); return nil }
			},
			status: scheduler.StatusOK,
		},
		{
			name:    "a handler's panic is an error to the middleware",
			handler: func(context.Context, scheduler.Run) error { panic("handler broke") },
			status:  scheduler.StatusError,
			seen:    scheduler.ErrHandlerPanic,
		},
		{
			name:    "a middleware's panic is recovered",
			handler: func(context.Context, scheduler.Run) error { return nil },
			mw: func(scheduler.Handler) scheduler.Handler {
				return func(context.Context, scheduler.Run) error { panic("middleware broke") }
			},
			status: scheduler.StatusError,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var seen error
				spy := func(next scheduler.Handler) scheduler.Handler {
					return func(ctx context.Context, r scheduler.Run) error {
						seen = next(ctx, r)
						return seen
					}
				}
				mws := []scheduler.Middleware{spy}
				if tc.mw != nil {
					mws = []scheduler.Middleware{tc.mw}
				}
				s := newScheduler(t, memory.New(), "A", func(c *scheduler.Config) { c.Middleware = mws })
				require.NoError(t, s.Every("job", 24*time.Hour, tc.handler))
				time.Sleep(time.Hour)
				require.NoError(t, s.Start(t.Context()))
				defer s.Stop(t.Context())
				rec, err := s.RunNow(t.Context(), "job")
				require.NoError(t, err)
				assert.Equal(t, tc.status, rec.Status, "error %q", rec.Error)
				if tc.seen != nil {
					assert.ErrorIs(t, seen, tc.seen)
				}
			})
		})
	}
}

// A nil middleware is refused by New, naming it; one that returns a nil handler
// is refused when a job is registered.
func TestMiddlewareIsChecked(t *testing.T) {
	ok := func(next scheduler.Handler) scheduler.Handler { return next }
	_, err := scheduler.New(scheduler.Config{Backend: memory.New(), Middleware: []scheduler.Middleware{ok, nil}})
	require.ErrorIs(t, err, scheduler.ErrInvalidConfig)
	assert.ErrorContains(t, err, "Middleware[1]")

	s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Middleware: []scheduler.Middleware{
		ok, func(scheduler.Handler) scheduler.Handler { return nil },
	}})
	require.NoError(t, err)
	err = s.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil })
	require.ErrorIs(t, err, scheduler.ErrNilHandler)
	assert.ErrorContains(t, err, "Middleware[1]")
	assert.Empty(t, s.Jobs(), "the job was not registered")
}

type callerKey struct{}

// A manual run's handler gets the values of RunNow's context (a trigger's trace
// context, say), and is still cancelled when that context is, with its cause.
func TestRunNowHandlerCarriesTheCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "A")
		type seen struct {
			value any
			cause error
		}
		got := make(chan seen, 2)
		require.NoError(t, s.Every("job", 24*time.Hour, func(ctx context.Context, r scheduler.Run) error {
			if !r.Manual {
				return nil
			}
			v := ctx.Value(callerKey{})
			if v == "wait" {
				<-ctx.Done()
			}
			got <- seen{v, context.Cause(ctx)}
			return context.Cause(ctx)
		}))
		time.Sleep(time.Hour)
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(t.Context())

		rec, err := s.RunNow(context.WithValue(t.Context(), callerKey{}, "trace-1"), "job")
		require.NoError(t, err)
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		assert.Equal(t, seen{"trace-1", nil}, <-got)

		gone := errors.New("the caller went away")
		ctx, cancel := context.WithCancelCause(context.WithValue(t.Context(), callerKey{}, "wait"))
		done := make(chan scheduler.RunRecord, 1)
		go func() {
			rec, err := s.RunNow(ctx, "job")
			assert.NoError(t, err)
			done <- rec
		}()
		synctest.Wait()
		cancel(gone)
		got1 := <-got
		assert.Equal(t, "wait", got1.value)
		assert.ErrorIs(t, got1.cause, gone, "the caller's cancellation reaches the handler with its cause")
		assert.Equal(t, scheduler.StatusError, (<-done).Status)
	})
}
