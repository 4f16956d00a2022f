package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
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
	fence uint64
	dur   time.Duration
}

// execute runs the handler for a won claim, keeps its lease alive, settles the lease
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
	if l != nil {
		go func() {
			defer close(hbStopped)
			s.heartbeat(j, in.Slot, l, hbDone, cancel)
		}()
	} else {
		close(hbStopped)
	}

	run := Run{Job: j.name, Slot: in.Slot, Instance: s.instance, Token: in.Token, Fence: fence, Attempt: max(in.Attempt, 1), Manual: in.Manual}
	started := s.clock.Now()
	s.emit(Event{Kind: EventStarted, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Lag: started.Sub(in.Slot)})
	err := callHandler(ctx, j.handler, run)
	finished := s.clock.Now()
	close(hbDone)
	<-hbStopped

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
	s.save(j, in, fence, res)
	s.emit(Event{Kind: EventFinished, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Status: res.Status, Duration: finished.Sub(started), Err: errOrNil(res.Error)})
	return res
}

func errOrNil(msg string) error {
	if msg == "" {
		return nil
	}
	return errors.New(msg)
}

func callHandler(ctx context.Context, h Handler, run Run) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrHandlerPanic, r, debug.Stack())
		}
	}()
	return h(ctx, run)
}

// settle ends a lease after the handler returned: a run cancelled by Stop, or one
// that lost its lease before finishing, is released so a backup takes over at once; anything else is finished, which fails for a holder
// that was replaced (its result is then stored as superseded).
func (s *Scheduler) settle(j *job, slot time.Time, l *lease, res execResult) execResult {
	ctx, cancel := s.callCtx(context.Background())
	defer cancel()
	if res.Status == StatusCancelled || res.Status == StatusLost {
		if err := s.runs.Release(ctx, j.name, slot, l.token); err != nil {
			s.backendError(j, slot, "release", err)
		}
		return res
	}
	err := s.runs.Finish(ctx, j.name, slot, l.token, res.Status)
	switch {
	case err == nil:
	case errors.Is(err, ErrStaleToken), errors.Is(err, ErrLeaseLost):
		s.log.Warn("result superseded: another attempt holds the run", "job", j.name, "slot", slot, "token", l.token, "status", res.Status)
		if res.Error == "" {
			res.Error = fmt.Sprintf("superseded (handler returned %s after losing its lease)", res.Status)
		} else {
			res.Error = fmt.Sprintf("superseded (handler returned %s after losing its lease): %s", res.Status, res.Error)
		}
		res.Status = StatusSuperseded
	default:
		s.backendError(j, slot, "finish", err)
	}
	return res
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

// heartbeat extends the lease every lease/3 until done. When the store says the lease
// is lost, or no heartbeat has succeeded for a whole lease, it cancels the handler.
func (s *Scheduler) heartbeat(j *job, slot time.Time, l *lease, done <-chan struct{}, cancel context.CancelCauseFunc) {
	every := l.dur / 3
	lastOK := s.clock.Now()
	for {
		t := s.clock.NewTimer(every)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C():
		}
		ctx, cc := context.WithTimeout(context.Background(), every)
		err := s.runs.Heartbeat(ctx, j.name, slot, l.token, l.dur)
		cc()
		now := s.clock.Now()
		switch {
		case err == nil:
			lastOK = now
			continue
		case errors.Is(err, ErrLeaseLost):
			err = fmt.Errorf("%w: job %q slot %s: %w", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), err)
		default:
			s.backendError(j, slot, "heartbeat", err)
			if now.Sub(lastOK) < l.dur {
				continue
			}
			err = fmt.Errorf("%w: job %q slot %s: no heartbeat succeeded for %v (last error: %w)", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), now.Sub(lastOK), err)
		}
		s.log.Warn("lease lost; cancelling the handler", "job", j.name, "slot", slot, "err", err)
		s.emit(Event{Kind: EventLeaseLost, Job: j.name, Slot: slot, Token: l.token, Err: err})
		cancel(err)
		return
	}
}
