package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// settle ends a's attempt with one call to the store: finished as res says, its
// retry stored (plan), or left for a backup (a lost lease, Stop). The call is
// repeat-safe. One whose answer is lost is sent again while the heartbeats keep the
// lease alive, until the store would have forgotten the run. Once Stop has begun it
// is left to the outbox, which Stop drains. A retry asks for what is left of its
// window each time, and is dropped once the window has passed or the outbox takes
// over: the attempt is finished instead. A retry whose answer was lost may be
// stored, its window ending by the store's clock. A settle without it answered
// stale then asks once more with it; a stored retry answers as a repeat. It
// returns res as settled.
func (s *Scheduler) settle(a *attempt, res execResult, plan *retryPlan) execResult {
	j := a.j
	st := backend.Settlement{Key: a.key(), Status: res.Status, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt,
		Error: backend.TruncateText(res.Error, MaxErrorText), Retention: a.rc.Retention,
		HandOver: (res.Status == StatusLost || res.Status == StatusCancelled) && !res.ended}
	st.Incarnation, st.EntryGone = s.entryFacts(j)
	if st.FinishedAt.IsZero() {
		st.FinishedAt = s.clock.Now()
	}
	giveUp := s.clock.Now().Add(j.keep())
	hard, stopping := s.hardCtx.Done(), s.loopCtx.Done() // either ends a wait between tries
	// unanswered is the last retry sent whose answer was lost: maybe stored.
	var unanswered *backend.RetryWindow
	for try := 0; ; try++ {
		st.Retry = plan.window(s.clock.Now())
		if plan != nil && st.Retry == nil {
			s.log.Warn("retry not stored in time: the failure stands", j.logAttr(), "slot", a.rc.Slot, "attempt", a.res.Attempt)
			plan = nil
		}
		ctx, cancel := s.writeCtx()
		err := s.store.settle(ctx, a, st)
		cancel()
		if st.Retry == nil && unanswered != nil && errors.Is(err, backend.ErrStaleToken) {
			// Its retry may be stored: the store's window ends by its own
			// clock. Asked again, a stored retry answers as a repeat.
			st.Retry = unanswered
			ctx, cancel := s.writeCtx()
			err = s.store.settle(ctx, a, st)
			cancel()
			if errors.Is(err, backend.ErrStaleToken) {
				st.Retry = nil
			}
		}
		if st.Retry != nil && err != nil {
			unanswered = st.Retry
		}
		switch {
		case err == nil:
			res.retried = st.Retry != nil
			if res.retried { // the store keeps the slot from its retry's window on
				a.answered = s.clock.Now().Add(st.Retry.Delay + st.Retry.Within)
			}
			res.handedOver = st.HandOver && st.Retry == nil && !st.EntryGone
			return res
		case errors.Is(err, backend.ErrStaleToken), errors.Is(err, ErrLeaseLost):
			// Another attempt took the run over and recorded this one lost.
			s.log.Warn("result superseded: another attempt holds the run", j.logAttr(), "slot", a.rc.Slot, "token", a.rc.Token, "status", res.Status)
			res.Status = StatusSuperseded
			return res
		}
		s.backendError(j, a.rc.Slot, "settle", err)
		if errors.Is(err, backend.ErrInvalidClaim) {
			return res
		}
		if s.clock.Now().After(giveUp) || s.loopCtx.Err() != nil {
			st.Retry = nil
			s.later(j, a.rc.Slot, "settle", time.Time{}, s.settleWrite(a, st))
			return res
		}
		t := s.clock.NewTimer(retryDelay(try))
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

// settleWrite is the write of st for the outbox: an attempt another took over
// meanwhile is settled already.
func (s *Scheduler) settleWrite(a *attempt, st backend.Settlement) func(context.Context) error {
	return func(ctx context.Context) error {
		err := s.store.settle(ctx, a, st)
		if errors.Is(err, backend.ErrStaleToken) || errors.Is(err, ErrLeaseLost) {
			return nil
		}
		return err
	}
}

// abandon ends a's attempt, which never started its handler, cancelled for
// why: a lease it may hold is handed over (a manual run's is finished), a slot
// it buffered is withdrawn. Sent now and again from the outbox until answered;
// a store that holds nothing for its token answers stale, which is fine.
func (s *Scheduler) abandon(a *attempt, why string) {
	st := backend.Settlement{Key: a.key(), Status: StatusCancelled, FinishedAt: s.clock.Now(), Error: "not run: " + why,
		HandOver: true, Retention: a.rc.Retention}
	st.Incarnation, st.EntryGone = s.entryFacts(a.j)
	s.complete(a.j, a.rc.Slot, "settle", time.Time{}, s.settleWrite(a, st))
}
