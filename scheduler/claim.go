package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// claimKind says why a slot is claimed through the run store.
type claimKind int

const (
	// claimScheduled: the loop's claim of a due slot (deadline slot + max lateness).
	claimScheduled claimKind = iota
	// claimCatchUp: a slot missed while no instance was up (deadline slot + catch-up
	// window).
	claimCatchUp
	// claimAdopt: an unfinished run found at Start; it may be taken over, never
	// created.
	claimAdopt
	// claimLate: a slot that may no longer start (past the catch-up cap); the claim
	// stores it late unless a decision is stored already.
	claimLate
	// claimBackfill: a past slot Backfill asks for; it may start now (deadline now
	// + max lateness) and may reopen a slot stored late, skipped or paused.
	claimBackfill
)

// lateDeadline is the deadline of a claim that may only store late: every store's
// clock is past it.
var lateDeadline = time.Unix(1, 0)

// leaseClaim is one token's claims of one slot, from the first to the last answer.
type leaseClaim struct {
	backend.RunClaim
	kind claimKind
	// localDeadline is when, by this instance's clock, the slot may no longer start.
	localDeadline time.Time
	// unanswered is when the first claim whose answer never came was sent (zero when
	// every claim was answered): the store may have applied it, so a lease won by a
	// later claim of the same token counts from then.
	unanswered time.Time
	// reclaimed says the last wait for the run named by WaitsFor found it ended
	// at once and claimed again without waiting.
	reclaimed bool
	// why explains a late record written by this claim.
	why string
	// bf is the backfill slot this claim reports to (nil unless Backfill asked
	// for the slot): its first claim, and the retries and takeovers this instance
	// stands by for after it.
	bf *backfillSlot
	// failed is this instance's attempt whose failure stored the retry this
	// claim stands by for; nil otherwise.
	failed *failedAttempt
}

// failedAttempt is an attempt that failed and stored its retry.
type failedAttempt struct {
	in     backend.ClaimInput
	status Status
	err    error
}

// retryMissed reports whether res, a done answer to c, says that nobody claimed
// the retry c's failed attempt stored before its window closed: the slot ended
// with that attempt's failure.
func (c *leaseClaim) retryMissed(res backend.ClaimResult) bool {
	return c.failed != nil && res.Outcome == backend.OutcomeDone && res.Status == StatusError && res.Attempt == c.failed.in.Attempt
}

// backfill reports whether the claim is of a slot Backfill asked for.
func (c *leaseClaim) backfill() bool { return c.bf != nil }

// handleLeased claims a slot through the run store and follows the stored decision:
// the winner runs it under a lease, the others stand by as backups and take over if
// the lease ends unfinished; skipped and late are recorded by the claimer that
// stored them.
func (s *Scheduler) handleLeased(j *job, slot time.Time, kind claimKind) {
	s.handleClaim(j, slot, kind, nil, nil)
}

// handleClaim is handleLeased for a claim that reports to bf when it is not nil
// (a backfill slot), and that stands by, when failed is not nil, for the retry
// this instance's failed attempt stored.
func (s *Scheduler) handleClaim(j *job, slot time.Time, kind claimKind, bf *backfillSlot, failed *failedAttempt) {
	c := &leaseClaim{
		RunClaim: backend.RunClaim{
			Job:       j.name,
			Slot:      slot,
			Token:     newToken(),
			Instance:  s.instance,
			Lease:     j.cfg.lease,
			Overlap:   j.cfg.overlap,
			BufferCap: j.cfg.bufferCap,
			MaxRuns:   j.cfg.maxRuns,
			Keep:      j.keep(),
		},
		kind:          kind,
		localDeadline: slot.Add(j.cfg.maxLate),
		why:           "nobody started the slot before its deadline",
		bf:            bf,
		failed:        failed,
	}
	switch kind {
	case claimCatchUp:
		c.localDeadline = slot.Add(j.cfg.catchUpWindow)
		// Catch-up runs the slots paused in its window once the pause has ended.
		_, paused := s.pauses.of(j.name, s.clock.Now())
		c.ReopenPaused = !paused
	case claimAdopt:
		c.TakeoverOnly = true
		if j.manualAt(slot) {
			c.MaxRuns = 0 // a manual slot is not counted
		}
	case claimLate:
		c.localDeadline = lateDeadline
		c.why = "missed while no instance was up, past the catch-up limit of " + strconv.Itoa(MaxCatchUpSlots) + " slots per job"
	case claimBackfill:
		// A backfilled slot may start now, and runs once across the fleet: a
		// slot stored late, skipped or paused is reopened.
		c.localDeadline = s.clock.Now().Add(j.cfg.maxLate)
		c.Backfill, c.MaxRuns = true, 0 // a backfilled slot is not counted
		// A rerun takes the attempt its Backfill read in history, and only that
		// one: of two reruns asked at once, one runs the slot.
		c.Rerun, c.RerunAttempt = bf.rerun, bf.rerunAttempt
		c.why = "nobody started the backfilled slot before its deadline"
	}
	if j.gone.Err() != nil {
		c.bf.notRun(fmt.Errorf("%w: %q was removed from this instance", ErrJobNotFound, j.name))
		return
	}
	res, sent, err := s.claimAndWait(j, c)
	if err != nil {
		// Stopping, or the store stayed unreachable for as long as it matters.
		c.bf.notRun(err)
		return
	}
	s.act(j, c, res, sent)
}

// claimAndWait claims c's slot and, while another attempt holds it (or its retry
// is due later), stands by for it.
func (s *Scheduler) claimAndWait(j *job, c *leaseClaim) (backend.ClaimResult, time.Time, error) {
	res, sent, err := s.claimLease(j, c)
	if err != nil {
		return res, sent, err
	}
	if waits(res.Outcome) {
		s.emit(Event{Kind: EventStandby, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome, Attempt: res.Attempt, Backfill: c.backfill()})
		return s.standby(j, c, res)
	}
	return res, sent, nil
}

// act follows a claim's answer other than running: a won manual run's slot is
// ended (a manual run is not run again), a won slot of a paused job is finished
// paused, anything else is followed.
func (s *Scheduler) act(j *job, c *leaseClaim, res backend.ClaimResult, sent time.Time) {
	if res.Outcome == backend.OutcomeWon && j.manualAt(c.Slot) {
		s.endManual(j, c, res)
		return
	}
	if res.Outcome == backend.OutcomeWon {
		p, paused := s.pauses.of(j.name, s.clock.Now())
		if !paused && !res.Reopened && !c.backfill() {
			// A slot that fell while its job was paused, claimed only after the
			// pause ended (a takeover, a late claim), is a paused slot too; the
			// job's catch-up policy runs it, as a reopened slot, if it asks. A
			// backfill asks for it: only a pause in force holds it.
			p, paused = s.pauses.heldAt(j.name, c.Slot)
		}
		if paused {
			// The job is paused: every attempt the store grants, a takeover too,
			// is finished paused at once, not run (the attempt it took over from
			// ended unfinished).
			if res.Attempt > 1 && !res.Reopened && !res.Retried {
				s.noteLost(j, c.Slot, res)
			}
			s.decidePaused(j, c, res.Attempt, &lease{token: c.Token, dur: j.cfg.lease, sent: sent}, p)
			c.bf.decided(BackfillPaused, StatusPaused)
			return
		}
	}
	s.follow(j, c, res, sent)
}

// follow acts on a claim's answer, other than running.
func (s *Scheduler) follow(j *job, c *leaseClaim, res backend.ClaimResult, sent time.Time) {
	switch res.Outcome {
	case backend.OutcomeWon:
		s.runLeased(j, c, res, sent)
	case backend.OutcomeOverlap:
		s.emit(Event{Kind: EventSkipped, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome, Backfill: c.backfill()})
		why := "another slot of the job held its lease (overlap forbidden)"
		switch j.cfg.overlap {
		case OverlapCancelOther:
			why = "a later slot of the job held its lease (overlap policy cancel-other: an earlier slot never ends a later one)"
		case OverlapBufferOne, OverlapBufferAll:
			why = fmt.Sprintf("another slot of the job ran and %d were buffered already (overlap policy %s)", c.Buffers(), j.cfg.overlap)
		}
		s.recordOnce(j, c.Slot, StatusSkipped, why)
		c.bf.decided(BackfillSkipped, StatusSkipped)
		if j.cfg.overlap.Buffers() {
			s.checkOrphan(j) // the buffer may be full of a RunNow that is gone
		}
	case backend.OutcomeLimit:
		s.emit(Event{Kind: EventLost, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome})
		s.recordOnce(j, c.Slot, StatusLimit, fmt.Sprintf("the job's run limit of %d runs was reached", c.MaxRuns))
	case backend.OutcomeLate:
		s.emit(Event{Kind: EventLate, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome, Backfill: c.backfill()})
		s.recordOnce(j, c.Slot, StatusLate, c.why)
		c.bf.decided(BackfillLate, StatusLate)
	default: // done, none, and outcomes this version does not know
		s.emit(Event{Kind: EventLost, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome, Backfill: c.backfill()})
		c.bf.elsewhere(res)
		if c.retryMissed(res) {
			f := c.failed
			s.log.Warn("retry not run: nobody claimed it before its window closed", j.logAttr(), "slot", c.Slot, "attempt", f.in.Attempt+1)
			s.finalFailure(j, f.in, f.status, f.err)
		}
	}
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

// claimLease asks the run store, retrying errors with the same token (the claim is
// repeat-safe) until an answer comes or the scheduler stops. Lateness is judged on
// this instance's clock: once the slot's local deadline has passed, the claim asks
// the store to store the slot late unless a decision is stored already (a claim of
// this token applied earlier, whose answer was lost, is then answered won). The
// store itself refuses a first claim past the deadline plus the clock skew
// allowance, by its own clock. It gives up only when the store would have forgotten
// the slot anyway.
//
// It returns the answer and when the lease a won answer gives must be counted from:
// the send time of the first claim of this token left unanswered, if any, else of
// the claim answered.
func (s *Scheduler) claimLease(j *job, c *leaseClaim) (backend.ClaimResult, time.Time, error) {
	if c.kind == claimBackfill {
		// A backfilled slot may start now, whenever a backup's claim of it
		// comes: its wait for another run (overlap forbidden) does not make it late.
		c.localDeadline = s.clock.Now().Add(j.cfg.maxLate)
	}
	giveUp := c.localDeadline.Add(c.Keep)
	jctx, cancelJob := s.jobCtx(j)
	defer cancelJob()
	for attempt := 0; ; attempt++ {
		sent := s.clock.Now()
		rc := c.RunClaim
		rc.Overlap = s.overlapOf(j, c, sent)
		switch {
		case c.TakeoverOnly:
		case c.kind == claimLate || sent.After(c.localDeadline):
			rc.Deadline = lateDeadline
		default:
			rc.Deadline = c.localDeadline.Add(s.maxSkew)
		}
		ctx, cancel := s.callCtx(jctx)
		res, err := s.runs.Claim(ctx, rc)
		cancel()
		if err == nil {
			from := sent
			if !c.unanswered.IsZero() {
				from = c.unanswered
			}
			c.unanswered = time.Time{}
			s.noteLimit(j, c, res)
			return res, from, nil
		}
		if c.unanswered.IsZero() {
			c.unanswered = sent
		}
		if jctx.Err() != nil { // stopping, or the job was removed here
			return s.settleStopped(c, rc, err)
		}
		s.backendError(j, c.Slot, "claim", err)
		if s.clock.Now().After(giveUp) {
			if c.kind == claimAdopt {
				return backend.ClaimResult{}, sent, err
			}
			// The store has been unreachable for longer than it keeps a run: say
			// so, and record it if the backend can be reached.
			s.emit(Event{Kind: EventLate, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: backend.OutcomeLate, Err: err})
			s.recordOnce(j, c.Slot, StatusLate, "the run store gave no answer: "+err.Error())
			return backend.ClaimResult{}, sent, err
		}
		if !s.sleepUntil(jctx, s.clock.Now().Add(retryDelay(attempt))) {
			return backend.ClaimResult{}, sent, err
		}
	}
}

// overlapOf is the overlap policy c's claim asks for at now: the job's, except
// that under cancel-other and the buffer policies a slot claimed while the job is
// paused asks no run to end and is not buffered (it is won beside it and finished
// paused, never run), and a backfilled slot keeps out of another run's way as
// with OverlapSkip.
func (s *Scheduler) overlapOf(j *job, c *leaseClaim, now time.Time) backend.OverlapPolicy {
	if c.Overlap != OverlapCancelOther && !c.Overlap.Buffers() {
		return c.Overlap
	}
	if _, paused := s.pauses.of(j.name, now); paused {
		return OverlapAllow
	}
	if c.kind == claimBackfill {
		return OverlapSkip
	}
	return c.Overlap
}

// settleStopped answers a claim that Stop cut short (err): the store may have
// applied it, and a run stored for this token that nobody runs would stay
// unfinished until another instance adopts it. So it asks once more with the same
// token (repeat-safe) as a takeover-only claim, which creates nothing new and only
// completes or reports what this token's claims stored, bounded by the call timeout
// and not by the stopping loops. A won answer is followed like any other (the
// handler runs while Stop waits for handlers); anything else ends the claim.
func (s *Scheduler) settleStopped(c *leaseClaim, rc backend.RunClaim, err error) (backend.ClaimResult, time.Time, error) {
	rc.TakeoverOnly = true
	ctx, cancel := s.callCtx(context.Background())
	res, rerr := s.runs.Claim(ctx, rc)
	cancel()
	if rerr == nil && res.Outcome == backend.OutcomeWon {
		return res, c.unanswered, nil
	}
	return backend.ClaimResult{}, c.unanswered, err
}

// standby waits as a backup for a running slot, or one whose retry is due later
// (res, the last answer), until a claim is answered other than running or retry:
// the lease ended unfinished or the retry came due (won), the run finished (done),
// or the lease key held no run and its deadline passed (late). It reacts to the
// store's watch when there is one, and polls otherwise; with a watch it still
// re-checks every lease/2, in case the lease ended between the last claim and the
// start of the watch. A retry is claimed when the store said it comes due.
func (s *Scheduler) standby(j *job, c *leaseClaim, res backend.ClaimResult) (backend.ClaimResult, time.Time, error) {
	for {
		if j.behindManual(res) {
			s.checkOrphan(j)
		}
		if !res.WaitsFor.IsZero() && res.Outcome == backend.OutcomeRunning {
			c.why = "the run of slot " + res.WaitsFor.UTC().Format(time.RFC3339Nano) + " that it asked to end (overlap policy cancel-other) had not ended by the slot's deadline"
		}
		jctx, cancel := s.jobCtx(j)
		changed := s.waitForChange(jctx, j, c, res)
		cancel()
		if !changed { // stopping, or the job was removed here
			return backend.ClaimResult{}, time.Time{}, context.Canceled
		}
		var sent time.Time
		var err error
		if res, sent, err = s.claimLease(j, c); err != nil || !waits(res.Outcome) {
			return res, sent, err
		}
	}
}

// waits reports whether a claim answered o stands by: another token holds the
// lease, the slot's retry is not due yet, or the slot is buffered.
func waits(o backend.ClaimOutcome) bool {
	return o == backend.OutcomeRunning || o == backend.OutcomeRetry || o == backend.OutcomeBuffered
}

// waitForChange waits, after a claim answered res, until claiming again may be
// answered otherwise: until a stored retry is due, or until the store's watch says
// the lease ended, or a poll interval passed. False once parent ends (the scheduler stops).
func (s *Scheduler) waitForChange(parent context.Context, j *job, c *leaseClaim, res backend.ClaimResult) bool {
	if res.Outcome == backend.OutcomeRetry {
		at := s.clock.Now().Add(res.RetryIn)
		return s.sleepUntil(parent, at.Add(retryMargin(j, c.Slot, at)))
	}
	watcher, _ := s.runs.(backend.LeaseWatcher)
	poll := j.cfg.lease / 4
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var changed <-chan struct{}
	if watcher != nil {
		poll = j.cfg.lease / 2
		slot := c.Slot
		if !res.WaitsFor.IsZero() {
			slot = res.WaitsFor // the earlier run it asked to end
		}
		ch, err := watcher.WatchRun(ctx, j.name, slot)
		if err != nil && ctx.Err() == nil { // not Stop's own cancellation
			s.backendError(j, c.Slot, "watch", err)
		}
		select {
		case <-ch:
			if !res.WaitsFor.IsZero() && !c.reclaimed {
				// The run it waits for ended since the answer: claim again,
				// once; a run still busy without a live lease is polled.
				c.reclaimed = true
				return parent.Err() == nil
			}
			// No live lease on the slot, yet the claim was answered running: it
			// waits for another slot (overlap forbidden). Poll.
		default:
			c.reclaimed = false
			changed = ch
		}
	}
	t := s.clock.NewTimer(poll)
	defer t.Stop()
	select {
	case <-parent.Done():
	case <-changed:
	case <-t.C():
	}
	return parent.Err() == nil
}

// retryClaimMargin is added to a stored retry's wait before claiming it, so that a
// claim rarely comes a moment too early.
const retryClaimMargin = 5 * time.Millisecond

// retryMargin is retryClaimMargin, or less for a retry due at at whose start
// window (at most the job's max lateness, closing at the next slot) is short: a
// claim a moment too early is only answered retry again, one past the window
// finds the slot ended and the retry never runs.
func retryMargin(j *job, slot, at time.Time) time.Duration {
	window := j.cfg.maxLate
	if next := j.sched.Next(slot); !next.IsZero() {
		window = min(window, next.Sub(at))
	}
	return max(min(retryClaimMargin, window/4), 0)
}

// noteLimit ends j's loop on this instance when res, the answer to c, says the
// job's run limit was reached: the win or buffering of the last counted slot, a
// slot this claim stored limit, or a loop's slot another instance stored limit
// (a catch-up slot stored limit may be older than a limit raised since).
func (s *Scheduler) noteLimit(j *job, c *leaseClaim, res backend.ClaimResult) {
	if c.MaxRuns == 0 {
		return
	}
	switch {
	case res.LimitReached, res.Outcome == backend.OutcomeLimit:
	case res.Outcome == backend.OutcomeDone && res.Status == StatusLimit && c.kind == claimScheduled:
	default:
		return
	}
	if !j.limitHit.CompareAndSwap(false, true) {
		return
	}
	j.end()
	s.emit(Event{Kind: EventLimitReached, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome})
}
