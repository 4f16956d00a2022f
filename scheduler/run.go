package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// execResult is how one execution of a handler ended.
type execResult struct {
	Status     Status
	StartedAt  time.Time
	FinishedAt time.Time
	Error      string
}

// lease is a held lease the execution must keep alive and settle.
type lease struct {
	token string
	dur   time.Duration
	// sent is when the claim that won the lease was sent, by the scheduler's clock:
	// the store's expiry is at least one lease after it.
	sent time.Time
}

// execute runs the handler for a won claim, keeps its lease alive until the lease is
// settled (so a slow Finish cannot let it expire under a finished run), settles it
// and stores the result.
func (s *Scheduler) execute(parent context.Context, j *job, in ClaimInput, fence uint64, l *lease) execResult {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if j.cfg.timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, j.cfg.timeout, fmt.Errorf("%w after %v", errTimeout, j.cfg.timeout))
		defer stop()
	}
	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	var settling atomic.Bool
	if l != nil {
		go func() {
			defer close(hbStopped)
			s.heartbeat(j, in.Slot, l, hbDone, &settling, cancel)
		}()
	} else {
		close(hbStopped)
	}
	stopHeartbeat := func() {
		close(hbDone)
		<-hbStopped
	}

	run := Run{Job: j.name, Slot: in.Slot, Instance: s.instance, Token: in.Token, Fence: fence, Attempt: max(in.Attempt, 1), Manual: in.Manual}
	started := s.clock.Now()
	s.emit(Event{Kind: EventStarted, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Lag: started.Sub(in.Slot)})
	err := s.callHandler(ctx, j.handler, run)
	finished := s.clock.Now()
	settling.Store(true)

	res := execResult{Status: StatusOK, StartedAt: started, FinishedAt: finished}
	cause := context.Cause(ctx)
	if err != nil {
		res.Error = err.Error()
		switch {
		case errors.Is(err, ErrHandlerPanic):
			res.Status = StatusError
		case errors.Is(cause, ErrLeaseLost):
			res.Status = StatusLost
		case errors.Is(cause, errTimeout):
			res.Status = StatusTimeout
		case errors.Is(cause, ErrStopped):
			res.Status = StatusCancelled
		default:
			res.Status = StatusError
		}
	} else if errors.Is(cause, ErrLeaseLost) {
		// The handler finished, but after its lease was gone: another attempt may
		// have run the slot. Finish below decides which result stands.
		res.Error = cause.Error()
	}

	if l != nil {
		res = s.settle(j, in.Slot, l, res)
	}
	stopHeartbeat()
	s.save(j, in, fence, res)
	// The hook gets the handler's own error value (errors.Is and errors.As work on
	// it), or the cause that ended the run; history keeps its text.
	evErr := err
	if evErr == nil && errors.Is(cause, ErrLeaseLost) {
		evErr = cause
	}
	if evErr == nil && res.Error != "" {
		evErr = errors.New(res.Error)
	}
	s.emit(Event{Kind: EventFinished, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Status: res.Status, Duration: finished.Sub(started), Err: evErr})
	return res
}

// callHandler runs h, turning a panic into an error matching ErrHandlerPanic that
// carries the panic's value; the stack trace goes to the log, not to history.
func (s *Scheduler) callHandler(ctx context.Context, h Handler, run Run) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, r)
			s.log.Error("handler panicked", "job", run.Job, "slot", run.Slot, "token", run.Token, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	return h(ctx, run)
}

// settle ends a lease after the handler returned: a run cancelled by Stop, or one
// that lost its lease before finishing, is released so a backup takes over at once;
// anything else is finished, which fails for a holder that was replaced (its result
// is then stored as superseded). Finish is repeat-safe for the holder, so one that
// gets no answer is sent again while the heartbeats keep the lease alive: a lost
// Finish must not let the lease expire under a run that succeeded, or a backup would
// run the slot again. It is tried until an answer, or until the store would have
// forgotten the run; after a hard stop for at most one more lease, so Stop returns.
func (s *Scheduler) settle(j *job, slot time.Time, l *lease, res execResult) execResult {
	if res.Status == StatusCancelled || res.Status == StatusLost {
		s.release(j, slot, l.token)
		return res
	}
	giveUp := s.clock.Now().Add(j.keep())
	hard := s.hardCtx.Done()
	for attempt := 0; ; attempt++ {
		ctx, cancel := s.callCtx(context.Background())
		err := s.runs.Finish(ctx, j.name, slot, l.token, res.Status)
		cancel()
		switch {
		case err == nil:
			return res
		case errors.Is(err, ErrStaleToken), errors.Is(err, ErrLeaseLost):
			s.log.Warn("result superseded: another attempt holds the run", "job", j.name, "slot", slot, "token", l.token, "status", res.Status)
			if res.Error == "" {
				res.Error = fmt.Sprintf("superseded (handler returned %s after losing its lease)", res.Status)
			} else {
				res.Error = fmt.Sprintf("superseded (handler returned %s after losing its lease): %s", res.Status, res.Error)
			}
			res.Status = StatusSuperseded
			return res
		}
		s.backendError(j, slot, "finish", err)
		if errors.Is(err, ErrInvalidClaim) || s.clock.Now().After(giveUp) {
			return res
		}
		t := s.clock.NewTimer(retryDelay(attempt))
		select {
		case <-t.C():
		case <-hard:
			t.Stop()
			hard = nil // stopping: a bounded last effort
			giveUp = minTime(giveUp, s.clock.Now().Add(l.dur))
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (s *Scheduler) save(j *job, in ClaimInput, fence uint64, res execResult) {
	instance := in.Instance
	if instance == "" {
		instance = s.instance
	}
	r := StoredResult{
		Slot: in.Slot, Token: in.Token, Instance: instance, Attempt: max(in.Attempt, 1), Manual: in.Manual,
		Status: res.Status, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt, Error: res.Error, Fence: fence,
	}
	ctx, cancel := s.callCtx(context.Background())
	defer cancel()
	if err := s.backend.SaveResult(ctx, j.name, r, Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL}); err != nil {
		s.backendError(j, in.Slot, "save_result", err)
	}
}

// heartbeat extends the lease every lease/3 until done. It cancels the handler as
// soon as the store says the lease is lost, or when no heartbeat has succeeded for
// long enough that the store may expire the lease: a lease/10 margin before one lease
// after the last successful heartbeat was sent (the store's expiry comes after that
// instant, so a backup never starts while this handler still thinks it holds the run).
// Once the handler has returned (settling), a loss is not reported: Finish decides.
func (s *Scheduler) heartbeat(j *job, slot time.Time, l *lease, done <-chan struct{}, settling *atomic.Bool, cancel context.CancelCauseFunc) {
	every := l.dur / 3
	margin := leaseMargin(l.dur)
	expireAt := l.sent.Add(l.dur - margin)
	nextBeat := l.sent.Add(every)
	for {
		now := s.clock.Now()
		if !now.Before(expireAt) {
			s.leaseLost(j, slot, l, settling, cancel, fmt.Errorf("%w: job %q slot %s: no heartbeat succeeded for %v of a %v lease", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), now.Sub(expireAt.Add(margin-l.dur)).Round(time.Millisecond), l.dur))
			return
		}
		wake := nextBeat
		if expireAt.Before(wake) {
			wake = expireAt
		}
		t := s.clock.NewTimer(wake.Sub(now))
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C():
		}
		now = s.clock.Now()
		if now.Before(nextBeat) || !now.Before(expireAt) {
			continue
		}
		sent := now
		ctx, cc := context.WithTimeout(context.Background(), expireAt.Sub(now))
		err := s.runs.Heartbeat(ctx, j.name, slot, l.token, l.dur)
		cc()
		switch {
		case err == nil:
			expireAt = sent.Add(l.dur - margin)
			nextBeat = sent.Add(every)
		case errors.Is(err, ErrLeaseLost):
			s.leaseLost(j, slot, l, settling, cancel, fmt.Errorf("%w: job %q slot %s: %w", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), err))
			return
		default:
			if !settling.Load() {
				s.backendError(j, slot, "heartbeat", err)
			}
			nextBeat = s.clock.Now().Add(min(every/4, 250*time.Millisecond))
		}
	}
}

// leaseMargin is how long before a lease may expire in the store its holder gives
// it up: lease/10, at least 50ms.
func leaseMargin(lease time.Duration) time.Duration { return max(lease/10, 50*time.Millisecond) }

// leaseLost cancels the running handler, unless it has already returned.
func (s *Scheduler) leaseLost(j *job, slot time.Time, l *lease, settling *atomic.Bool, cancel context.CancelCauseFunc, err error) {
	if settling.Load() {
		return
	}
	s.log.Warn("lease lost; cancelling the handler", "job", j.name, "slot", slot, "err", err)
	s.emit(Event{Kind: EventLeaseLost, Job: j.name, Slot: slot, Token: l.token, Err: err})
	cancel(err)
}
