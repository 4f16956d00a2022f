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
}

// execute runs the handler for a won claim, keeps its lease alive until the lease is
// settled (so a slow Finish cannot let it expire under a finished run), settles it
// and stores the result.
func (s *Scheduler) execute(parent context.Context, j *job, in backend.ClaimInput, fence uint64, l *lease) execResult {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if j.cfg.timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, j.cfg.timeout, fmt.Errorf("%w after %v", ErrHandlerTimeout, j.cfg.timeout))
		defer stop()
	}
	// The heartbeats end, a call in flight included, once the lease is settled.
	hbCtx, hbDone := context.WithCancel(context.Background())
	hbStopped := make(chan struct{})
	var settling atomic.Bool
	if l != nil {
		go func() {
			defer close(hbStopped)
			s.heartbeat(hbCtx, j, in.Slot, l, &settling, cancel)
		}()
	} else {
		close(hbStopped)
	}
	stopHeartbeat := func() {
		hbDone()
		<-hbStopped
	}

	run := Run{Job: j.name, Slot: in.Slot, Instance: s.instance, Token: in.Token, Fence: fence, Attempt: max(in.Attempt, 1), Manual: in.Manual}
	if l != nil {
		run.Previous = l.previous
	}
	started := s.clock.Now()
	s.emit(Event{Kind: EventStarted, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Lag: started.Sub(in.Slot)})
	err := s.callHandler(ctx, j.handler, run)
	finished := s.clock.Now()
	settling.Store(true)

	res := execResult{Status: StatusOK, StartedAt: started, FinishedAt: finished}
	cause := context.Cause(ctx)
	if err != nil {
		res.Error = backend.TruncateText(err.Error(), MaxErrorText)
		switch {
		case errors.Is(err, ErrHandlerPanic):
			res.Status = StatusError
		case errors.Is(cause, ErrLeaseLost):
			res.Status = StatusLost
		case errors.Is(cause, ErrHandlerTimeout):
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

	deferred := false
	if l != nil {
		res, deferred = s.settle(j, in, fence, l, res)
	}
	res.Error = backend.TruncateText(res.Error, MaxErrorText)
	stopHeartbeat()
	if !deferred { // else the outbox stores it once the Finish is answered
		s.save(j, in, fence, res)
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
	s.emit(Event{Kind: EventFinished, Job: j.name, Slot: in.Slot, Token: in.Token, Attempt: run.Attempt, Manual: in.Manual, Status: res.Status, Duration: finished.Sub(started), Err: evErr})
	return res
}

// logFailure logs a run that failed on its own, a handler's error or its timeout,
// at warn level; a panic is logged at error level, with its stack, by
// callHandler. A lost lease and a superseded result are logged where they are
// found, a cancellation by Stop is not a failure.
func (s *Scheduler) logFailure(run Run, res execResult, err error) {
	if (res.Status != StatusError && res.Status != StatusTimeout) || errors.Is(err, ErrHandlerPanic) {
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

func (s *Scheduler) save(j *job, in backend.ClaimInput, fence uint64, res execResult) {
	r, keep := s.result(j, in, fence, res)
	s.complete(j, in.Slot, "save_result", keep.Until(r.FinishedAt), func(ctx context.Context) error {
		return s.backend.SaveResult(ctx, j.name, r, keep)
	})
}

// result is the stored result of in's attempt that ended so, and the job's
// retention.
func (s *Scheduler) result(j *job, in backend.ClaimInput, fence uint64, res execResult) (backend.StoredResult, backend.Retention) {
	instance := in.Instance
	if instance == "" {
		instance = s.instance
	}
	return backend.StoredResult{
		Slot: in.Slot, Token: in.Token, Instance: instance, Attempt: max(in.Attempt, 1), Manual: in.Manual,
		Status: res.Status, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt, Error: backend.TruncateText(res.Error, MaxErrorText), Fence: fence,
	}, backend.Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL}
}
