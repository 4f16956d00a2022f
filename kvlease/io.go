package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// attempt runs one request with the attempt timeout, and again while it fails with
// no answer (timeout, no responders, no stream leader) and ctx allows. Requests are
// reads and compare-and-set writes: a write sent again after it was applied loses its
// compare-and-set, and the caller reads again and decides, as after any lost race.
func (s *Store) attempt(ctx context.Context, op func(ctx context.Context) error) error {
	_, err := natsutil.Retry(ctx, s.opts.attempt, natsutil.Unanswered, op)
	return err
}

// read returns the last message on key's subject, asking the stream leader.
func (s *Store) read(ctx context.Context, b *bucket, key string) (entry, error) {
	var m *jetstream.RawStreamMsg
	err := s.attempt(ctx, func(ctx context.Context) (err error) {
		m, err = b.stream.GetLastMsgForSubject(ctx, b.subject(key))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return entry{}, nil
	}
	if err != nil {
		return entry{}, fmt.Errorf("kvlease: read %s: %w", key, err)
	}
	return entryOf(m.Sequence, m.Time, m.Header, m.Data), nil
}

// readKeys returns the last message of each of keys (an entry with rev 0 for
// nothing stored), from the stream leader. It uses one direct get of all of them
// when the bucket has a single replica (its only replica is its leader), else one
// leader read each. Replicated buckets answer no direct gets: a follower's answer
// could be behind an acknowledged write, and these reads decide claims.
func (s *Store) readKeys(ctx context.Context, b *bucket, keys ...string) (map[string]entry, error) {
	out := make(map[string]entry, len(keys))
	if b.direct && len(keys) > 1 {
		subjects := make([]string, len(keys))
		for i, k := range keys {
			subjects[i] = b.subject(k)
		}
		var msgs []*jetstream.RawStreamMsg
		err := s.attempt(ctx, func(ctx context.Context) (err error) {
			msgs, err = s.direct.Batch(ctx, b.stream.CachedInfo().Config.Name, natsutil.GetRequest{MultiLast: subjects})
			return err
		})
		if err == nil {
			for _, m := range msgs {
				out[strings.TrimPrefix(m.Subject, b.prefix)] = msgEntry(m)
			}
			return out, nil
		}
		if !errors.Is(err, natsutil.ErrReaderClosed) {
			return nil, fmt.Errorf("kvlease: read %s: %w", strings.Join(keys, ", "), err)
		}
		// After Close: one key at a time.
	}
	for _, k := range keys {
		e, err := s.read(ctx, b, k)
		if err != nil {
			return nil, err
		}
		out[k] = e
	}
	return out, nil
}

// errConflict marks a compare-and-set that lost: the key's last revision was not
// the one expected.
var errConflict = errors.New("kvlease: revision conflict")

// isConflict reports whether err is a lost compare-and-set. A single server answers
// 10071 (which nats.go matches to ErrKeyExists), a replicated stream may answer
// 10164 while another write to the key is in flight (which matches neither
// sentinel), and kv.Update/Delete wrap ErrKeyRevisionMismatch: check them all.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) ||
		natsutil.HasCode(err, natsutil.ErrCodeWrongLastSequence) ||
		natsutil.HasCode(err, natsutil.ErrCodeWrongLastSequenceInFlight)
}

// storedRev returns the key's last revision named by the answer to a lost
// compare-and-set (nats-server's 10071 "wrong last sequence: N"), or 0 when the
// answer names none (10164 on a replicated stream, a write that failed otherwise).
func storedRev(err error) uint64 {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != natsutil.ErrCodeWrongLastSequence {
		return 0
	}
	_, num, ok := strings.Cut(apiErr.Description, "wrong last sequence: ")
	if !ok {
		return 0
	}
	rev, err := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
	if err != nil {
		return 0
	}
	return rev
}

// backoff waits a little before round try of a contended change: none before the
// first two rounds, then natsutil.ContentionBackoff.
func backoff(ctx context.Context, try int) error {
	if try < 2 {
		return nil
	}
	return natsutil.ContentionBackoff.Wait(ctx, try-1)
}

// write is one compare-and-set: a value (or, in a batch, a purge) of key, expected
// at revision expect (0: nothing stored), kept for ttl.
type write struct {
	key    string
	value  any // nil for a purge
	expect uint64
	ttl    time.Duration
}

// put stores w by compare-and-set and returns the key's new revision, with a
// per-message TTL. kv.Update cannot carry a TTL (and so would make the key
// permanent), hence the publish with both headers. A lost race returns an error
// matching errConflict.
func (s *Store) put(ctx context.Context, b *bucket, w write) (uint64, error) {
	m, err := putMsg(b, w)
	if err != nil {
		return 0, err
	}
	var ack natsutil.PubAck
	err = s.attempt(ctx, func(ctx context.Context) (err error) {
		ack, err = natsutil.Publish(ctx, s.js.Conn(), m)
		return err
	})
	if err != nil {
		if isConflict(err) {
			return 0, fmt.Errorf("%w: %s at revision %d: %w", errConflict, w.key, w.expect, err)
		}
		return 0, fmt.Errorf("kvlease: write %s: %w", w.key, err)
	}
	s.mem.wrote(w.key, ack.Sequence)
	return ack.Sequence, nil
}

// putMsg is the message of put: w's value on its key's subject, stored if the key's
// last revision is still w.expect, kept for w.ttl.
func putMsg(b *bucket, w write) (*nats.Msg, error) {
	data, err := json.Marshal(w.value)
	if err != nil {
		return nil, fmt.Errorf("kvlease: encode %s: %w", w.key, err)
	}
	m := nats.NewMsg(b.subject(w.key))
	m.Data = data
	m.Header.Set(expectedSeq, strconv.FormatUint(w.expect, 10))
	if w.ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, natsutil.TTLHeader(w.ttl))
	}
	return m, nil
}

// purgeMsg is a purge of key if its last revision is still expect, leaving a
// marker kept for ttl, with body (nil for none).
func purgeMsg(b *bucket, key string, expect uint64, ttl time.Duration, body []byte) *nats.Msg {
	m := nats.NewMsg(b.subject(key))
	m.Data = body
	m.Header.Set(kvOperationHeader, kvPurge)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(expectedSeq, strconv.FormatUint(expect, 10))
	m.Header.Set(jetstream.MsgTTLHeader, natsutil.TTLHeader(ttl))
	return m
}

// purge ends a lease key written at revision rev, leaving a purge marker that
// expires by itself. A lost race returns an error matching errConflict.
func (s *Store) purge(ctx context.Context, b *bucket, key string, rev uint64) error {
	err := s.attempt(ctx, func(ctx context.Context) error {
		return b.kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
	})
	if err != nil {
		if isConflict(err) {
			return fmt.Errorf("%w: %s at revision %d: %w", errConflict, key, rev, err)
		}
		return fmt.Errorf("kvlease: purge %s: %w", key, err)
	}
	return nil
}

// purgeNoWait purges a lease key written at revision rev with a publish that asks
// for no answer: the lease ends by its TTL anyway. The server still checks the
// revision: a lease key changed meanwhile is left alone. A finished run rides in
// its body for the backups' shared watchers (final, stored before it was sent).
func (s *Store) purgeNoWait(b *bucket, key string, rev uint64, finished *machine.Run) {
	var body []byte
	if finished != nil {
		body, _ = json.Marshal(runJSON(*finished))
	}
	_ = s.js.Conn().PublishMsg(purgeMsg(b, key, rev, markerTTL, body))
}

// putNoWait stores w by compare-and-set without waiting for the answer.
func (s *Store) putNoWait(b *bucket, w write) {
	if m, err := putMsg(b, w); err == nil {
		_ = s.js.Conn().PublishMsg(m)
	}
}

const (
	kvPurge     = "PURGE"
	expectedSeq = "Nats-Expected-Last-Subject-Sequence"
)
