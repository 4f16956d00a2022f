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

// run runs a's won attempt under its lease and settles it. It reports whether
// the slot is to be stood by for again: its lease was lost unfinished, or it
// failed and stored its retry.
func (s *Scheduler) run(a *attempt) bool {
	j, res := a.j, a.res
	s.emit(Event{Kind: EventClaimed, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Attempt: res.Attempt, Outcome: res.Outcome,
		Manual: a.man != nil, Backfill: a.backfill()})
	takeover := res.Attempt > 1 && !res.Reopened && !res.Retried
	switch {
	case res.Reopened:
		s.log.Info("runs a slot that did not run before (catch-up after a pause, or a backfill)", j.logAttr(), "slot", a.rc.Slot, "attempt", res.Attempt)
	case res.Retried:
		s.log.Info("retries a failed run", j.logAttr(), "slot", a.rc.Slot, "attempt", res.Attempt, "previous", res.Previous)
	case takeover:
		s.log.Info("took over a run", j.logAttr(), "slot", a.rc.Slot, "attempt", res.Attempt, "previous", res.Previous)
		s.emit(Event{Kind: EventTakeover, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Attempt: res.Attempt, Outcome: res.Outcome, Backfill: a.backfill()})
	}
	out := s.execute(a)
	a.bf.ran(out.Status, res.Attempt, s.instance, out.Error)
	switch {
	case out.retried:
		a.failed = &failedAttempt{attempt: res.Attempt, status: out.Status, err: out.err}
		return true
	case out.handedOver && a.man == nil && s.store.leased():
		// The lease was lost with the run unfinished. Backups that wait for it
		// take it over first. After a lease this instance stands by for it too,
		// so it is taken over even when nobody else waits.
		return s.sleepUntil(s.loopCtx, s.clock.Now().Add(j.cfg.lease))
	}
	return false
}

// execResult is how one attempt ended.
type execResult struct {
	Status     Status
	StartedAt  time.Time
	FinishedAt time.Time
	Error      string
	// retried: the attempt failed and its retry was stored; handedOver: it was
	// left unfinished for a backup (a lost lease, Stop).
	retried, handedOver bool
	// ended: a later slot asked the run to end (cancel-other): it is finished.
	ended bool
	// err is what the handler's failure is reported as in events.
	err error
}

// execute runs the handler of a's won attempt, keeps its lease alive until the
// attempt is settled, and settles it with one call. An attempt whose lease is
// too old, or whose job or entry was paused or removed since the claim, is
// settled without running.
func (s *Scheduler) execute(a *attempt) execResult {
	j := a.j
	parent := s.hardCtx
	if a.man != nil {
		parent = a.man.handlerCtx
	}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if !s.freshLease(a) {
		return s.settle(a, execResult{Status: StatusLost, Error: "its lease was won too late to run under it: not run"}, nil)
	}
	if why := s.pausedWhy(a, s.clock.Now()); why != "" && a.man == nil {
		// A pause or an entry's change that came while the claim was answered.
		s.emit(Event{Kind: EventPaused, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Status: StatusPaused, Backfill: a.backfill()})
		return s.settle(a, execResult{Status: StatusPaused, Error: why}, nil)
	}
	if _, gone := s.entryFacts(j); gone {
		return s.settle(a, execResult{Status: StatusCancelled, Error: "the schedule entry was removed before this attempt started: not run"}, nil)
	}
	if j.cfg.timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, j.cfg.timeout, fmt.Errorf("%w after %v", ErrHandlerTimeout, j.cfg.timeout))
		defer stop()
	}
	settling, stopHeartbeat := s.startHeartbeat(a, cancel)
	defer stopHeartbeat()

	run := Run{Job: j.name, Slot: a.rc.Slot, Instance: s.instance, Token: a.rc.Token, Fence: a.res.Fence, Attempt: max(a.res.Attempt, 1),
		Manual: a.man != nil, Backfill: a.backfill(), Previous: a.l.previous, Nominal: a.rc.Slot}
	if a.kind != claimManual && j.onSchedule(a.rc.Slot) {
		run.Nominal = j.nominal(a.rc.Slot)
	}
	if j.entry != nil {
		run.Job, run.Entry, run.Payload = j.entry.job, j.entry.id, j.entry.payload
	}
	a.man.started(run)
	started := s.clock.Now()
	s.emit(Event{Kind: EventStarted, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Attempt: run.Attempt, Manual: run.Manual, Backfill: run.Backfill,
		Lag: started.Sub(a.rc.Slot)})
	seen := RunRecord{Job: run.Job, Entry: run.Entry, Slot: run.Slot, Instance: s.instance, Token: run.Token, Attempt: run.Attempt,
		Manual: run.Manual, Backfill: run.Backfill, Status: StatusRunning, StartedAt: started, Fence: run.Fence}
	s.seen.note(seen)
	err := s.callHandler(ctx, j.handler, run)
	res := execResult{StartedAt: started, FinishedAt: s.clock.Now()}
	settling.Store(true)
	cause := context.Cause(ctx)
	res.Status, res.Error = endOf(err, cause)
	res.ended = errors.Is(cause, ErrOverlapCancelled)
	res.err = err
	if res.err == nil && errors.Is(cause, ErrLeaseLost) {
		res.err = cause
	}
	if res.err == nil && res.Error != "" {
		res.err = errors.New(res.Error)
	}
	plan, retry, noRetry := s.planRetry(a, res.Status, err, cause)
	if !retry {
		plan = nil
	}
	s.logFailure(run, res, err)
	out := s.settle(a, res, plan)
	if out.Status == StatusOK && !run.Manual {
		s.sawOK(j, a.rc.Slot, res.FinishedAt)
	}
	if !out.retried {
		seen.Status, seen.FinishedAt, seen.Duration, seen.Error = out.Status, res.FinishedAt, res.FinishedAt.Sub(started), res.Error
		s.seen.note(seen)
	}
	s.emit(Event{Kind: EventFinished, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Attempt: run.Attempt, Manual: run.Manual, Backfill: run.Backfill,
		Status: out.Status, Duration: res.FinishedAt.Sub(res.StartedAt), Err: res.err})
	switch {
	case out.retried:
		s.log.Info("retry planned", j.logAttr(), "slot", a.rc.Slot, "attempt", run.Attempt, "retry_at", plan.at)
		s.emit(Event{Kind: EventRetry, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Attempt: run.Attempt, Backfill: run.Backfill,
			Status: out.Status, Next: plan.at, Err: res.err})
	case failedOnItsOwn(out.Status):
		if noRetry != "" {
			s.log.Warn("run failed for good", j.logAttr(), "slot", a.rc.Slot, "attempt", run.Attempt, "why", noRetry)
		}
		s.finalFailure(a, run.Attempt, res.err)
	}
	return out
}

// finalFailure reports a's failure of attempt as its slot's final one (no retry
// follows): EventFailed, and the job's pause after failed slots.
func (s *Scheduler) finalFailure(a *attempt, attempt int, err error) {
	j := a.j
	s.emit(Event{Kind: EventFailed, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Attempt: max(attempt, 1), Manual: a.man != nil,
		Backfill: a.backfill(), Status: StatusError, Err: err})
	if a.man == nil && j.cfg.pauseAfter > 0 {
		s.beside(func() { s.pauseIfFailing(j) })
	}
}

// startHeartbeat keeps a's lease alive, when it holds one, until stop is called;
// stop returns once the heartbeats ended, a call in flight included. Settling is
// set once the handler has returned: a loss is then no longer reported.
func (s *Scheduler) startHeartbeat(a *attempt, cancel context.CancelCauseFunc) (settling *atomic.Bool, stop func()) {
	settling = new(atomic.Bool)
	ctx, done := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	if !s.store.leased() {
		close(stopped)
	} else {
		go func() {
			defer close(stopped)
			s.heartbeat(ctx, a, settling, cancel)
		}()
	}
	var once atomic.Bool
	return settling, func() {
		if once.CompareAndSwap(false, true) {
			done()
			<-stopped
		}
	}
}

// endOf is the status and error text of a run whose handler returned err, its
// context ended by cause (nil while it was not).
func endOf(err, cause error) (Status, string) {
	if err == nil {
		if errors.Is(cause, ErrLeaseLost) {
			// The handler finished, but after its lease was gone: another attempt
			// may have run the slot. Settle decides which result stands.
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
// at warn level. A panic is logged at error level, with its stack, by
// callHandler.
func (s *Scheduler) logFailure(run Run, res execResult, err error) {
	if !failedOnItsOwn(res.Status) || errors.Is(err, ErrHandlerPanic) {
		return
	}
	s.log.Warn("run failed", "job", run.Job, "slot", run.Slot, "attempt", run.Attempt, "manual", run.Manual,
		"status", res.Status, "duration", res.FinishedAt.Sub(res.StartedAt), "err", res.Error)
}

// callHandler runs h, turning a panic into an error matching ErrHandlerPanic that
// carries the panic's value. The stack trace goes to the log, not to history.
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

// beside runs f in a goroutine that Stop waits for.
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
