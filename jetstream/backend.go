package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/internal/option"
)

// Backend is a backend.Backend on NATS JetStream, named "jetstream". It also
// implements backend.JobChecker and backend.JobWindower. It has no leases; see
// NewLeased for a backend that adds a backend.RunStore.
//
// Its methods are safe for concurrent use.
type Backend struct {
	js  natsjs.JetStream
	cfg config

	closed  atomic.Bool
	skipped atomic.Uint64
	direct  *natsutil.DirectReader // History's batched reads
	memo    claimMemo              // what this backend has seen of its claims' slots

	mu       sync.Mutex
	jobs     map[string]*jobStream
	byStream map[string]*jobStream // the same, by stream name
	upd      updates               // stream update advisories (updates.go)
}

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.JobChecker  = (*Backend)(nil)
	_ backend.JobWindower = (*Backend)(nil)
)

// New returns a backend that keeps each job in its own stream on js. It neither
// connects nor talks to the server: Init checks the server, PrepareJob creates the
// streams. The backend never closes js or its connection.
//
// A nil js is an error matching backend.ErrInvalidConfig; an invalid option, one
// matching ErrInvalidOption (and backend.ErrInvalidOption). A nil Option is
// skipped.
func New(js natsjs.JetStream, opts ...Option) (*Backend, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: jetstream: New: nil JetStream", backend.ErrInvalidConfig)
	}
	cfg := defaultConfig()
	if err := option.Apply(&cfg, opts); err != nil {
		return nil, err
	}
	return &Backend{js: js, cfg: cfg, jobs: map[string]*jobStream{}, byStream: map[string]*jobStream{}, direct: natsutil.NewDirectReader(js)}, nil
}

// Name returns "jetstream".
func (*Backend) Name() string { return "jetstream" }

// DedupeWindow returns the duplicate window of jobs that do not ask for their own:
// the one set WithDedupeWindow, else MinFittedWindow, the shortest that FitWindow
// gives. WindowFor gives a job's own.
func (b *Backend) DedupeWindow() time.Duration {
	if b.cfg.window > 0 {
		return b.cfg.window
	}
	return MinFittedWindow
}

// WindowFor returns the duplicate window of job's stream: job.DedupeWindow when the
// job sets one, else the backend's WithDedupeWindow, else FitWindow(job).
func (b *Backend) WindowFor(job backend.JobLimits) time.Duration {
	w, _ := b.windowFor(job)
	return w
}

// windowFor is WindowFor, and whether the window is fitted rather than set.
func (b *Backend) windowFor(job backend.JobLimits) (time.Duration, bool) {
	switch {
	case job.DedupeWindow > 0:
		return job.DedupeWindow, false
	case b.cfg.window > 0:
		return b.cfg.window, false
	}
	return FitWindow(job), true
}

// FitWindow returns the duplicate window fitted to a job's timing. It is the sum
// of jitter, max lateness, the clock skew allowance, the lease and the call
// timeout, rounded up to a second, and at least MinFittedWindow. Every claim of a
// slot is sent within jitter, max lateness and clock skew. The lease is there
// because a takeover in a fleet where some instances have no leases meets the
// slot's claim up to a lease later. The call timeout is there because a claim's
// record is written up to a call later. A job with catch-up claims slots up to its
// catch-up window old. So its window covers the catch-up window in place of jitter
// and max lateness: in a fleet where some instances have no leases, the claim of a
// slot they ran still decides.
func FitWindow(job backend.JobLimits) time.Duration {
	reach := job.Jitter + job.MaxLate
	if job.CatchUp != backend.CatchUpNone {
		reach = max(reach, job.CatchUpWindow)
	}
	d := reach + job.ClockSkew + job.Lease + job.CallTimeout
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return max(d, MinFittedWindow)
}

// SkippedRecords returns how many messages History has skipped because they were not
// readable anarchon records (each is also logged at warn level).
func (b *Backend) SkippedRecords() uint64 { return b.skipped.Load() }

// CheckJob rejects the jobs this backend cannot run: a name backend.ValidateJobName
// refuses, a duplicate window below MinDedupeWindow, negative retention. Any valid
// name works: it is encoded into the stream name and subjects.
func (b *Backend) CheckJob(job backend.JobLimits) error {
	if err := backend.ValidateJobName(job.Job); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupportedJob, err)
	}
	switch {
	case job.DedupeWindow < 0 || job.DedupeWindow > 0 && job.DedupeWindow < MinDedupeWindow:
		return fmt.Errorf("%w: dedupe window %v: nats-server needs at least %v", ErrUnsupportedJob, job.DedupeWindow, MinDedupeWindow)
	case job.Retention.Size < 0:
		return fmt.Errorf("%w: history size %d is negative", ErrUnsupportedJob, job.Retention.Size)
	case job.Retention.TTL < 0:
		return fmt.Errorf("%w: history TTL %v is negative", ErrUnsupportedJob, job.Retention.TTL)
	}
	return nil
}

// Init checks that JetStream answers on the connection and that the account's limits
// allow the streams this backend creates. A ctx without a deadline gets the backend's
// call timeout (WithCallTimeout), so Init never hangs. A closed connection fails at once;
// a server without JetStream fails on its first answer.
func (b *Backend) Init(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	nc := b.js.Conn()
	if nc == nil || nc.IsClosed() {
		return fmt.Errorf("%w: the NATS connection is closed: %w", ErrUnavailable, nats.ErrConnectionClosed)
	}
	// A cluster that has not elected its meta leader yet answers nothing (or 10008):
	// ask again until an answer or the deadline, as the whole fleet starts at once.
	var info *natsjs.AccountInfo
	_, err := natsutil.Retry(ctx, b.cfg.attemptTimeout, func(err error) bool {
		return natsutil.Unanswered(err) && !errors.Is(err, natsjs.ErrJetStreamNotEnabled) && !errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount)
	}, func(ctx context.Context) (err error) {
		info, err = b.js.AccountInfo(ctx)
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, natsjs.ErrJetStreamNotEnabled), errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("%w: the server at %s has no JetStream for this account (run nats-server with -js, or enable JetStream for the account): %w",
			ErrUnavailable, serverURL(nc), err)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w: no answer from JetStream at %s (connection %s) before the deadline: server unreachable or overloaded: %w",
			ErrUnavailable, serverURL(nc), nc.Status(), err)
	default:
		return fmt.Errorf("%w: account info from %s: %w", ErrUnavailable, serverURL(nc), err)
	}
	return b.checkLimits(info)
}

// checkLimits refuses account limits under which no job stream can be created.
func (b *Backend) checkLimits(info *natsjs.AccountInfo) error {
	lim := info.Limits
	if len(info.Tiers) > 0 { // tiered limits: the top-level ones are empty
		t, ok := info.Tiers[fmt.Sprintf("R%d", b.cfg.replicas)]
		if !ok {
			return nil // no limits for this replica count to judge; PrepareJob will tell
		}
		lim = t.Limits
	}
	kind, maxStorage, perStream := "file", lim.MaxStore, lim.StoreMaxStreamBytes
	if b.cfg.storage == natsjs.MemoryStorage {
		kind, maxStorage, perStream = "memory", lim.MaxMemory, lim.MemoryMaxStreamBytes
	}
	switch {
	case maxStorage == 0:
		return fmt.Errorf("%w: the account allows no JetStream %s storage (WithStorage chooses file or memory)", ErrUnavailable, kind)
	case lim.MaxBytesRequired && b.cfg.maxBytes <= 0:
		return fmt.Errorf("%w: the account requires every stream to set a size (max_bytes_required): use WithMaxBytes", ErrUnavailable)
	case perStream > 0 && b.cfg.maxBytes > perStream:
		return fmt.Errorf("%w: the account allows at most %d bytes per %s stream, WithMaxBytes asks for %d", ErrUnavailable, perStream, kind, b.cfg.maxBytes)
	}
	if lim.MaxStreams > 0 && info.Streams >= lim.MaxStreams {
		b.cfg.log.Warn("jetstream: the account is at its stream limit; a job whose stream does not exist yet cannot be prepared",
			"streams", info.Streams, "max_streams", lim.MaxStreams)
	}
	return nil
}

// Close forgets the streams the backend looked up and ends the subscription that
// collects History's batched reads. It closes nothing else: the connection and the
// JetStream context belong to the caller. After Close, every method returns
// ErrClosed.
func (b *Backend) Close(context.Context) error {
	b.closed.Store(true)
	b.upd.stop()
	b.direct.Close()
	b.mu.Lock()
	clear(b.jobs)
	clear(b.byStream)
	b.mu.Unlock()
	b.memo.clear()
	return nil
}

// callContext gives ctx the backend's call timeout when it has no deadline.
func (b *Backend) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return backendutil.CallContext(ctx, b.cfg.callTimeout)
}

func serverURL(nc *nats.Conn) string {
	if u := nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	if s := nc.Servers(); len(s) > 0 {
		return s[0]
	}
	return "(no server)"
}

// jobStream is what the backend knows of one job's stream, as the runs of the
// job or of one of its entries (entryView) use it.
type jobStream struct {
	names
	// job is the run name: the job's, or an entry's (backend.EntryRunName).
	job    string
	stream natsjs.Stream
	// streamState is the stream's, shared by the job and its entries' views.
	*streamState
}

// streamState is what the backend knows of a job's stream's settings.
type streamState struct {
	timeout time.Duration // the job's timeout, for claimTTL
	ours    bool          // created by anarchon (metadata), so limits may be updated
	// window is the stream's duplicate window and claimTTL how long claims are
	// stored (claimTTL of it), in nanoseconds: another instance may widen the
	// window (updates.go).
	window, claimTTL atomic.Int64
	// direct: the stream answers direct gets (History reads in batches).
	direct atomic.Bool
	// mode is the stream's claim mode as last read ("" without one).
	mode atomic.Pointer[string]
	// lastSeq is the highest sequence of the stream this backend has seen (its
	// own publishes' acknowledgements, History's stream state): where History's
	// first window is read from while the stream state is asked for.
	lastSeq atomic.Uint64

	// maxMsg is the stream's MaxMsgSize (0 or -1: none).
	maxMsg int32

	mu   sync.Mutex
	size int64 // the stream's MaxMsgsPerSubject (-1: none)
}

// setWindow takes the stream's duplicate window w, and stores claims for it.
func (st *streamState) setWindow(w time.Duration) {
	st.claimTTL.Store(int64(claimTTL(w, st.timeout)))
	st.window.Store(int64(w))
}

// dupWindow is the stream's duplicate window as last read.
func (st *streamState) dupWindow() time.Duration { return time.Duration(st.window.Load()) }

// ttl is how long a claim is stored.
func (st *streamState) ttl() time.Duration { return time.Duration(st.claimTTL.Load()) }

// sawSeq notes that the stream holds sequence seq.
func (st *streamState) sawSeq(seq uint64) {
	for {
		old := st.lastSeq.Load()
		if seq <= old || st.lastSeq.CompareAndSwap(old, seq) {
			return
		}
	}
}

// entryView is st (a job's stream) as the runs of the job's entry id use it:
// the same stream, window and limits, the entry's own subjects. Views are made
// on demand, never cached: a job may have very many entries.
func (st *jobStream) entryView(id string) *jobStream {
	return &jobStream{names: st.names.entry(id), job: backend.EntryRunName(st.job, id), stream: st.stream, streamState: st.streamState}
}

// cached returns the stream of a run name's job if this backend prepared or
// looked it up (an entry's view of it for an entry's run name).
func (b *Backend) cached(name string) *jobStream {
	job, id, entry := backend.SplitEntryRunName(name)
	b.mu.Lock()
	st := b.jobs[job]
	b.mu.Unlock()
	if st != nil && entry {
		return st.entryView(id)
	}
	return st
}

// cachedStream returns the stream named name if this backend caches it.
func (b *Backend) cachedStream(name string) *jobStream {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byStream[name]
}

// remember caches st, and follows its stream's updates.
func (b *Backend) remember(st *jobStream) {
	b.mu.Lock()
	b.jobs[st.job] = st
	b.byStream[st.stream.CachedInfo().Config.Name] = st
	b.mu.Unlock()
	b.follow()
}

// errNoStream is returned by lookup when the job's stream does not exist.
var errNoStream = errors.New("no stream")

// lookup returns the job's stream, from the cache or from the server. A stream found
// on the server is checked like PrepareJob checks it, but never changed. For an
// entry's run name (backend.EntryRunName) it returns the entry's view of its
// job's stream.
func (b *Backend) lookup(ctx context.Context, job string) (*jobStream, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if st := b.cached(job); st != nil {
		return st, nil
	}
	if parent, id, ok := backend.SplitEntryRunName(job); ok {
		st, err := b.lookup(ctx, parent)
		if err != nil {
			return nil, err
		}
		return st.entryView(id), nil
	}
	if job == "" {
		return nil, fmt.Errorf("%w: empty job name", ErrInvalidClaim)
	}
	n := b.cfg.namesFor(job)
	s, err := b.js.Stream(ctx, n.stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, errNoStream
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q of job %q: %w", n.stream, job, err)
	}
	info := s.CachedInfo()
	ours, err := b.checkStream(job, n, &info.Config, info.Config.Duplicates)
	if err != nil {
		return nil, err
	}
	st := &jobStream{names: n, job: job, stream: s, streamState: &streamState{ours: ours, size: info.Config.MaxMsgsPerSubject, maxMsg: info.Config.MaxMsgSize}}
	st.setWindow(info.Config.Duplicates)
	st.direct.Store(info.Config.AllowDirect)
	st.setMode(info.Config.Metadata)
	b.remember(st)
	return st, nil
}

// claimTTL is how long a claim is stored. It is at least the duplicate window: the
// server rebuilds its duplicate table from stored messages after a restart, so a
// claim evicted inside the window would be forgotten. It is also at least the job's
// timeout, so a running run stays visible in History. Message TTLs are whole
// seconds; one more second covers the server's lazy expiry of duplicate-table
// entries.
func claimTTL(window, timeout time.Duration) time.Duration {
	d := max(window, min(timeout, 24*time.Hour))
	return natsutil.TTL(d) + time.Second
}
