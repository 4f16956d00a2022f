package scheduler

import (
	"context"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// claimKind says why a slot is claimed.
type claimKind int

const (
	// claimScheduled: the loop's claim of a due slot (deadline slot + max lateness).
	claimScheduled claimKind = iota
	// claimCatchUp: a slot missed while no instance was up (deadline slot +
	// catch-up window); it may reopen a slot stored paused.
	claimCatchUp
	// claimAdopt: an unfinished run found unattended; it may be taken over, never
	// created.
	claimAdopt
	// claimMissed: a slot due while no instance could claim it, found at Start
	// (missed.go); the claim stores it missed unless a decision is stored already.
	claimMissed
	// claimBackfill: a past slot Backfill asks for; it may start now and may
	// reopen a slot stored late, skipped or paused.
	claimBackfill
	// claimManual: RunNow's run, on a slot off the schedule.
	claimManual
)

// lateDeadline is the deadline of a claim that may only store late: every store's
// clock is past it.
var lateDeadline = time.Unix(1, 0)

// attempt is one slot's claims on this instance, from the first to the last
// answer, and the attempt it holds once one is won. Every slot passes the same
// loop (claim.go): claim, stand by, run under the lease (run.go), settle.
type attempt struct {
	j    *job
	kind claimKind
	rc   backend.RunClaim
	// deadline is when, by this instance's clock, the slot may no longer start.
	deadline time.Time
	// unanswered is when the first claim of this token whose answer never came
	// was sent (zero when every claim was answered): a lease won by a later
	// claim of the same token counts from then.
	unanswered time.Time
	// sendFailed says a claim of the slot failed (its answer never came).
	sendFailed bool
	// answered is when the store last answered about the slot (the end of a
	// retry's window it stored): it remembers the slot for rc.Keep after that,
	// so a claim is asked again until then.
	answered time.Time
	// reclaimed says the last wait for the run named by WaitsFor found it ended
	// at once and claimed again without waiting.
	reclaimed bool
	// bf is the backfill slot this attempt reports to (nil unless Backfill asked).
	bf *backfillSlot
	// man is the RunNow call that asked for the run (nil otherwise).
	man *manualCall
	// failed is this instance's failed attempt whose stored retry it stands by for.
	failed *failedAttempt
	// stands is, for a missed slot recorded for a range of them, how many.
	stands int
	// local is the slot's state on a store that keeps none (no leases): the
	// machine decides retries and pauses in this process.
	local machine.Run

	// Once won: the answer, and the lease it holds.
	res backend.ClaimResult
	l   lease
}

// failedAttempt is an attempt that failed and stored its retry.
type failedAttempt struct {
	attempt int
	status  Status
	err     error
}

// newAttempt returns the first claim of slot of j for kind.
func (s *Scheduler) newAttempt(j *job, slot time.Time, kind claimKind) *attempt {
	a := &attempt{j: j, kind: kind, deadline: slot.Add(j.cfg.maxLate)}
	a.rc = backend.RunClaim{
		Job:         j.name,
		Slot:        slot,
		Token:       newToken(),
		Instance:    s.instance,
		Lease:       j.cfg.lease,
		Overlap:     j.cfg.overlap,
		BufferCap:   j.cfg.bufferCap,
		Concurrency: j.cfg.concurrency,
		MaxRuns:     j.cfg.maxRuns,
		Keep:        j.keep(),
		Retention:   backend.Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL},
	}
	switch kind {
	case claimCatchUp:
		a.deadline = slot.Add(j.cfg.catchUpWindow)
	case claimAdopt:
		a.rc.TakeoverOnly = true
		if j.manualAt(slot) {
			a.rc.MaxRuns = 0 // a manual slot is not counted
		}
	case claimMissed:
		a.deadline = lateDeadline
	case claimBackfill:
		// A backfilled slot may start now, and runs once across the fleet: a
		// slot stored late, skipped or paused is reopened.
		a.deadline = s.clock.Now().Add(j.cfg.maxLate)
		a.rc.Backfill, a.rc.MaxRuns = true, 0
		a.rc.LateWhy = "nobody started the backfilled slot before its deadline"
	case claimManual:
		a.deadline = s.clock.Now().Add(s.maxSkew)
		a.rc.Manual, a.rc.MaxRuns = true, 0
	}
	a.local.Slot = slot
	return a
}

// again makes a the claim that stands by for its slot after its attempt ended
// unfinished (a lost lease, a stored retry): a new token that takes over only.
func (a *attempt) again() {
	a.rc.Token = newToken()
	a.rc.TakeoverOnly = true
	a.rc.ReopenPaused, a.rc.Backfill, a.rc.Rerun = false, false, false
	a.unanswered, a.reclaimed = time.Time{}, false
	a.res, a.l = backend.ClaimResult{}, lease{}
	a.kind = claimAdopt
}

// backfill reports whether a's run was asked for by Backfill: its own, or the
// one it took over.
func (a *attempt) backfill() bool { return a.bf != nil || a.res.Backfill }

// key is the attempt's hold on the run.
func (a *attempt) key() backend.RunKey { return a.rc.Key() }

// input is the attempt as History and the handler know it.
func (a *attempt) input(s *Scheduler, attempt int) backend.ClaimInput {
	return backend.ClaimInput{
		Job: a.j.name, Slot: a.rc.Slot, Token: a.rc.Token, Instance: s.instance, Attempt: max(attempt, 1),
		Manual: a.kind == claimManual, RequestedBy: a.man.by(), Backfill: a.backfill(), At: s.clock.Now(),
		HistorySize: a.j.cfg.historySize, HistoryTTL: a.j.cfg.historyTTL,
	}
}

// retryMissed reports whether res, a done answer, says that nobody claimed the
// retry a's failed attempt stored before its window closed.
func (a *attempt) retryMissed(res backend.ClaimResult) bool {
	return a.failed != nil && res.Outcome == backend.OutcomeDone && res.Status == StatusError && res.Attempt == a.failed.attempt
}

// cause says why ctx, a's claim or wait, ended: RunNow's caller's cause when
// that ended it.
func (a *attempt) cause(ctx context.Context) error {
	if a.man != nil && a.man.ctx.Err() != nil {
		return context.Cause(a.man.ctx)
	}
	return context.Cause(ctx)
}
