package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// drive claims a's slot and follows each answer until the slot needs nothing
// more of this instance. A won attempt runs (run.go); one that ended unfinished
// (its lease lost, its retry stored) is stood by for again with a new token.
// Scheduled, catch-up, adopted, backfilled, retried and entry slots all pass
// here, and RunNow's through manual.go.
func (s *Scheduler) drive(a *attempt) {
	for {
		res, err := s.decide(a)
		if err != nil {
			a.bf.notRun(err)
			return
		}
		if res.Outcome != backend.OutcomeWon {
			s.follow(a, res)
			return
		}
		if !s.run(a) {
			return
		}
		a.again()
	}
}

// decide asks for a's slot until the answer is not a wait: it stands by while
// another attempt holds the run, its retry is not due, or it is buffered.
func (s *Scheduler) decide(a *attempt) (backend.ClaimResult, error) {
	standing := false
	for {
		if a.j.gone.Err() != nil && a.man == nil {
			return backend.ClaimResult{}, fmt.Errorf("%w: %q was removed from this instance", ErrJobNotFound, a.j.name)
		}
		res, err := s.ask(a)
		if err == nil {
			s.noteLimit(a, res)
		}
		if err != nil || !waits(res.Outcome) || a.man.taken(a, res) {
			return res, err
		}
		a.man.buffered(a, res)
		if !standing {
			standing = true
			s.emit(Event{Kind: EventStandby, Job: a.j.name, Slot: a.rc.Slot, Token: a.rc.Token, Outcome: res.Outcome, Attempt: res.Attempt,
				Manual: a.man != nil, Backfill: a.backfill()})
		}
		if !res.WaitsFor.IsZero() && res.Outcome == backend.OutcomeRunning {
			a.rc.LateWhy = "the run of slot " + res.WaitsFor.UTC().Format(time.RFC3339Nano) +
				" that it asked to end (overlap policy cancel-other) had not ended by the slot's deadline"
		}
		if err := s.standby(a, res); err != nil {
			return res, err
		}
	}
}

// waits reports whether a claim answered o stands by: another token holds the
// lease, the slot's retry is not due yet, or the slot is buffered.
func waits(o backend.ClaimOutcome) bool {
	return o == backend.OutcomeRunning || o == backend.OutcomeRetry || o == backend.OutcomeBuffered
}

// ask sends a's claim until the store answers. It asks again with the same
// token (a claim is repeat-safe) for as long as the store still remembers the
// slot, counted from its last answer. A token whose unanswered claim may have
// won a lease that has ended since is replaced by a new one.
func (s *Scheduler) ask(a *attempt) (backend.ClaimResult, error) {
	ctx, cancel := s.jobCtx(a.j)
	defer cancel()
	if a.man != nil {
		defer context.AfterFunc(a.man.ctx, cancel)()
	}
	for try := 0; ; try++ {
		if a.j.entry != nil && !a.rc.TakeoverOnly {
			if err := s.entryViewHolds(ctx, a.j, a.rc.Slot, a.deadline); err != nil {
				return backend.ClaimResult{}, fmt.Errorf("scheduler: claim of %q: %w", a.j.name, err)
			}
		}
		sent := s.clock.Now()
		if s.store.leased() && !a.unanswered.IsZero() && !sent.Before(a.unanswered.Add(a.rc.Lease)) {
			a.rc.Token, a.unanswered = newToken(), time.Time{}
		}
		s.prepare(a, sent)
		cctx, cc := s.callCtx(ctx)
		res, err := s.store.claim(cctx, a)
		cc()
		if err == nil {
			from := sent
			if !a.unanswered.IsZero() {
				from = a.unanswered
			}
			a.answered, a.unanswered, a.res = s.clock.Now(), time.Time{}, res
			a.l = lease{dur: a.rc.Lease, sent: from, previous: res.Previous}
			s.payOwed(a.j)
			return res, nil
		}
		if a.unanswered.IsZero() {
			a.unanswered = sent
		}
		a.sendFailed = true
		if ctx.Err() != nil { // stopping, the job removed here, or RunNow's caller gone
			if res, won := s.askedLast(a); won {
				return res, nil
			}
			return backend.ClaimResult{}, fmt.Errorf("scheduler: claim of %q: %w", a.j.name, a.cause(ctx))
		}
		s.backendError(a.j, a.rc.Slot, "claim", err)
		if s.giveUp(a, err) {
			return backend.ClaimResult{}, err
		}
		if !s.sleepUntil(ctx, s.clock.Now().Add(retryDelay(try))) {
			if res, won := s.askedLast(a); won {
				return res, nil
			}
			return backend.ClaimResult{}, err
		}
		if s.giveUp(a, err) { // the store may have forgotten the slot meanwhile
			return backend.ClaimResult{}, err
		}
	}
}

// giveUp reports whether a's claim, failing with err, is given up: the store
// would have forgotten the slot since it last answered, or RunNow's lease would
// be too old to run under.
func (s *Scheduler) giveUp(a *attempt, err error) bool {
	now := s.clock.Now()
	if a.man != nil && s.store.leased() {
		if now.Before(a.unanswered.Add(a.rc.Lease / 3)) {
			return false
		}
		s.abandon(a, "its claim's answer was lost")
		return true
	}
	from := a.rc.Slot
	if a.answered.After(from) {
		from = a.answered
	}
	// The store's clock may be ahead of this instance's by the allowance (at
	// most a quarter of the keep: an allowance larger than the keep would give
	// every claim up at its first failure).
	if !now.After(from.Add(a.rc.Keep - min(s.maxSkew, a.rc.Keep/4))) {
		return false
	}
	if a.kind != claimAdopt {
		s.emit(Event{Kind: EventLate, Job: a.j.name, Slot: a.rc.Slot, Token: a.rc.Token, Outcome: backend.OutcomeLate, Backfill: a.backfill(), Err: err})
	}
	if a.kind == claimScheduled {
		a.j.owe(a.rc.Slot)
	}
	return true
}

// askedLast asks once more, with the same token, for a claim cut short after a
// send whose answer never came. Stop, the job's removal or RunNow's caller cut
// it short. A lease the store gave it is followed like any other (Stop waits for
// the handler). A RunNow's lease is ended unrun, since its caller is gone.
func (s *Scheduler) askedLast(a *attempt) (backend.ClaimResult, bool) {
	if a.unanswered.IsZero() {
		return backend.ClaimResult{}, false
	}
	a.rc.TakeoverOnly = true
	ctx, cancel := s.writeCtx()
	res, err := s.store.claim(ctx, a)
	cancel()
	if err != nil || res.Outcome != backend.OutcomeWon {
		return res, false
	}
	a.res = res
	a.l = lease{dur: a.rc.Lease, sent: a.unanswered, previous: res.Previous}
	if a.man != nil {
		s.abandon(a, "its RunNow stopped waiting")
		return res, false
	}
	return res, true
}

// prepare sets what a's next claim asks, at now by this instance's clock.
func (s *Scheduler) prepare(a *attempt, now time.Time) {
	rc := &a.rc
	rc.Overlap = a.j.cfg.overlap
	if a.kind == claimBackfill && (rc.Overlap == OverlapCancelOther || rc.Overlap.Buffers()) {
		rc.Overlap = OverlapSkip // a backfilled slot keeps out of another run's way
	}
	switch {
	case rc.TakeoverOnly:
		rc.Deadline = time.Time{}
	case a.kind == claimBackfill:
		// A backfilled slot may start now: waiting for another run does not
		// make it late.
		a.deadline = now.Add(a.j.cfg.maxLate)
		rc.Deadline = a.deadline.Add(s.maxSkew)
	case a.kind == claimManual:
		rc.Deadline = now.Add(s.maxSkew)
	case a.kind == claimMissed || now.After(a.deadline):
		rc.Deadline = lateDeadline
	default:
		rc.Deadline = a.deadline.Add(s.maxSkew)
	}
	// Its claims failed until past its deadline: cut off from the store, no
	// instance could claim the slot. (One sent late on its own is late.)
	rc.Missed = a.kind == claimMissed ||
		a.kind == claimScheduled && !rc.TakeoverOnly && a.answered.IsZero() && a.sendFailed && now.After(a.deadline)
	rc.PausedWhy = s.pausedWhy(a, now)
	rc.ExcludedWhy = s.excludedWhy(a)
	rc.ReopenPaused = a.kind == claimCatchUp && rc.PausedWhy == ""
	rc.Incarnation, rc.EntryGone = s.entryFacts(a.j)
	if a.kind == claimBackfill {
		rc.Rerun, rc.RerunAttempt = a.bf.rerun, a.bf.rerunAttempt
	}
}

// pausedWhy says why a's slot is not to run, as this instance sees it at now.
// That is a pause in force, a paused entry, or a pause that held the slot when
// it fell. The last does not stop catch-up and backfills, which run paused slots
// once the pause is over.
func (s *Scheduler) pausedWhy(a *attempt, now time.Time) string {
	if a.kind == claimManual {
		return ""
	}
	if p, paused := s.pauses.of(a.j.name, now); paused {
		return pausedWhy(p)
	}
	if a.kind != claimCatchUp && a.kind != claimBackfill {
		if p, held := s.pauses.heldAt(a.j.name, a.rc.Slot); held {
			return pausedWhy(p)
		}
	}
	if s.entryPaused(a.j) {
		return "the schedule entry is paused: not run"
	}
	return ""
}

// pausedWhy says which pause held a slot.
func pausedWhy(p Pause) string {
	why := "job paused"
	if p.Job == "" {
		why = "all jobs paused"
	}
	return why + " by " + p.By + ": " + p.Reason
}

// follow acts on an answer that is neither won nor a wait: the store stored the
// decision and its record; this instance reports it.
func (s *Scheduler) follow(a *attempt, res backend.ClaimResult) {
	j := a.j
	e := Event{Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Outcome: res.Outcome, Backfill: a.backfill()}
	switch res.Outcome {
	case backend.OutcomeOverlap:
		e.Kind = EventSkipped
		a.bf.decided(BackfillSkipped, StatusSkipped)
		if j.cfg.overlap.Buffers() {
			s.checkOrphan(j) // the buffer may be full of a RunNow that is gone
		}
	case backend.OutcomeLate:
		e.Kind = EventLate
		if res.Status == StatusMissed {
			e.Kind, e.Status, e.Count = EventMissed, StatusMissed, max(a.stands, 1)
		}
		a.bf.decided(BackfillLate, StatusLate)
	case backend.OutcomePaused:
		e.Kind, e.Status = EventPaused, StatusPaused
		a.bf.decided(BackfillPaused, StatusPaused)
	case backend.OutcomeExcluded:
		e.Kind, e.Status = EventExcluded, StatusExcluded
		a.bf.excluded(a.rc.ExcludedWhy)
	default: // limit, done, none, and outcomes this version does not know
		e.Kind = EventLost
		if res.Outcome == backend.OutcomeNone && a.rc.EntryGone {
			a.bf.notRun(errors.New("the schedule entry was removed"))
		} else {
			a.bf.elsewhere(res)
		}
		if a.retryMissed(res) {
			s.log.Warn("retry not run: nobody claimed it before its window closed", j.logAttr(), "slot", a.rc.Slot, "attempt", a.failed.attempt+1)
			s.finalFailure(a, a.failed.attempt, a.failed.err)
		}
	}
	s.emit(e)
}

// noteLimit ends a's job's loop on this instance when res says the job's run
// limit was reached. That is the win or buffering of the last counted slot, a
// slot this claim stored limit, or a loop's slot another instance stored limit.
func (s *Scheduler) noteLimit(a *attempt, res backend.ClaimResult) {
	j := a.j
	if a.rc.MaxRuns == 0 {
		return
	}
	switch {
	case res.LimitReached, res.Outcome == backend.OutcomeLimit:
	case res.Outcome == backend.OutcomeDone && res.Status == StatusLimit && a.kind == claimScheduled:
	default:
		return
	}
	if !j.limitHit.CompareAndSwap(false, true) {
		return
	}
	j.end()
	if s.turns != nil {
		s.turns.limitReached(j)
	}
	s.emit(Event{Kind: EventLimitReached, Job: j.name, Slot: a.rc.Slot, Token: a.rc.Token, Outcome: res.Outcome})
}

// standby waits as a backup after an answer res to wait, until claiming again
// may be answered otherwise: a stored retry's time, the store's watch of the run
// (or a poll). It returns an error once the wait is cut short (Stop, the job
// removed here, RunNow's caller gone).
func (s *Scheduler) standby(a *attempt, res backend.ClaimResult) error {
	if a.j.behindManual(res) {
		s.checkOrphan(a.j)
	}
	ctx, cancel := s.jobCtx(a.j)
	defer cancel()
	if a.man != nil {
		defer context.AfterFunc(a.man.ctx, cancel)()
	}
	if s.waitForChange(ctx, a, res) {
		return nil
	}
	why := "stand-by"
	switch {
	case res.Outcome == backend.OutcomeBuffered && !res.WaitsFor.IsZero():
		why = "buffered behind the run of slot " + res.WaitsFor.UTC().Format(time.RFC3339Nano)
	case !res.WaitsFor.IsZero():
		why = "waiting for the run of slot " + res.WaitsFor.UTC().Format(time.RFC3339Nano) + " it asked to end"
	}
	if a.man != nil && res.Outcome == backend.OutcomeBuffered {
		s.abandon(a, "its RunNow stopped waiting") // a buffered slot nobody claims would hold the job
	}
	return fmt.Errorf("%s: %w", why, a.cause(ctx))
}

// waitForChange waits, after a claim answered res, until claiming again may be
// answered otherwise. False once ctx ends.
func (s *Scheduler) waitForChange(ctx context.Context, a *attempt, res backend.ClaimResult) bool {
	j := a.j
	if res.Outcome == backend.OutcomeRetry {
		at := s.clock.Now().Add(res.RetryIn)
		if s.store.leased() { // a claim a moment early is answered retry again
			at = at.Add(retryMargin(j, a.rc.Slot, at))
		}
		return s.sleepUntil(ctx, at)
	}
	watcher, _ := s.runs.(backend.LeaseWatcher)
	poll := j.cfg.lease / 4
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var changed <-chan struct{}
	if watcher != nil {
		poll = j.cfg.lease / 2
		slot := a.rc.Slot
		if !res.WaitsFor.IsZero() {
			slot = res.WaitsFor // the run it waits for
		}
		ch, err := watcher.WatchRun(wctx, j.name, slot)
		if err != nil && wctx.Err() == nil {
			s.backendError(j, a.rc.Slot, "watch", err)
		}
		select {
		case <-ch:
			if !a.reclaimed {
				// The run it waits for ended, or its lease did, since the
				// answer: claim again, once.
				a.reclaimed = true
				return ctx.Err() == nil
			}
			if !res.WaitsFor.IsZero() {
				// Its lease ended, and the run still holds the job until it is
				// taken over or ended: look often, it is about to be.
				poll = min(poll, max(j.cfg.lease/10, 100*time.Millisecond))
			}
		default:
			a.reclaimed = false
			changed = ch
		}
	}
	t := s.clock.NewTimer(poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-changed:
	case <-t.C():
	}
	return ctx.Err() == nil
}

// retryClaimMargin is added to a stored retry's wait before claiming it, so that a
// claim rarely comes a moment too early.
const retryClaimMargin = 5 * time.Millisecond

// retryMargin is retryClaimMargin, or less for a retry due at at whose start
// window (at most the job's max lateness, closing at the next slot) is short.
func retryMargin(j *job, slot, at time.Time) time.Duration {
	window := j.cfg.maxLate
	if next := j.sched.Next(slot); !next.IsZero() && next.After(at) {
		window = min(window, next.Sub(at))
	}
	return max(min(retryClaimMargin, window/4), 0)
}

// keep is how long a finished run must be remembered so that any instance still
// allowed to claim it sees it as done.
func (j *job) keep() time.Duration {
	k := j.cfg.jitter + j.cfg.maxLate
	if j.cfg.catchUp != CatchUpNone {
		k = max(k, j.cfg.catchUpWindow)
	}
	k += j.cfg.lease + time.Minute
	if isOnce(j.sched) {
		// A one-time job's slot is remembered long: a redeploy that adds catch-up
		// must not find it forgotten and run it again.
		k = max(k, backend.DefaultRunKeep)
	}
	return k
}
