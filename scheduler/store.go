package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// slotStore is what the claim loop asks of the stores, and the only place the
// scheduler writes a slot's state or its records: a claim, a heartbeat, a settle.
type slotStore interface {
	// claim asks for a's slot with a.rc; records the answer decides are stored.
	claim(ctx context.Context, a *attempt) (backend.ClaimResult, error)
	// beat extends a's lease.
	beat(ctx context.Context, a *attempt) error
	// settle ends a's attempt as st says and stores its record.
	settle(ctx context.Context, a *attempt, st backend.Settlement) error
	// leased reports whether won attempts hold leases that others take over.
	leased() bool
}

// newSlotStore picks the store the claim loop asks: the run store when it keeps
// its history (Settler), else the run store with the records written beside it,
// else the backend alone.
func (s *Scheduler) newSlotStore() slotStore {
	switch set, ok := s.runs.(backend.Settler); {
	case s.runs == nil:
		return &plainStore{s: s}
	case ok:
		st := &settlerStore{s: s, settler: set}
		if rec, ok := s.backend.(interface {
			backend.ClaimRecorder
			backend.RecordDecider
		}); ok {
			st.rec = rec
		}
		return st
	}
	return &seedStore{s: s}
}

// settlerStore drives a run store that stores its own records.
type settlerStore struct {
	s       *Scheduler
	settler backend.Settler
	// rec, when the backend says its claim record decides (a fleet that mixes
	// instances without leases), is written before a won attempt runs.
	rec interface {
		backend.ClaimRecorder
		backend.RecordDecider
	}
}

func (st *settlerStore) leased() bool { return true }

func (st *settlerStore) claim(ctx context.Context, a *attempt) (backend.ClaimResult, error) {
	res, err := st.s.runs.Claim(ctx, a.rc)
	if err != nil || res.Outcome != backend.OutcomeWon || st.rec == nil || !st.rec.RecordDecides(a.j.name) {
		return res, err
	}
	// Bounded so that the lease is still good when the handler starts; a record
	// that fails otherwise than ErrClaimedElsewhere does not hold the run.
	rctx, cancel := context.WithTimeout(ctx, min(st.s.callTO, a.rc.Lease/3))
	err = st.rec.RecordClaim(rctx, a.input(st.s, res.Attempt))
	cancel()
	if err != nil && ctx.Err() != nil {
		// The call ended (Stop, or its time) before the record was answered:
		// the lease is handed over unrun, the hand-over sent until answered.
		st.s.log.Info("the slot's claim record was not answered in time; handing the lease over unrun", a.j.logAttr(), "slot", a.rc.Slot)
		st.s.abandon(a, "its claim record was not answered in time")
		return backend.ClaimResult{Outcome: backend.OutcomeDone}, nil
	}
	if err != nil && !errors.Is(err, backend.ErrClaimedElsewhere) {
		st.s.backendError(a.j, a.rc.Slot, "record_claim", err)
		return res, nil
	}
	if err != nil {
		st.s.log.Warn("slot claimed by an instance without leases; not running it", a.j.logAttr(), "slot", a.rc.Slot, "err", err)
		end := backend.Settlement{Key: a.key(), Status: StatusSkipped, Error: err.Error(), Retention: a.rc.Retention}
		if serr := st.settler.Settle(ctx, end); serr != nil {
			return res, serr
		}
		return backend.ClaimResult{Outcome: backend.OutcomeDone, Status: StatusSkipped}, nil
	}
	return res, err
}

func (st *settlerStore) beat(ctx context.Context, a *attempt) error {
	return st.s.runs.Heartbeat(ctx, a.key(), a.l.dur)
}

func (st *settlerStore) settle(ctx context.Context, _ *attempt, end backend.Settlement) error {
	return st.settler.Settle(ctx, end)
}

// recordDecides reports whether the record of a won attempt of job must be
// written before the handler starts (backend.RecordDecider).
func recordDecides(b backend.Backend, job string) bool {
	d, ok := b.(backend.RecordDecider)
	return !ok || d.RecordDecides(job)
}

// seedStore drives a run store of the seed's shape (no Settler): Finish,
// Release and Retry end the attempts, and the records go to the backend beside
// them, through the outbox. A process that dies between the two writes leaves
// an attempt without its record.
type seedStore struct{ s *Scheduler }

func (st *seedStore) leased() bool { return true }

func (st *seedStore) claim(ctx context.Context, a *attempt) (backend.ClaimResult, error) {
	s := st.s
	res, err := s.runs.Claim(ctx, a.rc)
	if err != nil {
		return res, err
	}
	now := s.clock.Now()
	switch res.Outcome {
	case backend.OutcomeOverlap, backend.OutcomeLate, backend.OutcomeLimit, backend.OutcomeExcluded:
		why := map[backend.ClaimOutcome]string{backend.OutcomeOverlap: machine.WhySkipped, backend.OutcomeLimit: machine.WhyLimit,
			backend.OutcomeLate: a.rc.LateWhy, backend.OutcomeExcluded: a.rc.ExcludedWhy}[res.Outcome]
		if why == "" {
			why = machine.WhyLate
		}
		st.record(a, backend.StoredResult{Slot: a.rc.Slot, Token: a.rc.Token, Instance: s.instance, Attempt: 1,
			Backfill: a.rc.Backfill, Status: res.Status, FinishedAt: now, Error: why})
		return res, nil
	case backend.OutcomeWon:
	case backend.OutcomeBuffered:
		if a.kind == claimManual && !st.bufferedFor(ctx, a) {
			res.Outcome = backend.OutcomeRunning // another RunNow's slot
		}
		return res, nil
	default:
		return res, nil
	}
	if res.PreviousToken != "" && !res.Retried && !res.Reopened {
		st.record(a, backend.StoredResult{Slot: a.rc.Slot, Token: res.PreviousToken, Instance: res.Previous, Attempt: res.PreviousAttempt,
			Status: StatusLost, FinishedAt: now, Error: machine.WhyTakenOver + s.instance})
	}
	in := a.input(s, res.Attempt)
	if a.kind == claimManual {
		if _, err := s.backend.RecordManualRun(ctx, in); err != nil {
			return res, err
		}
	} else if rec, ok := s.backend.(backend.ClaimRecorder); ok {
		if recordDecides(s.backend, a.j.name) {
			if err := rec.RecordClaim(ctx, in); errors.Is(err, backend.ErrClaimedElsewhere) {
				_ = s.runs.Finish(ctx, a.key(), StatusSkipped)
				return backend.ClaimResult{Outcome: backend.OutcomeDone, Status: StatusSkipped}, nil
			} else if err != nil {
				return res, err
			}
		} else {
			s.complete(a.j, a.rc.Slot, "record_claim", time.Time{}, func(ctx context.Context) error {
				return rec.RecordClaim(ctx, in)
			})
		}
	}
	// What the machine stores for a Settler, said with Finish (a store that
	// ignores the claim's newer fields).
	manual := a.kind == claimAdopt && a.j.manualAt(a.rc.Slot)
	excluded := a.rc.ExcludedWhy != "" && res.Attempt == 1 && !res.Reopened
	if a.rc.PausedWhy != "" || a.rc.EntryGone || manual || excluded {
		status, why, out := StatusPaused, a.rc.PausedWhy, backend.OutcomePaused
		switch {
		case excluded:
			status, why, out = StatusExcluded, a.rc.ExcludedWhy, backend.OutcomeExcluded
		case a.rc.EntryGone:
			status, why, out = StatusCancelled, machine.WhyEntryRemoved, backend.OutcomeDone
		case manual:
			status, why, out = StatusLost, machine.WhyManualStopped, backend.OutcomeDone
		}
		if err := s.runs.Finish(ctx, a.key(), status); err != nil {
			return res, err
		}
		st.record(a, backend.StoredResult{Slot: a.rc.Slot, Token: a.rc.Token, Instance: s.instance, Attempt: res.Attempt,
			Backfill: a.rc.Backfill, Status: status, FinishedAt: now, Error: why, Fence: res.Fence})
		res.Outcome, res.Status = out, status
	}
	return res, nil
}

// bufferedFor reports whether the run store lists a's slot buffered for a's
// token, or cannot say; false when another token buffered it.
func (st *seedStore) bufferedFor(ctx context.Context, a *attempt) bool {
	active, err := st.s.runs.Active(ctx, a.j.name)
	if err != nil {
		return true
	}
	for _, r := range active {
		if r.Slot.Equal(a.rc.Slot) && r.Buffered {
			return r.Token == a.rc.Token
		}
	}
	return true
}

func (st *seedStore) beat(ctx context.Context, a *attempt) error {
	return st.s.runs.Heartbeat(ctx, a.key(), a.l.dur)
}

func (st *seedStore) settle(ctx context.Context, a *attempt, end backend.Settlement) error {
	s := st.s
	rt, retries := s.runs.(backend.Retrier)
	var err error
	switch {
	case end.Retry != nil && retries && a.kind != claimManual:
		err = rt.Retry(ctx, end.Key, end.Retry.Delay, end.Retry.Within)
	case end.HandOver && a.kind != claimManual && !end.EntryGone:
		err = s.runs.Release(ctx, end.Key)
	default:
		err = s.runs.Finish(ctx, end.Key, end.Status)
	}
	if errors.Is(err, backend.ErrStaleToken) || errors.Is(err, backend.ErrLeaseLost) {
		end.Error = fmt.Sprintf("superseded (handler returned %s after losing its lease): %s", end.Status, end.Error)
		end.Status = StatusSuperseded
	} else if err != nil {
		return err
	}
	r := backend.StoredResult{Slot: a.rc.Slot, Token: a.rc.Token, Instance: s.instance, Attempt: max(a.res.Attempt, 1),
		Manual: a.kind == claimManual, Backfill: a.backfill(), Status: end.Status, StartedAt: end.StartedAt,
		FinishedAt: end.FinishedAt, Error: end.Error, Fence: a.res.Fence}
	st.record(a, r)
	if r.Status == StatusSuperseded {
		return err
	}
	return nil
}

// record stores r, a record of a's slot, beside the run, through the outbox.
func (st *seedStore) record(a *attempt, r backend.StoredResult) {
	st.s.saveRecords(a, []backend.StoredResult{r})
}

// plainStore drives a backend without a run store: the backend's claim decides
// which instance runs a slot, and the machine, on a state this process keeps,
// its retries and pauses. Records go to the backend through the outbox.
type plainStore struct{ s *Scheduler }

func (st *plainStore) leased() bool { return false }

func (st *plainStore) claim(ctx context.Context, a *attempt) (backend.ClaimResult, error) {
	s := st.s
	if a.local.Phase == machine.Pending {
		in := a.input(s, 1)
		switch {
		case a.kind == claimManual:
			slot, err := s.backend.RecordManualRun(ctx, in)
			if err != nil {
				return backend.ClaimResult{}, err
			}
			if !slot.IsZero() {
				a.rc.Slot, a.local.Slot = slot, slot
			}
		case s.clock.Now().After(a.deadline):
			st.lateAnswer(a, in)
			return backend.ClaimResult{Outcome: backend.OutcomeLate}, nil
		default:
			// No claim is sent after the deadline: the window check's terms.
			ctx, cancel := context.WithTimeout(ctx, a.deadline.Sub(s.clock.Now()))
			won, err := s.backend.Claim(ctx, in)
			cancel()
			if err != nil || !won {
				return backend.ClaimResult{Outcome: backend.OutcomeDone}, err
			}
		}
	}
	rc := a.rc
	rc.Deadline, rc.TakeoverOnly = a.deadline.Add(s.maxSkew), false
	d := machine.Claim(a.local, rc, machine.Job{}, s.clock.Now())
	a.local = d.Run
	s.saveRecords(a, d.Records)
	return d.Result, nil
}

// lateAnswer records late a slot whose claim's answers never came before its
// deadline, when one more claim (repeat-safe, inside the window) says it was won.
func (st *plainStore) lateAnswer(a *attempt, in backend.ClaimInput) {
	s := st.s
	left := a.deadline.Add(s.maxSkew).Sub(s.clock.Now())
	if a.unanswered.IsZero() || left <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.loopCtx, min(s.callTO, left))
	won, err := s.backend.Claim(ctx, in)
	cancel()
	if err == nil && won {
		s.saveRecords(a, []backend.StoredResult{{Slot: a.rc.Slot, Token: a.rc.Token, Instance: s.instance, Attempt: 1,
			Status: StatusLate, FinishedAt: s.clock.Now(), Error: "the claim was won, but its answer came after the slot's deadline: not run"}})
	}
}

func (st *plainStore) beat(context.Context, *attempt) error { return nil }

func (st *plainStore) settle(_ context.Context, a *attempt, end backend.Settlement) error {
	d := machine.Settle(a.local, end, st.s.clock.Now())
	a.local = d.Run
	st.s.saveRecords(a, d.Records)
	return d.Err
}

// saveRecords stores recs, records of a's slot, through the outbox.
func (s *Scheduler) saveRecords(a *attempt, recs []backend.StoredResult) {
	keep := a.rc.Retention
	for _, r := range recs {
		r.Error = backend.TruncateText(r.Error, MaxErrorText)
		s.complete(a.j, r.Slot, "save_result", keep.Until(r.FinishedAt), func(ctx context.Context) error {
			return s.backend.SaveResult(ctx, a.j.name, r, keep)
		})
	}
}
