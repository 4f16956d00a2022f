package otel

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	laterSlot := fmt.Errorf("%w: slot 10:01 asked from instance b", scheduler.ErrOverlapCancelled)
	for _, tc := range []struct {
		name          string
		ctx           context.Context
		err           error
		want, errType string
	}{
		{"ok", context.Background(), nil, OutcomeOK, ""},
		{"error", context.Background(), boom, OutcomeError, "*errors.errorString"},
		{"a typed error, wrapped", context.Background(), fmt.Errorf("read: %w", &net.OpError{Op: "read", Err: boom}), OutcomeError, "*net.OpError"},
		{"an error that names its type", context.Background(), fmt.Errorf("call: %w", typedErr{}), OutcomeError, "quota_exceeded"},
		{"panic, whatever the context", cancelled(scheduler.ErrStopped), fmt.Errorf("%w: x", scheduler.ErrHandlerPanic), OutcomeError, ErrorTypePanic},
		{"timeout", cancelled(timeout), timeout, OutcomeTimeout, ErrorTypeTimeout},
		{"a handler that ignored its timeout", cancelled(timeout), nil, OutcomeOK, ""},
		{"stopped", cancelled(scheduler.ErrStopped), context.Canceled, OutcomeCancelled, ErrorTypeStopped},
		{"cancelled by a later slot: no failure", cancelled(laterSlot), context.Canceled, OutcomeCancelled, ""},
		{"cancelled by a later slot, its own error returned", cancelled(laterSlot), boom, OutcomeCancelled, ""},
		{"lost", cancelled(scheduler.ErrLeaseLost), boom, OutcomeLost, ErrorTypeLeaseLost},
		{"lost, though the handler returned nil", cancelled(scheduler.ErrLeaseLost), nil, OutcomeLost, ErrorTypeLeaseLost},
		{"the caller gave up on a manual run", cancelled(context.Canceled), context.Canceled, OutcomeError, "*errors.errorString"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errType := outcome(tc.ctx, tc.err)
			assert.Equal(t, tc.want, out)
			assert.Equal(t, tc.errType, errType)
		})
	}
}

// typedErr names its error.type.
type typedErr struct{}

func (typedErr) Error() string     { return "quota exceeded" }
func (typedErr) ErrorType() string { return "quota_exceeded" }
