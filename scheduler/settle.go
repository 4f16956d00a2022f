package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// settle ends a lease after the handler returned: a run cancelled by Stop, or one
// that lost its lease before finishing, is released so a backup takes over at once
// (a run a later slot asked to end, or of an entry removed meanwhile, is finished);
// anything else is finished, which fails for a holder that was replaced (its result
// is then stored as superseded). Finish is repeat-safe for the holder, so one that
// gets no answer is sent again while the heartbeats keep the lease alive: a lost
// Finish must not let the lease expire under a run that succeeded, or a backup would
// run the slot again. It is tried until an answer, or until the store would have
// forgotten the run, or, once Stop has begun, once; then it is left to the
// outbox, which Stop drains.
//
// A failed attempt the job retries (retry) stores its retry in place of its
// Finish, the same way. Each try asks for what is left of the planned window by
// this instance's clock, so a Retry sent again late never moves the retry past
// the next slot; once the window has passed, or when the outbox has to take
// over, the attempt is finished instead, and not retried.
func (s *Scheduler) settle(a *slotAttempt, res execResult, plan retryPlan, retry bool) (execResult, bool) {
	j, slot, l := a.j, a.in.Slot, a.l
	// A run of an entry removed meanwhile is finished, not handed over: no
	// instance follows the entry any more to take it.
	handOver := res.Status == StatusLost || res.Status == StatusCancelled && !s.entryRemoved(j)
	if !l.manual && !res.ended && handOver {
		s.release(j, slot, l.token)
		return res, false
	}
	finish := func(ctx context.Context) error { return s.runs.Finish(ctx, a.key(), res.Status) }
	end := finish
	rt, ok := s.runs.(backend.Retrier)
	retry = ok && retry && !l.manual
	by := plan.at.Add(plan.within)
	giveUp := s.clock.Now().Add(j.keep())
	hard, stopping := s.hardCtx.Done(), s.loopCtx.Done() // either ends a retry's wait
	for attempt := 0; ; attempt++ {
		if retry {
			now := s.clock.Now()
			if now.Before(by) {
				delay := max(plan.at.Sub(now), 0)
				end = func(ctx context.Context) error { return rt.Retry(ctx, a.key(), delay, by.Sub(now.Add(delay))) }
			} else {
				s.log.Warn("retry not stored in time: the failure stands", j.logAttr(), "slot", slot, "attempt", a.in.Attempt)
				retry, end = false, finish
			}
		}
		ctx, cancel := s.callCtx(context.Background())
		err := end(ctx)
		cancel()
		switch {
		case err == nil:
			res.retry, res.retried = plan, retry
			return res, false
		case errors.Is(err, backend.ErrStaleToken), errors.Is(err, ErrLeaseLost):
			s.log.Warn("result superseded: another attempt holds the run", j.logAttr(), "slot", slot, "token", l.token, "status", res.Status)
			return superseded(res), false
		}
		s.backendError(j, slot, "finish", err)
		if errors.Is(err, backend.ErrInvalidClaim) {
			return res, false
		}
		if s.clock.Now().After(giveUp) || s.loopCtx.Err() != nil {
			// The outbox goes on, during Stop's drain too (a holder's Finish is
			// accepted after its lease expired while nobody took the run over),
			// and stores the result once the Finish is answered, superseded if
			// another attempt took the run over meanwhile: a manual run has no
			// other taker, and a scheduled one is then not run again by a backup.
			s.settleLater(a, res)
			return res, true
		}
		t := s.clock.NewTimer(retryDelay(attempt))
		select {
		case <-t.C():
		case <-hard:
			t.Stop()
			hard = nil
		case <-stopping:
			t.Stop()
			stopping = nil
		}
	}
}

// superseded is res, the result of a holder whose run another attempt took over.
func superseded(res execResult) execResult {
	if res.Error == "" {
		res.Error = fmt.Sprintf("superseded (handler returned %s after losing its lease)", res.Status)
	} else {
		res.Error = fmt.Sprintf("superseded (handler returned %s after losing its lease): %s", res.Status, res.Error)
	}
	res.Status = StatusSuperseded
	return res
}

// settleLater leaves a run's Finish to the outbox, and its result after it: the
// result says superseded when the Finish finds another attempt holding the run.
func (s *Scheduler) settleLater(a *slotAttempt, res execResult) {
	s.finishThenRecord(a.j, a.key(), res.Status, false, func(stale bool) (backend.StoredResult, backend.Retention, bool) {
		if stale {
			res = superseded(res)
		}
		r, keep := s.result(a, res)
		return r, keep, true
	})
}

// finishThenRecord finishes key's run with status, then stores the record that
// record makes of it (none when it returns false), sending both again from the
// outbox until stored; stale tells record that another attempt holds the run. Now
// is false for a caller whose own tries just failed: straight to the outbox.
func (s *Scheduler) finishThenRecord(j *job, key backend.RunKey, status Status, now bool, record func(stale bool) (backend.StoredResult, backend.Retention, bool)) {
	finished, stale := false, false // the outbox sends it again, one try at a time
	write := func(ctx context.Context) error {
		if !finished {
			err := s.runs.Finish(ctx, key, status)
			switch {
			case errors.Is(err, backend.ErrStaleToken), errors.Is(err, ErrLeaseLost):
				stale = true
			case err != nil:
				return err
			}
			finished = true
		}
		r, keep, ok := record(stale)
		if !ok {
			return nil
		}
		if err := s.backend.SaveResult(ctx, j.name, r, keep); err != nil {
			return &failedOp{op: "save_result", err: err}
		}
		return nil
	}
	if now {
		s.complete(j, key.Slot, "finish", time.Time{}, write)
	} else {
		s.later(j, key.Slot, "finish", time.Time{}, write)
	}
}

// finishLater finishes key's run with status, and sends the Finish again from the
// outbox until the store answers: a holder's Finish is accepted also after its
// lease expired, as long as nobody took the run over (who then ends it).
func (s *Scheduler) finishLater(j *job, key backend.RunKey, status Status) {
	s.finishThenRecord(j, key, status, true, func(bool) (backend.StoredResult, backend.Retention, bool) {
		return backend.StoredResult{}, backend.Retention{}, false
	})
}

// claimedElsewhere settles a won lease whose slot an instance without leases ran:
// the run is finished (as skipped here; that instance records how it ended), so no
// backup takes it over.
func (s *Scheduler) claimedElsewhere(a *slotAttempt, err error) {
	j, slot, l := a.j, a.in.Slot, a.l
	s.log.Warn("slot claimed by an instance without leases; not running it", j.logAttr(), "slot", slot, "err", err)
	s.emit(Event{Kind: EventLost, Job: j.name, Slot: slot, Token: l.token, Outcome: backend.OutcomeDone, Err: err})
	ctx, cancel := s.callCtx(context.Background())
	defer cancel()
	if err := s.runs.Finish(ctx, a.key(), StatusSkipped); err != nil {
		s.backendError(j, slot, "finish", err)
	}
}
