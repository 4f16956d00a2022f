package scheduler

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
)

// RunNow runs the job at once on this instance, recorded as a manual run (never
// de-duplicated), and returns its record. The scheduler must be started. The handler's
// context carries ctx's values; it is cancelled when ctx is done, and by Stop like
// any other handler.
//
// A manual run is refused, with nothing run, while WithMaxManualRuns manual runs of
// the job are in progress on this instance (ErrTooManyManualRuns). On a backend
// with leases it holds a lease like any run (see Active), and a job that forbids
// overlap refuses it while another of its runs, on any instance, holds a lease
// (ErrJobBusy). A job whose overlap policy is OverlapCancelOther asks the run in
// progress to end instead, and RunNow waits for it to end (for as long as ctx
// allows) before its run starts; the request stands when ctx ends first. OnStart tells the caller when the run has been recorded and its
// handler starts; an error returned before that ran nothing.
func (s *Scheduler) RunNow(ctx context.Context, name string, opts ...RunNowOption) (RunRecord, error) {
	var o runNowConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if !utf8.ValidString(o.by) || len(o.by) > MaxPauseText {
		return RunRecord{}, fmt.Errorf("%w: RequestedBy must be valid UTF-8 of at most %d bytes", ErrInvalidOption, MaxPauseText)
	}
	s.mu.Lock()
	j, ok := s.jobs[name]
	state := s.state
	if ok && state == stateStarted {
		s.handlers.Add(1) // under the lock that Stop changes the state under
	}
	s.mu.Unlock()
	if !ok {
		return RunRecord{}, fmt.Errorf("%w: %q", ErrJobNotFound, name)
	}
	switch state {
	case stateNew, stateStarting:
		return RunRecord{}, fmt.Errorf("run %q now: %w: call Start first", name, ErrNotStarted)
	case stateStopped:
		return RunRecord{}, fmt.Errorf("run %q now: %w: the scheduler was stopped", name, ErrNotStarted)
	}
	defer s.handlers.Done()
	if n := j.manual.Add(1); int(n) > j.cfg.maxManual {
		j.manual.Add(-1)
		return RunRecord{}, fmt.Errorf("run %q now: %w: %d in progress on %s, at most %d (WithMaxManualRuns)",
			name, ErrTooManyManualRuns, n-1, s.instance, j.cfg.maxManual)
	}
	defer j.manual.Add(-1)
	now := s.clock.Now()
	in := s.claimInput(j, time.UnixMilli(now.UnixMilli()).UTC(), 1)
	in.Manual, in.RequestedBy = true, o.by
	var l *lease
	var fence uint64
	var rc backend.RunClaim
	if s.runs != nil {
		var res backend.ClaimResult
		var sent time.Time
		var err error
		rc, res, sent, err = s.claimManual(ctx, j, &in, o.onBuffered)
		if err != nil {
			return RunRecord{}, err
		}
		l, fence = &lease{token: in.Token, dur: j.cfg.lease, sent: sent, manual: true}, res.Fence
		in.At = s.clock.Now()
	}
	cctx, cancel := s.callCtx(ctx)
	slot, err := s.backend.RecordManualRun(cctx, in)
	cancel()
	if err != nil {
		s.backendError(j, in.Slot, "record_manual_run", err)
		if l != nil {
			s.endUnrun(j, rc)
		}
		return RunRecord{}, fmt.Errorf("scheduler: run %q now: %w", name, err)
	}
	if !slot.IsZero() && l == nil {
		in.Slot = slot // a leased run keeps the slot of its lease
	}
	a := &slotAttempt{j: j, in: in, fence: fence, l: l}
	if l != nil && !s.freshLease(a) {
		s.endUnrun(j, rc)
		s.save(a, execResult{Status: StatusCancelled, FinishedAt: s.clock.Now(), Error: "its lease was won too late to run under it: not run"})
		return RunRecord{}, fmt.Errorf("scheduler: run %q now: %w: the lease was won too late to run under it", name, ErrLeaseLost)
	}
	// The handler's context carries the caller's values (a trigger's trace
	// context, say) and ends with the caller's or with a hard stop.
	hctx, hcancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hcancel(nil)
	defer context.AfterFunc(s.hardCtx, func() { hcancel(context.Cause(s.hardCtx)) })()
	defer context.AfterFunc(ctx, func() { hcancel(context.Cause(ctx)) })()
	if o.onStart != nil {
		o.onStart(Run{Job: name, Slot: in.Slot, Instance: s.instance, Token: in.Token, Fence: fence, Attempt: 1, Manual: true})
	}
	res := s.execute(hctx, a)
	return RunRecord{
		Job: name, Slot: in.Slot, Instance: s.instance, Token: in.Token, Attempt: 1, Manual: true, RequestedBy: o.by,
		Status: res.Status, ClaimedAt: in.At, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt,
		Duration: res.FinishedAt.Sub(res.StartedAt), Error: res.Error, Fence: fence,
	}, nil
}

// History returns the job's recent runs on every instance, newest first. On a
// started scheduler, a record of a job it declares that is left running by an
// attempt that can no longer end it (its instance died before storing the result)
// is ended from what the run store knows, and that ending stored: see repair.go.
func (s *Scheduler) History(ctx context.Context, name string, limit int) ([]RunRecord, error) {
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	recs, err := s.backend.History(cctx, name, limit)
	if err != nil {
		return nil, fmt.Errorf("scheduler: history of %q: %w", name, err)
	}
	if j, err := s.declared(name); err == nil {
		s.repair(cctx, j, recs)
	}
	return recs, nil
}

// RunNowOption changes one RunNow call.
type RunNowOption func(*runNowConfig)

type runNowConfig struct {
	by         string
	onStart    func(Run)
	onBuffered func(Run)
}

// RequestedBy records who asked for the run (a user, a service, a CLI) with the
// manual run in history.
func RequestedBy(who string) RunNowOption { return func(c *runNowConfig) { c.by = who } }

// OnStart calls fn once the manual run is recorded, just before its handler starts,
// from RunNow's goroutine: a caller that answers "accepted" from fn tells the truth,
// as an error RunNow returns without having called fn means nothing ran. fn must
// return quickly.
func OnStart(fn func(Run)) RunNowOption { return func(c *runNowConfig) { c.onStart = fn } }

// OnBuffered calls fn once, from RunNow's goroutine, when the manual run is
// stored buffered behind the job's run in progress (a buffer overlap policy) and
// waits for it to end: the run starts later (OnStart), or, if ctx ends first, is
// withdrawn. Run names the buffered slot and its token; Attempt is 0. A caller
// that answers from fn tells the truth: nothing has run yet, and the slot is
// stored. fn must return quickly.
func OnBuffered(fn func(Run)) RunNowOption { return func(c *runNowConfig) { c.onBuffered = fn } }
