package scheduler

import (
	"context"
	"errors"
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
	// why explains a late record written by this claim.
	why string
}

// handleLeased claims a slot through the run store and follows the stored decision:
// the winner runs it under a lease, the others stand by as backups and take over if
// the lease ends unfinished; skipped and late are recorded by the claimer that
// stored them.
func (s *Scheduler) handleLeased(j *job, slot time.Time, kind claimKind) {
	c := &leaseClaim{
		RunClaim: backend.RunClaim{
			Job:      j.name,
			Slot:     slot,
			Token:    newToken(),
			Instance: s.instance,
			Lease:    j.cfg.lease,
			Overlap:  j.cfg.overlap,
			Keep:     j.keep(),
		},
		kind:          kind,
		localDeadline: slot.Add(j.cfg.maxLate),
		why:           "nobody started the slot before its deadline",
	}
	switch kind {
	case claimCatchUp:
		c.localDeadline = slot.Add(j.cfg.catchUpWindow)
		// Catch-up runs the slots paused in its window once the pause has ended.
		_, paused := s.pauses.of(j.name, s.clock.Now())
		c.ReopenPaused = !paused
	case claimAdopt:
		c.TakeoverOnly = true
	case claimLate:
		c.localDeadline = lateDeadline
		c.why = "missed while no instance was up, past the catch-up limit of " + strconv.Itoa(MaxCatchUpSlots) + " slots per job"
	}
	res, sent, err := s.claimLease(j, c)
	if err != nil {
		return // stopping, or the store stayed unreachable for as long as it matters
	}
	if res.Outcome == backend.OutcomeRunning {
		s.emit(Event{Kind: EventStandby, Job: j.name, Slot: slot, Token: c.Token, Outcome: res.Outcome, Attempt: res.Attempt})
		res, sent, err = s.standby(j, c)
		if err != nil {
			return
		}
	}
	s.act(j, c, res, sent)
}

// act follows a claim's answer other than running: a won manual run's slot is
// ended (a manual run is not run again), a won slot of a paused job is finished
// paused, anything else is followed.
func (s *Scheduler) act(j *job, c *leaseClaim, res backend.ClaimResult, sent time.Time) {
	if res.Outcome == backend.OutcomeWon && !j.onSchedule(c.Slot) {
		s.endManual(j, c, res)
		return
	}
	if res.Outcome == backend.OutcomeWon {
		p, paused := s.pauses.of(j.name, s.clock.Now())
		if !paused && !res.Reopened {
			// A slot that fell while its job was paused, claimed only after the
			// pause ended (a takeover, a late claim), is a paused slot too; the
			// job's catch-up policy runs it, as a reopened slot, if it asks.
			p, paused = s.pauses.heldAt(j.name, c.Slot)
		}
		if paused {
			// The job is paused: every attempt the store grants, a takeover too,
			// is finished paused at once, not run (the attempt it took over from
			// ended unfinished).
			if res.Attempt > 1 && !res.Reopened {
				s.noteLost(j, c.Slot, res)
			}
			s.decidePaused(j, c, res.Attempt, &lease{token: c.Token, dur: j.cfg.lease, sent: sent}, p)
			return
		}
	}
	s.follow(j, c, res, sent)
}

// decidePaused finishes a won lease's slot paused and records it so: not run.
// When the store cannot be told while the lease is ours, the outbox keeps telling
// it and writes the record once it has (a backup that took the slot over meanwhile
// decides it itself, and this instance records nothing).
func (s *Scheduler) decidePaused(j *job, c *leaseClaim, attempt int, l *lease, p Pause) {
	if s.finishDecided(j, c, attempt, l, StatusPaused) {
		s.recordPaused(j, c.Slot, c.Token, attempt, p)
		return
	}
	emitted := false
	s.finishThenRecord(j, c.Slot, c.Token, StatusPaused, true, func(stale bool) (backend.StoredResult, backend.Retention, bool) {
		if stale {
			return backend.StoredResult{}, backend.Retention{}, false // another attempt holds the slot: it decides
		}
		if !emitted {
			emitted = true
			s.emit(Event{Kind: EventPaused, Job: j.name, Slot: c.Slot, Token: c.Token, Status: StatusPaused})
		}
		r, keep := s.pausedRecord(j, c.Slot, c.Token, attempt, p)
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
	res, err := s.runs.Claim(ctx, rc)
	if err == nil && res.Outcome == backend.OutcomeWon {
		s.release(j, c.Slot, rc.Token) // unfinished again since Active: not ours to take
	}
	return err == nil && res.Outcome == backend.OutcomeDone && res.Status == status && res.Attempt == attempt
}

// recordPaused stores the history record of a slot decided paused: not run.
func (s *Scheduler) recordPaused(j *job, slot time.Time, token string, attempt int, p Pause) {
	in := s.claimInput(j, slot, max(attempt, 1))
	in.Token = token
	s.save(j, in, 0, execResult{Status: StatusPaused, FinishedAt: s.clock.Now(), Error: pausedWhy(p)})
	s.emit(Event{Kind: EventPaused, Job: j.name, Slot: slot, Token: token, Status: StatusPaused})
}

// pausedRecord is the history record of a slot decided paused, and the job's
// retention.
func (s *Scheduler) pausedRecord(j *job, slot time.Time, token string, attempt int, p Pause) (backend.StoredResult, backend.Retention) {
	return backend.StoredResult{Slot: slot, Token: token, Instance: s.instance, Attempt: max(attempt, 1), Status: StatusPaused,
		FinishedAt: s.clock.Now(), Error: backend.TruncateText(pausedWhy(p), MaxErrorText)}, backend.Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL}
}

// pausedWhy says which pause held a slot.
func pausedWhy(p Pause) string {
	why := "job paused"
	if p.Job == "" {
		why = "all jobs paused"
	}
	return why + " by " + p.By + ": " + p.Reason
}

// follow acts on a claim's answer, other than running.
func (s *Scheduler) follow(j *job, c *leaseClaim, res backend.ClaimResult, sent time.Time) {
	switch res.Outcome {
	case backend.OutcomeWon:
		s.runLeased(j, c, res, sent)
	case backend.OutcomeOverlap:
		s.emit(Event{Kind: EventSkipped, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome})
		s.recordOnce(j, c.Slot, StatusSkipped, "another slot of the job held its lease (overlap forbidden)")
	case backend.OutcomeLate:
		s.emit(Event{Kind: EventLate, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome})
		s.recordOnce(j, c.Slot, StatusLate, c.why)
	default: // done, none, and outcomes this version does not know
		s.emit(Event{Kind: EventLost, Job: j.name, Slot: c.Slot, Token: c.Token, Outcome: res.Outcome})
	}
}

// keep is how long a finished run must be remembered so that any instance still
// allowed to claim it sees it as done.
func (j *job) keep() time.Duration {
	k := j.cfg.jitter + j.cfg.maxLate
	if j.cfg.catchUp != CatchUpNone {
		k = max(k, j.cfg.catchUpWindow)
	}
	return k + j.cfg.lease + time.Minute
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
	giveUp := c.localDeadline.Add(c.Keep)
	for attempt := 0; ; attempt++ {
		sent := s.clock.Now()
		rc := c.RunClaim
		switch {
		case c.TakeoverOnly:
		case c.kind == claimLate || sent.After(c.localDeadline):
			rc.Deadline = lateDeadline
		default:
			rc.Deadline = c.localDeadline.Add(s.maxSkew)
		}
		ctx, cancel := s.callCtx(s.loopCtx)
		res, err := s.runs.Claim(ctx, rc)
		cancel()
		if err == nil {
			from := sent
			if !c.unanswered.IsZero() {
				from = c.unanswered
			}
			c.unanswered = time.Time{}
			return res, from, nil
		}
		if c.unanswered.IsZero() {
			c.unanswered = sent
		}
		if s.loopCtx.Err() != nil {
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
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return backend.ClaimResult{}, sent, err
		}
	}
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

// runLeased runs a won lease and settles it. Its attempt is recorded in history
// before the handler starts when the record may decide (RecordDecider): a backend
// that arbitrates between instances with and without leases (ErrClaimedElsewhere)
// may say the slot is not ours, for a takeover too. Everything else is written
// beside the run. A lease lost with the run unfinished makes this instance stand
// by for the run again.
func (s *Scheduler) runLeased(j *job, c *leaseClaim, res backend.ClaimResult, sent time.Time) {
	in := backend.ClaimInput{
		Job: j.name, Slot: c.Slot, Token: c.Token, Instance: s.instance, Attempt: max(res.Attempt, 1),
		At: s.clock.Now(), HistorySize: j.cfg.historySize, HistoryTTL: j.cfg.historyTTL,
	}
	l := &lease{token: c.Token, dur: j.cfg.lease, sent: sent}
	s.emit(Event{Kind: EventClaimed, Job: j.name, Slot: c.Slot, Token: c.Token, Attempt: in.Attempt, Outcome: res.Outcome})
	takeover := in.Attempt > 1 && !res.Reopened
	if takeover {
		l.previous = res.Previous
	}
	if res.Reopened {
		s.log.Info("runs a slot paused before (catch-up after the pause ended)", "job", j.name, "slot", c.Slot, "attempt", in.Attempt)
	} else if takeover {
		s.log.Info("took over a run", "job", j.name, "slot", c.Slot, "attempt", in.Attempt, "previous", res.Previous)
		s.emit(Event{Kind: EventTakeover, Job: j.name, Slot: c.Slot, Token: c.Token, Attempt: in.Attempt, Outcome: res.Outcome})
	}
	if rec, ok := s.backend.(backend.ClaimRecorder); ok {
		record := func(ctx context.Context) error {
			err := rec.RecordClaim(ctx, in)
			if err != nil && !errors.Is(err, backend.ErrClaimedElsewhere) {
				s.backendError(j, c.Slot, "record_claim", err)
			}
			return err
		}
		if recordDecides(s.backend, j.name) {
			// Before the handler, for every attempt: the record may decide (a mixed
			// fleet, where an instance without leases may have claimed the slot
			// while the lease's first holder died before recording it). Bounded so
			// that the lease is still good when the handler starts.
			parent := s.loopCtx
			if parent.Err() != nil {
				// A claim settled after Stop began (settleStopped): the slot is
				// ours and runs while Stop waits for handlers, recorded first.
				parent = context.Background()
			}
			ctx, cancel := context.WithTimeout(parent, min(s.callTO, j.cfg.lease/3))
			err := record(ctx)
			cancel()
			if errors.Is(err, backend.ErrClaimedElsewhere) {
				s.claimedElsewhere(j, c.Slot, l, err)
				return
			}
			if err != nil && s.loopCtx.Err() != nil && parent == s.loopCtx {
				// Stopping before the slot's claim was recorded: hand the lease
				// over unrun rather than run a slot the record might not be ours.
				s.release(j, c.Slot, l.token)
				return
			}
		} else {
			s.beside(func() {
				ctx, cancel := s.callCtx(context.Background())
				defer cancel()
				_ = record(ctx)
			})
		}
	}
	if takeover {
		s.noteLost(j, c.Slot, res)
	}
	out := StatusLost
	if s.freshLease(j, c.Slot, l) {
		// A pause stored while the claim was recorded holds the slot too: it has
		// not started.
		if p, paused := s.pauses.of(j.name, s.clock.Now()); paused {
			s.decidePaused(j, c, res.Attempt, l, p)
			return
		}
		out = s.execute(s.hardCtx, j, in, res.Fence, l).Status
	}
	// The lease was lost with the run unfinished (and released): after a lease, in
	// which the backups that wait for it take it over first, this instance stands by
	// for it too, so that it is taken over even when nobody else waits for it.
	if out == StatusLost && s.sleepUntil(s.loopCtx, s.clock.Now().Add(j.cfg.lease)) {
		s.handleLeased(j, c.Slot, claimAdopt)
	}
}

// noteLost records, beside the run, that the attempt a takeover (res) took over from
// ended unfinished.
func (s *Scheduler) noteLost(j *job, slot time.Time, res backend.ClaimResult) {
	if res.PreviousToken == "" {
		return
	}
	prev := backend.ClaimInput{Slot: slot, Token: res.PreviousToken, Instance: res.Previous, Attempt: res.PreviousAttempt}
	s.beside(func() {
		s.save(j, prev, 0, execResult{Status: StatusLost, FinishedAt: s.clock.Now(), Error: "lease expired or released before the run finished; taken over by " + s.instance})
	})
}

// recordDecides reports whether the record of a won attempt of job must be
// written before the handler starts.
func recordDecides(b backend.Backend, job string) bool {
	d, ok := b.(backend.RecordDecider)
	return !ok || d.RecordDecides(job)
}

// beside runs f in a goroutine that Stop waits for: writes that go beside a run.
func (s *Scheduler) beside(f func()) {
	s.handlers.Add(1)
	go func() {
		defer s.handlers.Done()
		f()
	}()
}

// besideIfRunning is beside for a caller that is not itself waited for by Stop (a
// reader): f runs only while the scheduler is started. It reports whether it does.
func (s *Scheduler) besideIfRunning(f func()) bool {
	s.mu.Lock()
	if s.state != stateStarted {
		s.mu.Unlock()
		return false
	}
	s.handlers.Add(1) // under the lock that Stop changes the state under
	s.mu.Unlock()
	go func() {
		defer s.handlers.Done()
		f()
	}()
	return true
}

// standby waits as a backup for a running slot until a claim is answered other than
// running: the lease ended unfinished (a takeover: won), the run finished (done), or
// the lease key held no run and its deadline passed (late). It reacts to the
// store's watch when there is one, and polls otherwise; with a watch it still
// re-checks every lease/2, in case the lease ended between the last claim and the
// start of the watch.
func (s *Scheduler) standby(j *job, c *leaseClaim) (backend.ClaimResult, time.Time, error) {
	watcher, _ := s.runs.(backend.LeaseWatcher)
	poll := j.cfg.lease / 4
	if watcher != nil {
		poll = j.cfg.lease / 2
	}
	for {
		ctx, cancel := context.WithCancel(s.loopCtx)
		var changed <-chan struct{}
		if watcher != nil {
			ch, err := watcher.WatchRun(ctx, j.name, c.Slot)
			if err != nil && ctx.Err() == nil { // not Stop's own cancellation
				s.backendError(j, c.Slot, "watch", err)
			}
			select {
			case <-ch:
				// No live lease on the slot, yet the claim was answered running: it
				// waits for another slot (overlap forbidden). Poll.
			default:
				changed = ch
			}
		}
		t := s.clock.NewTimer(poll)
		select {
		case <-s.loopCtx.Done():
		case <-changed:
		case <-t.C():
		}
		t.Stop()
		cancel()
		if s.loopCtx.Err() != nil {
			return backend.ClaimResult{}, time.Time{}, s.loopCtx.Err()
		}
		res, sent, err := s.claimLease(j, c)
		if err != nil || res.Outcome != backend.OutcomeRunning {
			return res, sent, err
		}
	}
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
