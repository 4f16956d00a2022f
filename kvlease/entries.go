package kvlease

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

var _ backend.EntryStore = (*Store)(nil)

// Entry keys: entry.<job>.<entry ID>, each name one base64url token, in the
// bucket of the leases. Their values never expire: no TTL.
const entryPrefix = "entry."

// entryMarkerTTL is how long the purge marker of a removed entry is kept: a
// watcher that reads it later than that (disconnected meanwhile) misses the
// removal. Markers are small; a day of them is kept rather than one per ID for
// ever.
const entryMarkerTTL = 24 * time.Hour

// entryReadParallel bounds the leader reads of one page of ListEntries on a
// replicated bucket.
const entryReadParallel = 16

func entryKey(job, id string) string { return entryPrefix + nameToken(job) + "." + nameToken(id) }

// parseEntryKey is the reverse of entryKey.
func parseEntryKey(key string) (job, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, entryPrefix)
	if !ok {
		return "", "", false
	}
	jt, it, ok := strings.Cut(rest, ".")
	if !ok || jt == "" || it == "" || strings.Contains(it, ".") {
		return "", "", false
	}
	j, err1 := base64.RawURLEncoding.DecodeString(jt)
	i, err2 := base64.RawURLEncoding.DecodeString(it)
	if err1 != nil || err2 != nil {
		return "", "", false
	}
	return string(j), string(i), true
}

// entryRecord is the value of an entry key.
type entryRecord struct {
	V int `json:"v"`
	backend.Entry
}

// decodeEntry reads the entry stored at key; ok is false for a marker or a value
// that is not an entry this version reads.
func decodeEntry(key string, e entry) (backend.Entry, bool) {
	job, id, ok := parseEntryKey(key)
	if !ok || !e.put {
		return backend.Entry{}, false
	}
	var rec entryRecord
	if err := json.Unmarshal(e.value, &rec); err != nil || rec.V < 1 || rec.Job != job || rec.ID != id {
		return backend.Entry{}, false
	}
	rec.Entry.Revision = e.rev
	return rec.Entry, true
}

func checkEntryName(job, id string) error {
	if err := backend.ValidateJobName(job); err != nil {
		return fmt.Errorf("%w: %w", backend.ErrInvalidEntry, err)
	}
	return backend.ValidateEntryID(id)
}

func entryNotFound(job, id string) error {
	return fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryNotFound, job, id)
}

func entryConflict(job, id string, have, want uint64) error {
	return fmt.Errorf("%w: job %q, entry %q is at revision %d, not %d", backend.ErrEntryConflict, job, id, have, want)
}

// CreateEntry stores e under a new key (compare-and-set from nothing stored, or
// from the marker of a removed entry).
func (s *Store) CreateEntry(ctx context.Context, e backend.Entry) (uint64, error) {
	if err := e.Check(); err != nil {
		return 0, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return 0, err
	}
	key := entryKey(e.Job, e.ID)
	e.Revision = 0
	expect := uint64(0)
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return 0, err
		}
		rev, err := s.put(ctx, b, write{key: key, value: entryRecord{V: recordVersion, Entry: e}, expect: expect})
		if !errors.Is(err, errConflict) {
			return rev, err
		}
		cur, err := s.read(ctx, b, key)
		if err != nil {
			return 0, err
		}
		if cur.put {
			return 0, fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryExists, e.Job, e.ID)
		}
		expect = cur.rev // a removed entry's marker (or nothing, once it expired)
	}
	return 0, fmt.Errorf("%w: create entry %q of job %q", ErrContention, e.ID, e.Job)
}

// UpdateEntry replaces the entry by compare-and-set on revision rev.
func (s *Store) UpdateEntry(ctx context.Context, e backend.Entry, rev uint64) (uint64, error) {
	if err := e.Check(); err != nil {
		return 0, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return 0, err
	}
	key := entryKey(e.Job, e.ID)
	// Read first: a marker's revision must not bring a removed entry back.
	cur, err := s.read(ctx, b, key)
	switch {
	case err != nil:
		return 0, err
	case !cur.put:
		return 0, entryNotFound(e.Job, e.ID)
	case cur.rev != rev:
		return 0, entryConflict(e.Job, e.ID, cur.rev, rev)
	}
	e.Revision = 0
	next, err := s.put(ctx, b, write{key: key, value: entryRecord{V: recordVersion, Entry: e}, expect: rev})
	if !errors.Is(err, errConflict) {
		return next, err
	}
	if cur, err = s.read(ctx, b, key); err != nil {
		return 0, err
	}
	if !cur.put {
		return 0, entryNotFound(e.Job, e.ID)
	}
	return 0, entryConflict(e.Job, e.ID, cur.rev, rev)
}

// DeleteEntry purges the entry's key by compare-and-set on revision rev (on the
// revision read when rev is 0), leaving a marker that watchers see and that
// expires after entryMarkerTTL.
func (s *Store) DeleteEntry(ctx context.Context, job, id string, rev uint64) error {
	if err := checkEntryName(job, id); err != nil {
		return err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	key := entryKey(job, id)
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		cur, err := s.read(ctx, b, key)
		switch {
		case err != nil:
			return err
		case !cur.put:
			return entryNotFound(job, id)
		case rev != 0 && cur.rev != rev:
			return entryConflict(job, id, cur.rev, rev)
		}
		err = s.attempt(ctx, func(ctx context.Context) error {
			_, err := natsutil.Publish(ctx, s.js.Conn(), purgeMsg(b, key, cur.rev, entryMarkerTTL, nil))
			return err
		})
		switch {
		case err == nil:
			return nil
		case !isConflict(err):
			return fmt.Errorf("kvlease: remove entry %q of job %q: %w", id, job, err)
		}
		// Changed meanwhile: read again (a given revision is then a conflict).
	}
	return fmt.Errorf("%w: remove entry %q of job %q", ErrContention, id, job)
}

// GetEntry reads one entry from the stream leader.
func (s *Store) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	if err := checkEntryName(job, id); err != nil {
		return backend.Entry{}, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return backend.Entry{}, err
	}
	key := entryKey(job, id)
	cur, err := s.read(ctx, b, key)
	if err != nil {
		return backend.Entry{}, err
	}
	e, ok := decodeEntry(key, cur)
	if !ok {
		return backend.Entry{}, entryNotFound(job, id)
	}
	return e, nil
}

// ListEntries returns a page of entries ordered by job then ID. It lists the entry
// keys (of job, or of every job) with one stream information request, sorts those
// after the cursor, and reads the page's values. It reads them in one batched
// direct get on a single-replica bucket, and by leader reads (up to 16 at once) on
// a replicated one. Every page lists every key, so the cost of a page grows with
// the entries stored, not with limit.
func (s *Store) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return nil, err
	}
	filter := entryPrefix + ">"
	if job != "" {
		filter = entryPrefix + nameToken(job) + ".*"
	}
	info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(filter)))
	if err != nil {
		return nil, fmt.Errorf("kvlease: list entries: %w", err)
	}
	type listed struct{ job, id, key string }
	var keys []listed
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, b.prefix)
		j, id, ok := parseEntryKey(key)
		if ok && (job == "" || j == job) && cmp.Or(strings.Compare(j, afterJob), strings.Compare(id, afterID)) > 0 {
			keys = append(keys, listed{j, id, key})
		}
	}
	slices.SortFunc(keys, func(x, y listed) int { return cmp.Or(strings.Compare(x.job, y.job), strings.Compare(x.id, y.id)) })
	out := make([]backend.Entry, 0, min(limit, len(keys)))
	for len(keys) > 0 && len(out) < limit {
		// Markers of removed entries are listed too: read on until the page is full.
		n := min(len(keys), limit-len(out))
		page := make([]string, n)
		for i, k := range keys[:n] {
			page[i] = k.key
		}
		keys = keys[n:]
		got, err := s.readEntries(ctx, b, page)
		if err != nil {
			return nil, fmt.Errorf("kvlease: list entries: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// readEntries reads the entries of keys, in their order, leaving out those
// removed.
func (s *Store) readEntries(ctx context.Context, b *bucket, keys []string) ([]backend.Entry, error) {
	found, err := s.readValues(ctx, b, keys)
	if err != nil {
		return nil, err
	}
	return entriesOf(keys, found), nil
}

// readValues reads the last message of each of keys, in their order (rev 0
// for nothing stored). On a single-replica bucket it reads them in one batched
// direct get, then on its own each key the answer left out (removed since it
// was listed, or past the answer's byte limit). On a replicated bucket it reads
// them from the leader, up to entryReadParallel at once.
func (s *Store) readValues(ctx context.Context, b *bucket, keys []string) ([]entry, error) {
	found := make([]entry, len(keys))
	if len(keys) == 0 {
		return found, nil
	}
	rest := make([]int, 0, len(keys))
	if b.direct {
		subjects := make([]string, len(keys))
		for i, k := range keys {
			subjects[i] = b.subject(k)
		}
		var msgs []*jetstream.RawStreamMsg
		err := s.attempt(ctx, func(ctx context.Context) (err error) {
			msgs, err = s.direct.Batch(ctx, b.stream.CachedInfo().Config.Name, natsutil.GetRequest{MultiLast: subjects})
			return err
		})
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		// Without an answer (no direct gets after all, or a closed reader),
		// every key is read on its own.
		at := make(map[string]int, len(keys))
		for i, k := range keys {
			at[k] = i
		}
		for _, m := range msgs {
			if i, ok := at[strings.TrimPrefix(m.Subject, b.prefix)]; ok {
				found[i] = entryOf(m.Sequence, m.Time, m.Header, m.Data)
			}
		}
	}
	for i := range keys {
		if found[i].rev == 0 {
			rest = append(rest, i)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, entryReadParallel)
	)
	for _, i := range rest {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			e, err := s.read(ctx, b, keys[i])
			if err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
				return
			}
			found[i] = e
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return found, nil
}

func entriesOf(keys []string, found []entry) []backend.Entry {
	out := make([]backend.Entry, 0, len(keys))
	for i, k := range keys {
		if e, ok := decodeEntry(k, found[i]); ok {
			out = append(out, e)
		}
	}
	return out
}

// WatchEntries watches the entry keys (a KV watch of entry.>): the stored
// entries, then Synced, then every change, a purge marker (or a value this
// version cannot read) as a removal. When the connection reconnects (a server
// restart, a network cut) it says Resync, reads the entries again at once and
// delivers what changed meanwhile, then Synced. It returns nil when ctx ends,
// ErrClosed when the store is closed, and an error when a watch cannot start.
func (s *Store) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	var reconnected chan nats.Status
	if nc := s.js.Conn(); nc != nil {
		reconnected = nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(reconnected)
	}
	known := map[string]uint64{} // entry key → revision delivered
	for first := true; ; first = false {
		if !first {
			fn(backend.EntryChange{Resync: true})
		}
		err := s.watchEntries(ctx, b, known, reconnected, fn)
		if !errors.Is(err, errResync) {
			return err
		}
	}
}

// errResync ends one watch of WatchEntries or WatchCalendars: read again.
var errResync = errors.New("kvlease: the watch may have missed changes")

// watchEntries is one watch of WatchEntries, delivering what differs from known
// (and keeping it up to date), until ctx ends, the store closes, or the
// connection reconnects (errResync).
func (s *Store) watchEntries(ctx context.Context, b *bucket, known map[string]uint64, reconnected <-chan nats.Status, fn func(backend.EntryChange)) error {
	w, err := b.kv.WatchFiltered(ctx, []string{entryPrefix + ">"})
	if err != nil {
		return fmt.Errorf("kvlease: watch entries: %w", err)
	}
	defer stopWatcher(w)
	synced := false
	seen := map[string]bool{}
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
			case !ok && (s.js.Conn() == nil || s.js.Conn().IsClosed()):
				return errors.New("kvlease: the entry watch ended: the connection is closed")
			case !ok:
				return errResync
			case kv == nil: // the stored entries have been delivered
				for key, rev := range known {
					if !seen[key] {
						job, id, _ := parseEntryKey(key)
						delete(known, key)
						fn(backend.EntryChange{Entry: backend.Entry{Job: job, ID: id, Revision: rev}, Removed: true})
					}
				}
				synced = true
				fn(backend.EntryChange{Synced: true})
				continue
			}
			job, id, ok := parseEntryKey(kv.Key())
			if !ok {
				continue // not an entry key of this layout
			}
			e, ok := decodeEntry(kv.Key(), entryFromKV(kv))
			switch {
			case ok:
				seen[kv.Key()] = true
				if known[kv.Key()] != e.Revision {
					known[kv.Key()] = e.Revision
					fn(backend.EntryChange{Entry: e})
				}
			case synced: // before Synced, a marker is no stored entry
				delete(known, kv.Key())
				fn(backend.EntryChange{Entry: backend.Entry{Job: job, ID: id, Revision: kv.Revision()}, Removed: true})
			}
		}
	}
}
