package memory

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// memorySweepEvery bounds how often the memory run store looks for runs to forget.
const memorySweepEvery = time.Minute

// RunStore is a backend.RunStore and backend.LeaseWatcher in process memory. Its leases are
// judged by the clock it is given (the "store clock" of the lease rules), which makes
// it the reference reading of the lease contract and the store for unit tests. It
// coordinates schedulers in the same process only.
//
// A run is remembered until it has been neither live nor changed for its RunClaim.Keep
// (backend.DefaultRunKeep when zero).
type RunStore struct {
	clock backend.Clock

	mu      sync.Mutex
	jobs    map[string]map[int64]*memRun // job → slot (unix ms) → run
	counts  map[string]int               // job → first wins counted (RunCounter)
	fence   uint64                       // last fence handed out
	sweepAt time.Time
}

var (
	_ backend.RunStore         = (*RunStore)(nil)
	_ backend.LeaseWatcher     = (*RunStore)(nil)
	_ backend.Retrier          = (*RunStore)(nil)
	_ backend.OverlapCanceller = (*RunStore)(nil)
	_ backend.OverlapBufferer  = (*RunStore)(nil)
	_ backend.RunCounter       = (*RunStore)(nil)
	_ backend.LeaseBackend     = (*Backend)(nil)
)

// memRun is the stored state of one (job, slot).
type memRun struct {
	token    string
	instance string
	attempt  int
	// previous and previousToken held the run before a takeover.
	previous      string
	previousToken string
	// reopened: the run was a paused slot, reopened by a ReopenPaused claim.
	reopened bool
	// retried: the run was taken for a retry its previous attempt stored.
	retried bool
	// retryAt and retryBy bound the claim of a stored retry; zero without one.
	retryAt, retryBy time.Time
	// cancel is a later slot's request that the run end (OverlapCancelOther).
	cancel *backend.CancelRequest
	// buffered: the slot is stored buffered (a buffer overlap policy), not started.
	buffered bool
	// last: the slot was the job's MaxRuns-th counted run (RunCounter).
	last    bool
	fence   uint64
	lease   time.Duration
	expires time.Time
	status  backend.Status // final status once finished, "" before
	keep    time.Duration
	changed time.Time     // last write, for forgetting
	notify  chan struct{} // closed and replaced on every write, heartbeats included
}

func (r *memRun) finished() bool { return r.status.Finished() }

// live reports whether the run's lease is held at now.
func (r *memRun) live(now time.Time) bool {
	return !r.finished() && now.Before(r.expires)
}

// touch records a write and wakes the run's watchers.
func (r *memRun) touch(now time.Time) {
	r.changed = now
	close(r.notify)
	r.notify = make(chan struct{})
}

// NewRunStore returns an empty run store whose leases are judged by clock.
func NewRunStore(clock backend.Clock) *RunStore {
	if clock == nil {
		clock = backend.SystemClock{}
	}
	return &RunStore{clock: clock, jobs: make(map[string]map[int64]*memRun), counts: make(map[string]int)}
}

// Runs returns the backend's lease store, a memory.RunStore on the backend's clock,
// created on first use. Every call returns the same store.
func (b *Backend) Runs() backend.RunStore {
	b.runsOnce.Do(func() {
		if b.runs == nil {
			b.runs = NewRunStore(b.clock)
		}
	})
	return b.runs
}

// Claim decides the claim from the stored run, atomically under the store's mutex.
// See RunStore and the lease rules for the outcomes.
func (s *RunStore) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return backend.ClaimResult{}, err
	}
	if err := backendutil.CheckRunClaim("memory", in); err != nil {
		return backend.ClaimResult{}, err
	}
	keep := in.Keep
	if keep == 0 {
		keep = backend.DefaultRunKeep
	}
	slot := in.Slot.UnixMilli()

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.sweepLocked(now)

	if r := s.lookupLocked(in.Job, slot, now); r != nil && r.buffered {
		return s.claimBufferedLocked(in, r, slot, now, keep), nil
	} else if r != nil {
		reopen := r.finished() && in.MayReopen(r.status, r.token, r.attempt) && (in.Deadline.IsZero() || !now.After(in.Deadline))
		switch {
		case r.finished() && !reopen:
			return r.decided(in.Token), nil
		case r.live(now) && r.token == in.Token:
			return r.result(backend.OutcomeWon), nil
		case r.live(now):
			return r.result(backend.OutcomeRunning), nil
		case r.cancel != nil && !r.finished():
			// A later slot asked the run to end: it is not taken over, nor
			// retried, but ended.
			r.status = backend.StatusCancelled
			r.touch(now)
			return r.decided(in.Token), nil
		case !r.retryAt.IsZero() && r.token == in.Token:
			// The failed attempt's own token: its attempt is over, it never
			// takes the retry.
			return backend.ClaimResult{Outcome: backend.OutcomeDone, Attempt: r.attempt, Fence: r.fence, Holder: r.instance, Status: backend.StatusError}, nil
		case !r.retryAt.IsZero() && now.Before(r.retryAt):
			return backend.ClaimResult{Outcome: backend.OutcomeRetry, Attempt: r.attempt, Fence: r.fence, Holder: r.instance, RetryIn: r.retryAt.Sub(now)}, nil
		case !r.retryAt.IsZero() && now.After(r.retryBy):
			// Nobody claimed the retry in time: the failure stands.
			r.status = backend.StatusError
			r.touch(now)
			return r.decided(in.Token), nil
		}
		// Unfinished and its lease expired or was released: a takeover. The deadline
		// does not apply, someone started the run already. Or a paused slot that
		// catch-up asks for once the pause ended (reopen), taken the same way. A
		// job that forbids overlap waits while another of its slots holds a live
		// lease.
		if in.Overlap.Exclusive() && s.otherBusyLocked(in.Job, slot, now, true) {
			return backend.ClaimResult{Outcome: backend.OutcomeRunning, Attempt: r.attempt, Fence: r.fence, Holder: r.instance, Expires: r.expires}, nil
		}
		s.fence++
		r.previous, r.previousToken, r.reopened = r.instance, r.token, reopen
		r.cancel = nil // a reopened slot's: the run it asked to end is over
		r.retried, r.retryAt, r.retryBy = !r.retryAt.IsZero(), time.Time{}, time.Time{}
		if reopen { // the paused attempt was not lost: it never ran
			r.status, r.previous, r.previousToken = "", "", ""
		}
		r.token, r.instance = in.Token, in.Instance
		r.attempt++
		r.fence = s.fence
		r.lease, r.expires = in.Lease, now.Add(in.Lease)
		r.keep = keep
		r.touch(now)
		return r.result(backend.OutcomeWon), nil
	}

	r := &memRun{token: in.Token, instance: in.Instance, attempt: 1, keep: keep, changed: now, notify: make(chan struct{})}
	switch {
	case in.TakeoverOnly:
		return backend.ClaimResult{Outcome: backend.OutcomeNone}, nil
	case !in.Deadline.IsZero() && now.After(in.Deadline):
		r.status = backend.StatusLate // stored: nobody runs the slot afterwards
	case in.Counts() && s.counts[in.Job] >= in.MaxRuns:
		r.status = backend.StatusLimit
	case in.Overlap == backend.OverlapSkip && s.otherBusyLocked(in.Job, slot, now, false):
		r.status = backend.StatusSkipped
	case in.Overlap == backend.OverlapCancelOther && s.laterBusyLocked(in.Job, slot, now):
		r.status = backend.StatusSkipped
	case in.Overlap == backend.OverlapCancelOther && s.otherBusyLocked(in.Job, slot, now, false):
		// Only earlier slots are busy: ask them to end, and wait for them.
		return s.cancelEarlierLocked(in, slot, now), nil
	case in.Overlap.Buffers() && s.heldLocked(in.Job, slot, now):
		if s.bufferedLocked(in.Job) >= in.Buffers() {
			r.status = backend.StatusSkipped
			break
		}
		r.attempt, r.buffered = 0, true
	default:
		s.fence++
		r.fence, r.lease, r.expires = s.fence, in.Lease, now.Add(in.Lease)
	}
	runs := s.jobs[in.Job]
	if runs == nil {
		runs = make(map[int64]*memRun)
		s.jobs[in.Job] = runs
	}
	runs[slot] = r
	if r.finished() {
		return r.decided(in.Token), nil
	}
	if in.Counts() { // won or buffered: a decision to run it
		s.counts[in.Job]++
		r.last = s.counts[in.Job] == in.MaxRuns
	}
	if r.buffered { // waits, unless only later slots are buffered: it goes first
		return s.claimBufferedLocked(in, r, slot, now, keep), nil
	}
	return r.result(backend.OutcomeWon), nil
}

// claimBufferedLocked decides a claim of the buffered slot r: it waits while
// another slot blocks or an earlier one is buffered, unless the claim allows
// overlap; otherwise it is won as a first claim.
func (s *RunStore) claimBufferedLocked(in backend.RunClaim, r *memRun, slot int64, now time.Time, keep time.Duration) backend.ClaimResult {
	if in.Overlap != backend.OverlapAllow {
		if res, blocked := s.blockerLocked(in.Job, slot, now); blocked {
			res.LimitReached = r.last
			return res
		}
	}
	s.fence++
	r.buffered = false
	r.token, r.instance, r.attempt = in.Token, in.Instance, 1
	r.fence, r.lease, r.expires = s.fence, in.Lease, now.Add(in.Lease)
	r.keep = keep
	r.touch(now)
	return r.result(backend.OutcomeWon)
}

// blocks reports whether the run keeps a buffered slot of its job waiting at
// now: it is busy, or its last attempt stored a retry still pending.
func (r *memRun) blocks(now time.Time) bool {
	if r.finished() || r.buffered {
		return false
	}
	return r.busy(now, false) || !r.retryAt.IsZero() && !now.After(r.retryBy)
}

// heldLocked reports whether a slot of job other than slot blocks or is buffered.
func (s *RunStore) heldLocked(job string, slot int64, now time.Time) bool {
	for ms, r := range s.jobs[job] {
		if ms != slot && (r.buffered || r.blocks(now)) {
			return true
		}
	}
	return false
}

// bufferedLocked counts job's buffered slots.
func (s *RunStore) bufferedLocked(job string) int {
	n := 0
	for _, r := range s.jobs[job] {
		if r.buffered {
			n++
		}
	}
	return n
}

// blockerLocked answers a claim of buffered slot: OutcomeBuffered, waiting for
// the newest other slot that blocks, else for the oldest earlier buffered one
// (blocked); when neither is, blocked is false.
func (s *RunStore) blockerLocked(job string, slot int64, now time.Time) (res backend.ClaimResult, blocked bool) {
	busy, buffered := int64(math.MinInt64), int64(math.MaxInt64)
	for ms, r := range s.jobs[job] {
		switch {
		case ms == slot:
		case r.blocks(now) && ms > busy:
			busy = ms
		case r.buffered && ms < slot && ms < buffered:
			buffered = ms
		}
	}
	ms := busy
	if busy == math.MinInt64 {
		if ms = buffered; buffered == math.MaxInt64 {
			return res, false
		}
	}
	r := s.jobs[job][ms]
	res = backend.ClaimResult{Outcome: backend.OutcomeBuffered, Holder: r.instance, Expires: r.expires, WaitsFor: time.UnixMilli(ms).UTC()}
	if r.buffered {
		res.Expires = time.Time{}
	}
	return res, true
}

// BuffersOverlap reports that the store implements OverlapBufferOne and
// OverlapBufferAll.
func (s *RunStore) BuffersOverlap() bool { return true }

// decided answers a claim of a finished slot: the token that stored a skipped or
// late decision is told that decision again (its claim is repeat-safe), everyone
// else done.
func (r *memRun) decided(token string) backend.ClaimResult {
	return backend.ClaimResult{Outcome: backend.DecidedOutcome(r.status, token == r.token && r.fence == 0),
		Attempt: r.attempt, Fence: r.fence, Holder: r.instance, Status: r.status}
}

// result answers a claim from the run's holder. A won claim of a taken-over run (and
// its repeats) also names the holder it took over from.
func (r *memRun) result(o backend.ClaimOutcome) backend.ClaimResult {
	res := backend.ClaimResult{Outcome: o, Attempt: r.attempt, Fence: r.fence, Holder: r.instance, Expires: r.expires}
	res.Reopened = o == backend.OutcomeWon && r.reopened
	res.Retried = o == backend.OutcomeWon && r.retried
	res.LimitReached = o == backend.OutcomeWon && r.last
	if o == backend.OutcomeWon && r.previousToken != "" {
		res.Previous, res.PreviousToken, res.PreviousAttempt = r.previous, r.previousToken, r.attempt-1
	}
	return res
}

// otherBusyLocked reports whether a slot of job other than slot is busy: it holds a
// live lease, or (unless liveOnly) its unfinished run lost its lease less than a
// lease ago (released or expired: a backup is about to take it over).
func (s *RunStore) otherBusyLocked(job string, slot int64, now time.Time, liveOnly bool) bool {
	for ms, r := range s.jobs[job] {
		if ms != slot && r.busy(now, liveOnly) {
			return true
		}
	}
	return false
}

// busy reports whether the run holds its job at now: unfinished with a live lease,
// or (unless liveOnly) one that ended less than a lease ago.
func (r *memRun) busy(now time.Time, liveOnly bool) bool {
	end := r.expires
	if !liveOnly {
		end = end.Add(r.lease)
	}
	return !r.finished() && now.Before(end)
}

// laterBusyLocked reports whether a slot of job after slot is busy, as
// otherBusyLocked (not liveOnly) counts.
func (s *RunStore) laterBusyLocked(job string, slot int64, now time.Time) bool {
	for ms, r := range s.jobs[job] {
		if ms > slot && r.busy(now, false) {
			return true
		}
	}
	return false
}

// cancelEarlierLocked stores, on each busy run of an earlier slot of in's job
// that has none, in's request that it end, and answers in running, waiting for
// the newest of them.
func (s *RunStore) cancelEarlierLocked(in backend.RunClaim, slot int64, now time.Time) backend.ClaimResult {
	var res backend.ClaimResult
	newest := int64(math.MinInt64)
	for ms, r := range s.jobs[in.Job] {
		if ms >= slot || !r.busy(now, false) {
			continue
		}
		if r.cancel == nil {
			r.cancel = &backend.CancelRequest{Slot: in.Slot, Instance: in.Instance, Token: in.Token}
			r.touch(now)
		}
		if ms > newest {
			newest = ms
			res = r.result(backend.OutcomeRunning)
			res.WaitsFor = time.UnixMilli(ms).UTC()
		}
	}
	return res
}

// CancelsOverlap reports that the store implements OverlapCancelOther.
func (s *RunStore) CancelsOverlap() bool { return true }

// CountsRuns reports that the store counts runs for RunClaim.MaxRuns. A job's
// count is kept as long as the store.
func (s *RunStore) CountsRuns() bool { return true }

// CountsBufferedRuns reports that a buffered slot is counted in the decision that
// stores it (one lock).
func (s *RunStore) CountsBufferedRuns() bool { return true }

// Heartbeat extends key's lease to now+lease if key.Token holds a live lease.
func (s *RunStore) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if err := ctx.Err(); err != nil {
		return err
	}
	if lease <= 0 {
		return fmt.Errorf("%w: heartbeat lease must be positive, got %v", backend.ErrInvalidClaim, lease)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.jobs[job][slot.UnixMilli()]
	if r == nil || r.token != token || !r.live(now) {
		return fmt.Errorf("%w: %s", backend.ErrLeaseLost, backendutil.DescribeRun(job, slot))
	}
	r.lease, r.expires = lease, now.Add(lease)
	r.touch(now)
	if r.cancel != nil {
		return &backend.CancelError{Job: job, Slot: slot, Request: *r.cancel}
	}
	return nil
}

// Finish marks the run finished with status. It is accepted from the token stored as
// the run's holder while the run is unfinished, even if its lease expired or was
// released, as long as nobody took the run over; repeating it is not an error.
// Anything else is backend.ErrStaleToken and changes nothing.
func (s *RunStore) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if err := ctx.Err(); err != nil {
		return err
	}
	if !status.Finished() {
		return fmt.Errorf("%w: finish needs a final status, got %q", backend.ErrInvalidClaim, status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.jobs[job][slot.UnixMilli()]
	switch {
	case r == nil || r.token != token || !r.retryAt.IsZero():
		return fmt.Errorf("%w: %s", backend.ErrStaleToken, backendutil.DescribeRun(job, slot))
	case r.finished():
		return nil
	}
	r.status, r.buffered = status, false
	r.touch(s.clock.Now())
	return nil
}

// Retry ends key's attempt as failed and stores its retry: see backend.Retrier.
func (s *RunStore) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if delay < 0 || within <= 0 {
		return fmt.Errorf("%w: retry needs a delay of zero or more and a positive window, got %v and %v", backend.ErrInvalidClaim, delay, within)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.jobs[key.Job][key.Slot.UnixMilli()]
	switch {
	case r != nil && r.retried && r.previousToken == key.Token:
		return nil // a repeat, after the retry it stored was claimed
	case r == nil || r.token != key.Token || r.finished() || r.buffered:
		return fmt.Errorf("%w: %s", backend.ErrStaleToken, backendutil.DescribeRun(key.Job, key.Slot))
	case !r.retryAt.IsZero():
		return nil // a repeat
	}
	now := s.clock.Now()
	r.retryAt, r.retryBy = now.Add(delay), now.Add(delay+within)
	r.expires = now
	r.touch(now)
	return nil
}

// Release ends key's live lease at once. The run stays unfinished, so the next
// Claim by another token takes it over.
func (s *RunStore) Release(ctx context.Context, key backend.RunKey) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.jobs[job][slot.UnixMilli()]
	if r == nil || r.token != token || !r.live(now) {
		return nil
	}
	r.expires = now // a released lease is an expired one
	r.touch(now)
	return nil
}

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
		out[job] = s.activeLocked(job, now)
	}
	return out, nil
}

var _ backend.EntryRunLister = (*RunStore)(nil)

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
		for _, r := range runs {
			if !r.finished() && !r.forgotten(now) {
				out = append(out, name)
				break
			}
		}
	}
	return out, nil
}

func (s *RunStore) activeLocked(job string, now time.Time) []backend.ActiveRun {
	var out []backend.ActiveRun
	for ms, r := range s.jobs[job] {
		if r.finished() || r.forgotten(now) {
			continue
		}
		out = append(out, backend.ActiveRun{
			Slot:     time.UnixMilli(ms),
			Token:    r.token,
			Instance: r.instance,
			Attempt:  r.attempt,
			Fence:    r.fence,
			Expires:  r.expires,
			Live:     r.live(now),
			RetryAt:  r.retryAt,
			Cancel:   copyCancel(r.cancel),
			Buffered: r.buffered,
		})
	}
	slices.SortFunc(out, func(a, b backend.ActiveRun) int { return a.Slot.Compare(b.Slot) })
	return out
}

// WatchRun returns a channel closed when (job, slot)'s lease ends: it expires (a timer
// on the store's clock, re-armed by heartbeats), is released, the run finishes or is
// taken over; or when a cancel request is stored on the run (OverlapCancelOther);
// a buffered slot's when it is claimed or withdrawn. When (job, slot) holds no
// live lease and is not buffered right now the channel is already closed. It is also closed when ctx is done; the watch holds no goroutine or timer
// after that.
func (s *RunStore) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(chan struct{})
	ms := slot.UnixMilli()
	s.mu.Lock()
	r := s.jobs[job][ms]
	live := r != nil && r.live(s.clock.Now())
	if r != nil && r.buffered {
		notify := r.notify
		s.mu.Unlock()
		go func() { // a buffered slot has no lease: any write changes it
			defer close(out)
			select {
			case <-ctx.Done():
			case <-notify:
			}
		}()
		return out, nil
	}
	var token string
	var asked bool
	if live {
		token, asked = r.token, r.cancel != nil
	}
	s.mu.Unlock()
	if !live {
		close(out)
		return out, nil
	}
	go s.watch(ctx, job, ms, token, asked, out)
	return out, nil
}

func (s *RunStore) watch(ctx context.Context, job string, ms int64, token string, asked bool, out chan<- struct{}) {
	defer close(out)
	for {
		s.mu.Lock()
		now := s.clock.Now()
		r := s.jobs[job][ms]
		if r == nil || r.token != token || !r.live(now) || !asked && r.cancel != nil {
			s.mu.Unlock()
			return
		}
		notify, wait := r.notify, r.expires.Sub(now)
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

// lookupLocked returns the run of (job, slot), or nil when there is none or it was
// neither live nor written for its keep (it is forgotten then, even between sweeps).
func (s *RunStore) lookupLocked(job string, slot int64, now time.Time) *memRun {
	r := s.jobs[job][slot]
	if r != nil && r.forgotten(now) {
		delete(s.jobs[job], slot)
		return nil
	}
	return r
}

func (r *memRun) forgotten(now time.Time) bool {
	return !r.buffered && !r.live(now) && !now.Before(r.changed.Add(r.keep)) && !now.Before(r.retryBy.Add(r.keep))
}

// sweepLocked forgets runs that were neither live nor written for their keep.
func (s *RunStore) sweepLocked(now time.Time) {
	if now.Before(s.sweepAt) {
		return
	}
	s.sweepAt = now.Add(memorySweepEvery)
	for job, runs := range s.jobs {
		for ms, r := range runs {
			if r.forgotten(now) {
				delete(runs, ms)
			}
		}
		if len(runs) == 0 {
			delete(s.jobs, job)
		}
	}
}

func copyCancel(c *backend.CancelRequest) *backend.CancelRequest {
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}
