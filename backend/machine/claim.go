package machine

import (
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Job is what a store knows of a job's other slots when it decides a claim.
type Job struct {
	// Others are the job's other unfinished runs (buffered, running, retrying)
	// of the same run name. A store must give all of them when the claim's
	// policy runs one slot at a time (Overlap.Exclusive) or the claimed slot is
	// buffered; otherwise it may give none.
	Others []Run
	// Count is how many runs of the job the store has counted (RunCounter).
	Count int
	// Fence is above every fence the store has handed out for the run name.
	Fence uint64
}

// Decision is what a call decided: what the store writes, conditionally on what
// it read, and what it answers.
type Decision struct {
	// Run is the slot's state after the call; Write says it changed.
	Run   Run
	Write bool
	// Others are other runs of the job the call changed (a cancel request
	// stored on them), written with Run.
	Others []Run
	// Count is the job's count after the call; Counted says it changed.
	Count   int
	Counted bool
	// Records are the terminal records of attempts the call ended, stored
	// with Run (Settler).
	Records []backend.StoredResult
	// Result is Claim's answer.
	Result backend.ClaimResult
	// Err is the answer of Heartbeat and Settle.
	Err error
}

// Reasons recorded with the decisions the machine makes.
const (
	WhyLate          = "nobody started the slot before its deadline"
	WhyMissed        = "due while no instance could claim it"
	WhySkipped       = "another slot of the job held its lease (overlap forbidden)"
	WhyLaterRuns     = "a later slot of the job held its lease (overlap policy cancel-other: an earlier slot never ends a later one)"
	WhyLimit         = "the job's run limit was reached"
	WhyTakenOver     = "its lease ended before the run finished; taken over by "
	WhyEntryRemoved  = "its schedule entry was removed"
	WhyCancelAsked   = "a later slot asked the run to end (overlap policy cancel-other) and its lease ended"
	WhyManualStopped = "its holder stopped before the manual run finished (a manual run is not run again)"
)

// Claim decides a claim of the slot whose stored state is cur (its Slot set also
// when nothing is stored) at now, by the store's clock.
//
//	pending  ──TakeoverOnly, EntryGone──▶ (none)
//	pending  ──ExcludedWhy──▶ finished excluded
//	pending  ──Missed: PausedWhy / MaxRuns counted / otherwise──▶ finished paused / (none, limit reached) / finished missed
//	pending  ──past Deadline──▶ finished late
//	pending  ──PausedWhy──▶ finished paused
//	pending  ──MaxRuns counted──▶ finished limit
//	pending  ──skip, Slots() other slots busy──▶ finished skipped
//	pending  ──cancel-other, a later slot busy──▶ finished skipped
//	pending  ──cancel-other, earlier slots busy──▶ (a cancel request on each; running)
//	pending  ──buffer, Slots() other slots busy or one buffered, under the cap──▶ buffered
//	pending  ──buffer, the cap reached──▶ finished skipped
//	pending  ──otherwise──▶ running (attempt 1)
//	buffered ──Slots() other slots busy, or an earlier one buffered; or PausedWhy──▶ (buffered)
//	buffered ──a manual slot: another token waits, an adoption ends it──▶ (buffered) / finished lost
//	buffered ──otherwise──▶ running (attempt 1)
//	running  ──lease live──▶ (won for its token, running for others)
//	running  ──lease ended: entry removed / cancel asked / manual──▶ finished cancelled / cancelled / lost
//	running  ──lease ended, PausedWhy──▶ finished paused (attempt+1)
//	running  ──lease ended, one slot at a time (or Slots()) and as many others live──▶ (running)
//	running  ──lease ended──▶ running (attempt+1: a takeover)
//	retrying ──a cancel request stored──▶ finished cancelled
//	retrying ──before RetryAt──▶ (retry)   ──after RetryBy──▶ finished error
//	retrying ──in the window──▶ running (attempt+1, Retried), as a takeover would
//	finished ──MayReopen before Deadline──▶ running (attempt+1, Reopened)
//	finished ──otherwise──▶ (done; the decider is told its decision again)
//
// Every attempt that ends in a claim gets its record in Decision.Records: the
// slot decided without running (attempt 1), the attempt taken over (lost), the
// attempt ended cancelled or lost.
func Claim(cur Run, in backend.RunClaim, job Job, now time.Time) Decision {
	cur.Slot = in.Slot
	c := claim{in: in, job: job, now: now, keep: in.Keep}
	if c.keep <= 0 {
		c.keep = backend.DefaultRunKeep
	}
	c.d = Decision{Run: cur, Count: job.Count}
	switch cur.Phase {
	case Pending:
		c.first()
	case Buffered:
		c.buffered(cur)
	case Running:
		c.running(cur)
	case Retrying:
		c.retrying(cur)
	default:
		c.finished(cur)
	}
	return c.d
}

// claim is one Claim's decision in the making.
type claim struct {
	in   backend.RunClaim
	job  Job
	now  time.Time
	keep time.Duration
	d    Decision
}

// store sets r as the slot's state to write.
func (c *claim) store(r Run) {
	r.Changed, r.Keep = c.now, c.keep
	c.d.Run, c.d.Write = r, true
}

// answer answers from r.
func (c *claim) answer(r Run, o backend.ClaimOutcome) { c.d.Result = r.answer(o) }

// end finishes r with status for why, recording its current attempt unless it
// is recorded, and answers o.
func (c *claim) end(r Run, status backend.Status, why string, o backend.ClaimOutcome) {
	if !r.Recorded {
		c.d.Records = append(c.d.Records, r.record(status, why, c.now))
	}
	r.Phase, r.Status, r.Recorded = Finished, status, true
	c.store(r)
	c.answer(r, o)
}

// decide ends r, a slot no attempt started, with status: a decision this claim
// is the decider of. A manual run's refusal is answered, not stored: no other
// claim ever asks for its slot.
func (c *claim) decide(r Run, status backend.Status, why string) {
	if c.in.Manual {
		c.d.Result = backend.ClaimResult{Outcome: backend.DecidedOutcome(status, true), Status: status}
		return
	}
	c.end(r, status, why, backend.DecidedOutcome(status, true))
}

// grant gives r's next attempt to the claim: a live lease, a new fence.
func (c *claim) grant(r Run) {
	r.Phase, r.Status = Running, ""
	r.Token, r.Instance = c.in.Token, c.in.Instance
	r.Attempt++
	r.Fence = max(c.job.Fence, r.Fence+1)
	r.Lease, r.Expires = c.in.Lease, c.now.Add(c.in.Lease)
	r.RetryAt, r.RetryBy = time.Time{}, time.Time{}
	r.Claimed, r.Recorded = c.now, false
	r.Backfill = r.Backfill || c.in.Backfill
	if r.Incarnation == 0 {
		r.Incarnation = c.in.Incarnation
	}
	c.store(r)
	c.answer(r, backend.OutcomeWon)
}

// next starts r's next attempt for the claim: the fields of a plain new attempt.
func (c *claim) next(r Run) Run {
	r.Previous, r.PreviousToken = "", ""
	r.Reopened, r.Retried, r.HandedOver = false, false, false
	r.Cancel = nil
	return r
}

// pause ends r's next attempt paused, for the claim, without running it. r
// names the attempt it follows, as grant's would.
func (c *claim) pause(r Run) {
	r.Token, r.Instance = c.in.Token, c.in.Instance
	r.Attempt++
	r.Fence = max(c.job.Fence, r.Fence+1)
	r.Claimed, r.Recorded = time.Time{}, false
	c.end(r, backend.StatusPaused, c.in.PausedWhy, backend.OutcomePaused)
}

// stale reports whether r belongs to an entry the claimer no longer follows:
// removed, or removed and added again (another incarnation).
func (c *claim) stale(r Run) bool {
	return c.in.EntryGone || c.in.Incarnation != 0 && r.Incarnation != 0 && c.in.Incarnation != r.Incarnation
}

// count counts r's first decision to run (won or buffered) when the claim counts.
func (c *claim) count(r *Run) {
	if !c.in.Counts() {
		return
	}
	c.d.Count++
	c.d.Counted = true
	r.Last = c.d.Count == c.in.MaxRuns
	r.Counted = true
}

// pastDeadline reports whether the claim's deadline has passed.
func (c *claim) pastDeadline() bool {
	return !c.in.Deadline.IsZero() && c.now.After(c.in.Deadline)
}

func (c *claim) first() {
	in := c.in
	if in.TakeoverOnly || in.EntryGone {
		c.d.Result = backend.ClaimResult{Outcome: backend.OutcomeNone}
		return
	}
	r := Run{Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: 1,
		Manual: in.Manual, RequestedBy: in.RequestedBy, Backfill: in.Backfill, Incarnation: in.Incarnation}
	switch {
	case in.ExcludedWhy != "":
		c.decide(r, backend.StatusExcluded, in.ExcludedWhy)
	case in.Missed && in.PausedWhy != "":
		c.decide(r, backend.StatusPaused, in.PausedWhy)
	case in.Missed && in.Counts() && c.job.Count >= in.MaxRuns:
		// The job had ended: nothing was owed.
		c.d.Result = backend.ClaimResult{Outcome: backend.OutcomeNone, LimitReached: true}
	case in.Missed:
		why := in.LateWhy
		if why == "" {
			why = WhyMissed
		}
		c.decide(r, backend.StatusMissed, why)
	case c.pastDeadline():
		why := in.LateWhy
		if why == "" {
			why = WhyLate
		}
		c.decide(r, backend.StatusLate, why)
	case in.PausedWhy != "":
		c.decide(r, backend.StatusPaused, in.PausedWhy)
	case in.Counts() && c.job.Count >= in.MaxRuns:
		c.decide(r, backend.StatusLimit, WhyLimit)
	case in.Overlap == backend.OverlapSkip && c.full():
		c.decide(r, backend.StatusSkipped, WhySkipped)
	case in.Overlap == backend.OverlapCancelOther && c.busy(laterSlot) != nil:
		c.decide(r, backend.StatusSkipped, WhyLaterRuns)
	case in.Overlap == backend.OverlapCancelOther && c.busy(earlierSlot) != nil:
		c.cancelEarlier()
	case in.Overlap.Buffers() && (c.full() || c.bufferedOthers() > 0):
		if c.bufferedOthers() >= in.Buffers() {
			c.decide(r, backend.StatusSkipped, fmt.Sprintf("another slot of the job ran and %d were buffered already (overlap policy %s)", in.Buffers(), in.Overlap))
			return
		}
		r.Phase, r.Attempt = Buffered, 0
		c.count(&r)
		c.store(r)
		c.buffered(r)
	default:
		r.Attempt = 0
		c.count(&r)
		c.grant(r)
	}
}

// cancelEarlier stores, on each busy run of an earlier slot that has none, the
// claim's request that it end, and answers running, waiting for the newest.
func (c *claim) cancelEarlier() {
	var newest *Run
	for i := range c.job.Others {
		o := c.job.Others[i]
		if !o.Slot.Before(c.in.Slot) || !o.Busy(c.now) {
			continue
		}
		if o.Cancel == nil {
			o.Cancel = &backend.CancelRequest{Slot: c.in.Slot, Instance: c.in.Instance, Token: c.in.Token}
			o.Changed = c.now
			c.d.Others = append(c.d.Others, o)
		}
		if newest == nil || o.Slot.After(newest.Slot) {
			newest = &o
		}
	}
	c.d.Result = newest.answer(backend.OutcomeRunning)
	c.d.Result.WaitsFor = newest.Slot
}

// Slot positions the overlap rules look at, relative to the claimed slot.
const (
	anySlot = iota
	earlierSlot
	laterSlot
)

// busy returns the newest other slot of the job at pos that is busy, or nil.
func (c *claim) busy(pos int) *Run {
	var found *Run
	for i := range c.job.Others {
		o := &c.job.Others[i]
		switch {
		case o.Slot.Equal(c.in.Slot), !o.Busy(c.now):
		case pos == earlierSlot && !o.Slot.Before(c.in.Slot):
		case pos == laterSlot && !o.Slot.After(c.in.Slot):
		case found == nil || o.Slot.After(found.Slot):
			found = o
		}
	}
	return found
}

// oldestBusy returns the oldest other slot of the job that is busy, or nil.
func (c *claim) oldestBusy() *Run {
	var found *Run
	for i := range c.job.Others {
		o := &c.job.Others[i]
		if !o.Slot.Equal(c.in.Slot) && o.Busy(c.now) && (found == nil || o.Slot.Before(found.Slot)) {
			found = o
		}
	}
	return found
}

// full reports whether as many other slots of the job are busy as the
// claim's policy lets hold a run at once (RunClaim.Slots).
func (c *claim) full() bool {
	n := 0
	for _, o := range c.job.Others {
		if !o.Slot.Equal(c.in.Slot) && o.Busy(c.now) {
			n++
		}
	}
	return n >= c.in.Slots()
}

// otherLive reports whether as many other slots of the job hold a live lease
// as the claim's policy lets hold a run at once (RunClaim.Slots).
func (c *claim) otherLive() bool {
	n := 0
	for _, o := range c.job.Others {
		if !o.Slot.Equal(c.in.Slot) && o.Live(c.now) {
			n++
		}
	}
	return n >= c.in.Slots()
}

// bufferedOthers counts the job's other buffered slots.
func (c *claim) bufferedOthers() int {
	n := 0
	for _, o := range c.job.Others {
		if !o.Slot.Equal(c.in.Slot) && o.Phase == Buffered {
			n++
		}
	}
	return n
}

// buffered decides a claim of r, a buffered slot (any token, takeover-only and
// past its deadline too). It waits while another slot is busy or an earlier one
// is buffered, and while the job is paused. Otherwise it is won as attempt 1.
func (c *claim) buffered(r Run) {
	if c.stale(r) {
		c.end(r, backend.StatusCancelled, WhyEntryRemoved, backend.OutcomeDone)
		return
	}
	wait := backend.ClaimResult{Outcome: backend.OutcomeBuffered, LimitReached: r.Last}
	mine := !r.Manual || r.Token == c.in.Token || c.in.TakeoverOnly
	if !mine {
		// A manual slot runs only for its RunNow: another claim waits for it.
		wait.WaitsFor, wait.Holder = r.Slot, r.Instance
		c.d.Result = wait
		return
	}
	if c.in.PausedWhy != "" {
		c.d.Result = wait
		return
	}
	if c.in.Overlap != backend.OverlapAllow {
		var blocker *Run
		switch {
		case c.full() && c.in.Slots() > 1:
			blocker = c.oldestBusy() // of a few at once, the oldest likely ends first
		case c.full():
			blocker = c.busy(anySlot)
		default:
			blocker = c.oldestBufferedBefore()
		}
		if blocker != nil {
			wait.WaitsFor, wait.Holder = blocker.Slot, blocker.Instance
			if blocker.Phase != Buffered {
				wait.Expires = blocker.Expires
			}
			c.d.Result = wait
			return
		}
	}
	if r.Manual && r.Token != c.in.Token {
		// Its turn came and its RunNow did not take it: an adoption ends it.
		c.end(r, backend.StatusLost, WhyManualStopped, backend.OutcomeDone)
		return
	}
	c.grant(c.next(r))
}

// oldestBufferedBefore returns the oldest buffered slot of the job before the
// claim's, or nil.
func (c *claim) oldestBufferedBefore() *Run {
	var found *Run
	for i := range c.job.Others {
		o := &c.job.Others[i]
		if o.Phase == Buffered && o.Slot.Before(c.in.Slot) && (found == nil || o.Slot.Before(found.Slot)) {
			found = o
		}
	}
	return found
}

func (c *claim) running(r Run) {
	switch {
	case r.Live(c.now) && r.Token == c.in.Token:
		c.answer(r, backend.OutcomeWon)
	case r.Live(c.now), r.Token == c.in.Token:
		// Held by another attempt; or by this token's own, whose lease ended:
		// the claimer claims again with a new token to take it over.
		c.answer(r, backend.OutcomeRunning)
	case c.stale(r):
		c.end(r, backend.StatusCancelled, WhyEntryRemoved, backend.OutcomeDone)
	case r.Cancel != nil:
		c.end(r, backend.StatusCancelled, WhyCancelAsked, backend.OutcomeDone)
	case r.Manual:
		c.end(r, backend.StatusLost, WhyManualStopped, backend.OutcomeDone)
	default:
		c.takeover(r, WhyTakenOver+c.in.Instance)
	}
}

// takeover gives r's next attempt to the claim, recording the attempt it takes
// over from with why (unless recorded), or ends it paused while the job is.
func (c *claim) takeover(r Run, why string) {
	if c.in.Overlap.Exclusive() && c.otherLive() {
		c.answer(r, backend.OutcomeRunning)
		return
	}
	if !r.Recorded {
		c.d.Records = append(c.d.Records, r.record(backend.StatusLost, why, c.now))
	}
	prev, prevToken, handed := r.Instance, r.Token, r.Recorded
	r = c.next(r)
	r.Previous, r.PreviousToken, r.HandedOver = prev, prevToken, handed
	if c.in.PausedWhy != "" {
		c.pause(r)
		return
	}
	c.grant(r)
}

func (c *claim) retrying(r Run) {
	switch {
	case c.stale(r):
		c.end(r, backend.StatusCancelled, WhyEntryRemoved, backend.OutcomeDone)
	case r.Cancel != nil:
		// Nobody holds it to hear the request: it ends at once.
		c.end(r, backend.StatusCancelled, WhyCancelAsked, backend.OutcomeDone)
	case r.Token == c.in.Token:
		// The failed attempt's own token never takes its retry.
		c.d.Result = r.answer(backend.OutcomeDone)
		c.d.Result.Status = backend.StatusError
	case c.now.Before(r.RetryAt):
		c.answer(r, backend.OutcomeRetry)
		c.d.Result.RetryIn = r.RetryAt.Sub(c.now)
	case c.now.After(r.RetryBy):
		c.end(r, backend.StatusError, "", backend.OutcomeDone)
	case c.in.PausedWhy != "":
		c.pause(c.retried(r))
	case c.in.Overlap.Exclusive() && c.otherLive():
		c.answer(r, backend.OutcomeRunning)
	default:
		c.grant(c.retried(r))
	}
}

// retried is r's next attempt, the retry its last attempt stored.
func (c *claim) retried(r Run) Run {
	prev, prevToken := r.Instance, r.Token
	r = c.next(r)
	r.Retried, r.Previous, r.PreviousToken = true, prev, prevToken
	return r
}

func (c *claim) finished(r Run) {
	in := c.in
	reopen := !c.stale(r) && in.MayReopen(r.Status, r.Token, r.Attempt) && !c.pastDeadline()
	// A paused slot run later counts, as it would have, unless it was counted.
	counts := reopen && r.Status == backend.StatusPaused && in.Counts() && !r.Counted
	if counts && c.job.Count >= in.MaxRuns {
		reopen = false
	}
	switch {
	case !reopen:
		c.answer(r, backend.DecidedOutcome(r.Status, r.Token == in.Token))
	case in.PausedWhy != "":
		c.pause(c.next(r))
	case in.Overlap.Exclusive() && c.otherLive():
		c.answer(r, backend.OutcomeRunning)
	default:
		r = c.next(r)
		r.Reopened = true
		if counts {
			c.count(&r)
		}
		c.grant(r)
	}
}
