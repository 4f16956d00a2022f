package scheduler

import (
	"context"
	"fmt"
	"time"
)

// Repair of history on read. A run's record says running from its claim until its
// result is stored. When the instance that ran it died before its result was
// stored (its outbox lost with it), or a takeover's note that the attempt before
// it was lost was never stored, nothing would ever end that record. History ends
// such a record when it reads it, from what the run store knows, and stores the
// ending (through the outbox) so that every reader sees it:
//
//   - the run store holds the slot finished by this attempt: its status, noted as
//     recorded from the run store;
//   - another attempt took the slot over (unfinished or finished), or the store
//     no longer holds it: lost;
//   - the attempt's lease expired or was released and nobody took it over: this
//     instance takes it over (as a backup would; a manual run is ended lost);
//   - without leases, a run with a timeout whose result has not come within the
//     timeout: lost. Without leases and without a timeout nothing can tell a dead
//     holder from a slow one, and the record stays running.
//
// Only records claimed longer ago than repairGrace are looked at, so a result
// still on its way (written again from the holder's outbox) is not raced.

// repairGrace is how old a running record must be, by its claim time, before a
// reader looks at it: several call timeouts, for the holder's own write and its
// first retries.
func (s *Scheduler) repairGrace() time.Duration { return 3 * s.callTO }

// repair ends, in recs, the records of j left running by attempts that can no
// longer end them, and stores each ending. A store that cannot be asked leaves the
// records as they are.
func (s *Scheduler) repair(ctx context.Context, j *job, recs []RunRecord) {
	if !s.Running() {
		return // its writes need the outbox and a taker of the scheduler's
	}
	now := s.clock.Now()
	var orphans []int
	for i := range recs {
		r := &recs[i]
		if r.Status == StatusRunning && !r.ClaimedAt.IsZero() && now.Sub(r.ClaimedAt) > s.repairGrace() {
			orphans = append(orphans, i)
		}
	}
	if len(orphans) == 0 {
		return
	}
	if s.runs == nil {
		if j.cfg.timeout <= 0 {
			return
		}
		for _, i := range orphans {
			if now.Sub(recs[i].ClaimedAt) > j.cfg.timeout+s.repairGrace() {
				s.ended(j, &recs[i], StatusLost, fmt.Sprintf("no result within the job's timeout (%v) after its claim: the instance running it stopped before storing it; ended by %s", j.cfg.timeout, s.instance))
			}
		}
		return
	}
	cctx, cancel := s.callCtx(ctx)
	active, err := s.runs.Active(cctx, j.name)
	cancel()
	if err != nil {
		return
	}
	bySlot := make(map[int64]ActiveRun, len(active))
	for _, a := range active {
		bySlot[a.Slot.UnixMilli()] = a
	}
	for _, i := range orphans {
		r := &recs[i]
		a, unfinished := bySlot[r.Slot.UnixMilli()]
		switch {
		case unfinished && a.Token == r.Token && a.Live:
			// Running now.
		case unfinished && a.Token == r.Token:
			s.adoptOnce(j, r.Slot)
		case unfinished:
			s.ended(j, r, StatusLost, fmt.Sprintf("taken over by attempt %d on %s; this attempt's end was never stored", a.Attempt, orDash(a.Instance)))
		default:
			s.endFromStore(ctx, j, r)
		}
	}
}

// endFromStore ends r, a record of a slot the run store does not hold unfinished,
// from what the store holds: a repeat-safe takeover-only claim creates nothing and
// answers how the slot ended.
func (s *Scheduler) endFromStore(ctx context.Context, j *job, r *RunRecord) {
	c := &leaseClaim{RunClaim: RunClaim{
		Job: j.name, Slot: r.Slot, Token: newToken(), Instance: s.instance, Lease: j.cfg.lease,
		Overlap: j.cfg.overlap, TakeoverOnly: true, Keep: j.keep(),
	}, kind: claimAdopt, localDeadline: r.Slot.Add(j.cfg.maxLate)}
	sent := s.clock.Now()
	cctx, cancel := s.callCtx(ctx)
	res, err := s.runs.Claim(cctx, c.RunClaim)
	cancel()
	switch {
	case err != nil:
	case res.Outcome == OutcomeDone && res.Attempt == r.Attempt && res.Status.Finished():
		s.ended(j, r, res.Status, fmt.Sprintf("ended %s in the run store, whose result was never stored; recorded by %s", res.Status, s.instance))
	case res.Outcome == OutcomeDone:
		s.ended(j, r, StatusLost, fmt.Sprintf("the slot was ended by attempt %d (%s); this attempt's end was never stored", res.Attempt, orDash(string(res.Status))))
	case res.Outcome == OutcomeNone:
		s.ended(j, r, StatusLost, "its end was never stored, and the run store no longer holds the run")
	case res.Outcome == OutcomeWon:
		// It became unfinished since Active was read: a takeover, acted on like
		// any other.
		if !s.besideIfRunning(func() { s.act(j, c, res, sent) }) {
			s.release(j, c.Slot, c.Token)
		}
	}
}

// ended sets r's status and stores that ending for r's attempt.
func (s *Scheduler) ended(j *job, r *RunRecord, status Status, why string) {
	now := s.clock.Now()
	r.Status, r.FinishedAt, r.Error = status, now, why
	in := ClaimInput{Slot: r.Slot, Token: r.Token, Instance: r.Instance, Attempt: r.Attempt, Manual: r.Manual}
	s.save(j, in, r.Fence, execResult{Status: status, StartedAt: r.StartedAt, FinishedAt: now, Error: why})
}

// adoptOnce takes over, beside the reader, a run whose lease ended unfinished with
// nobody taking it over, once per slot at a time on this instance.
func (s *Scheduler) adoptOnce(j *job, slot time.Time) {
	k := adoptKey{j.name, slot.UnixMilli()}
	s.mu.Lock()
	if s.adopting == nil {
		s.adopting = map[adoptKey]bool{}
	}
	busy := s.adopting[k]
	s.adopting[k] = true
	s.mu.Unlock()
	if busy {
		return
	}
	done := func() {
		s.mu.Lock()
		delete(s.adopting, k)
		s.mu.Unlock()
	}
	if !s.besideIfRunning(func() {
		defer done()
		s.handleLeased(j, slot, claimAdopt)
	}) {
		done()
	}
}

type adoptKey struct {
	job  string
	slot int64
}
