package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
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
// still on its way (written again from the holder's outbox) is not raced; and
// only records claimed after the oldest finished record of the read, because a
// store that keeps a job's newest results (a bounded history) may have dropped
// the result of a record older than that while its claim is still stored. One
// instance writes one ending per record (maxRepaired remembered), so readers in a
// loop, or during an outage of the result writes, add no copies.

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
	var oldestEnd time.Time
	for i := range recs {
		if f := recs[i].FinishedAt; recs[i].Status.Finished() && !f.IsZero() && (oldestEnd.IsZero() || f.Before(oldestEnd)) {
			oldestEnd = f
		}
	}
	var orphans []int
	for i := range recs {
		r := &recs[i]
		if r.Status == StatusRunning && !r.ClaimedAt.IsZero() && now.Sub(r.ClaimedAt) > s.repairGrace() &&
			(oldestEnd.IsZero() || r.ClaimedAt.After(oldestEnd)) {
			if ending, ok := s.repairedAs(r.Token); ok {
				r.Status, r.FinishedAt, r.Error = ending.Status, ending.FinishedAt, ending.Error
				continue
			}
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
		case unfinished && a.Attempt > r.Attempt:
			s.ended(j, r, StatusLost, fmt.Sprintf("taken over by attempt %d on %s; this attempt's end was never stored", a.Attempt, orDash(a.Instance)))
		case unfinished:
			// Another run of the slot's attempt (an instance without leases
			// beside this one's lease): nothing to tell.
		default:
			s.endFromStore(ctx, j, r)
		}
	}
}

// endFromStore ends r, a record of a slot the run store does not hold unfinished,
// from what the store holds: a repeat-safe takeover-only claim creates nothing and
// answers how the slot ended.
func (s *Scheduler) endFromStore(ctx context.Context, j *job, r *RunRecord) {
	c := &leaseClaim{RunClaim: backend.RunClaim{
		Job: j.name, Slot: r.Slot, Token: newToken(), Instance: s.instance, Lease: j.cfg.lease,
		Overlap: j.cfg.overlap, BufferCap: j.cfg.bufferCap, TakeoverOnly: true, Keep: j.keep(),
	}, kind: claimAdopt, localDeadline: r.Slot.Add(j.cfg.maxLate)}
	sent := s.clock.Now()
	cctx, cancel := s.callCtx(ctx)
	res, err := s.runs.Claim(cctx, c.RunClaim)
	cancel()
	switch {
	case err != nil:
	case res.Outcome == backend.OutcomeDone && res.Attempt == r.Attempt && res.Holder == r.Instance && res.Status.Finished():
		s.ended(j, r, res.Status, fmt.Sprintf("ended %s in the run store, whose result was never stored; recorded by %s", res.Status, s.instance))
	case res.Outcome == backend.OutcomeDone && res.Attempt > r.Attempt:
		s.ended(j, r, StatusLost, fmt.Sprintf("the slot was ended by attempt %d (%s); this attempt's end was never stored", res.Attempt, orDash(string(res.Status))))
	case res.Outcome == backend.OutcomeDone:
		// The store's attempt is another instance's (one without leases claimed
		// the slot beside a lease): nothing to tell about this record.
	case res.Outcome == backend.OutcomeNone:
		s.ended(j, r, StatusLost, "its end was never stored, and the run store no longer holds the run")
	case res.Outcome == backend.OutcomeWon:
		// It became unfinished since Active was read: a takeover, acted on like
		// any other.
		if !s.besideIfRunning(func() { s.act(j, c, res, sent) }) {
			s.release(j, c.Slot, c.Token)
		}
	}
}

// ended sets r's status and stores that ending for r's attempt, once per record on
// this instance.
func (s *Scheduler) ended(j *job, r *RunRecord, status Status, why string) {
	now := s.clock.Now()
	r.Status, r.FinishedAt, r.Error = status, now, why
	if !s.noteRepaired(r.Token, repairedEnding{Status: status, FinishedAt: now, Error: why}) {
		return // another reader of this instance stores it
	}
	in := backend.ClaimInput{Slot: r.Slot, Token: r.Token, Instance: r.Instance, Attempt: r.Attempt, Manual: r.Manual}
	s.save(&slotAttempt{j: j, in: in, fence: r.Fence}, execResult{Status: status, StartedAt: r.StartedAt, FinishedAt: now, Error: why})
}

// maxRepaired bounds how many endings an instance remembers having written.
const maxRepaired = 4096

// repairedEnding is an ending a reader of this instance stored.
type repairedEnding struct {
	Status     Status
	FinishedAt time.Time
	Error      string
}

// noteRepaired remembers token's ending; false when one was noted already.
func (s *Scheduler) noteRepaired(token string, e repairedEnding) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.repaired[token]; ok {
		return false
	}
	if s.repaired == nil || len(s.repaired) >= maxRepaired {
		s.repaired = map[string]repairedEnding{}
	}
	s.repaired[token] = e
	return true
}

// repairedAs returns the ending a reader of this instance stored for token.
func (s *Scheduler) repairedAs(token string) (repairedEnding, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.repaired[token]
	return e, ok
}

// adoptOnce takes over, beside the reader, a run whose lease ended unfinished with
// nobody taking it over, once per slot at a time on this instance.
func (s *Scheduler) adoptOnce(j *job, slot time.Time) {
	s.onceBeside(j, slot, func() { s.handleLeased(j, slot, claimAdopt) })
}

// onceBeside runs f, which takes over j's run of slot, beside the caller while
// the scheduler runs, unless such an f runs already on this instance.
func (s *Scheduler) onceBeside(j *job, slot time.Time, f func()) {
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
		f()
	}) {
		done()
	}
}

type adoptKey struct {
	job  string
	slot int64
}
