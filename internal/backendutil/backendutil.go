// Package backendutil holds what every backend of this repository shares and that
// needs no store client: claim checks, run names in messages, call timeouts. It
// imports no NATS and no SQL driver, so that each backend's users link only their
// own store's client (natsutil builds on it for the NATS ones; sqlbackend uses it
// directly).
package backendutil

import (
	"context"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// CheckClaim refuses what no backend stores: a run name backend.ValidateRunName
// refuses, or an empty token. The error matches backend.ErrInvalidClaim and, for
// the name, backend.ErrInvalidJobName; pkg ("jetstream", "kvlease", "sqlbackend")
// starts its message.
func CheckClaim(pkg, job, token string) error {
	if err := backend.ValidateRunName(job); err != nil {
		return fmt.Errorf("%w: %s: %w", backend.ErrInvalidClaim, pkg, err)
	}
	if token == "" {
		return fmt.Errorf("%w: %s: claim for job %q has no token", backend.ErrInvalidClaim, pkg, job)
	}
	return nil
}

// CheckRunClaim refuses a run claim no run store accepts: CheckClaim's, a lease
// that is not positive, a negative keep, an unknown overlap policy, a buffer cap
// out of range.
func CheckRunClaim(pkg string, in backend.RunClaim) error {
	if err := CheckClaim(pkg, in.Job, in.Token); err != nil {
		return err
	}
	switch {
	case in.Lease <= 0:
		return fmt.Errorf("%w: %s: claim for job %q: lease must be positive, got %v", backend.ErrInvalidClaim, pkg, in.Job, in.Lease)
	case in.Keep < 0:
		return fmt.Errorf("%w: %s: claim for job %q: keep must not be negative, got %v", backend.ErrInvalidClaim, pkg, in.Job, in.Keep)
	case in.Overlap < backend.OverlapAllow || in.Overlap > backend.OverlapBufferAll:
		return fmt.Errorf("%w: %s: claim for job %q: unknown overlap policy %d", backend.ErrInvalidClaim, pkg, in.Job, in.Overlap)
	case in.BufferCap < 0 || in.BufferCap > backend.MaxBufferCap:
		return fmt.Errorf("%w: %s: claim for job %q: buffer cap must be 0 to %d, got %d", backend.ErrInvalidClaim, pkg, in.Job, backend.MaxBufferCap, in.BufferCap)
	case in.MaxRuns < 0:
		return fmt.Errorf("%w: %s: claim for job %q: max runs must not be negative, got %d", backend.ErrInvalidClaim, pkg, in.Job, in.MaxRuns)
	}
	return nil
}

// DescribeRun names a run in messages: job "report" slot 2026-01-02T03:04:05Z.
func DescribeRun(job string, slot time.Time) string {
	return fmt.Sprintf("job %q slot %s", job, slot.UTC().Format(time.RFC3339Nano))
}

// CallContext gives ctx the timeout d when it has no deadline of its own, so that a
// call never waits forever; a deadline already set is kept, however far away. The
// caller must call cancel.
func CallContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
