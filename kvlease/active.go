package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// Active lists job's unfinished runs, oldest slot first. It lists the job's keys
// with one StreamInfo request and reads the run records and their leases from the
// stream leader, so it never misses a write already acknowledged; and the job's
// buffer key, for the slots listed buffered without a run record (buffer.go).
// Live tells whether the run's lease key holds a live lease; Expires is when that
// lease ends, or roughly when it ended (its marker's time) while a marker is left.
func (s *Store) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	out, err := s.ActiveJobs(ctx, []string{job})
	return out[job], err
}

// ActiveJobs is Active of each of jobs in one reading: one listing of the bucket's
// run keys (on a single-replica bucket, one batched direct get of their records,
// and one of the unfinished runs' leases) for all of them, then the reads of each
// job's runs, so that the requests do not grow with the jobs but with their runs.
// A job whose runs could not be read is left out of the map and named in the
// error; the others are in it.
func (s *Store) ActiveJobs(ctx context.Context, jobs []string) (map[string][]backend.ActiveRun, error) {
	for _, job := range jobs {
		if err := backend.ValidateRunName(job); err != nil {
			return nil, err
		}
	}
	if len(jobs) == 0 {
		return map[string][]backend.ActiveRun{}, nil
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return nil, err
	}
	if b.direct {
		out, err := s.activeDirect(ctx, b, jobs)
		if err == nil || !errors.Is(err, errFallBack) {
			return out, err
		}
	}
	filter := runPrefix + ">"
	if len(jobs) == 1 {
		filter = runPrefix + jobToken(jobs[0]) + ".*"
	}
	info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(filter)))
	if err != nil {
		return nil, fmt.Errorf("kvlease: active %s: %w", jobList(jobs), err)
	}
	// One job's buffer key is read; many jobs' are listed first, so that only
	// those that exist are read.
	buffered := func(string) bool { return true }
	if len(jobs) > 1 {
		binfo, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(bufferFilter(jobs))))
		if err != nil {
			return nil, fmt.Errorf("kvlease: active %s: %w", jobList(jobs), err)
		}
		buffered = func(job string) bool {
			_, ok := binfo.State.Subjects[b.subject(bufferKey(job))]
			return ok
		}
	}
	slots := make(map[string][]time.Time, len(jobs))
	for _, job := range jobs {
		slots[job] = nil
	}
	for subj := range info.State.Subjects {
		_, job, slot, err := parseKey(strings.TrimPrefix(subj, b.prefix))
		if err != nil {
			continue // not of this layout
		}
		if list, ok := slots[job]; ok {
			slots[job] = append(list, slot)
		}
	}
	out := make(map[string][]backend.ActiveRun, len(jobs))
	var errs []error
	for job, list := range slots {
		runs, err := s.activeListed(ctx, b, job, list, buffered(job))
		if err != nil {
			errs = append(errs, fmt.Errorf("kvlease: active %q: %w", job, err))
			continue
		}
		out[job] = runs
	}
	return out, errors.Join(errs...)
}

// activeListed reads job's runs in the listed slots from the stream leader, and its
// buffer key if it may have one, and returns the unfinished ones oldest first.
func (s *Store) activeListed(ctx context.Context, b *bucket, job string, slots []time.Time, buffered bool) ([]backend.ActiveRun, error) {
	var out []backend.ActiveRun
	stored := map[int64]bool{}
	for _, slot := range slots {
		k := keysFor(job, slot)
		run, err := s.readRun(ctx, b, k)
		if err != nil {
			return nil, err
		}
		stored[slot.UnixMilli()] = run.rec != nil
		if run.rec == nil || run.rec.finished() {
			continue
		}
		ls, err := s.readLease(ctx, b, k)
		if err != nil {
			return nil, err
		}
		out = append(out, activeRun(slot, run, ls))
	}
	if buffered {
		buf, err := s.readBuffer(ctx, b, job)
		if err != nil {
			return nil, err
		}
		out = append(out, listedOnly(buf.rec, func(ms int64) bool {
			if known, ok := stored[ms]; ok {
				return known
			}
			// Listed after the listing of the run keys: read its record.
			run, err := s.readRun(ctx, b, keysFor(job, time.UnixMilli(ms)))
			return err != nil || run.rec != nil
		})...)
	}
	slices.SortFunc(out, func(x, y backend.ActiveRun) int { return x.Slot.Compare(y.Slot) })
	return out, nil
}

// anyEntry reports whether names holds an entry's run name (two key tokens).
func anyEntry(names []string) bool {
	for _, name := range names {
		if strings.Contains(jobToken(name), ".") {
			return true
		}
	}
	return false
}

// bufferFilter is the pattern of the buffer keys of names: buffer.* for jobs,
// buffer.> when an entry's (buffer.<job>.<entry>) is among them.
func bufferFilter(names []string) string {
	if anyEntry(names) {
		return bufferPrefix + ">"
	}
	return bufferPrefix + "*"
}

// jobList names jobs in an error: the job, or how many.
func jobList(jobs []string) string {
	if len(jobs) == 1 {
		return fmt.Sprintf("%q", jobs[0])
	}
	return fmt.Sprintf("of %d jobs", len(jobs))
}

// listedOnly lists the slots of a job's buffer key that have no run record
// (stored reports whether one does): listed by a claimer between its two writes,
// or dead there, they are buffered (buffer.go).
func listedOnly(buf bufferRecord, stored func(ms int64) bool) []backend.ActiveRun {
	var out []backend.ActiveRun
	for _, q := range buf.Slots {
		if !stored(q.SlotMS) {
			out = append(out, backend.ActiveRun{Slot: time.UnixMilli(q.SlotMS), Token: q.Token, Instance: q.Instance, Buffered: true})
		}
	}
	return out
}

// errFallBack: the batched read could not be used; read key by key.
var errFallBack = errors.New("kvlease: batched read unavailable")

// activeDirect is ActiveJobs on a single-replica bucket (whose direct gets are
// answered by its leader): the last record of every run key and the buffer keys of
// the jobs in one batched direct get, then the leases of the unfinished runs in
// another: two round trips whatever the number of jobs and slots kept, where the
// key-by-key reading costs one per slot. A first read that fails other than by ctx
// returns an error matching errFallBack.
func (s *Store) activeDirect(ctx context.Context, b *bucket, jobs []string) (map[string][]backend.ActiveRun, error) {
	stream := b.stream.CachedInfo().Config.Name
	batch := func(subjects []string) ([]*jetstream.RawStreamMsg, error) {
		var msgs []*jetstream.RawStreamMsg
		err := s.attempt(ctx, func(ctx context.Context) (err error) {
			msgs, err = s.direct.Batch(ctx, stream, natsutil.GetRequest{MultiLast: subjects})
			return err
		})
		return msgs, err
	}
	// One job's keys by its token; many jobs' by wildcards over the bucket (with
	// the entries' keys, one token longer, when an entry's runs are asked for).
	subjects := []string{b.subject(runPrefix + "*.*"), b.subject(bufferFilter(jobs))}
	if anyEntry(jobs) {
		subjects = append(subjects, b.subject(runPrefix+"*.*.*"))
	}
	if len(jobs) == 1 {
		subjects = []string{b.subject(runPrefix + jobToken(jobs[0]) + ".*"), b.subject(bufferKey(jobs[0]))}
	}
	msgs, err := batch(subjects)
	if err != nil && ctx.Err() == nil {
		// No direct gets, a closed reader, or a batch the server refused (more
		// keys than it sends at once): the key-by-key reading says what is wrong,
		// if anything.
		return nil, fmt.Errorf("%w: %w", errFallBack, err)
	}
	if err != nil {
		return nil, fmt.Errorf("kvlease: active %s: %w", jobList(jobs), err)
	}
	type open struct {
		job  string
		slot time.Time
		run  runEntry
	}
	type jobState struct {
		buf    bufferRecord
		stored map[int64]bool
		open   []backend.ActiveRun
		err    error // a record of the job that could not be read
	}
	byJob := make(map[string]*jobState, len(jobs))
	byToken := make(map[string]*jobState, len(jobs))
	for _, job := range jobs {
		st := &jobState{stored: map[int64]bool{}}
		byJob[job], byToken[bufferKey(job)] = st, st
	}
	var runs []open
	var leases []string
	for _, m := range msgs {
		key := strings.TrimPrefix(m.Subject, b.prefix)
		if st, ok := byToken[key]; ok {
			if e := entryOf(m.Sequence, m.Time, m.Header, m.Data); e.put {
				if err := json.Unmarshal(e.value, &st.buf); err != nil {
					st.err = errors.Join(st.err, fmt.Errorf("corrupt buffer record %q at revision %d: %w", key, e.rev, err))
				}
			}
			continue
		}
		_, job, slot, err := parseKey(key)
		if err != nil {
			continue // not of this layout
		}
		st, ok := byJob[job]
		if !ok {
			continue // another job's
		}
		run, err := decodeRun(entryOf(m.Sequence, m.Time, m.Header, m.Data))
		if err != nil {
			st.err = errors.Join(st.err, fmt.Errorf("key %q: %w", key, err))
			continue
		}
		st.stored[slot.UnixMilli()] = run.rec != nil
		if run.rec == nil || run.rec.finished() {
			continue
		}
		runs = append(runs, open{job, slot, run})
		leases = append(leases, b.subject(keysFor(job, slot).lease))
	}
	if len(runs) > 0 {
		lmsgs, err := batch(leases)
		if err != nil {
			return nil, fmt.Errorf("kvlease: active %s: leases: %w", jobList(jobs), err)
		}
		bySubject := make(map[string]*jetstream.RawStreamMsg, len(lmsgs))
		for _, m := range lmsgs {
			bySubject[m.Subject] = m
		}
		for i, r := range runs {
			st := byJob[r.job]
			var ls leaseEntry
			if m := bySubject[leases[i]]; m != nil {
				if ls, err = decodeLease(entryOf(m.Sequence, m.Time, m.Header, m.Data)); err != nil {
					st.err = errors.Join(st.err, fmt.Errorf("key %q: %w", strings.TrimPrefix(leases[i], b.prefix), err))
					continue
				}
			}
			st.open = append(st.open, activeRun(r.slot, r.run, ls))
		}
	}
	// A job with a record that could not be read is left out, and named.
	out := make(map[string][]backend.ActiveRun, len(jobs))
	var errs []error
	for job, st := range byJob {
		if st.err != nil {
			errs = append(errs, fmt.Errorf("kvlease: active %q: %w", job, st.err))
			continue
		}
		// One reading of both, so a slot listed and not stored has no record.
		list := append(st.open, listedOnly(st.buf, func(ms int64) bool { return st.stored[ms] })...)
		slices.SortFunc(list, func(x, y backend.ActiveRun) int { return x.Slot.Compare(y.Slot) })
		out[job] = list
	}
	return out, errors.Join(errs...)
}

// activeRun is an unfinished run as Active lists it: Live tells whether its lease
// key holds a live lease; Expires is when that lease ends, or roughly when it ended
// (its marker's time) while a marker is left. A run waiting for its stored retry
// is not live (a lease key left is the failed attempt's, about to be purged, or a
// claim's in flight), and RetryAt says when the retry may be claimed.
func activeRun(slot time.Time, run runEntry, ls leaseEntry) backend.ActiveRun {
	r := run.rec
	a := backend.ActiveRun{
		Slot: slot, Token: r.Token, Instance: r.Instance, Attempt: r.Attempt, Fence: r.Fence,
		Live: ls.rec != nil && !r.retrying(), Expires: ls.expires(), Cancel: r.request(),
	}
	if ls.rec == nil && ls.rev != 0 {
		a.Expires = ls.created
	}
	if r.retrying() {
		a.RetryAt, _ = run.retryWindow()
	}
	if r.buffered() {
		// Not started: a lease key left is a claim's in flight.
		a.Buffered, a.Live, a.Attempt, a.Fence, a.Expires = true, false, 0, 0, time.Time{}
	}
	return a
}

// entryFromKV turns a watched KV entry into an entry.
func entryFromKV(e jetstream.KeyValueEntry) entry {
	return entry{
		rev:     e.Revision(),
		created: e.Created(),
		put:     e.Operation() == jetstream.KeyValuePut,
		value:   e.Value(),
	}
}

// stopWatcher stops w and drains its channel until nats.go closes it, so that its
// delivery callback is never left blocked on a full channel.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	go func() {
		for range w.Updates() {
		}
	}()
}

var _ backend.EntryRunLister = (*Store)(nil)

// EntryRunNames lists the entries of jobs whose run keys or buffer key the
// bucket holds (backend.EntryRunLister): removed entries' too, and entries whose
// runs are all finished until their records expire. One listing of the keys of
// the jobs' entries (run.<job>.*.* for one job), one of their buffer keys; no
// record is read.
func (s *Store) EntryRunNames(ctx context.Context, jobs []string) ([]string, error) {
	asked := make(map[string]bool, len(jobs))
	for _, job := range jobs {
		if err := backend.ValidateJobName(job); err != nil {
			return nil, err
		}
		asked[job] = true
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return nil, err
	}
	runs, buffers := runPrefix+"*.*.*", bufferPrefix+"*.*"
	if len(jobs) == 1 {
		tok := nameToken(jobs[0])
		runs, buffers = runPrefix+tok+".*.*", bufferPrefix+tok+".*"
	}
	var out []string
	seen := map[string]bool{}
	for _, filter := range []string{runs, buffers} {
		info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(filter)))
		if err != nil {
			return nil, fmt.Errorf("kvlease: entry runs %s: %w", jobList(jobs), err)
		}
		for subj := range info.State.Subjects {
			key := strings.TrimPrefix(subj, b.prefix)
			var name string
			if tok, ok := strings.CutPrefix(key, bufferPrefix); ok {
				name, err = parseRunToken(tok)
			} else {
				_, name, _, err = parseKey(key)
			}
			if err != nil || seen[name] {
				continue // not of this layout, or listed
			}
			if job, _, ok := backend.SplitEntryRunName(name); ok && asked[job] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out, nil
}
