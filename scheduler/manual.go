package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Manual runs with leases. On a backend with leases a manual run holds a lease of
// its own, on a slot of the job that is not on its schedule (the trigger's instant,
// moved on by a millisecond while it is one), so that every instance sees it
// running (Active), a job that forbids overlap refuses it while another run holds
// the job (ErrJobBusy) and skips its scheduled slots while it runs, and a manual
// run whose instance died is ended lost by the instance that finds its lease
// expired. A manual run is never run again by another instance.

// maxManualSlotTries bounds the slots a manual claim tries when the one it picked
// is taken (another instance's manual run claimed the same millisecond), and
// maxManualSkip how many milliseconds at most it moves on after one.
const (
	maxManualSlotTries = 16
	maxManualSkip      = 64
)

// onSchedule reports whether t is one of the job's slots.
func (j *job) onSchedule(t time.Time) bool {
	return j.sched.Next(t.Add(-time.Millisecond)).Equal(t)
}

// manualAt reports whether t is the slot of a manual run of the job: one that is
// not one of its slots. An entry has no manual runs: a run of it off the
// schedule its view follows is a slot of an earlier version of the entry (or of
// the entry before its removal).
func (j *job) manualAt(t time.Time) bool {
	return j.entry == nil && !j.onSchedule(t)
}

// manualSlot is the first instant from t, at millisecond precision, that is not
// one of the job's slots and is after the manual slots this instance took before,
// so that its own manual runs never meet on one slot. It reports false when the
// job has no such instant within maxManualSearch (every millisecond is a slot).
func (j *job) manualSlot(t time.Time) (time.Time, bool) {
	ms := t.UnixMilli()
	for {
		last := j.lastManual.Load()
		next := max(ms, last+1)
		free := false
		for range maxManualSearch {
			if free = !j.onSchedule(time.UnixMilli(next)); free {
				break
			}
			next++
		}
		if !free {
			return time.Time{}, false
		}
		if j.lastManual.CompareAndSwap(last, next) {
			return time.UnixMilli(next).UTC(), true
		}
	}
}

// maxManualSearch bounds the milliseconds manualSlot looks at.
const maxManualSearch = 1000

// claimManual claims a lease for a manual run of j, on a slot off its schedule
// from now (in.Slot is set to it). It returns the claim won, its answer and when
// the lease counts from. A job that forbids overlap while another of its runs
// holds a lease gets ErrJobBusy. onBuffered, when not nil, is called once, when
// the slot is found stored buffered for the claim's token (OnBuffered).
func (s *Scheduler) claimManual(parent context.Context, j *job, in *backend.ClaimInput, onBuffered func(Run)) (backend.RunClaim, backend.ClaimResult, time.Time, error) {
	ctx, cancel := s.callCtx(parent)
	defer func() { cancel() }()
	slot, ok := j.manualSlot(s.clock.Now())
	reclaimed := false // the last wait for an earlier run's end (cancel-other)
	var mine time.Time // the slot found buffered for this claim's token
	for try := 0; ok && try < maxManualSlotTries; try++ {
		c := &leaseClaim{RunClaim: backend.RunClaim{
			Job: j.name, Slot: slot, Token: in.Token, Instance: s.instance, Lease: j.cfg.lease,
			Deadline: s.clock.Now().Add(s.maxSkew), Overlap: j.cfg.overlap, BufferCap: j.cfg.bufferCap, Keep: j.keep(),
		}, reclaimed: reclaimed}
		var res backend.ClaimResult
		var sent time.Time
		for attempt := 0; ; attempt++ {
			sent = s.clock.Now()
			var err error
			res, err = s.runs.Claim(ctx, c.RunClaim)
			if err == nil {
				break
			}
			if c.unanswered.IsZero() {
				c.unanswered = sent
			}
			s.backendError(j, slot, "claim", err)
			// Asked again only while a lease the store may have given is young
			// enough to run under; past that, a repeat would take it over.
			next := s.clock.Now().Add(retryDelay(attempt))
			if !next.Before(c.unanswered.Add(j.cfg.lease/3)) || !s.sleepUntil(ctx, next) {
				// The store may have applied a claim whose answer was lost: the
				// lease it gave, if any, is ended unrun.
				s.endUnrun(j, c.RunClaim)
				return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("scheduler: run %q now: claim a lease: %w", j.name, err)
			}
		}
		if !c.unanswered.IsZero() {
			sent = c.unanswered
		}
		if res.Outcome == backend.OutcomeBuffered && !mine.Equal(slot) {
			// Any claim of a buffered slot is answered buffered: another
			// instance's manual run may have buffered this millisecond first.
			if !s.bufferedFor(ctx, j, slot, in.Token) {
				res = backend.ClaimResult{Outcome: backend.OutcomeRunning} // taken
			} else {
				mine = slot
				if onBuffered != nil {
					onBuffered(Run{Job: j.name, Slot: slot, Instance: s.instance, Token: in.Token, Manual: true})
				}
			}
		}
		switch {
		case res.Outcome == backend.OutcomeBuffered:
			// Buffered behind another run: claim it again once that has
			// ended, for as long as the caller waits; if it gives up first the
			// buffered slot is withdrawn.
			if err := s.awaitEnd(parent, j, c, res); err != nil {
				s.finishLater(j, c.Key(), StatusCancelled)
				return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("run %q now: buffered behind the run of slot %s: %w",
					j.name, res.WaitsFor.UTC().Format(time.RFC3339Nano), err)
			}
			cancel()
			ctx, cancel = s.callCtx(parent)
			reclaimed = c.reclaimed
			try--
			continue
		case res.Outcome == backend.OutcomeRunning && !res.WaitsFor.IsZero():
			// Cancel-other: the earlier run was asked to end. Claim the same
			// slot again once it has, for as long as the caller waits.
			if err := s.awaitEnd(parent, j, c, res); err != nil {
				return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("run %q now: waiting for the run of slot %s it asked to end: %w",
					j.name, res.WaitsFor.UTC().Format(time.RFC3339Nano), err)
			}
			cancel()
			ctx, cancel = s.callCtx(parent)
			reclaimed = c.reclaimed
			try--
			continue
		}
		switch res.Outcome {
		case backend.OutcomeWon:
			in.Slot = slot
			return c.RunClaim, res, sent, nil
		case backend.OutcomeOverlap:
			if j.cfg.overlap.Buffers() {
				return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("run %q now: %w: another run of it holds its lease and %d are buffered already (overlap policy %s)", j.name, ErrJobBusy, c.Buffers(), j.cfg.overlap)
			}
			return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("run %q now: %w: another run of it holds its lease", j.name, ErrJobBusy)
		case backend.OutcomeLate:
			return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("scheduler: run %q now: the run store's clock is more than the clock skew allowance (%v) ahead of this instance's", j.name, s.maxSkew)
		}
		// The millisecond is taken (running, done): another instance's manual run
		// has it. Its later ones may follow it closely, so skip a random stretch.
		slot, ok = j.manualSlot(slot.Add(time.Duration(1+rand.N(maxManualSkip)) * time.Millisecond))
		in.Token = newToken()
	}
	if !ok {
		return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("run %q now: %w: every millisecond is one of its slots, and with leases a manual run holds a lease on an instant that is not (an interval of at least 2ms)",
			j.name, ErrInvalidOption)
	}
	return backend.RunClaim{}, backend.ClaimResult{}, time.Time{}, fmt.Errorf("scheduler: run %q now: %d slots in a row were taken by other manual runs", j.name, maxManualSlotTries)
}

// bufferedFor reports whether the run store lists slot buffered for token, or
// cannot say (Active fails, or the slot is no longer listed buffered: the next
// claim tells); false when another token buffered it.
func (s *Scheduler) bufferedFor(ctx context.Context, j *job, slot time.Time, token string) bool {
	active, err := s.runs.Active(ctx, j.name)
	if err != nil {
		s.backendError(j, slot, "active", err)
		return true
	}
	for _, r := range active {
		if r.Slot.Equal(slot) && r.Buffered {
			return r.Token == token
		}
	}
	return true
}

// awaitEnd waits, for a manual claim answered res (waiting for an earlier run it
// asked to end), until claiming again may be answered otherwise, or ctx ends.
func (s *Scheduler) awaitEnd(ctx context.Context, j *job, c *leaseClaim, res backend.ClaimResult) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.loopCtx, cancel)
	defer stop()
	s.waitForChange(ctx, j, c, res)
	if s.loopCtx.Err() != nil {
		return ErrStopped
	}
	return ctx.Err()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// endManual settles a takeover of a manual run (found unfinished, its lease
// expired or released: its instance stopped before it ended): finished lost, with
// the attempt it took over recorded lost. A manual run is not run again.
func (s *Scheduler) endManual(j *job, c *leaseClaim, res backend.ClaimResult) {
	s.log.Info("ends a manual run whose instance stopped renewing its lease", j.logAttr(), "slot", c.Slot, "previous", res.Previous)
	s.finishLater(j, c.Key(), StatusLost)
	if res.PreviousToken == "" {
		return
	}
	prev := backend.ClaimInput{Slot: c.Slot, Token: res.PreviousToken, Instance: res.Previous, Attempt: res.PreviousAttempt, Manual: true}
	s.save(&slotAttempt{j: j, in: prev}, execResult{Status: StatusLost, FinishedAt: s.clock.Now(),
		Error: "the instance running this manual run stopped renewing its lease; ended by " + s.instance + " (a manual run is not run again)"})
}

// endUnrun ends a manual run's lease that rc's token may hold while its handler
// never started (its claim was abandoned, or its history record could not be
// written), so that nobody finds it unfinished: finished cancelled. It is written
// again from the outbox until the store answers; a repeat of the claim (the same
// token, creating nothing) says whether there is a lease to end. Under a buffer
// policy a slot the claim stored buffered is withdrawn: left buffered, no one
// would claim it, and the job's later slots would wait behind it for ever.
func (s *Scheduler) endUnrun(j *job, rc backend.RunClaim) {
	held := rc.Token
	// The lease, if held, is released first; then a token of its own takes the
	// run over (a takeover-only claim creates nothing) and finishes it. Both are
	// repeat-safe, so the outbox may send them again.
	rc.Token, rc.TakeoverOnly = newToken(), true
	s.complete(j, rc.Slot, "finish", time.Time{}, func(ctx context.Context) error {
		if j.cfg.overlap.Buffers() {
			// The claim may have stored the slot buffered: that holds no lease
			// to release, and a takeover-only claim of it only waits with it.
			// The token that buffered it withdraws it by finishing it (on a
			// lease it holds, that ends the lease the same way).
			err := s.runs.Finish(ctx, backend.RunKey{Job: j.name, Slot: rc.Slot, Token: held}, StatusCancelled)
			if err == nil {
				return nil
			}
			if !errors.Is(err, backend.ErrStaleToken) {
				return err
			}
		}
		if err := s.runs.Release(ctx, backend.RunKey{Job: j.name, Slot: rc.Slot, Token: held}); err != nil {
			return err
		}
		res, err := s.runs.Claim(ctx, rc)
		switch {
		case err != nil:
			return err
		case res.Outcome == backend.OutcomeRunning:
			return fmt.Errorf("scheduler: manual run of %q not yet released: %w", j.name, ErrLeaseLost)
		case res.Outcome != backend.OutcomeWon:
			return nil // nothing stored, or finished already
		}
		if err := s.runs.Finish(ctx, backend.RunKey{Job: j.name, Slot: rc.Slot, Token: rc.Token}, StatusCancelled); err != nil && !errors.Is(err, backend.ErrStaleToken) {
			return err
		}
		return nil
	})
}
