package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/scheduler"
)

// The registry: every replica keeps an entry (a Registration) in a JetStream
// key-value bucket, rewritten every heartbeat with a per-message TTL of
// registryTTLBeats heartbeats, so that an entry whose replica died expires by
// itself and the bucket's delete marker tells every watcher at once. Each replica
// watches the entries of its fleet (its prefix) and reports the jobs the replicas
// declare differently (scheduler.EventJobConflict, a warning in its log); clients
// read the entries (batched direct gets, no consumer) beside the replicas' live
// answers.
//
// An entry is one value (format 1) while it is at most registryInline bytes. A
// larger one (thousands of jobs) is format 2: a small head at the same key, which
// the heartbeat rewrites and every watcher sees, and the declarations in parts of
// at most a message each, at <key>.<digest>.<n>, rewritten every
// registryPartRefresh heartbeats with a TTL of registryPartBeats heartbeats and read
// only when the head's digest changes. A reader of format 1 only sees the head and
// reports a newer format; the parts' keys are outside the keys it reads.

const (
	// RegistryFormat is the newest format of registry entries this version reads
	// and writes: 1, an entry in one value; 2, a head and its parts. An entry of a
	// newer format is reported, never read as if it were this one.
	RegistryFormat = 2
	// DefaultRegistryBucket is the key-value bucket of the registry, shared by every
	// fleet of the account (keys start with the fleet's prefix).
	DefaultRegistryBucket = "anarchon_registry"
	// DefaultHeartbeat is how often a replica rewrites its registry entry.
	DefaultHeartbeat = 5 * time.Second
	// MaxHeartbeat is the longest heartbeat WithHeartbeat takes.
	MaxHeartbeat = time.Hour
	// registryTTLBeats is how many heartbeats an entry outlives its last rewrite.
	registryTTLBeats = 3
	// registryMarkerTTL is how long the server keeps the marker an expired or
	// removed entry leaves, for watchers that reconnect.
	registryMarkerTTL = time.Minute
	// registryInline is the largest entry written as one value (format 1).
	registryInline = 64 << 10
	// registryPartBeats is how many heartbeats a part outlives its last rewrite, and
	// registryPartRefresh how many heartbeats pass between two rewrites: a part
	// always outlives the head written with it.
	registryPartBeats   = 12
	registryPartRefresh = 6
	// registryReadBytes bounds one batch of a registry read.
	registryReadBytes = 8 << 20
	// registryHeadroom is what a value leaves of a message for the time the
	// heartbeat writes into it (the layout measures a value at its first write).
	registryHeadroom = 64
)

// Registration is one replica's registry entry: what it declares.
type Registration struct {
	// Format is the format the entry was written in: 1 (one value), or 2 (in
	// Parts parts).
	Format   int    `json:"format"`
	Instance string `json:"instance"`
	// Version is the replica's fleet.Version; Backend its scheduler backend's name.
	Version string `json:"version"`
	Backend string `json:"backend"`
	// At is when the entry was written, by the replica's clock.
	At time.Time `json:"at"`
	// HeartbeatMS is how often the replica rewrites it; it expires after
	// three heartbeats without a rewrite.
	HeartbeatMS int64         `json:"heartbeat_ms"`
	Jobs        []Declaration `json:"jobs"`
	// Parts is how many parts the declarations were read from (format 2).
	Parts int `json:"parts,omitempty"`
}

// Declaration is a job as one replica declares it: the schedule in words (with its
// zone) and the options that decide when and how its slots run.
type Declaration struct {
	Name      string `json:"name"`
	Schedule  string `json:"schedule"`
	Overlap   string `json:"overlap"`
	CatchUp   string `json:"catch_up"`
	LeaseMS   int64  `json:"lease_ms,omitempty"`
	MaxLateMS int64  `json:"max_late_ms"`
	JitterMS  int64  `json:"jitter_ms,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// MaxRuns is the job's fleet-wide run limit (scheduler.WithMaxRuns); 0: none.
	MaxRuns int `json:"max_runs,omitempty"`
	// Policies are the job's other policies and limits; nil from a replica of
	// an earlier version, which does not declare them.
	Policies *Policies `json:"policies,omitempty"`
}

// Policies are the policies and limits of a declared job beyond the
// Declaration's own fields.
type Policies struct {
	// CatchUpWindowMS bounds how far back catch-up looks.
	CatchUpWindowMS int64 `json:"catch_up_window_ms,omitempty"`
	// DedupeWindowMS is the dedupe window that applies to the job (the
	// backend's for it); ForeverMS when the backend remembers every slot.
	DedupeWindowMS int64 `json:"dedupe_window_ms"`
	// HistorySize is how many records of the job (and of each of its entries)
	// are kept, HistoryTTLMS for how long (0: no limit).
	HistorySize  int   `json:"history_size,omitempty"`
	HistoryTTLMS int64 `json:"history_ttl_ms,omitempty"`
	// Retry is the retry policy (scheduler.WithRetry); nil: none.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// MaxManual is how many manual runs of the job may be in progress at once
	// on one replica (scheduler.WithMaxManualRuns).
	MaxManual int `json:"max_manual"`
	// PauseAfter pauses the job after that many failed slots in a row
	// (scheduler.WithPauseAfterFailures); 0: never.
	PauseAfter int `json:"pause_after,omitempty"`
	// BufferCap is how many slots overlap policy buffer-all keeps buffered
	// (scheduler.WithBufferCap); 0: the default.
	BufferCap int `json:"buffer_cap,omitempty"`
	// Concurrency is how many of the job's slots may run at once under overlap
	// policy skip or a buffer policy (scheduler.WithConcurrency); 0: one.
	Concurrency int `json:"concurrency,omitempty"`
	// DST is the daylight saving time policy of the job's cron schedule
	// (scheduler.WithDST), defaults filled in; nil for a job with no cron
	// schedule of its own. The schedule's text says it when not the default.
	DST *scheduler.DSTPolicy `json:"dst,omitempty"`
}

// ForeverMS is Policies.DedupeWindowMS of a backend that remembers every slot.
const ForeverMS = -1

// RetryPolicy is a job's retry policy (scheduler.RetryPolicy) in numbers.
type RetryPolicy struct {
	// Attempts is how many attempts a slot may have in all.
	Attempts int `json:"attempts"`
	// BackoffMS is the first retry's delay, doubling up to MaxBackoffMS (0: no
	// cap but the next slot), with up to Jitter of it added at random.
	BackoffMS    int64   `json:"backoff_ms"`
	MaxBackoffMS int64   `json:"max_backoff_ms,omitempty"`
	Jitter       float64 `json:"jitter,omitempty"`
	// Filtered says the job's code decides which failures are retried.
	Filtered bool `json:"filtered,omitempty"`
}

func declarationOf(j backend.JobLimits) Declaration {
	p := &Policies{CatchUpWindowMS: j.CatchUpWindow.Milliseconds(), DedupeWindowMS: j.Window.Milliseconds(),
		HistorySize: j.Retention.Size, HistoryTTLMS: j.Retention.TTL.Milliseconds(), MaxManual: j.MaxManual,
		PauseAfter: j.PauseAfter, BufferCap: j.BufferCap, Concurrency: j.Concurrency, DST: j.DST}
	if j.Window == backend.Forever {
		p.DedupeWindowMS = ForeverMS
	}
	if r := j.Retry; r != nil {
		p.Retry = &RetryPolicy{Attempts: r.Attempts, BackoffMS: r.Backoff.Milliseconds(), MaxBackoffMS: r.MaxBackoff.Milliseconds(),
			Jitter: r.Jitter, Filtered: r.Filtered}
	}
	return Declaration{
		Name: j.Job, Schedule: j.Schedule, Overlap: j.Overlap.String(), CatchUp: j.CatchUp.String(),
		LeaseMS: j.Lease.Milliseconds(), MaxLateMS: j.MaxLate.Milliseconds(),
		JitterMS: j.Jitter.Milliseconds(), TimeoutMS: j.Timeout.Milliseconds(), MaxRuns: j.MaxRuns, Policies: p,
	}
}

// registryHead is the value at an entry's key in format 2: the replica, and where
// its declarations are.
type registryHead struct {
	Format      int       `json:"format"`
	Instance    string    `json:"instance"`
	Version     string    `json:"version"`
	Backend     string    `json:"backend"`
	At          time.Time `json:"at"`
	HeartbeatMS int64     `json:"heartbeat_ms"`
	// Digest names the declarations (the parts' keys hold it); Parts and Jobs
	// count them.
	Digest string `json:"digest"`
	Parts  int    `json:"parts"`
	Jobs   int    `json:"job_count"`
}

// registryPart is one part of the declarations of a format 2 entry.
type registryPart struct {
	Format   int           `json:"format"`
	Instance string        `json:"instance"`
	Digest   string        `json:"digest"`
	Part     int           `json:"part"`
	Parts    int           `json:"parts"`
	Jobs     []Declaration `json:"jobs,omitempty"`
}

// registryKey is the key of instance's entry in the fleet with prefix p.
func registryKey(p subjects, instance string) string {
	return JobToken(string(p)) + "." + JobToken(instance)
}

func partKey(key, digest string, n int) string { return key + "." + digest + "." + strconv.Itoa(n) }

// ErrRegistryFormat: a registry entry written by a newer version of anarchon, in a
// format this version cannot read.
var ErrRegistryFormat = errors.New("fleet: registry entry of a newer format")

// decodeEntry reads the value at an entry's key: a whole entry (format 1), or the
// head of one in parts (format 2). An entry of a newer format is an error wrapping
// ErrRegistryFormat that names the writer when it can.
func decodeEntry(data []byte) (Registration, *registryHead, error) {
	var head struct {
		Format   int    `json:"format"`
		Instance string `json:"instance"`
		Version  string `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Registration{}, nil, fmt.Errorf("fleet: registry entry is not JSON: %w", err)
	}
	switch {
	case head.Format > RegistryFormat:
		return Registration{}, nil, fmt.Errorf("%w: replica %q (version %s) wrote format %d; this version (%s) reads format %d: upgrade it",
			ErrRegistryFormat, head.Instance, head.Version, head.Format, Version, RegistryFormat)
	case head.Format < 1:
		return Registration{}, nil, fmt.Errorf("fleet: registry entry has no format")
	case head.Format == 1:
		var r Registration
		if err := json.Unmarshal(data, &r); err != nil {
			return Registration{}, nil, fmt.Errorf("fleet: registry entry of %q: %w", head.Instance, err)
		}
		return r, nil, nil
	}
	var h registryHead
	if err := json.Unmarshal(data, &h); err != nil {
		return Registration{}, nil, fmt.Errorf("fleet: registry entry of %q: %w", head.Instance, err)
	}
	if h.Parts < 1 || h.Digest == "" || strings.ContainsAny(h.Digest, ".*> ") || h.Jobs < 0 {
		return Registration{}, nil, fmt.Errorf("fleet: registry entry of %q: a head without its parts (parts %d, digest %q)", h.Instance, h.Parts, h.Digest)
	}
	return Registration{Format: h.Format, Instance: h.Instance, Version: h.Version, Backend: h.Backend, At: h.At,
		HeartbeatMS: h.HeartbeatMS, Parts: h.Parts}, &h, nil
}

// withParts completes the entry of head from its parts (by number): an error when
// a part is missing (the replica stopped, or is rewriting them: ask again) or does
// not belong to it.
func withParts(reg Registration, head *registryHead, parts map[int][]byte) (Registration, error) {
	jobs := make([]Declaration, 0, head.Jobs)
	for n := range head.Parts {
		data, ok := parts[n]
		if !ok {
			return Registration{}, fmt.Errorf("fleet: registry entry of %q: part %d of %d is missing (the replica stopped, or is writing it: ask again)",
				head.Instance, n+1, head.Parts)
		}
		var p registryPart
		if err := json.Unmarshal(data, &p); err != nil {
			return Registration{}, fmt.Errorf("fleet: registry entry of %q: part %d: %w", head.Instance, n+1, err)
		}
		if p.Format != 2 || p.Instance != head.Instance || p.Digest != head.Digest || p.Part != n+1 || p.Parts != head.Parts {
			return Registration{}, fmt.Errorf("fleet: registry entry of %q: part %d is part %d of %d of %q (digest %s), not of this entry",
				head.Instance, n+1, p.Part, p.Parts, p.Instance, p.Digest)
		}
		jobs = append(jobs, p.Jobs...)
	}
	if len(jobs) != head.Jobs {
		return Registration{}, fmt.Errorf("fleet: registry entry of %q: %d declarations in its parts, the head says %d", head.Instance, len(jobs), head.Jobs)
	}
	reg.Jobs = jobs
	return reg, nil
}

// errNoRegistry: the registry's bucket does not answer direct gets: it does not
// exist (no replica ever registered), or the account has no JetStream.
var errNoRegistry = errors.New("fleet: no registry")

// readEntries reads the last value of every key of bucket matching filter (a key
// pattern) in batched direct gets, the way a viewer may: no consumer, only the
// bucket stream's direct get subject. Removed keys (delete and purge markers, and
// the markers of expired ones) are left out.
func readEntries(ctx context.Context, js jetstream.JetStream, bucket, filter string) (map[string][]byte, error) {
	r := natsutil.NewDirectReader(js)
	defer r.Close()
	prefix := "$KV." + bucket + "."
	out := map[string][]byte{}
	var next uint64
	for {
		msgs, err := r.Batch(ctx, "KV_"+bucket, natsutil.GetRequest{Seq: next, NextFor: prefix + filter, Batch: 1 << 20, MaxBytes: registryReadBytes})
		if errors.Is(err, natsutil.ErrNoDirect) {
			return nil, fmt.Errorf("%w: %w", errNoRegistry, err)
		}
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			next = m.Sequence + 1
			key := strings.TrimPrefix(m.Subject, prefix)
			if m.Header.Get("KV-Operation") != "" || m.Header.Get("Nats-Marker-Reason") != "" {
				delete(out, key)
				continue
			}
			out[key] = m.Data
		}
		if len(msgs) == 0 || msgs[len(msgs)-1].Header.Get("Nats-Num-Pending") == "0" {
			return out, nil
		}
	}
}

// entriesOf reads the fleet's entries from the values of its keys: each entry's
// head and parts completed, by instance; the entries that cannot be read are
// errors beside them.
func entriesOf(p subjects, values map[string][]byte) ([]Registration, []error) {
	fleetTok := JobToken(string(p)) + "."
	heads := map[string][]byte{}
	parts := map[string]map[int][]byte{} // by <instance token>.<digest>
	for key, data := range values {
		rest, ok := strings.CutPrefix(key, fleetTok)
		if !ok {
			continue
		}
		switch toks := strings.Split(rest, "."); len(toks) {
		case 1:
			heads[rest] = data
		case 3:
			n, err := strconv.Atoi(toks[2])
			if err != nil || n < 0 {
				continue
			}
			at := toks[0] + "." + toks[1]
			if parts[at] == nil {
				parts[at] = map[int][]byte{}
			}
			parts[at][n] = data
		}
	}
	out := []Registration{}
	var bad []error
	for _, inst := range slices.Sorted(maps.Keys(heads)) {
		reg, head, err := decodeEntry(heads[inst])
		if err == nil && head != nil {
			reg, err = withParts(reg, head, parts[inst+"."+head.Digest])
		}
		if err != nil {
			bad = append(bad, err)
			continue
		}
		out = append(out, reg)
	}
	slices.SortFunc(out, func(a, b Registration) int { return strings.Compare(a.Instance, b.Instance) })
	return out, bad
}

// openRegistry creates the bucket (or binds the one another replica created),
// asking again while the server cannot answer yet (a cluster that has no leader,
// or no peers placed yet).
func openRegistry(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	_, err := natsutil.Retry(ctx, time.Second, func(err error) bool {
		if natsutil.NoJetStream(err) {
			return false
		}
		return natsutil.Unanswered(err) || natsutil.HasCode(err, natsutil.ErrCodeNoPlacement) ||
			errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists)
	}, func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, bucket)
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         bucket,
			Description:    "anarchon fleet registry: one entry per replica, expiring unless rewritten",
			History:        1,
			Storage:        jetstream.MemoryStorage,
			Replicas:       max(replicas, 1),
			LimitMarkerTTL: registryMarkerTTL,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: registry bucket %q: %w (serve without it: WithoutRegistry)", bucket, err)
	}
	return kv, nil
}

// registry is one replica's side of the registry: its heartbeat and its watch.
type registry struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	bucket string
	key    string
	filter string // the heads of this fleet's entries
	s      *scheduler.Scheduler
	log    *slog.Logger
	beat   time.Duration
	// The replica's entry: one value (inline), or its parts (by number) with the
	// digest that names them and a head that counts them.
	inline *Registration
	parts  [][]byte
	head   registryHead
	beats  int // heartbeats since the parts were last written
	budget int // the largest value written
	// update carries the declarations of the jobs after a registration or
	// removal (redeclare) to run, which writes them.
	update   chan []Declaration
	declared map[string]Declaration // under mu

	mu        sync.Mutex
	entries   map[string]*regEntry // the others', by key
	conflicts map[string]string    // job → the conflict reported, "" none

	cancel context.CancelFunc
	done   chan struct{}
}

// regEntry is another replica's entry as a watcher keeps it.
type regEntry struct {
	reg    Registration
	digest string                 // format 2: the parts read
	byName map[string]Declaration // its jobs
}

// startRegistry writes s's entry in the registry under c's prefix and bucket,
// and watches the others'.
func startRegistry(ctx context.Context, nc *nats.Conn, s *scheduler.Scheduler, c *config, log *slog.Logger) (*registry, error) {
	p := subjects(c.prefix)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleet: registry: %w", err)
	}
	kv, err := openRegistry(ctx, js, c.bucket, c.regReplicas)
	if err != nil {
		return nil, err
	}
	r := &registry{
		kv: kv, js: js, bucket: c.bucket, key: registryKey(p, s.Instance()), filter: JobToken(string(p)) + ".*",
		s: s, log: log, beat: c.heartbeat, declared: map[string]Declaration{},
		entries: map[string]*regEntry{}, conflicts: map[string]string{}, done: make(chan struct{}),
		budget: int(nc.MaxPayload()) - replyHeadroom, update: make(chan []Declaration, 1),
	}
	var jobs []Declaration
	for _, j := range s.Jobs() {
		d := declarationOf(j.JobLimits)
		jobs = append(jobs, d)
		r.declared[j.Job] = d
	}
	if err := r.layout(jobs, r.budget); err != nil {
		return nil, err
	}
	if err := r.put(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.Watch(wctx, r.filter)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fleet: registry: watch: %w", err)
	}
	r.cancel = cancel
	go r.run(wctx, w)
	return r, nil
}

// layout writes the replica's entry once: as one value when it is small enough,
// else as the parts of a format 2 entry, each within budget bytes.
func (r *registry) layout(jobs []Declaration, budget int) error {
	if jobs == nil {
		jobs = []Declaration{}
	}
	reg := Registration{Format: 1, Instance: r.s.Instance(), Version: Version, Backend: r.s.Backend().Name(),
		At: r.s.Clock().Now().UTC(), HeartbeatMS: r.beat.Milliseconds(), Jobs: jobs}
	inline, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	if len(inline) <= min(registryInline, budget-registryHeadroom) {
		r.inline = &reg
		return nil
	}
	r.inline = nil
	items, err := marshalEach(jobs)
	if err != nil {
		return err
	}
	sum := sha256.New()
	for _, it := range items {
		sum.Write(it)
	}
	r.head = registryHead{Format: 2, Instance: r.s.Instance(), Version: Version, Backend: r.s.Backend().Name(),
		HeartbeatMS: r.beat.Milliseconds(), Digest: hex.EncodeToString(sum.Sum(nil))[:16], Jobs: len(jobs)}
	p := parted{items: items, field: "jobs", envelope: func(part, parts int) any {
		return registryPart{Format: 2, Instance: r.s.Instance(), Digest: r.head.Digest, Part: part, Parts: parts}
	}}
	if r.parts, err = p.messages(budget); err != nil {
		return fmt.Errorf("fleet: registry: the entry of %q: %w", r.s.Instance(), err)
	}
	r.head.Parts = len(r.parts)
	return nil
}

// put writes this replica's entry with a TTL of registryTTLBeats heartbeats: the
// value, or the head, after the parts when they are due for a rewrite (every
// registryPartRefresh heartbeats, with a TTL of registryPartBeats).
func (r *registry) put(ctx context.Context) error {
	ctx, cancel := backendutil.CallContext(ctx, DefaultTimeout)
	defer cancel()
	var entry any
	if r.inline != nil {
		reg := *r.inline
		reg.At = r.s.Clock().Now().UTC()
		entry = reg
	} else {
		if r.beats == 0 {
			for n, part := range r.parts {
				if err := r.publish(ctx, partKey(r.key, r.head.Digest, n), part, registryPartBeats*r.beat); err != nil {
					return err
				}
			}
		}
		r.beats = (r.beats + 1) % registryPartRefresh
		head := r.head
		head.At = r.s.Clock().Now().UTC()
		entry = head
	}
	data, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	return r.publish(ctx, r.key, data, registryTTLBeats*r.beat)
}

func (r *registry) publish(ctx context.Context, key string, data []byte, ttl time.Duration) error {
	m := nats.NewMsg("$KV." + r.bucket + "." + key)
	m.Data = data
	m.Header.Set(jetstream.MsgTTLHeader, natsutil.TTLHeader(ttl))
	if _, err := r.js.PublishMsg(ctx, m); err != nil {
		r.beats = 0 // the parts are written again at the next heartbeat
		return fmt.Errorf("fleet: registry: write the entry of %q (%s): %w", r.s.Instance(), key, err)
	}
	return nil
}

// run rewrites the entry every heartbeat and follows the fleet's entries until
// stopped.
func (r *registry) run(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(r.done)
	defer func() { _ = w.Stop() }()
	t := time.NewTicker(r.beat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.put(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("fleet registry heartbeat failed", "err", err)
			}
		case jobs := <-r.update:
			r.apply(ctx, jobs)
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return
				}
				// The watch ended (the connection closed for good): rewrite on.
				r.log.Warn("fleet registry watch ended")
				w = stoppedWatch{}
				continue
			}
			if e == nil {
				continue // the entries stored when the watch began are all in
			}
			r.note(ctx, e)
		}
	}
}

// redeclare hands the jobs declared now to run, which rewrites the entry; a
// newer call replaces one not written yet.
func (r *registry) redeclare(infos []scheduler.JobInfo) {
	jobs := make([]Declaration, 0, len(infos))
	for _, j := range infos {
		jobs = append(jobs, declarationOf(j.JobLimits))
	}
	for {
		select {
		case r.update <- jobs:
			return
		default:
		}
		select {
		case <-r.update: // not written yet: replaced
		default:
		}
	}
}

// apply writes this replica's entry with jobs, and reports the conflicts
// that changed with them.
func (r *registry) apply(ctx context.Context, jobs []Declaration) {
	declared := make(map[string]Declaration, len(jobs))
	for _, d := range jobs {
		declared[d.Name] = d
	}
	r.mu.Lock()
	r.declared = declared
	for job, c := range r.conflicts {
		if _, ok := declared[job]; ok {
			continue
		}
		delete(r.conflicts, job)
		if c != "" {
			// No longer declared here: its conflict is not this replica's to
			// report (a metric that follows the events goes back to 0).
			r.log.Info("a job declared differently is no longer declared here", "job", job)
			r.s.Report(scheduler.Event{Kind: scheduler.EventJobConflict, Job: job})
		}
	}
	r.reportConflictsLocked()
	r.mu.Unlock()
	if err := r.layout(jobs, r.budget); err != nil {
		r.log.Error("fleet registry entry not rewritten with the jobs declared now", "err", err)
		return
	}
	r.beats = 0
	if err := r.put(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("fleet registry write failed", "err", err)
	}
}

// stoppedWatch stands in for a watch that ended: no more updates.
type stoppedWatch struct{}

func (stoppedWatch) Updates() <-chan jetstream.KeyValueEntry { return nil }
func (stoppedWatch) Stop() error                             { return nil }

// note takes one entry (or its removal) and reports the jobs whose conflict
// changed. A heartbeat that changes nothing but the entry's time costs its
// decoding; the parts of an entry are read when its digest changes.
func (r *registry) note(ctx context.Context, e jetstream.KeyValueEntry) {
	key := e.Key()
	if key == r.key {
		return // this replica's own: its declarations are r.declared
	}
	r.mu.Lock()
	old := r.entries[key]
	r.mu.Unlock()
	var next *regEntry
	if e.Operation() == jetstream.KeyValuePut {
		reg, head, err := decodeEntry(e.Value())
		switch {
		case err != nil:
			r.log.Warn("fleet registry entry not read", "key", key, "err", err)
		case head == nil:
			next = &regEntry{reg: reg}
			if old != nil && old.digest == "" && slices.Equal(old.reg.Jobs, reg.Jobs) {
				next.byName = old.byName
			}
		case old != nil && old.digest == head.Digest:
			reg.Jobs = old.reg.Jobs
			next = &regEntry{reg: reg, digest: head.Digest, byName: old.byName}
		default:
			if reg, err = r.readParts(ctx, key, reg, head); err != nil {
				r.log.Warn("fleet registry entry not read", "key", key, "err", err)
			} else {
				next = &regEntry{reg: reg, digest: head.Digest}
			}
		}
	}
	if next != nil && next.byName == nil {
		next.byName = make(map[string]Declaration, len(next.reg.Jobs))
		for _, d := range next.reg.Jobs {
			next.byName[d.Name] = d
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if next == nil {
		delete(r.entries, key)
	} else {
		r.entries[key] = next
	}
	if old != nil && next != nil && maps.Equal(old.byName, next.byName) {
		return // the same declarations: nothing to report
	}
	r.reportConflictsLocked()
}

// reportConflictsLocked reports the declared jobs whose conflict with the
// other replicas' declarations changed. Called with r.mu held.
func (r *registry) reportConflictsLocked() {
	for job, mine := range r.declared {
		c := conflictOf(job, mine, r.s.Instance(), r.entries)
		if c == r.conflicts[job] {
			continue
		}
		r.conflicts[job] = c
		if c != "" {
			r.log.Warn("replicas declare the job differently", "job", job, "conflict", c)
		} else {
			r.log.Info("replicas declare the job alike again", "job", job)
		}
		r.s.Report(scheduler.Event{Kind: scheduler.EventJobConflict, Job: job, Conflict: c})
	}
}

// readParts reads the parts of the format 2 entry at key.
func (r *registry) readParts(ctx context.Context, key string, reg Registration, head *registryHead) (Registration, error) {
	ctx, cancel := backendutil.CallContext(ctx, DefaultTimeout)
	defer cancel()
	values, err := readEntries(ctx, r.js, r.bucket, key+"."+head.Digest+".*")
	if err != nil {
		return Registration{}, fmt.Errorf("fleet: registry entry of %q: read its parts: %w", head.Instance, err)
	}
	parts := map[int][]byte{}
	for k, v := range values {
		if n, err := strconv.Atoi(k[strings.LastIndexByte(k, '.')+1:]); err == nil {
			parts[n] = v
		}
	}
	return withParts(reg, head, parts)
}

// conflictOf says how the registered replicas that declare job (this one, with
// mine, included) declare it differently ("" when they all agree): each field
// with more than one value, with who declares which.
func conflictOf(job string, mine Declaration, me string, entries map[string]*regEntry) string {
	decls := map[string]Declaration{me: mine}
	for _, e := range entries {
		if d, ok := e.byName[job]; ok && e.reg.Instance != me {
			decls[e.reg.Instance] = d
		}
	}
	if len(decls) < 2 {
		return ""
	}
	fields := declarationFields
	if allHavePolicies(decls) {
		fields = append(slices.Clip(fields), policyFields...)
	}
	var parts []string
	for _, field := range fields {
		byValue := map[string][]string{}
		for inst, d := range decls {
			v := fieldValue(field, d)
			byValue[v] = append(byValue[v], inst)
		}
		if len(byValue) < 2 {
			continue
		}
		var vs []string
		for _, v := range slices.Sorted(maps.Keys(byValue)) {
			vs = append(vs, fmt.Sprintf("%q on %s", v, strings.Join(slices.Sorted(slices.Values(byValue[v])), ", ")))
		}
		parts = append(parts, field+": "+strings.Join(vs, "; "))
	}
	return strings.Join(parts, " | ")
}

// declarationFields are the fields of a Declaration that replicas must agree on;
// policyFields those of its Policies, compared once every replica declares them
// (a rolling upgrade from a version without them is no conflict). The DST
// policy is compared as part of the schedule.
var (
	declarationFields = []string{"schedule", "overlap", "catch-up", "lease", "max lateness", "jitter", "timeout", "max runs"}
	policyFields      = []string{"catch-up window", "dedupe window", "retention", "retry", "manual runs", "pause after", "buffer cap", "concurrency"}
)

func allHavePolicies(decls map[string]Declaration) bool {
	for _, d := range decls {
		if d.Policies == nil {
			return false
		}
	}
	return true
}

// PolicyText is a policy of d in words, as conflicts and describe say it:
// "catch-up window", "dedupe window", "retention", "retry", "manual runs",
// "pause after", "buffer cap", "concurrency", "daylight saving". Empty when d
// declares no Policies.
func PolicyText(field string, d Declaration) string {
	p := d.Policies
	if p == nil {
		return ""
	}
	dur := func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }
	switch field {
	case "catch-up window":
		if p.CatchUpWindowMS == 0 {
			return "none"
		}
		return dur(p.CatchUpWindowMS)
	case "dedupe window":
		if p.DedupeWindowMS == ForeverMS {
			return "forever"
		}
		return dur(p.DedupeWindowMS)
	case "retention":
		s := strconv.Itoa(p.HistorySize) + " records"
		if p.HistoryTTLMS > 0 {
			s += " for " + dur(p.HistoryTTLMS)
		}
		return s
	case "retry":
		r := p.Retry
		if r == nil {
			return "none"
		}
		s := fmt.Sprintf("%d attempts, backoff %s", r.Attempts, dur(r.BackoffMS))
		if r.MaxBackoffMS > 0 {
			s += " up to " + dur(r.MaxBackoffMS)
		}
		if r.Jitter > 0 {
			s += fmt.Sprintf(", jitter %g", r.Jitter)
		}
		if r.Filtered {
			s += ", some failures only"
		}
		return s
	case "manual runs":
		return fmt.Sprintf("%d at once per replica", p.MaxManual)
	case "pause after":
		if p.PauseAfter == 0 {
			return "never"
		}
		return fmt.Sprintf("%d failed slots in a row", p.PauseAfter)
	case "buffer cap":
		if p.BufferCap == 0 {
			return "default"
		}
		return strconv.Itoa(p.BufferCap)
	case "concurrency":
		if p.Concurrency <= 1 {
			return "one slot at a time under skip and the buffer policies"
		}
		return fmt.Sprintf("up to %d slots at once", p.Concurrency)
	case "daylight saving":
		return dstText(d)
	}
	return ""
}

// dstText says the DST policy of d's cron schedule.
func dstText(d Declaration) string {
	dst := d.Policies.DST
	if dst == nil {
		if !strings.HasPrefix(d.Schedule, "CRON_TZ=") && !strings.HasPrefix(d.Schedule, "TZ=") {
			return "none: no cron schedule of its own"
		}
		dst = &scheduler.DSTPolicy{} // a replica of an earlier version: the default was the only policy
	}
	n := dst.Normal()
	return fmt.Sprintf("repeated %s, missing %s: a wall time clocks repeat runs %s; one they skip %s",
		n.Repeated, n.Missing, repeatedWords[n.Repeated], missingWords[n.Missing])
}

var (
	repeatedWords = map[scheduler.DSTRepeated]string{
		scheduler.DSTFirst: "once, at its first occurrence",
		scheduler.DSTLast:  "once, at its second occurrence",
		scheduler.DSTBoth:  "at both occurrences",
	}
	missingWords = map[scheduler.DSTMissing]string{
		scheduler.DSTShift: "runs later by the jump",
		scheduler.DSTSkip:  "does not run",
	}
)

func fieldValue(field string, d Declaration) string {
	switch field {
	case "schedule":
		return d.Schedule
	case "overlap":
		return d.Overlap
	case "catch-up":
		return d.CatchUp
	case "lease":
		return (time.Duration(d.LeaseMS) * time.Millisecond).String()
	case "max lateness":
		return (time.Duration(d.MaxLateMS) * time.Millisecond).String()
	case "jitter":
		return (time.Duration(d.JitterMS) * time.Millisecond).String()
	case "timeout":
		return (time.Duration(d.TimeoutMS) * time.Millisecond).String()
	case "max runs":
		if d.MaxRuns == 0 {
			return "no limit"
		}
		return strconv.Itoa(d.MaxRuns)
	}
	return PolicyText(field, d)
}

// Conflicts returns, by job, how the registered replicas declare this replica's
// jobs differently: empty when they agree.
func (f *Service) Conflicts() map[string]string {
	out := map[string]string{}
	if f.reg == nil {
		return out
	}
	f.reg.mu.Lock()
	defer f.reg.mu.Unlock()
	for job, c := range f.reg.conflicts {
		if c != "" {
			out[job] = c
		}
	}
	return out
}

// stop ends the heartbeat and the watch, and removes the entry (and its parts) so
// that the others see this replica gone at once; the removal markers expire.
func (r *registry) stop(ctx context.Context) error {
	r.cancel()
	<-r.done
	// Best effort: an entry left behind expires three heartbeats on.
	ctx, cancel := context.WithTimeout(ctx, stopWriteTimeout)
	defer cancel()
	keys := []string{r.key}
	for n := range r.parts {
		keys = append(keys, partKey(r.key, r.head.Digest, n))
	}
	for _, key := range keys {
		if err := r.kv.Purge(ctx, key, jetstream.PurgeTTL(registryMarkerTTL)); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("fleet: registry: remove the entry of %q: %w", r.s.Instance(), err)
		}
	}
	return nil
}

// Registry reads the registry entries of the fleet: one per live replica (an entry
// expires three heartbeats after its replica stopped rewriting it), by instance,
// with batched direct gets of the bucket's stream (no consumer: a viewer needs no
// more than its direct get subject). Entries this version cannot read are returned
// as errors beside the others (a newer format wraps ErrRegistryFormat).
func (c *Client) Registry(ctx context.Context) ([]Registration, []error, error) {
	ctx, cancel := backendutil.CallContext(ctx, c.timeout)
	defer cancel()
	values, err := readEntries(ctx, c.js, c.bucket, JobToken(string(c.subj))+".>")
	if errors.Is(err, errNoRegistry) {
		return []Registration{}, nil, nil // no replica ever registered
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: registry bucket %q: %w", c.bucket, err)
	}
	regs, bad := entriesOf(c.subj, values)
	return regs, bad, nil
}
