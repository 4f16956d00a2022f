package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

var _ backend.Membership = (*Store)(nil)

// Member keys: member.<instance>, the instance one base64url token, in the
// bucket of the leases. A beat's TTL is the member's; the server expires it
// and leaves a marker the watchers see.
const memberPrefix = "member."

func memberKey(instance string) string { return memberPrefix + nameToken(instance) }

// parseMemberKey is the reverse of memberKey.
func parseMemberKey(key string) (string, bool) { return parseNameKey(memberPrefix, key) }

// memberRecord is the value of a member key.
type memberRecord struct {
	V        int    `json:"v"`
	Instance string `json:"instance"`
	Group    string `json:"group"`
}

// decodeMember reads the member stored at key; ok is false for a marker or a
// value that is not a member this version reads.
func decodeMember(key string, put bool, value []byte) (backend.Member, bool) {
	inst, ok := parseMemberKey(key)
	if !ok || !put {
		return backend.Member{}, false
	}
	var rec memberRecord
	if err := json.Unmarshal(value, &rec); err != nil || rec.V < 1 || rec.Instance != inst {
		return backend.Member{}, false
	}
	return backend.Member{Instance: rec.Instance, Group: rec.Group}, true
}

// Beat stores m on its key with a per-message TTL of ttl, which the server
// counts in whole seconds (rounded up). A beat replaces the last one whatever
// it was: it is no compare-and-set, and sending it again is harmless.
func (s *Store) Beat(ctx context.Context, m backend.Member, ttl time.Duration) error {
	if err := backend.CheckMember(m, ttl); err != nil {
		return err
	}
	data, err := json.Marshal(memberRecord{V: recordVersion, Instance: m.Instance, Group: m.Group})
	if err != nil {
		return fmt.Errorf("kvlease: encode member %q: %w", m.Instance, err)
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(b.subject(memberKey(m.Instance)))
	msg.Data = data
	msg.Header.Set(jetstream.MsgTTLHeader, natsutil.TTLHeader(ttl))
	err = s.attempt(ctx, func(ctx context.Context) error {
		_, err := natsutil.Publish(ctx, s.js.Conn(), msg)
		return err
	})
	if err != nil {
		return fmt.Errorf("kvlease: beat of %q: %w", m.Instance, err)
	}
	return nil
}

// Leave purges instance's key, leaving a marker that watchers see.
func (s *Store) Leave(ctx context.Context, instance string) error {
	if err := backend.CheckMember(backend.Member{Instance: instance}, backend.MinMemberTTL); err != nil {
		return err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	err = s.attempt(ctx, func(ctx context.Context) error {
		return b.kv.Purge(ctx, memberKey(instance), jetstream.PurgeTTL(markerTTL))
	})
	if err != nil {
		return fmt.Errorf("kvlease: leave of %q: %w", instance, err)
	}
	return nil
}

// WatchMembers watches the member keys (a KV watch of member.*) and calls fn
// with the live members once the watch has read them, and again after every
// change of the set: a member added, its group changed, or its key purged or
// expired. When the connection reconnects it watches again and calls fn once
// the new watch read them, if the set changed meanwhile. It returns nil when
// ctx ends, ErrClosed when the store is closed, and an error when a watch
// cannot start or ends by itself.
func (s *Store) WatchMembers(ctx context.Context, fn func([]backend.Member)) error {
	if s.done.Err() != nil {
		return ErrClosed
	}
	b, err := s.bucketFor(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var reconnected chan nats.Status
	if nc := s.js.Conn(); nc != nil {
		reconnected = nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(reconnected)
	}
	var last []backend.Member
	delivered := false
	report := func(all []backend.Member) {
		if delivered && slices.Equal(all, last) {
			return
		}
		delivered, last = true, all
		fn(slices.Clone(all))
	}
	for {
		err := s.watchMembers(ctx, b, reconnected, report)
		if !errors.Is(err, errResync) {
			return err
		}
	}
}

// watchMembers is one watch of WatchMembers, until ctx ends, the store closes,
// the watch ends, or the connection reconnects (errResync).
func (s *Store) watchMembers(ctx context.Context, b *bucket, reconnected <-chan nats.Status, report func([]backend.Member)) error {
	w, err := b.kv.WatchFiltered(ctx, []string{memberPrefix + "*"})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kvlease: watch members: %w", err)
	}
	defer stopWatcher(w)
	byKey := map[string]backend.Member{}
	ready := false
	all := func() []backend.Member {
		out := make([]backend.Member, 0, len(byKey))
		for _, m := range byKey {
			out = append(out, m)
		}
		slices.SortFunc(out, func(x, y backend.Member) int { return strings.Compare(x.Instance, y.Instance) })
		return out
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.done.Done():
			return ErrClosed
		case <-reconnected:
			return errResync
		case kv, ok := <-w.Updates():
			switch {
			case !ok && ctx.Err() != nil:
				return nil
			case !ok:
				return errors.New("kvlease: the member watch ended")
			case kv == nil: // the stored members have been read
				ready = true
				report(all())
				continue
			}
			if m, ok := decodeMember(kv.Key(), kv.Operation() == jetstream.KeyValuePut, kv.Value()); ok {
				byKey[kv.Key()] = m
			} else {
				delete(byKey, kv.Key()) // a purge, or the server's expiry marker
			}
			if ready {
				report(all())
			}
		}
	}
}
