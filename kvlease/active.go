package kvlease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/natsutil"
)

var (
	_ backend.ActiveLister   = (*Store)(nil)
	_ backend.EntryRunLister = (*Store)(nil)
)

// Active lists job's unfinished runs, oldest slot first: its run records, and
// the slots its job key lists buffered whose record is not written yet, each
// mapped as a claim would (view.runOf). Records left to write are written.
func (s *Store) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	out, err := s.ActiveJobs(ctx, []string{job})
	return out[job], err
}

// ActiveJobs is Active of each of jobs in one reading. On a single-replica bucket,
// that is one batched direct get of the jobs' run records and job keys, and one of
// the unfinished runs' lease keys, whatever the number of jobs. On a replicated
// one, it is a listing and one leader read per key. A job whose runs could not be
// read is left out of the map and named in the error.
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
	filters := []string{runPrefix + "*.*", jobPrefix + "*"}
	if anyEntry(jobs) {
		filters = append(filters, runPrefix+"*.*.*", jobPrefix+"*.*")
	}
	if len(jobs) == 1 {
		filters = []string{runPrefix + jobToken(jobs[0]) + ".*", jobKey(jobs[0])}
	}
	got, err := s.lastOf(ctx, b, filters)
	if err != nil {
		return nil, fmt.Errorf("kvlease: active %s: %w", jobList(jobs), err)
	}
	type jobState struct {
		views []view
		err   error
	}
	byJob := make(map[string]*jobState, len(jobs))
	for _, job := range jobs {
		st := &jobState{}
		byJob[job] = st
		j, err := jobOf(got[jobKey(job)])
		if err != nil {
			st.err = err
			continue
		}
		for _, e := range j.val.Runs {
			if _, stored := got[keysFor(job, e.slot()).run]; !stored && e.Phase == machine.Buffered {
				st.views = append(st.views, view{slot: e.slot(), listed: &e})
			}
		}
	}
	var leases []string
	for key, e := range got {
		_, job, slot, err := parseKey(key)
		st := byJob[job]
		if err != nil || st == nil {
			continue // not of this layout, or another job's
		}
		v, err := viewOf(slot, e, entry{})
		if err != nil {
			st.err = errors.Join(st.err, err)
			continue
		}
		s.clearPending(b, job, v, s.writePending(ctx, job, v))
		if v.rv != nil && v.rv.run().Unfinished() {
			st.views = append(st.views, v)
			leases = append(leases, keysFor(job, slot).lease)
		}
	}
	ls, err := s.readKeys(ctx, b, leases...)
	if err != nil {
		return nil, fmt.Errorf("kvlease: active %s: leases: %w", jobList(jobs), err)
	}
	now := s.clock.estimate(time.Now())
	out := make(map[string][]backend.ActiveRun, len(jobs))
	var errs []error
	for job, st := range byJob {
		list := []backend.ActiveRun{}
		for _, v := range st.views {
			v.lease = ls[keysFor(job, v.slot).lease]
			var err error
			if v.lv, err = decodeLease(v.lease); err != nil {
				st.err = errors.Join(st.err, err)
			}
			if a, ok := activeOf(v, now); ok {
				list = append(list, a)
			}
		}
		if st.err != nil {
			errs = append(errs, fmt.Errorf("kvlease: active %q: %w", job, st.err))
			continue
		}
		slices.SortFunc(list, func(x, y backend.ActiveRun) int { return x.Slot.Compare(y.Slot) })
		out[job] = list
	}
	return out, errors.Join(errs...)
}

// activeOf is v's run as Active lists it. A claim in flight on a slot stored
// unfinished is listed as the stored run, its lease not live.
func activeOf(v view, now time.Time) (backend.ActiveRun, bool) {
	r, _ := v.runOf("", now)
	if v.rv != nil && r.Token != v.rv.Run.Token {
		r, _ = view{slot: v.slot, run: v.run, rv: v.rv, lease: v.lease}.runOf(r.Token, now)
	}
	a, ok := r.Active(now)
	if ok && !a.Live && v.lease.rev != 0 && r.Phase == machine.Running {
		a.Expires = v.lease.created
	}
	return a, ok
}

// lastOf returns the last message of every key matching filters, by key: on a
// single replica in one direct get, else by listing the keys (one stream
// information request per filter) and reading each from the leader.
func (s *Store) lastOf(ctx context.Context, b *bucket, filters []string) (map[string]entry, error) {
	if b.direct {
		subjects := make([]string, len(filters))
		for i, f := range filters {
			subjects[i] = b.subject(f)
		}
		var msgs []*jetstream.RawStreamMsg
		err := s.attempt(ctx, func(ctx context.Context) (err error) {
			msgs, err = s.direct.Batch(ctx, b.stream.CachedInfo().Config.Name, natsutil.GetRequest{MultiLast: subjects})
			return err
		})
		if err == nil {
			out := make(map[string]entry, len(msgs))
			for _, m := range msgs {
				out[strings.TrimPrefix(m.Subject, b.prefix)] = msgEntry(m)
			}
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// No direct gets, a closed reader, or more keys than one batch sends.
	}
	var keys []string
	for _, f := range filters {
		info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(f)))
		if err != nil {
			return nil, err
		}
		for subj := range info.State.Subjects {
			keys = append(keys, strings.TrimPrefix(subj, b.prefix))
		}
	}
	out := make(map[string]entry, len(keys))
	for _, k := range keys {
		e, err := s.read(ctx, b, k)
		if err != nil {
			return nil, err
		}
		out[k] = e
	}
	return out, nil
}

// anyEntry reports whether names holds an entry's run name (two key tokens).
func anyEntry(names []string) bool {
	return slices.ContainsFunc(names, func(name string) bool { return strings.Contains(jobToken(name), ".") })
}

// jobList names jobs in an error: the job, or how many.
func jobList(jobs []string) string {
	if len(jobs) == 1 {
		return fmt.Sprintf("%q", jobs[0])
	}
	return fmt.Sprintf("of %d jobs", len(jobs))
}

// entryFromKV turns a watched KV entry into an entry.
func entryFromKV(e jetstream.KeyValueEntry) entry {
	return entry{rev: e.Revision(), created: e.Created(), put: e.Operation() == jetstream.KeyValuePut, value: e.Value()}
}

// stopWatcher stops w and drains its channel until nats.go closes it, so that its
// delivery callback is never left blocked on a full channel; or until nothing
// came for watcherDrainIdle (a watcher whose connection closed under it is never
// closed, and delivers nothing more). It does not wait: stopping deletes a
// consumer, which a server that is gone answers only by a timeout.
func stopWatcher(w jetstream.KeyWatcher) {
	go func() {
		_ = w.Stop()
		idle := time.NewTimer(watcherDrainIdle)
		defer idle.Stop()
		for {
			select {
			case _, ok := <-w.Updates():
				if !ok {
					return
				}
				idle.Reset(watcherDrainIdle)
			case <-idle.C:
				return
			}
		}
	}()
}

// watcherDrainIdle is how long a stopped watcher's channel is drained with
// nothing coming before the drain ends.
const watcherDrainIdle = time.Second

// EntryRunNames lists the entries of jobs whose run keys or job key the bucket
// holds (backend.EntryRunLister): removed entries' too, and entries whose runs
// are all finished until their records expire. One listing per kind of key; no
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
	runs, jobKeys := runPrefix+"*.*.*", jobPrefix+"*.*"
	if len(jobs) == 1 {
		tok := nameToken(jobs[0])
		runs, jobKeys = runPrefix+tok+".*.*", jobPrefix+tok+".*"
	}
	var out []string
	seen := map[string]bool{}
	for _, filter := range []string{runs, jobKeys} {
		info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(filter)))
		if err != nil {
			return nil, fmt.Errorf("kvlease: entry runs %s: %w", jobList(jobs), err)
		}
		for subj := range info.State.Subjects {
			key := strings.TrimPrefix(subj, b.prefix)
			var name string
			if tok, ok := strings.CutPrefix(key, jobPrefix); ok {
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
