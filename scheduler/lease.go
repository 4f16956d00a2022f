package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// lease is a held lease the execution must keep alive and settle.
type lease struct {
	token string
	dur   time.Duration
	// sent is when the lease is counted from, by the scheduler's clock: the first
	// send of the winning token whose answer was lost, else the send of the claim
	// (or of the heartbeat) answered. The store's expiry is at least one lease after.
	sent time.Time
	// manual: a manual run's lease, finished however the run ended (nobody takes a
	// manual run over to run it again).
	manual bool
	// previous is the instance whose attempt this lease took over (Run.Previous).
	previous string
}

// heartbeat extends the lease every lease/3 until done. It cancels the handler as
// soon as the store says the lease is lost, or when no heartbeat has succeeded for
// long enough that the store may expire the lease: a lease/10 margin before one lease
// after the last successful heartbeat was sent (the store's expiry comes after that
// instant, so a backup never starts while this handler still thinks it holds the run).
// Once the handler has returned (settling), a loss is not reported: Finish decides.
func (s *Scheduler) heartbeat(done context.Context, j *job, slot time.Time, l *lease, settling *atomic.Bool, cancel context.CancelCauseFunc) {
	every := l.dur / 3
	margin := leaseMargin(l.dur)
	expireAt := l.sent.Add(l.dur - margin)
	nextBeat := l.sent.Add(every)
	for {
		now := s.clock.Now()
		if !now.Before(expireAt) {
			s.leaseLost(j, slot, l, settling, cancel, fmt.Errorf("%w: job %q slot %s: no heartbeat succeeded for %v of a %v lease", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), now.Sub(expireAt.Add(margin-l.dur)).Round(time.Millisecond), l.dur))
			return
		}
		wake := nextBeat
		if expireAt.Before(wake) {
			wake = expireAt
		}
		t := s.clock.NewTimer(wake.Sub(now))
		select {
		case <-done.Done():
			t.Stop()
			return
		case <-t.C():
		}
		now = s.clock.Now()
		if now.Before(nextBeat) || !now.Before(expireAt) {
			continue
		}
		sent := now
		ctx, cc := context.WithTimeout(done, min(s.callTO, expireAt.Sub(now)))
		err := s.runs.Heartbeat(ctx, backend.RunKey{Job: j.name, Slot: slot, Token: l.token}, l.dur)
		cc()
		if done.Err() != nil {
			return
		}
		switch {
		case err == nil:
			expireAt = sent.Add(l.dur - margin)
			nextBeat = sent.Add(every)
		case errors.Is(err, ErrLeaseLost):
			s.leaseLost(j, slot, l, settling, cancel, fmt.Errorf("%w: job %q slot %s: %w", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), err))
			return
		default:
			if !settling.Load() {
				s.backendError(j, slot, "heartbeat", err)
			}
			nextBeat = s.clock.Now().Add(min(every/4, 250*time.Millisecond))
		}
	}
}

// leaseMargin is how long before a lease may expire in the store its holder gives
// it up: lease/10, at least 50ms.
func leaseMargin(lease time.Duration) time.Duration { return max(lease/10, 50*time.Millisecond) }

// leaseLost cancels the running handler, unless it has already returned.
func (s *Scheduler) leaseLost(j *job, slot time.Time, l *lease, settling *atomic.Bool, cancel context.CancelCauseFunc, err error) {
	if settling.Load() {
		return
	}
	s.log.Warn("lease lost; cancelling the handler", "job", j.name, "slot", slot, "err", err)
	s.emit(Event{Kind: EventLeaseLost, Job: j.name, Slot: slot, Token: l.token, Err: err})
	cancel(err)
}

// settle ends a lease after the handler returned: a run cancelled by Stop, or one
// that lost its lease before finishing, is released so a backup takes over at once;
// anything else is finished, which fails for a holder that was replaced (its result
// is then stored as superseded). Finish is repeat-safe for the holder, so one that
// gets no answer is sent again while the heartbeats keep the lease alive: a lost
// Finish must not let the lease expire under a run that succeeded, or a backup would
// run the slot again. It is tried until an answer, or until the store would have
// forgotten the run, or, once Stop has begun, once; then it is left to the
// outbox, which Stop drains.
func (s *Scheduler) settle(j *job, in backend.ClaimInput, fence uint64, l *lease, res execResult) (execResult, bool) {
	slot := in.Slot
	if !l.manual && (res.Status == StatusCancelled || res.Status == StatusLost) {
		s.release(j, slot, l.token)
		return res, false
	}
	giveUp := s.clock.Now().Add(j.keep())
	hard, stopping := s.hardCtx.Done(), s.loopCtx.Done() // either ends a retry's wait
	for attempt := 0; ; attempt++ {
		ctx, cancel := s.callCtx(context.Background())
		err := s.runs.Finish(ctx, backend.RunKey{Job: j.name, Slot: slot, Token: l.token}, res.Status)
		cancel()
		switch {
		case err == nil:
			return res, false
		case errors.Is(err, backend.ErrStaleToken), errors.Is(err, ErrLeaseLost):
			s.log.Warn("result superseded: another attempt holds the run", "job", j.name, "slot", slot, "token", l.token, "status", res.Status)
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
			s.settleLater(j, in, fence, l.token, res)
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
func (s *Scheduler) settleLater(j *job, in backend.ClaimInput, fence uint64, token string, res execResult) {
	s.finishThenRecord(j, in.Slot, token, res.Status, false, func(stale bool) (backend.StoredResult, backend.Retention, bool) {
		if stale {
			res = superseded(res)
		}
		r, keep := s.result(j, in, fence, res)
		return r, keep, true
	})
}

// finishThenRecord finishes token's run with status, then stores the record that
// record makes of it (none when it returns false), sending both again from the
// outbox until stored; stale tells record that another attempt holds the run. Now
// is false for a caller whose own tries just failed: straight to the outbox.
func (s *Scheduler) finishThenRecord(j *job, slot time.Time, token string, status Status, now bool, record func(stale bool) (backend.StoredResult, backend.Retention, bool)) {
	finished, stale := false, false // the outbox sends it again, one try at a time
	write := func(ctx context.Context) error {
		if !finished {
			err := s.runs.Finish(ctx, backend.RunKey{Job: j.name, Slot: slot, Token: token}, status)
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
		s.complete(j, slot, "finish", time.Time{}, write)
	} else {
		s.later(j, slot, "finish", time.Time{}, write)
	}
}

// finishLater finishes token's run with status, and sends the Finish again from the
// outbox until the store answers: a holder's Finish is accepted also after its
// lease expired, as long as nobody took the run over (who then ends it).
func (s *Scheduler) finishLater(j *job, slot time.Time, token string, status Status) {
	s.finishThenRecord(j, slot, token, status, true, func(bool) (backend.StoredResult, backend.Retention, bool) {
		return backend.StoredResult{}, backend.Retention{}, false
	})
}

// freshLease makes sure a won lease has most of its time left before a handler
// starts under it: a win whose claim was first sent long ago (its answer lost, or
// the store slow) is renewed by one heartbeat first. A lease that cannot be renewed
// is released, unrun, for a backup.
func (s *Scheduler) freshLease(j *job, slot time.Time, l *lease) bool {
	if s.clock.Now().Before(l.sent.Add(l.dur / 3)) {
		return true
	}
	sent := s.clock.Now()
	ctx, cancel := context.WithTimeout(s.loopCtx, max(l.sent.Add(l.dur-leaseMargin(l.dur)).Sub(sent), 0))
	err := s.runs.Heartbeat(ctx, backend.RunKey{Job: j.name, Slot: slot, Token: l.token}, l.dur)
	cancel()
	if err == nil {
		l.sent = sent
		return true
	}
	s.log.Warn("won a lease too late to run it; releasing it", "job", j.name, "slot", slot, "err", err)
	s.emit(Event{Kind: EventLeaseLost, Job: j.name, Slot: slot, Token: l.token, Err: err})
	s.release(j, slot, l.token)
	return false
}

// release hands a lease over at once, so that a backup takes the run over.
func (s *Scheduler) release(j *job, slot time.Time, token string) {
	ctx, cancel := s.callCtx(context.Background())
	defer cancel()
	if err := s.runs.Release(ctx, backend.RunKey{Job: j.name, Slot: slot, Token: token}); err != nil {
		s.backendError(j, slot, "release", err)
	}
}

// claimedElsewhere settles a won lease whose slot an instance without leases ran:
// the run is finished (as skipped here; that instance records how it ended), so no
// backup takes it over.
func (s *Scheduler) claimedElsewhere(j *job, slot time.Time, l *lease, err error) {
	s.log.Warn("slot claimed by an instance without leases; not running it", "job", j.name, "slot", slot, "err", err)
	s.emit(Event{Kind: EventLost, Job: j.name, Slot: slot, Token: l.token, Outcome: backend.OutcomeDone, Err: err})
	ctx, cancel := s.callCtx(context.Background())
	defer cancel()
	if err := s.runs.Finish(ctx, backend.RunKey{Job: j.name, Slot: slot, Token: l.token}, StatusSkipped); err != nil {
		s.backendError(j, slot, "finish", err)
	}
}
