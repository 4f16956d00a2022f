package backend

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Member is one live instance of the fleet, as its last beat stored it.
type Member struct {
	// Instance names the instance (scheduler.Config.Instance).
	Instance string
	// Group says which jobs the instance declares (a digest of their names):
	// instances share out a job's slots only with the members of their group.
	Group string
}

// Membership is implemented by stores that keep which instances are alive, so
// that a fleet can share out its slots: one instance claims each slot at its time
// and the others stand by (scheduler.Config.Turns). It is optional: on a store
// without it every instance claims every slot.
type Membership interface {
	// Beat stores m as alive for ttl from the store's receipt of the beat (by
	// the store's clock), replacing the instance's earlier beat. An instance
	// that stops beating is gone once ttl has passed since its last beat.
	Beat(ctx context.Context, m Member, ttl time.Duration) error
	// Leave removes instance at once. Leaving an instance that is not stored
	// is not an error.
	Leave(ctx context.Context, instance string) error
	// WatchMembers calls fn with the live members, sorted by instance, at once
	// and again after every change of the set (a beat that only extends a
	// member need not call it), until ctx ends (it then returns nil) or the
	// watch fails. fn is called from one goroutine at a time and must return
	// quickly.
	WatchMembers(ctx context.Context, fn func([]Member)) error
}

// MaxMemberGroup bounds Member.Group, in bytes.
const MaxMemberGroup = 64

// MinMemberTTL and MaxMemberTTL bound a beat's ttl.
const (
	MinMemberTTL = time.Second
	MaxMemberTTL = time.Hour
)

// Errors of Membership, matched with errors.Is.
var (
	// ErrInvalidMember is returned for a member or ttl a store must not keep.
	ErrInvalidMember = errors.New("backend: invalid member")
	// ErrMembershipNotSupported: a Membership call on a wrapper whose inner
	// store keeps no members (a leased backend's run store without it).
	ErrMembershipNotSupported = errors.New("backend: the store keeps no members")
)

// CheckMember refuses a member whose Instance is empty, not UTF-8 or longer than
// MaxJobNameLen bytes, or whose Group is longer than MaxMemberGroup, and a ttl
// outside [MinMemberTTL, MaxMemberTTL].
func CheckMember(m Member, ttl time.Duration) error {
	switch {
	case m.Instance == "" || !utf8.ValidString(m.Instance) || len(m.Instance) > MaxJobNameLen:
		return fmt.Errorf("%w: instance %q must be UTF-8 of 1 to %d bytes", ErrInvalidMember, m.Instance, MaxJobNameLen)
	case !utf8.ValidString(m.Group) || len(m.Group) > MaxMemberGroup:
		return fmt.Errorf("%w: group of %q must be UTF-8 of at most %d bytes", ErrInvalidMember, m.Instance, MaxMemberGroup)
	case ttl < MinMemberTTL || ttl > MaxMemberTTL:
		return fmt.Errorf("%w: ttl %v of %q must be %v to %v", ErrInvalidMember, ttl, m.Instance, MinMemberTTL, MaxMemberTTL)
	}
	return nil
}
