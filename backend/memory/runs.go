package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// memorySweepEvery bounds how often the memory run store looks for runs to forget.
const memorySweepEvery = time.Minute

// RunStore is a backend.RunStore in process memory that applies package
// backend/machine: every call reads the slot's stored machine.Run, asks the
// machine, and writes its decision under the store's mutex. Its leases are
// judged by the clock it is given (the "store clock" of the lease rules). It
// coordinates schedulers in the same process only.
//
// It is a backend.Settler: the records of the attempts a decision ends are
// written in the same critical section as the state, into the RecordWriter it
// was given (UseRecords), before the state. A write that fails changes nothing.
// Lock order: the store's mutex, then the writer's (a memory.Backend's); a
// Backend never calls its store while it holds its own.
//
// A run is forgotten as machine.Run.Forgotten says.
type RunStore struct {
	clock backend.Clock

	mu      sync.Mutex
	jobs    map[string]map[int64]*storedRun // run name → slot (unix ms) → run
	counts  map[string]int                  // run name → runs counted (RunCounter)
	fence   uint64                          // the biggest fence handed out
	sweepAt time.Time
	records backend.RecordWriter
}

var (
	_ backend.RunStore           = (*RunStore)(nil)
	_ backend.Settler            = (*RunStore)(nil)
	_ backend.RecordsUser        = (*RunStore)(nil)
	_ backend.LeaseWatcher       = (*RunStore)(nil)
	_ backend.Retrier            = (*RunStore)(nil)
	_ backend.OverlapCanceller   = (*RunStore)(nil)
	_ backend.OverlapBufferer    = (*RunStore)(nil)
	_ backend.RunCounter         = (*RunStore)(nil)
	_ backend.BufferedRunCounter = (*RunStore)(nil)
	_ backend.ActiveLister       = (*RunStore)(nil)
	_ backend.EntryRunLister     = (*RunStore)(nil)
	_ backend.LeaseBackend       = (*Backend)(nil)
	_ backend.RecordWriter       = (*Backend)(nil)
	_ backend.OnceRecorder       = (*Backend)(nil)
)

// storedRun is what the store keeps per (run name, slot).
type storedRun struct {
	run machine.Run
	// keep is the retention of the last call that gave one, for the records
	// of the seed's calls (Finish, Retry), which give none.
	keep backend.Retention
	// notify is closed and replaced on every write, heartbeats included.
	notify chan struct{}
}

// NewRunStore returns an empty run store whose leases are judged by clock. It
// keeps its records in a memory.Backend of its own until UseRecords.
func NewRunStore(clock backend.Clock) *RunStore {
	if clock == nil {
		clock = backend.SystemClock{}
	}
	return &RunStore{
		clock:   clock,
		jobs:    make(map[string]map[int64]*storedRun),
		counts:  make(map[string]int),
		records: NewWithClock(clock),
	}
}

// UseRecords makes w the history the store writes its records into; nil gives
// it a memory.Backend of its own again.
func (s *RunStore) UseRecords(w backend.RecordWriter) {
	if w == nil {
		w = NewWithClock(s.clock)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = w
}

// Runs returns the backend's run store, created on first use, on the backend's
// clock and writing its records into the backend. Every call returns the same
// store.
func (b *Backend) Runs() backend.RunStore {
	b.runsOnce.Do(func() {
		b.runs = NewRunStore(b.clock)
		b.runs.records = b
	})
	return b.runs
}

// Claim decides in with machine.Claim and stores the decision.
func (s *RunStore) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return backend.ClaimResult{}, err
	}
	if err := backendutil.CheckRunClaim("memory", in); err != nil {
		return backend.ClaimResult{}, err
	}
	in.Slot = slotOf(in.Slot.UnixMilli())
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sweepLocked(now)
	cur := s.loadLocked(in.Job, in.Slot, now)
	job := machine.Job{Count: s.counts[in.Job], Fence: s.fence + 1}
	// machine.Job says when the machine needs the other runs.
	if in.Overlap.Exclusive() || cur.Phase == machine.Buffered {
		job.Others = s.othersLocked(in.Job, in.Slot, now)
	}
	d := machine.Claim(cur, in, job, now)
	if err := s.applyLocked(ctx, in.Job, d, &in.Retention); err != nil {
		return backend.ClaimResult{}, err
	}
	return d.Result, nil
}

// Heartbeat extends key's lease as machine.Heartbeat decides.
func (s *RunStore) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	return s.call(ctx, key, nil, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Heartbeat(cur, key, lease, now)
	})
}

// Settle ends st.Key's attempt as machine.Settle decides, with its record.
func (s *RunStore) Settle(ctx context.Context, st backend.Settlement) error {
	return s.call(ctx, st.Key, &st.Retention, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Settle(cur, st, now)
	})
}

// Finish is Settle with status and no times (machine.Finish).
func (s *RunStore) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	return s.call(ctx, key, nil, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Finish(cur, key, status, now)
	})
}

// Retry stores key's retry (backend.Retrier) as machine.Retry decides.
func (s *RunStore) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	return s.call(ctx, key, nil, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Retry(cur, key, delay, within, now)
	})
}

// Release ends key's live lease at once (machine.Release).
func (s *RunStore) Release(ctx context.Context, key backend.RunKey) error {
	return s.call(ctx, key, nil, func(cur machine.Run, now time.Time) machine.Decision {
		return machine.Release(cur, key, now)
	})
}

// call applies decide to key's run under the store's mutex and returns its Err.
// keep is the call's retention, nil when it gives none.
func (s *RunStore) call(ctx context.Context, key backend.RunKey, keep *backend.Retention,
	decide func(cur machine.Run, now time.Time) machine.Decision) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	d := decide(s.loadLocked(key.Job, slotOf(key.Slot.UnixMilli()), now), now)
	if err := s.applyLocked(ctx, key.Job, d, keep); err != nil {
		return err
	}
	return d.Err
}

// applyLocked writes d for job: its records first, then the slot, the other
// runs it changed, the count and the fence. keep is the call's retention, nil
// when it gives none (the run's stored one applies).
func (s *RunStore) applyLocked(ctx context.Context, job string, d machine.Decision, keep *backend.Retention) error {
	ms := d.Run.Slot.UnixMilli()
	prev := s.jobs[job][ms]
	var retention backend.Retention
	switch {
	case keep != nil:
		retention = *keep
	case prev != nil:
		retention = prev.keep
	}
	if len(d.Records) > 0 {
		if err := s.records.WriteRecords(ctx, job, d.Records, retention); err != nil {
			return err
		}
	}
	if d.Write {
		s.storeLocked(job, d.Run, retention)
	}
	for _, o := range d.Others {
		r := s.jobs[job][o.Slot.UnixMilli()]
		s.storeLocked(job, o, r.keep)
	}
	if d.Counted {
		s.counts[job] = d.Count
	}
	s.fence = max(s.fence, d.Run.Fence)
	return nil
}

// storeLocked stores r as job's run of its slot and wakes its watchers.
func (s *RunStore) storeLocked(job string, r machine.Run, keep backend.Retention) {
	runs := s.jobs[job]
	if runs == nil {
		runs = make(map[int64]*storedRun)
		s.jobs[job] = runs
	}
	ms := r.Slot.UnixMilli()
	st := runs[ms]
	if st == nil {
		st = &storedRun{notify: make(chan struct{})}
		runs[ms] = st
	}
	st.run, st.keep = r, keep
	close(st.notify)
	st.notify = make(chan struct{})
}

// loadLocked returns job's run of slot, Pending when nothing is stored; a run
// machine.Run.Forgotten says may be forgotten is deleted first.
func (s *RunStore) loadLocked(job string, slot time.Time, now time.Time) machine.Run {
	ms := slot.UnixMilli()
	if st := s.jobs[job][ms]; st != nil {
		if !st.run.Forgotten(now) {
			return st.run
		}
		delete(s.jobs[job], ms)
	}
	return machine.Run{Slot: slot}
}

// othersLocked returns job's unfinished runs other than slot's.
func (s *RunStore) othersLocked(job string, slot time.Time, now time.Time) []machine.Run {
	var out []machine.Run
	for ms, st := range s.jobs[job] {
		if ms != slot.UnixMilli() && st.run.Unfinished() && !st.run.Forgotten(now) {
			out = append(out, st.run)
		}
	}
	return out
}

// slotOf is the slot at unix millisecond ms, in UTC: the form the store keeps.
func slotOf(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// BuffersOverlap reports that the store implements OverlapBufferOne and
// OverlapBufferAll.
func (s *RunStore) BuffersOverlap() bool { return true }

// CapsConcurrency reports that the store applies RunClaim.Concurrency.
func (s *RunStore) CapsConcurrency() bool { return true }

// CancelsOverlap reports that the store implements OverlapCancelOther.
func (s *RunStore) CancelsOverlap() bool { return true }

// CountsRuns reports that the store counts runs for RunClaim.MaxRuns. A job's
// count is kept as long as the store.
func (s *RunStore) CountsRuns() bool { return true }

// CountsBufferedRuns reports that a buffered slot is counted in the decision that
// stores it (one lock).
func (s *RunStore) CountsBufferedRuns() bool { return true }

// Active lists job's unfinished runs, oldest slot first.
func (s *RunStore) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	out, err := s.ActiveJobs(ctx, []string{job})
	return out[job], err
}

// ActiveJobs returns Active of each of jobs, read at one instant.
func (s *RunStore) ActiveJobs(ctx context.Context, jobs []string) (map[string][]backend.ActiveRun, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sweepLocked(now)
	out := make(map[string][]backend.ActiveRun, len(jobs))
	for _, job := range jobs {
		var runs []backend.ActiveRun
		for _, st := range s.jobs[job] {
			if a, ok := st.run.Active(now); ok && !st.run.Forgotten(now) {
				runs = append(runs, a)
			}
		}
		slices.SortFunc(runs, func(a, b backend.ActiveRun) int { return a.Slot.Compare(b.Slot) })
		out[job] = runs
	}
	return out, nil
}

// EntryRunNames lists the run names of the entries of jobs that hold an
// unfinished run (backend.EntryRunLister), removed entries included.
func (s *RunStore) EntryRunNames(ctx context.Context, jobs []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	asked := make(map[string]bool, len(jobs))
	for _, job := range jobs {
		asked[job] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out []string
	for name, runs := range s.jobs {
		job, _, entry := backend.SplitEntryRunName(name)
		if !entry || !asked[job] {
			continue
		}
		for _, st := range runs {
			if st.run.Unfinished() && !st.run.Forgotten(now) {
				out = append(out, name)
				break
			}
		}
	}
	return out, nil
}

// WatchRun returns a channel closed when (job, slot)'s lease ends: it expires (a timer
// on the store's clock, re-armed by heartbeats), is released, the run finishes or is
// taken over; or when a cancel request is stored on the run (OverlapCancelOther);
// a buffered slot's when it is claimed or withdrawn. When (job, slot) holds no
// live lease and is not buffered right now the channel is already closed. It is
// also closed when ctx is done; the watch holds no goroutine or timer after that.
func (s *RunStore) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(chan struct{})
	ms := slot.UnixMilli()
	s.mu.Lock()
	st := s.jobs[job][ms]
	var a backend.ActiveRun
	var notify chan struct{}
	if st != nil {
		a, _ = st.run.Active(s.clock.Now())
		notify = st.notify
	}
	s.mu.Unlock()
	switch {
	case a.Buffered:
		go func() { // a buffered slot has no lease: any write changes it
			defer close(out)
			select {
			case <-ctx.Done():
			case <-notify:
			}
		}()
	case a.Live:
		go s.watch(ctx, job, ms, a, out)
	default:
		close(out)
	}
	return out, nil
}

// watch closes out once seen's lease of (job, ms) ends, or a cancel request
// is stored on it when seen had none, or ctx is done.
func (s *RunStore) watch(ctx context.Context, job string, ms int64, seen backend.ActiveRun, out chan<- struct{}) {
	defer close(out)
	token, asked := seen.Token, seen.Cancel != nil
	for {
		s.mu.Lock()
		now := s.clock.Now()
		st := s.jobs[job][ms]
		if st == nil || st.run.Token != token || !st.run.Live(now) || !asked && st.run.Cancel != nil {
			s.mu.Unlock()
			return
		}
		notify, wait := st.notify, st.run.Expires.Sub(now)
		s.mu.Unlock()

		t := s.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-notify: // a write; look again (a heartbeat re-arms the timer)
		case <-t.C():
		}
		t.Stop()
	}
}

// sweepLocked forgets, once a minute at most, the runs machine.Run.Forgotten
// says may be forgotten.
func (s *RunStore) sweepLocked(now time.Time) {
	if now.Before(s.sweepAt) {
		return
	}
	s.sweepAt = now.Add(memorySweepEvery)
	for job, runs := range s.jobs {
		for ms, st := range runs {
			if st.run.Forgotten(now) {
				delete(runs, ms)
			}
		}
		if len(runs) == 0 {
			delete(s.jobs, job)
		}
	}
}
