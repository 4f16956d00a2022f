package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// lease is the lease a won attempt holds, as this instance counts it.
type lease struct {
	dur time.Duration
	// sent is when the lease is counted from, by the scheduler's clock: the first
	// send of the winning token whose answer was lost, else the send of the claim
	// (or of the heartbeat) answered. The store's expiry is at least one lease after.
	sent time.Time
	// previous is the instance whose attempt this one took over (Run.Previous).
	previous string
}

// heartbeat extends the lease every lease/3 until done. It cancels the handler as
// soon as the store says the lease is lost. It also cancels it when no heartbeat
// has succeeded for long enough that the store may expire the lease. It does so a
// lease/10 margin before one lease after the last successful heartbeat was sent.
// The store's expiry comes after that instant, so a backup never starts while
// this handler still thinks it holds the run.
// Once the handler has returned (settling), a loss is not reported: Finish decides.
func (s *Scheduler) heartbeat(done context.Context, a *attempt, settling *atomic.Bool, cancel context.CancelCauseFunc) {
	j, slot, l := a.j, a.rc.Slot, &a.l
	every := l.dur / 3
	margin := leaseMargin(l.dur)
	expireAt := l.sent.Add(l.dur - margin)
	nextBeat := l.sent.Add(every)
	asked := false
	poke := s.watchOwnRun(done, a)
	for {
		now := s.clock.Now()
		if !now.Before(expireAt) {
			s.leaseLost(a, settling, cancel, fmt.Errorf("%w: job %q slot %s: no heartbeat succeeded for %v of a %v lease", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), now.Sub(expireAt.Add(margin-l.dur)).Round(time.Millisecond), l.dur))
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
		case <-poke:
			// The run changed in the store (a later slot's cancel request): beat
			// now, and read the answer.
			t.Stop()
			nextBeat = s.clock.Now()
		}
		now = s.clock.Now()
		if now.Before(nextBeat) || !now.Before(expireAt) {
			continue
		}
		sent := now
		ctx, cc := context.WithTimeout(done, min(s.callTO, expireAt.Sub(now)))
		err := s.store.beat(ctx, a)
		cc()
		if done.Err() != nil {
			return
		}
		var ce *backend.CancelError
		switch {
		case err == nil:
			expireAt = sent.Add(l.dur - margin)
			nextBeat = sent.Add(every)
		case errors.As(err, &ce):
			// Renewed, and a later slot asked the run to end: the run is still
			// this attempt's until it finishes.
			expireAt = sent.Add(l.dur - margin)
			nextBeat = sent.Add(every)
			if !asked {
				asked = true
				s.cancelAsked(a, settling, cancel, ce)
			}
		case errors.Is(err, ErrLeaseLost):
			s.leaseLost(a, settling, cancel, fmt.Errorf("%w: job %q slot %s: %w", ErrLeaseLost, j.name, slot.Format(time.RFC3339Nano), err))
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
func (s *Scheduler) leaseLost(a *attempt, settling *atomic.Bool, cancel context.CancelCauseFunc, err error) {
	if settling.Load() {
		return
	}
	s.log.Warn("lease lost; cancelling the handler", a.j.logAttr(), "slot", a.rc.Slot, "err", err)
	s.emit(Event{Kind: EventLeaseLost, Job: a.j.name, Slot: a.rc.Slot, Token: a.rc.Token, Err: err})
	cancel(err)
}

// watchOwnRun returns a channel that receives when the stored state of a's run
// may have changed. It serves a job whose runs a later slot may ask to end
// (OverlapCancelOther) on a store that watches runs. The holder then learns of
// a request at once, not at its next heartbeat. Nil (never ready) otherwise. It
// receives once the first watch is taken, and after each change, the watch taken
// again first. A watch that closes at once is taken at most every watchOwnEvery.
func (s *Scheduler) watchOwnRun(done context.Context, a *attempt) <-chan struct{} {
	w, ok := s.runs.(backend.LeaseWatcher)
	if !ok || a.j.cfg.overlap != OverlapCancelOther {
		return nil
	}
	poke := make(chan struct{}, 1)
	go func() {
		ch, err := w.WatchRun(done, a.j.name, a.rc.Slot)
		if err == nil {
			// One beat once the watch is taken: a request stored since the claim
			// was won, before the watch, is seen by it.
			poke <- struct{}{}
		}
		for err == nil { // on an error, the heartbeats still come
			select {
			case <-done.Done():
				return
			case <-ch:
			}
			// Watch again before the beat: a change between the two is seen by
			// the beat or by the new watch.
			ch, err = w.WatchRun(done, a.j.name, a.rc.Slot)
			select {
			case poke <- struct{}{}:
			default:
			}
			select {
			case <-ch: // closed at once (the lease is not live): not more often than watchOwnEvery
				if !s.sleepUntil(done, s.clock.Now().Add(watchOwnEvery)) {
					return
				}
			default:
			}
		}
	}()
	return poke
}

// watchOwnEvery bounds how often a holder takes again a watch of its own run that
// closes at once (its lease not live).
const watchOwnEvery = 250 * time.Millisecond

// cancelAsked cancels the running handler, unless it has already returned,
// because a later slot of its job asked the run to end (OverlapCancelOther).
func (s *Scheduler) cancelAsked(a *attempt, settling *atomic.Bool, cancel context.CancelCauseFunc, ce *backend.CancelError) {
	if settling.Load() {
		return
	}
	cause := fmt.Errorf("%w: slot %s asked from instance %s", ErrOverlapCancelled,
		ce.Request.Slot.UTC().Format(time.RFC3339Nano), ce.Request.Instance)
	s.log.Info("a later slot asked the run to end; cancelling the handler", a.j.logAttr(), "slot", a.rc.Slot,
		"asked_by_slot", ce.Request.Slot, "asked_by", ce.Request.Instance)
	s.emit(Event{Kind: EventCancelRequested, Job: a.j.name, Slot: a.rc.Slot, Token: a.rc.Token, Attempt: a.res.Attempt,
		Manual: a.man != nil, Backfill: a.backfill(), Next: ce.Request.Slot, Err: cause})
	cancel(cause)
}

// freshLease makes sure a won lease has most of its time left before a handler
// starts under it. A win whose claim was first sent long ago (its answer lost, or
// the store slow) is renewed by one heartbeat first. False when it cannot be.
func (s *Scheduler) freshLease(a *attempt) bool {
	l := &a.l
	if !s.store.leased() || s.clock.Now().Before(l.sent.Add(l.dur/3)) {
		return true
	}
	sent := s.clock.Now()
	ctx, cancel := context.WithTimeout(s.loopCtx, max(l.sent.Add(l.dur-leaseMargin(l.dur)).Sub(sent), 0))
	err := s.store.beat(ctx, a)
	cancel()
	if err == nil || errors.Is(err, backend.ErrCancelRequested) {
		// Renewed; a later slot's request to end the run is acted on once the
		// handler runs (the holder's first beat).
		l.sent = sent
		return true
	}
	s.log.Warn("won a lease too late to run it; handing it over", a.j.logAttr(), "slot", a.rc.Slot, "err", err)
	s.emit(Event{Kind: EventLeaseLost, Job: a.j.name, Slot: a.rc.Slot, Token: a.rc.Token, Err: err})
	return false
}
