package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/scheduler"
)

// Errors of this package. Errors from JetStream are wrapped with %w, so its own
// sentinels (jetstream.ErrKeyRevisionMismatch, nats.ErrTimeout, ...) stay reachable.
var (
	// ErrNoJetStream: the server answered, but without JetStream (not enabled on the
	// server or for the account).
	ErrNoJetStream = errors.New("kvlease: JetStream is not available")
	// ErrUnsupportedServer: the server cannot keep per-key TTLs (nats-server before
	// 2.11 ignores them, which would make leases permanent).
	ErrUnsupportedServer = errors.New("kvlease: server does not support per-message TTLs (needs nats-server 2.11 or later)")
	// ErrContention: a change kept losing compare-and-set races to other writers of
	// the same run. Retrying later is safe.
	ErrContention = errors.New("kvlease: too many concurrent changes to one run")
	// ErrClosed: WatchRun after Close.
	ErrClosed = errors.New("kvlease: store closed")
)

const (
	// markerTTL is how long the server keeps the marker it leaves when a lease key
	// expires, and the markers of released and finished leases (the server's
	// minimum). Markers matter only to watchers, which see them as they are written.
	markerTTL = time.Second
	// maxTries bounds the read-decide-write rounds of one call.
	maxTries = 16
	// maxHeld bounds the cache of leases this store holds.
	maxHeld = 4096
)

// Store is a scheduler.RunStore and scheduler.LeaseWatcher on one JetStream KV
// bucket. The server judges every lease: a lease is a key with a per-message TTL,
// every change is a compare-and-set on a key's last revision, and fences are stream
// sequences. See the package documentation for the layout and the transitions.
//
// A Store is safe for concurrent use. It owns no connection: only the watchers
// WatchRun starts, which Close stops.
type Store struct {
	js   jetstream.JetStream
	opts options

	initMu sync.Mutex
	b      atomic.Pointer[bucket]

	clock serverClock

	mu       sync.Mutex
	held     map[heldKey]*held // leases won through this store, by (lease key, token)
	closed   bool
	watchers sync.WaitGroup
	hub      watchHub
	// clockCall is the server-time reading in flight, if any (guarded by mu).
	clockCall *clockCall

	done   context.Context // canceled by Close
	cancel context.CancelFunc
}

var (
	_ scheduler.RunStore     = (*Store)(nil)
	_ scheduler.LeaseWatcher = (*Store)(nil)
)

// bucket is the initialized KV bucket.
type bucket struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream
	prefix string // subject prefix of keys, "$KV.<bucket>."
}

func (b *bucket) subject(key string) string { return b.prefix + key }

// New returns a Store on js configured by opts. It does no I/O: the bucket is created
// or updated by Init, or by the first call that needs it.
func New(js jetstream.JetStream, opts ...Option) (*Store, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: kvlease: nil JetStream", scheduler.ErrInvalidConfig)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	s := &Store{js: js, opts: o, held: make(map[heldKey]*held)}
	s.done, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Bucket returns the name of the store's KV bucket.
func (s *Store) Bucket() string { return s.opts.bucket }

// Close stops the watchers started by WatchRun (their channels close) and waits for
// them. WatchRun fails with ErrClosed afterwards; the other methods keep working, the
// store holds nothing else. Close is safe to call more than once.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.watchers.Wait()
}

// bucketFor returns the bucket, initializing it first when needed.
func (s *Store) bucketFor(ctx context.Context) (*bucket, error) {
	if b := s.b.Load(); b != nil {
		return b, nil
	}
	if err := s.Init(ctx); err != nil {
		return nil, err
	}
	return s.b.Load(), nil
}

// callContext gives ctx the store's timeout when it has no deadline.
func (s *Store) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.opts.timeout)
}

// attempt runs one request with the attempt timeout, and again while it fails with
// no answer (timeout, no responders, no stream leader) and ctx allows. Requests are
// reads and compare-and-set writes: a write sent again after it was applied loses its
// compare-and-set, and the caller reads again and decides, as after any lost race.
func (s *Store) attempt(ctx context.Context, op func(ctx context.Context) error) error {
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, s.opts.attempt)
		err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !unanswered(err) {
			return err
		}
		t := time.NewTimer(time.Duration(min(try+1, 10)) * 50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// unanswered reports whether err means the server gave no answer to a request.
func unanswered(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeClusterNotAvailable
}

// errCodeClusterNotAvailable: the stream has no leader at the moment (10008).
const errCodeClusterNotAvailable jetstream.ErrorCode = 10008

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

func (s *Store) readLease(ctx context.Context, b *bucket, k runKeys) (leaseEntry, error) {
	e, err := s.read(ctx, b, k.lease)
	if err != nil {
		return leaseEntry{}, err
	}
	return decodeLease(e)
}

func (s *Store) readRun(ctx context.Context, b *bucket, k runKeys) (runEntry, error) {
	e, err := s.read(ctx, b, k.run)
	if err != nil {
		return runEntry{}, err
	}
	return decodeRun(e)
}

// errConflict marks a compare-and-set that lost: the key's last revision was not
// the one expected.
var errConflict = errors.New("kvlease: revision conflict")

// isConflict reports whether err is a lost compare-and-set. A single server answers
// 10071 (which nats.go matches to ErrKeyExists), a replicated stream may answer
// 10164 while another write to the key is in flight (which matches neither
// sentinel), and kv.Update/Delete wrap ErrKeyRevisionMismatch: check them all.
func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// put writes v to key if the key's last revision is still expect (0: nothing
// stored), with a per-message TTL. kv.Update cannot carry a TTL (and so would make
// the key permanent), hence the publish with both headers. A lost race returns an
// error matching errConflict.
func (s *Store) put(ctx context.Context, b *bucket, key string, v any, expect uint64, ttl time.Duration) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("kvlease: encode %s: %w", key, err)
	}
	m := nats.NewMsg(b.subject(key))
	m.Data = data
	var ack *jetstream.PubAck
	err = s.attempt(ctx, func(ctx context.Context) (err error) {
		ack, err = s.js.PublishMsg(ctx, m,
			jetstream.WithExpectLastSequencePerSubject(expect),
			jetstream.WithMsgTTL(ttl), jetstream.WithRetryAttempts(0))
		return err
	})
	if err != nil {
		if isConflict(err) {
			return 0, fmt.Errorf("%w: %s at revision %d: %w", errConflict, key, expect, err)
		}
		return 0, fmt.Errorf("kvlease: write %s: %w", key, err)
	}
	return ack.Sequence, nil
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

// sampleClock reads the server's time.
func (s *Store) sampleClock(ctx context.Context, b *bucket, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	var sent time.Time
	err := s.attempt(ctx, func(ctx context.Context) (err error) {
		sent = time.Now()
		info, err = b.stream.Info(ctx, opts...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kvlease: stream info: %w", err)
	}
	s.clock.observe(info.TimeStamp, sent, time.Now())
	return info, nil
}

// wholeSeconds rounds d up to whole seconds: the server counts TTLs in whole seconds
// and truncates, so a lease of 1.5s would otherwise live 1s.
func wholeSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// keepFor is how long a run record lives: keep once finished; while unfinished at
// least three leases, so that heartbeats refresh it long before it expires.
func keepFor(keep, lease time.Duration, finished bool) time.Duration {
	if keep == 0 {
		keep = scheduler.DefaultRunKeep
	}
	if !finished {
		keep = max(keep, 3*lease)
	}
	return wholeSeconds(keep)
}

func describeRun(job string, slot time.Time) string {
	return fmt.Sprintf("job %q slot %s", job, slot.UTC().Format(time.RFC3339Nano))
}

// backoff waits a little before round try of a contended change.
func backoff(ctx context.Context, try int) error {
	if try < 2 {
		return nil
	}
	d := time.Duration(try) * time.Duration(1+time.Now().UnixNano()%3) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// heldKey names a lease this store won: lease key and token.
type heldKey struct{ key, token string }

// held is what the store remembers of a lease it won, to heartbeat and finish it
// without reading first. It is only a hint: every write is still a compare-and-set.
type held struct {
	leaseRev   uint64
	lease      leaseRecord
	runRev     uint64 // 0 when unknown
	run        runRecord
	runWritten time.Time // local time of the run record's last write
}

func (s *Store) remember(k runKeys, token string, h held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) >= maxHeld {
		for key := range s.held { // drop one; it is only a hint
			delete(s.held, key)
			break
		}
	}
	s.held[heldKey{k.lease, token}] = &h
}

func (s *Store) recall(k runKeys, token string) (held, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[heldKey{k.lease, token}]
	if !ok {
		return held{}, false
	}
	return *h, true
}

func (s *Store) forget(k runKeys, token string) {
	s.mu.Lock()
	delete(s.held, heldKey{k.lease, token})
	s.mu.Unlock()
}
