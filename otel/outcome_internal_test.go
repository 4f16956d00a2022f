package otel

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/scheduler"
)

// The outcome follows the scheduler's rules for a run's status: the cause of the
// context's end decides for an error, a lost lease even without one.
func TestOutcome(t *testing.T) {
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	boom := errors.New("boom")
	timeout := fmt.Errorf("%w after 5s", scheduler.ErrHandlerTimeout)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want string
	}{
		{"ok", context.Background(), nil, OutcomeOK},
		{"error", context.Background(), boom, OutcomeError},
		{"panic, whatever the context", cancelled(scheduler.ErrStopped), fmt.Errorf("%w: x", scheduler.ErrHandlerPanic), OutcomeError},
		{"timeout", cancelled(timeout), timeout, OutcomeTimeout},
		{"a handler that ignored its timeout", cancelled(timeout), nil, OutcomeOK},
		{"stopped", cancelled(scheduler.ErrStopped), context.Canceled, OutcomeCancelled},
		{"lost", cancelled(scheduler.ErrLeaseLost), boom, OutcomeLost},
		{"lost, though the handler returned nil", cancelled(scheduler.ErrLeaseLost), nil, OutcomeLost},
		{"the caller gave up on a manual run", cancelled(context.Canceled), context.Canceled, OutcomeError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, outcome(tc.ctx, tc.err))
		})
	}
}
