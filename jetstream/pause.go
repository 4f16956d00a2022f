package jetstream

import (
	"context"
	"fmt"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.Pauser = (*LeasedBackend)(nil)

// pauser is the run store's pause capability, or an error saying there is none.
func (b *LeasedBackend) pauser() (backend.Pauser, error) {
	p, ok := b.runs.(backend.Pauser)
	if !ok {
		return nil, fmt.Errorf("%w: the run store %T stores no pauses", backend.ErrPauseNotSupported, b.runs)
	}
	return p, nil
}

// SetPause stores a pause in the run store (a kvlease store keeps it in its bucket).
func (b *LeasedBackend) SetPause(ctx context.Context, p backend.Pause) error {
	ps, err := b.pauser()
	if err != nil {
		return err
	}
	return ps.SetPause(ctx, p)
}

// ClearPause removes a pause from the run store.
func (b *LeasedBackend) ClearPause(ctx context.Context, job string) error {
	ps, err := b.pauser()
	if err != nil {
		return err
	}
	return ps.ClearPause(ctx, job)
}

// Pauses lists the run store's pauses.
func (b *LeasedBackend) Pauses(ctx context.Context) ([]backend.Pause, error) {
	ps, err := b.pauser()
	if err != nil {
		return nil, err
	}
	return ps.Pauses(ctx)
}

// WatchPauses watches the run store's pauses.
func (b *LeasedBackend) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	ps, err := b.pauser()
	if err != nil {
		return err
	}
	return ps.WatchPauses(ctx, fn)
}
