package kvlease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/internal/option"
)

const (
	// markerTTL is how long the server keeps the marker it leaves when a lease key
	// expires, and the markers of released and finished leases (the server's
	// minimum). Markers matter only to watchers, which see them as they are written.
	markerTTL = time.Second
	// maxTries bounds the read-decide-write rounds of one call.
	maxTries = 16
)

// Store is a backend.RunStore and backend.Settler on one JetStream KV bucket,
// with every optional capability of a run store. The server judges every lease:
// a lease is a key with a per-message TTL, and every change is a compare-and-set
// on a key's last revision. backend/machine makes every decision. See the
// package documentation for the layout.
//
// A Store is safe for concurrent use. It owns no connection: only the watchers
// WatchRun starts, which Close stops.
type Store struct {
	js   jetstream.JetStream
	opts options

	initMu sync.Mutex
	b      atomic.Pointer[bucket]
	// oldRecords: Init found records of an older layout in the bucket.
	oldRecords atomic.Bool

	clock serverClock
	// direct reads both keys of a run in one request (single-replica buckets).
	direct *natsutil.DirectReader
	// claims holds a token per claim at the server (WithMaxClaimsInFlight).
	claims chan struct{}

	// mem is what the store remembers between calls: hints, never decisions.
	mem      memory
	watchers sync.WaitGroup

	mu sync.Mutex
	// clockCall is the server-time reading in flight, if any (guarded by mu).
	clockCall *clockCall

	done   context.Context // canceled by Close
	cancel context.CancelFunc

	// writer is the history records are written into (UseRecords).
	writer atomic.Pointer[backend.RecordWriter]
	// stepHook, when set (tests only), is called between two writes of a call
	// (the step* constants); true stops the call there, as if its process died.
	stepHook func(job string, slot time.Time, step string) bool
	// watchHook, when set (tests only), is called by the shared watcher after it
	// delivered an update of key.
	watchHook func(key string, purge bool)
}

var (
	_ backend.RunStore     = (*Store)(nil)
	_ backend.LeaseWatcher = (*Store)(nil)
)

// bucket is the initialized KV bucket.
type bucket struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream
	prefix string // subject prefix of keys, "$KV.<bucket>."
	// direct: the bucket has one replica and answers direct gets, so a claim reads
	// both of a run's keys in one request (its only replica is its leader).
	direct bool
	// chain: the bucket has one replica, so a blind claim may send its two
	// writes chained (pair.go). Never on a replicated bucket: nats-server 2.15.3
	// checks Nats-Expected-Last-Msg-Id there only when it applies the message,
	// and a mismatch found then stops the stream.
	chain bool
	// pairs writes a claim's lease key and run record (pair.go), picked at Init.
	pairs pairWriter
}

func (b *bucket) subject(key string) string { return b.prefix + key }

// New returns a Store on js configured by opts. It does no I/O: the bucket is created
// or updated by Init, or by the first call that needs it.
//
// A nil js is an error matching backend.ErrInvalidConfig; an invalid option, one
// matching ErrInvalidOption (and backend.ErrInvalidOption). A nil Option is
// skipped.
func New(js jetstream.JetStream, opts ...Option) (*Store, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: kvlease: New: nil JetStream", backend.ErrInvalidConfig)
	}
	o := defaultOptions()
	if err := option.Apply(&o, opts); err != nil {
		return nil, err
	}
	s := &Store{js: js, opts: o, direct: natsutil.NewDirectReader(js), claims: make(chan struct{}, o.inFlight)}
	s.done, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Bucket returns the name of the store's KV bucket.
func (s *Store) Bucket() string { return s.opts.bucket }

// Close stops the watchers started by WatchRun (their channels close) and waits for
// them, and ends the subscription that collects batched reads. WatchRun fails with
// ErrClosed afterwards; claims read their keys one at a time; the other methods keep
// working, the store holds nothing else. Close is safe to call more than once.
func (s *Store) Close() {
	// Under the hub's lock, which WatchRun starts a watcher under once it saw
	// the store open: no watcher starts beside the wait.
	s.mem.hub.mu.Lock()
	s.cancel()
	s.mem.hub.mu.Unlock()
	s.watchers.Wait()
	s.direct.Close()
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

// callContext gives ctx the store's call timeout when it has no deadline.
func (s *Store) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return backendutil.CallContext(ctx, s.opts.callTimeout)
}
