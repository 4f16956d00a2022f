package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
// list the entries beside the replicas' live answers.

const (
	// RegistryFormat is the format of the registry entries this version writes. An
	// entry of a newer format is reported, never read as if it were this one.
	RegistryFormat = 1
	// DefaultRegistryBucket is the key-value bucket of the registry, shared by every
	// fleet of the account (keys start with the fleet's prefix).
	DefaultRegistryBucket = "anarchon_registry"
	// DefaultHeartbeat is how often a replica rewrites its registry entry.
	DefaultHeartbeat = 5 * time.Second
	// registryTTLBeats is how many heartbeats an entry outlives its last rewrite.
	registryTTLBeats = 3
	// registryMarkerTTL is how long the server keeps the marker an expired entry
	// leaves, for watchers that reconnect.
	registryMarkerTTL = time.Minute
)

// Registration is one replica's registry entry: what it declares.
type Registration struct {
	// Format is RegistryFormat of the version that wrote it.
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
}

func declarationOf(j scheduler.JobLimits) Declaration {
	return Declaration{
		Name: j.Job, Schedule: j.Schedule, Overlap: j.Overlap.String(), CatchUp: j.CatchUp.String(),
		LeaseMS: j.Lease.Milliseconds(), MaxLateMS: j.MaxLate.Milliseconds(),
		JitterMS: j.Jitter.Milliseconds(), TimeoutMS: j.Timeout.Milliseconds(),
	}
}

// registryKey is the key of instance's entry in the fleet with prefix p.
func registryKey(p subjects, instance string) string {
	return JobToken(string(p)) + "." + JobToken(instance)
}

// ErrRegistryFormat: a registry entry written by a newer version of anarchon, in a
// format this version cannot read.
var ErrRegistryFormat = errors.New("fleet: registry entry of a newer format")

// decodeRegistration reads one entry. An entry of a newer format is an error
// wrapping ErrRegistryFormat that names the writer when it can.
func decodeRegistration(data []byte) (Registration, error) {
	var head struct {
		Format   int    `json:"format"`
		Instance string `json:"instance"`
		Version  string `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Registration{}, fmt.Errorf("fleet: registry entry is not JSON: %w", err)
	}
	if head.Format > RegistryFormat {
		return Registration{}, fmt.Errorf("%w: replica %q (version %s) wrote format %d; this version (%s) reads format %d: upgrade it",
			ErrRegistryFormat, head.Instance, head.Version, head.Format, Version, RegistryFormat)
	}
	if head.Format < 1 {
		return Registration{}, fmt.Errorf("fleet: registry entry has no format")
	}
	var r Registration
	if err := json.Unmarshal(data, &r); err != nil {
		return Registration{}, fmt.Errorf("fleet: registry entry of %q: %w", head.Instance, err)
	}
	return r, nil
}

// openRegistry creates the bucket (or binds the one another replica created),
// asking again while the server cannot answer yet (a cluster that has no leader,
// or no peers placed yet).
func openRegistry(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
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
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	subject string // the entry's subject in the bucket's stream
	key     string
	filter  string // the keys of this fleet
	s       *scheduler.Scheduler
	log     *slog.Logger
	beat    time.Duration
	// jobs are the replica's declarations in registration order, as its entry
	// lists them; declared the same by name.
	jobs     []Declaration
	declared map[string]Declaration

	mu        sync.Mutex
	entries   map[string]Registration // by key
	conflicts map[string]string       // job → the conflict reported, "" none

	cancel context.CancelFunc
	done   chan struct{}
}

func startRegistry(ctx context.Context, nc *nats.Conn, s *scheduler.Scheduler, p subjects, c *config, log *slog.Logger) (*registry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleet: registry: %w", err)
	}
	kv, err := openRegistry(ctx, js, c.bucket)
	if err != nil {
		return nil, err
	}
	r := &registry{
		kv: kv, js: js, key: registryKey(p, s.Instance()), filter: JobToken(string(p)) + ".*",
		s: s, log: log, beat: c.heartbeat, declared: map[string]Declaration{},
		entries: map[string]Registration{}, conflicts: map[string]string{}, done: make(chan struct{}),
	}
	r.subject = "$KV." + c.bucket + "." + r.key
	for _, j := range s.Jobs() {
		d := declarationOf(j.JobLimits)
		r.jobs = append(r.jobs, d)
		r.declared[j.Job] = d
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

// put writes this replica's entry with a TTL of registryTTLBeats heartbeats.
func (r *registry) put(ctx context.Context) error {
	reg := Registration{
		Format: RegistryFormat, Instance: r.s.Instance(), Version: Version, Backend: r.s.Backend().Name(),
		At: r.s.Clock().Now().UTC(), HeartbeatMS: r.beat.Milliseconds(), Jobs: r.jobs,
	}
	if reg.Jobs == nil {
		reg.Jobs = []Declaration{}
	}
	data, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	m := nats.NewMsg(r.subject)
	m.Data = data
	m.Header.Set(jetstream.MsgTTLHeader, natsutil.TTLHeader(registryTTLBeats*r.beat))
	ctx, cancel := backendutil.CallContext(ctx, DefaultTimeout)
	defer cancel()
	if _, err := r.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("fleet: registry: write the entry of %q: %w", r.s.Instance(), err)
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
			r.note(e)
		}
	}
}

// stoppedWatch stands in for a watch that ended: no more updates.
type stoppedWatch struct{}

func (stoppedWatch) Updates() <-chan jetstream.KeyValueEntry { return nil }
func (stoppedWatch) Stop() error                             { return nil }

// note takes one entry (or its removal) and reports the jobs whose conflict
// changed.
func (r *registry) note(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.entries, e.Key())
	} else if reg, err := decodeRegistration(e.Value()); err != nil {
		r.log.Warn("fleet registry entry not read", "key", e.Key(), "err", err)
		delete(r.entries, e.Key())
	} else {
		r.entries[e.Key()] = reg
	}
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

// conflictOf says how the registered replicas that declare job (this one, with
// mine, included) declare it differently ("" when they all agree): each field
// with more than one value, with who declares which.
func conflictOf(job string, mine Declaration, me string, entries map[string]Registration) string {
	decls := map[string]Declaration{me: mine}
	for _, reg := range entries {
		for _, d := range reg.Jobs {
			if d.Name == job && reg.Instance != me {
				decls[reg.Instance] = d
			}
		}
	}
	var parts []string
	for _, field := range declarationFields {
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

// declarationFields are the fields of a Declaration that replicas must agree on.
var declarationFields = []string{"schedule", "overlap", "catch-up", "lease", "max lateness", "jitter", "timeout"}

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
	}
	return ""
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

// stop ends the heartbeat and the watch, and deletes the entry so that the others
// see this replica gone at once.
func (r *registry) stop(ctx context.Context) error {
	r.cancel()
	<-r.done
	ctx, cancel := backendutil.CallContext(ctx, DefaultTimeout)
	defer cancel()
	if err := r.kv.Purge(ctx, r.key); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("fleet: registry: remove the entry of %q: %w", r.s.Instance(), err)
	}
	return nil
}

// Registry reads the registry entries of the fleet: one per live replica (an entry
// expires three heartbeats after its replica stopped rewriting it), by instance.
// Entries this version cannot read are returned as errors beside the others (a
// newer format wraps ErrRegistryFormat).
func (c *Client) Registry(ctx context.Context) ([]Registration, []error, error) {
	ctx, cancel := backendutil.CallContext(ctx, c.timeout)
	defer cancel()
	kv, err := c.registryBucket(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return []Registration{}, nil, nil // no replica ever registered
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: registry bucket %q: %w", c.bucket, err)
	}
	w, err := kv.Watch(ctx, JobToken(string(c.subj))+".*")
	if err != nil {
		c.regMu.Lock()
		c.reg = nil // bound again next time: the bucket may be gone
		c.regMu.Unlock()
		return nil, nil, fmt.Errorf("fleet: registry: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := []Registration{}
	var bad []error
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("fleet: registry: %w", ctx.Err())
		case e := <-w.Updates():
			if e == nil {
				slices.SortFunc(out, func(a, b Registration) int { return strings.Compare(a.Instance, b.Instance) })
				return out, bad, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			reg, err := decodeRegistration(e.Value())
			if err != nil {
				bad = append(bad, err)
				continue
			}
			out = append(out, reg)
		}
	}
}

// registryBucket binds the registry's bucket once (a stream information request)
// and keeps it for the client's later reads.
func (c *Client) registryBucket(ctx context.Context) (jetstream.KeyValue, error) {
	c.regMu.Lock()
	defer c.regMu.Unlock()
	if c.reg != nil {
		return c.reg, nil
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, c.bucket)
	if err != nil {
		return nil, err
	}
	c.reg = kv
	return kv, nil
}
