package memory

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.Membership = (*Backend)(nil)

// memMembers holds the memory backend's members and wakes its watchers.
type memMembers struct {
	byInstance map[string]memMember
	notify     chan struct{} // closed and replaced when the live set changes
}

// memMember is one member's last beat: live while the clock is before expires.
type memMember struct {
	group   string
	expires time.Time
}

func (b *Backend) membersLocked() *memMembers {
	if b.members == nil {
		b.members = &memMembers{byInstance: map[string]memMember{}, notify: make(chan struct{})}
	}
	return b.members
}

func (ms *memMembers) changed() {
	close(ms.notify)
	ms.notify = make(chan struct{})
}

// Beat stores m as live for ttl from now, by the backend's clock.
func (b *Backend) Beat(ctx context.Context, m backend.Member, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := backend.CheckMember(m, ttl); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ms := b.membersLocked()
	now := b.clock.Now()
	for inst, cur := range ms.byInstance { // forget the expired: they are seen gone already
		if !now.Before(cur.expires) {
			delete(ms.byInstance, inst)
		}
	}
	cur, live := ms.byInstance[m.Instance]
	ms.byInstance[m.Instance] = memMember{group: m.Group, expires: now.Add(ttl)}
	if !live || cur.group != m.Group {
		ms.changed()
	}
	return nil
}

// Leave removes instance at once.
func (b *Backend) Leave(ctx context.Context, instance string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := backend.CheckMember(backend.Member{Instance: instance}, backend.MinMemberTTL); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ms := b.membersLocked()
	cur, ok := ms.byInstance[instance]
	if !ok {
		return nil
	}
	delete(ms.byInstance, instance)
	if b.clock.Now().Before(cur.expires) {
		ms.changed()
	}
	return nil
}

// liveMembersLocked returns the members live at now, by instance, the earliest
// of their expiries (zero for none), and the channel closed on the next change.
func (b *Backend) liveMembersLocked(now time.Time) ([]backend.Member, time.Time, <-chan struct{}) {
	ms := b.membersLocked()
	out := make([]backend.Member, 0, len(ms.byInstance))
	var next time.Time
	for inst, m := range ms.byInstance {
		if !now.Before(m.expires) {
			continue
		}
		out = append(out, backend.Member{Instance: inst, Group: m.group})
		if next.IsZero() || m.expires.Before(next) {
			next = m.expires
		}
	}
	slices.SortFunc(out, func(x, y backend.Member) int { return strings.Compare(x.Instance, y.Instance) })
	return out, next, ms.notify
}

// WatchMembers calls fn with the live members now and after every change of
// the set, until ctx ends. A member is gone when the backend's clock reaches
// its expiry: a timer on that clock wakes the watch at the earliest one.
func (b *Backend) WatchMembers(ctx context.Context, fn func([]backend.Member)) error {
	var last []backend.Member
	for first := true; ; first = false {
		b.mu.Lock()
		now := b.clock.Now()
		all, next, changed := b.liveMembersLocked(now)
		b.mu.Unlock()
		if first || !slices.Equal(all, last) {
			last = all
			fn(slices.Clone(all))
		}
		var expiry <-chan time.Time
		var t backend.Timer
		if !next.IsZero() {
			t = b.clock.NewTimer(next.Sub(now))
			expiry = t.C()
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-expiry:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}
