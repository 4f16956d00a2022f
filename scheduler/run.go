package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// execResult is how one execution of a handler ended.
type execResult struct {
	Status     Status
	StartedAt  time.Time
	FinishedAt time.Time
	Error      string
	// retry is the attempt's retry, when retried says one follows: stored in
	// the run store with leases, made by this process without.
	retry   retryPlan
	retried bool
	// ended says a later slot asked the run to end (OverlapCancelOther): it is
	// finished cancelled, not handed over.
	ended bool
	// err is what the handler's failure is reported as in events.
	err error
}

// execute runs the handler for a won claim, keeps its lease alive until the lease is
// settled (so a slow Finish cannot let it expire under a finished run), settles it
// and stores the result.
func (s *Scheduler) execute(parent context.Context, a *slotAttempt) execResult {
	j, in, l := a.j, a.in, a.l
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if j.cfg.timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, j.cfg.timeout, fmt.Errorf("%w after %v", ErrHandlerTimeout, j.cfg.timeout))
		defer stop()
	}
	settling, stopHeartbeat := s.startHeartbeat(a, cancel)

	run := Run{Job: j.name, Slot: in.Slot, Instance: s.instance, Token: in.Token, Fence: a.fence, Attempt: max(in.Attempt, 1), Manual: in.Manual, Backfill: in.Backfill}
	if l != nil {
		run.Previous = l.previous
	}
	if j.entry != nil {
		run.Job, run.Entry, run.Payload = j.entry.job, j.entry.id, j.entry.payload
	}
	started := s.clock.Now()
	s.emit(Event{Kind: EventStarted, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Backfill: in.Backfill, Lag: started.Sub(in.Slot)})
	err := s.callHandler(ctx, j.handler, run)
	finished := s.clock.Now()
	settling.Store(true)

	res := execResult{StartedAt: started, FinishedAt: finished}
	cause := context.Cause(ctx)
	res.Status, res.Error = endOf(err, cause)
	res.ended = errors.Is(cause, ErrOverlapCancelled)
	plan, retry, noRetry := s.planRetry(a, res.Status, err, cause)

	deferred := false
	if l != nil {
		res, deferred = s.settle(a, res, plan, retry)
	} else {
		res.retry, res.retried = plan, retry
	}
	res.Error = backend.TruncateText(res.Error, MaxErrorText)
	stopHeartbeat()
	if !deferred { // else the outbox stores it once the Finish is answered
		s.save(a, res)
	}
	// The hook gets the handler's own error value (errors.Is and errors.As work on
	// it), or the cause that ended the run; history keeps its text.
	evErr := err
	if evErr == nil && errors.Is(cause, ErrLeaseLost) {
		evErr = cause
	}
	if evErr == nil && res.Error != "" {
		evErr = errors.New(res.Error)
	}
	s.logFailure(run, res, err)
	s.emit(Event{Kind: EventFinished, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Backfill: in.Backfill, Status: res.Status, Duration: finished.Sub(started), Err: evErr})
	switch {
	case res.retried:
		s.log.Info("retry planned", j.logAttr(), "slot", in.Slot, "attempt", run.Attempt, "retry_at", res.retry.at)
		s.emit(Event{Kind: EventRetry, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Backfill: in.Backfill, Status: res.Status, Next: res.retry.at, Err: evErr})
	case failedOnItsOwn(res.Status):
		if noRetry != "" {
			s.log.Warn("run failed for good", j.logAttr(), "slot", in.Slot, "attempt", run.Attempt, "why", noRetry)
		}
		s.finalFailure(j, in, res.Status, evErr)
	}
	res.err = evErr
	return res
}

// finalFailure reports in's failure as its slot's final one (no retry follows):
// EventFailed, and the job's pause after failed slots.
func (s *Scheduler) finalFailure(j *job, in backend.ClaimInput, status Status, err error) {
	s.emit(Event{Kind: EventFailed, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: max(in.Attempt, 1), Manual: in.Manual, Backfill: in.Backfill, Status: status, Err: err})
	if !in.Manual && j.cfg.pauseAfter > 0 {
		s.beside(func() { s.pauseIfFailing(j) })
	}
}

// startHeartbeat keeps a's lease alive, when it has one, until stop is called;
// stop returns once the heartbeats ended, a call in flight included. Settling is
// set once the handler has returned, so that a loss is no longer reported: the
// lease's Finish decides.
func (s *Scheduler) startHeartbeat(a *slotAttempt, cancel context.CancelCauseFunc) (settling *atomic.Bool, stop func()) {
	settling = new(atomic.Bool)
	ctx, done := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	if a.l == nil {
		close(stopped)
	} else {
		go func() {
			defer close(stopped)
			s.heartbeat(ctx, a, settling, cancel)
		}()
	}
	return settling, func() {
		done()
		<-stopped
	}
}

// endOf is the status and error text of a run whose handler returned err, its
// context ended by cause (nil while it was not).
func endOf(err, cause error) (Status, string) {
	if err == nil {
		if errors.Is(cause, ErrLeaseLost) {
			// The handler finished, but after its lease was gone: another attempt
			// may have run the slot. Finish decides which result stands.
			return StatusOK, cause.Error()
		}
		return StatusOK, ""
	}
	text := backend.TruncateText(err.Error(), MaxErrorText)
	switch {
	case errors.Is(err, ErrHandlerPanic):
		return StatusError, text
	case errors.Is(cause, ErrLeaseLost):
		return StatusLost, text
	case errors.Is(cause, ErrHandlerTimeout):
		return StatusTimeout, text
	case errors.Is(cause, ErrStopped):
		return StatusCancelled, text
	case errors.Is(cause, ErrOverlapCancelled):
		if errors.Is(err, context.Canceled) {
			text = cause.Error()
		}
		return StatusCancelled, text
	}
	return StatusError, text
}

// logFailure logs a run that failed on its own, a handler's error or its timeout,
// at warn level; a panic is logged at error level, with its stack, by
// callHandler. A lost lease and a superseded result are logged where they are
// found, a cancellation by Stop is not a failure.
func (s *Scheduler) logFailure(run Run, res execResult, err error) {
	if !failedOnItsOwn(res.Status) || errors.Is(err, ErrHandlerPanic) {
		return
	}
	s.log.Warn("run failed", "job", run.Job, "slot", run.Slot, "attempt", run.Attempt, "manual", run.Manual,
		"status", res.Status, "duration", res.FinishedAt.Sub(res.StartedAt), "err", res.Error)
}

// callHandler runs h, turning a panic into an error matching ErrHandlerPanic that
// carries the panic's value; the stack trace goes to the log, not to history.
func (s *Scheduler) callHandler(ctx context.Context, h Handler, run Run) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, r)
			s.log.Error("handler panicked", "job", run.Job, "slot", run.Slot, "attempt", run.Attempt, "manual", run.Manual,
				"token", run.Token, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	return h(ctx, run)
}

// runLeased runs a won lease and settles it. Its attempt is recorded in history
// before the handler starts when the record may decide (RecordDecider): a backend
// that arbitrates between instances with and without leases (ErrClaimedElsewhere)
// may say the slot is not ours, for a takeover too. Everything else is written
// beside the run. A lease lost with the run unfinished makes this instance stand
// by for the run again.
func (s *Scheduler) runLeased(j *job, c *leaseClaim, res backend.ClaimResult, sent time.Time) {
	in := backend.ClaimInput{
		Job: j.name, Slot: c.Slot, Token: c.Token, Instance: s.instance, Attempt: max(res.Attempt, 1), Backfill: c.backfill(),
		At: s.clock.Now(), HistorySize: j.cfg.historySize, HistoryTTL: j.cfg.historyTTL,
	}
	l := &lease{token: c.Token, dur: j.cfg.lease, sent: sent}
	a := &slotAttempt{j: j, in: in, fence: res.Fence, l: l}
	s.emit(Event{Kind: EventClaimed, Job: j.name, Slot: c.Slot, Token: c.Token, Attempt: in.Attempt, Outcome: res.Outcome, Backfill: in.Backfill})
	takeover := in.Attempt > 1 && !res.Reopened && !res.Retried
	if takeover || res.Retried {
		l.previous = res.Previous
	}
	switch {
	case res.Reopened && c.backfill():
		s.log.Info("backfills a slot that did not run before", j.logAttr(), "slot", c.Slot, "attempt", in.Attempt)
	case res.Reopened:
		s.log.Info("runs a slot paused before (catch-up after the pause ended)", j.logAttr(), "slot", c.Slot, "attempt", in.Attempt)
	case res.Retried:
		s.log.Info("retries a failed run", j.logAttr(), "slot", c.Slot, "attempt", in.Attempt, "previous", res.Previous)
	case takeover:
		s.log.Info("took over a run", j.logAttr(), "slot", c.Slot, "attempt", in.Attempt, "previous", res.Previous)
		s.emit(Event{Kind: EventTakeover, Job: j.name, Slot: c.Slot, Token: c.Token, Attempt: in.Attempt, Outcome: res.Outcome, Backfill: in.Backfill})
	}
	if !s.recordClaim(a) {
		c.bf.notRun(errors.New("the slot's claim could not be recorded; not run here"))
		return
	}
	if takeover {
		s.noteLost(j, c.Slot, res)
	}
	out := execResult{Status: StatusLost}
	if s.freshLease(a) {
		// A pause stored while the claim was recorded holds the slot too: it has
		// not started.
		if p, paused := s.pauses.of(j.name, s.clock.Now()); paused {
			s.decidePaused(j, c, res.Attempt, l, p)
			c.bf.decided(BackfillPaused, StatusPaused)
			return
		}
		if status, why, held := s.entryHeld(j); held {
			s.log.Info("attempt of a schedule entry not run", j.logAttr(), "slot", c.Slot, "attempt", in.Attempt, "status", status, "why", why)
			s.decideNotRun(j, c, res.Attempt, l, status, why)
			c.bf.notRun(errors.New(why))
			return
		}
		out = s.execute(s.hardCtx, a)
	}
	c.bf.ran(out.Status, in.Attempt, s.instance, out.Error)
	if out.retried {
		// The retry is stored: this instance stands by for it like any other,
		// and sends the final failure if nobody claims it in time.
		s.handleClaim(j, c.Slot, claimAdopt, c.bf, &failedAttempt{in: in, status: out.Status, err: out.err})
		return
	}
	// The lease was lost with the run unfinished (and released): after a lease, in
	// which the backups that wait for it take it over first, this instance stands by
	// for it too, so that it is taken over even when nobody else waits for it.
	if out.Status == StatusLost && s.sleepUntil(s.loopCtx, s.clock.Now().Add(j.cfg.lease)) {
		s.handleClaim(j, c.Slot, claimAdopt, c.bf, nil)
	}
}

// recordClaim writes a won attempt's claim to history on a backend that records
// claims (ClaimRecorder). When the record may decide (RecordDecider) it is written
// before the handler, and false says the slot is not to run: an instance without
// leases claimed it (ErrClaimedElsewhere), or Stop came before the record was
// stored (the lease is handed over). Otherwise it is written beside the run.
func (s *Scheduler) recordClaim(a *slotAttempt) bool {
	rec, ok := s.backend.(backend.ClaimRecorder)
	if !ok {
		return true
	}
	// record writes the attempt's claim; a call that Stop cut short (stopCuts: its
	// context is the loops') is not a failure of the backend.
	record := func(ctx context.Context, stopCuts bool) error {
		err := rec.RecordClaim(ctx, a.in)
		cut := stopCuts && errors.Is(ctx.Err(), context.Canceled) && s.loopCtx.Err() != nil
		if err != nil && !cut && !errors.Is(err, backend.ErrClaimedElsewhere) {
			s.backendError(a.j, a.in.Slot, "record_claim", err)
		}
		return err
	}
	if recordDecides(s.backend, a.j.name) {
		// Before the handler, for every attempt: the record may decide (a mixed
		// fleet, where an instance without leases may have claimed the slot
		// while the lease's first holder died before recording it). Bounded so
		// that the lease is still good when the handler starts.
		parent := s.loopCtx
		if parent.Err() != nil {
			// A claim settled after Stop began (settleStopped): the slot is
			// ours and runs while Stop waits for handlers, recorded first.
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, min(s.callTO, a.l.dur/3))
		err := record(ctx, parent == s.loopCtx)
		cancel()
		if errors.Is(err, backend.ErrClaimedElsewhere) {
			s.claimedElsewhere(a, err)
			return false
		}
		if err != nil && s.loopCtx.Err() != nil && parent == s.loopCtx {
			// Stopping before the slot's claim was recorded: hand the lease
			// over unrun rather than run a slot the record might not be ours.
			s.log.Info("stopping before the slot's claim was recorded; handing the lease over unrun", a.j.logAttr(), "slot", a.in.Slot)
			s.release(a.j, a.in.Slot, a.l.token)
			return false
		}
	} else {
		s.beside(func() {
			ctx, cancel := s.callCtx(context.Background())
			defer cancel()
			_ = record(ctx, false)
		})
	}
	return true
}

// recordDecides reports whether the record of a won attempt of job must be
// written before the handler starts.
func recordDecides(b backend.Backend, job string) bool {
	d, ok := b.(backend.RecordDecider)
	return !ok || d.RecordDecides(job)
}

// beside runs f in a goroutine that Stop waits for: writes that go beside a run.
func (s *Scheduler) beside(f func()) {
	s.handlers.Add(1)
	go func() {
		defer s.handlers.Done()
		f()
	}()
}

// besideIfRunning is beside for a caller that is not itself waited for by Stop (a
// reader): f runs only while the scheduler is started. It reports whether it does.
func (s *Scheduler) besideIfRunning(f func()) bool {
	s.mu.Lock()
	if s.state != stateStarted {
		s.mu.Unlock()
		return false
	}
	s.handlers.Add(1) // under the lock that Stop changes the state under
	s.mu.Unlock()
	go func() {
		defer s.handlers.Done()
		f()
	}()
	return true
}
