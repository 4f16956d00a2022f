package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.Membership = (*LeasedBackend)(nil)

// members is the run store's membership, or an error saying there is none.
func (b *LeasedBackend) members() (backend.Membership, error) {
	ms, ok := b.runs.(backend.Membership)
	if !ok {
		return nil, fmt.Errorf("%w: the run store %T keeps no members", backend.ErrMembershipNotSupported, b.runs)
	}
	return ms, nil
}

// Beat stores m as live in the run store (a kvlease store keeps it in its
// bucket).
func (b *LeasedBackend) Beat(ctx context.Context, m backend.Member, ttl time.Duration) error {
	ms, err := b.members()
	if err != nil {
		return err
	}
	return ms.Beat(ctx, m, ttl)
}

// Leave removes instance from the run store's members.
func (b *LeasedBackend) Leave(ctx context.Context, instance string) error {
	ms, err := b.members()
	if err != nil {
		return err
	}
	return ms.Leave(ctx, instance)
}

// WatchMembers watches the run store's members.
func (b *LeasedBackend) WatchMembers(ctx context.Context, fn func([]backend.Member)) error {
	ms, err := b.members()
	if err != nil {
		return err
	}
	return ms.WatchMembers(ctx, fn)
}
