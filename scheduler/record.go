package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// decidePaused finishes a won lease's slot paused and records it so: not run.
// When the store cannot be told while the lease is ours, the outbox keeps telling
// it and writes the record once it has (a backup that took the slot over meanwhile
// decides it itself, and this instance records nothing).
func (s *Scheduler) decidePaused(j *job, c *leaseClaim, attempt int, l *lease, p Pause) {
	s.decideNotRun(j, c, attempt, l, StatusPaused, pausedWhy(p))
}

// decideNotRun finishes a won lease's slot with status, not run, and records it
// so with why, as decidePaused does.
func (s *Scheduler) decideNotRun(j *job, c *leaseClaim, attempt int, l *lease, status Status, why string) {
	if s.finishDecided(j, c, attempt, l, status) {
		s.recordNotRun(j, c.Slot, c.Token, attempt, c.backfill(), status, why)
		return
	}
	emitted := false
	s.finishThenRecord(j, c.Key(), status, true, func(stale bool) (backend.StoredResult, backend.Retention, bool) {
		if stale {
			return backend.StoredResult{}, backend.Retention{}, false // another attempt holds the slot: it decides
		}
		if !emitted {
			emitted = true
			s.emitNotRun(j, c.Slot, c.Token, c.backfill(), status)
		}
		r, keep := s.notRunRecord(j, c.Slot, c.Token, attempt, c.backfill(), status, why)
		return r, keep, true
	})
}

// finishDecided stores a won lease's run finished with a status that is a decision
// (paused): the decision is stored before anyone acts on it, so a failed Finish is
// sent again while the lease is ours. It reports whether it was stored (asking the
// store once more when the answers were lost).
func (s *Scheduler) finishDecided(j *job, c *leaseClaim, attempt int, l *lease, status Status) bool {
	until := l.sent.Add(l.dur - leaseMargin(l.dur))
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), min(s.callTO, max(until.Sub(s.clock.Now()), 0)))
		err := s.runs.Finish(ctx, backend.RunKey{Job: j.name, Slot: c.Slot, Token: l.token}, status)
		cancel()
		switch {
		case err == nil:
			return true
		case errors.Is(err, backend.ErrStaleToken), errors.Is(err, ErrLeaseLost):
			return false // another attempt holds the slot: it decides
		}
		s.backendError(j, c.Slot, "finish", err)
		next := s.clock.Now().Add(retryDelay(try))
		if errors.Is(err, backend.ErrInvalidClaim) || !next.Before(until) || !s.sleepUntil(s.hardCtx, next) {
			break
		}
	}
	// A Finish whose answer was lost may have been stored: the store says.
	return s.storedAs(j, c, attempt, status)
}

// storedAs reports whether the store holds c's slot finished with status by
// attempt, asking without taking anything: only a slot no longer unfinished
// (Active) is asked for with a takeover-only claim, which then creates nothing.
func (s *Scheduler) storedAs(j *job, c *leaseClaim, attempt int, status Status) bool {
	ctx, cancel := s.callCtx(context.Background())
	defer cancel()
	active, err := s.runs.Active(ctx, j.name)
	if err != nil {
		return false
	}
	for _, a := range active {
		if a.Slot.Equal(c.Slot) {
			return false
		}
	}
	rc := c.RunClaim
	rc.Token, rc.TakeoverOnly = newToken(), true
	// A probe reopens nothing: a catch-up's or a backfill's claim would take the
	// very slot it asks about, and leave it unfinished.
	rc.ReopenPaused, rc.Backfill, rc.Rerun = false, false, false
	res, err := s.runs.Claim(ctx, rc)
	if err == nil && res.Outcome == backend.OutcomeWon {
		s.release(j, c.Slot, rc.Token) // unfinished again since Active: not ours to take
	}
	return err == nil && res.Outcome == backend.OutcomeDone && res.Status == status && res.Attempt == attempt
}

// recordPaused stores the history record of a slot decided paused: not run.
func (s *Scheduler) recordPaused(j *job, slot time.Time, token string, attempt int, backfill bool, p Pause) {
	s.recordNotRun(j, slot, token, attempt, backfill, StatusPaused, pausedWhy(p))
}

// recordNotRun stores the history record of a slot decided status (paused, or
// cancelled as its entry was removed) with why: not run.
func (s *Scheduler) recordNotRun(j *job, slot time.Time, token string, attempt int, backfill bool, status Status, why string) {
	in := s.claimInput(j, slot, max(attempt, 1))
	in.Token, in.Backfill = token, backfill
	s.save(&slotAttempt{j: j, in: in}, execResult{Status: status, FinishedAt: s.clock.Now(), Error: why})
	s.emitNotRun(j, slot, token, backfill, status)
}

// emitNotRun reports a slot decided paused (EventPaused); a slot cancelled before
// it started has no event of its own (the log says it).
func (s *Scheduler) emitNotRun(j *job, slot time.Time, token string, backfill bool, status Status) {
	if status == StatusPaused {
		s.emit(Event{Kind: EventPaused, Job: j.name, Slot: slot, Token: token, Status: status, Backfill: backfill})
	}
}

// notRunRecord is the history record of a slot decided status with why (not
// run), and the job's retention.
func (s *Scheduler) notRunRecord(j *job, slot time.Time, token string, attempt int, backfill bool, status Status, why string) (backend.StoredResult, backend.Retention) {
	return backend.StoredResult{Slot: slot, Token: token, Instance: s.instance, Attempt: max(attempt, 1), Backfill: backfill, Status: status,
		FinishedAt: s.clock.Now(), Error: backend.TruncateText(why, MaxErrorText)}, backend.Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL}
}

// pausedWhy says which pause held a slot.
func pausedWhy(p Pause) string {
	why := "job paused"
	if p.Job == "" {
		why = "all jobs paused"
	}
	return why + " by " + p.By + ": " + p.Reason
}

// noteLost records, beside the run, that the attempt a takeover (res) took over from
// ended unfinished.
func (s *Scheduler) noteLost(j *job, slot time.Time, res backend.ClaimResult) {
	if res.PreviousToken == "" {
		return
	}
	prev := backend.ClaimInput{Slot: slot, Token: res.PreviousToken, Instance: res.Previous, Attempt: res.PreviousAttempt}
	s.beside(func() {
		s.save(&slotAttempt{j: j, in: prev}, execResult{Status: StatusLost, FinishedAt: s.clock.Now(), Error: "lease expired or released before the run finished; taken over by " + s.instance})
	})
}

// recordOnce stores a result for a slot that did not run (skipped, late) from exactly
// one instance: the backend's claim picks which. Both writes are repeat-safe, and
// they are written again from the outbox until stored.
func (s *Scheduler) recordOnce(j *job, slot time.Time, status Status, why string) {
	in := s.claimInput(j, slot, 1)
	r := backend.StoredResult{Slot: slot, Token: in.Token, Instance: s.instance, Attempt: 1, Status: status,
		FinishedAt: s.clock.Now(), Error: backend.TruncateText(why, MaxErrorText)}
	keep := backend.Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL}
	// Not under the loops' context: a decision already stored is recorded even
	// while Stop is stopping the loops (Stop waits for it, and drains the outbox).
	s.complete(j, slot, "claim", keep.Until(r.FinishedAt), func(ctx context.Context) error {
		won, err := s.backend.Claim(ctx, in)
		if err != nil || !won {
			return err
		}
		if err := s.backend.SaveResult(ctx, j.name, r, keep); err != nil {
			return &failedOp{op: "save_result", err: err}
		}
		return nil
	})
}

// save stores the result of a's attempt that ended so, through the outbox.
func (s *Scheduler) save(a *slotAttempt, res execResult) {
	r, keep := s.result(a, res)
	s.complete(a.j, a.in.Slot, "save_result", keep.Until(r.FinishedAt), func(ctx context.Context) error {
		return s.backend.SaveResult(ctx, a.j.name, r, keep)
	})
}

// result is the stored result of a's attempt that ended so, and the job's
// retention.
func (s *Scheduler) result(a *slotAttempt, res execResult) (backend.StoredResult, backend.Retention) {
	j, in := a.j, a.in
	instance := in.Instance
	if instance == "" {
		instance = s.instance
	}
	return backend.StoredResult{
		Slot: in.Slot, Token: in.Token, Instance: instance, Attempt: max(in.Attempt, 1), Manual: in.Manual, Backfill: in.Backfill,
		Status: res.Status, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt, Error: backend.TruncateText(res.Error, MaxErrorText), Fence: a.fence,
	}, backend.Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL}
}
