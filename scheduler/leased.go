package scheduler

import (
	"context"
	"errors"
	"time"
)

// handleLeased claims a slot through the run store: the winner runs it under a lease,
// the others stand by as backups and take over if the lease ends unfinished.
func (s *Scheduler) handleLeased(j *job, slot time.Time, catchUp bool) {
	deadline := slot.Add(j.cfg.maxLate)
	if catchUp {
		deadline = slot.Add(j.cfg.catchUpWindow)
	}
	rc := RunClaim{
		Job:      j.name,
		Slot:     slot,
		Token:    newToken(),
		Instance: s.instance,
		Lease:    j.cfg.lease,
		Deadline: deadline,
		Overlap:  j.cfg.overlap,
		Keep:     j.keep(),
	}
	// Past the deadline a first claim can only be answered late (or won again, if an
	// answer was lost, and then its lease expires into a backup's hands): stop there.
	res, sent, err := s.claimLease(j, rc, deadline)
	if err != nil {
		if s.loopCtx.Err() != nil {
			return // stopping
		}
		// The store gave no answer until the deadline: the slot is missed. Say so,
		// and record it (once, if the backend can be reached) rather than drop it.
		s.emit(Event{Kind: EventLate, Job: j.name, Slot: slot, Token: rc.Token, Outcome: OutcomeLate, Err: err})
		s.recordOnce(j, slot, StatusLate, "no claim could be decided before the deadline: "+err.Error())
		return
	}
	switch res.Outcome {
	case OutcomeWon:
		s.runLeased(j, rc, res, sent)
	case OutcomeRunning:
		s.emit(Event{Kind: EventStandby, Job: j.name, Slot: slot, Token: rc.Token, Outcome: res.Outcome, Attempt: res.Attempt})
		s.standby(j, rc)
	case OutcomeOverlap:
		s.emit(Event{Kind: EventSkipped, Job: j.name, Slot: slot, Token: rc.Token, Outcome: res.Outcome})
		s.recordOnce(j, slot, StatusSkipped, "an earlier slot still held its lease (overlap forbidden)")
	case OutcomeLate:
		s.emit(Event{Kind: EventLate, Job: j.name, Slot: slot, Token: rc.Token, Outcome: res.Outcome})
		s.recordOnce(j, slot, StatusLate, "nobody started the slot before its deadline")
	default: // done, none, and outcomes this version does not know
		s.emit(Event{Kind: EventLost, Job: j.name, Slot: slot, Token: rc.Token, Outcome: res.Outcome})
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

// claimLease asks the run store, retrying errors with the same token until giveUp.
// It returns the answer and when the request that got it was sent.
func (s *Scheduler) claimLease(j *job, rc RunClaim, giveUp time.Time) (ClaimResult, time.Time, error) {
	for attempt := 0; ; attempt++ {
		sent := s.clock.Now()
		ctx, cancel := s.callCtx(s.loopCtx)
		res, err := s.runs.Claim(ctx, rc)
		cancel()
		if err == nil {
			return res, sent, nil
		}
		if s.loopCtx.Err() != nil {
			return ClaimResult{}, sent, err
		}
		s.backendError(j, rc.Slot, "claim", err)
		if s.clock.Now().After(giveUp) || !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return ClaimResult{}, sent, err
		}
	}
}

// runLeased runs a won lease and settles it.
func (s *Scheduler) runLeased(j *job, rc RunClaim, res ClaimResult, sent time.Time) {
	in := ClaimInput{
		Job: j.name, Slot: rc.Slot, Token: rc.Token, Instance: s.instance, Attempt: max(res.Attempt, 1),
		At: s.clock.Now(), HistorySize: j.cfg.historySize, HistoryTTL: j.cfg.historyTTL,
	}
	s.emit(Event{Kind: EventClaimed, Job: j.name, Slot: rc.Slot, Token: rc.Token, Attempt: in.Attempt, Outcome: res.Outcome})
	if in.Attempt > 1 {
		s.log.Info("took over a run", "job", j.name, "slot", rc.Slot, "attempt", in.Attempt, "previous", res.Previous)
		s.emit(Event{Kind: EventTakeover, Job: j.name, Slot: rc.Slot, Token: rc.Token, Attempt: in.Attempt, Outcome: res.Outcome})
		if res.PreviousToken != "" {
			s.save(j, ClaimInput{Slot: rc.Slot, Token: res.PreviousToken, Instance: res.Previous, Attempt: res.PreviousAttempt},
				0, execResult{Status: StatusLost, FinishedAt: s.clock.Now(), Error: "lease expired or released before the run finished; taken over by " + s.instance})
		}
	}
	if rec, ok := s.backend.(ClaimRecorder); ok {
		// The history record is written beside the run, not before it: the lease is
		// being heartbeaten from the start, whatever the record's write costs.
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			ctx, cancel := s.callCtx(context.Background())
			defer cancel()
			if err := rec.RecordClaim(ctx, in); err != nil {
				s.backendError(j, rc.Slot, "record_claim", err)
			}
		}()
	}
	s.execute(s.hardCtx, j, in, res.Fence, &lease{token: rc.Token, dur: j.cfg.lease, sent: sent})
}

// standby waits as a backup for a running slot: when its lease ends unfinished, it
// claims a takeover. It reacts to the store's watch when there is one, and polls
// otherwise; with a watch it still re-checks every lease/2, in case the lease ended
// between the last claim and the start of the watch.
func (s *Scheduler) standby(j *job, rc RunClaim) {
	rc.TakeoverOnly = true
	watcher, _ := s.runs.(LeaseWatcher)
	poll := j.cfg.lease / 4
	if watcher != nil {
		poll = j.cfg.lease / 2
	}
	for first := true; ; first = false {
		ctx, cancel := context.WithCancel(s.loopCtx)
		var changed <-chan struct{}
		if watcher != nil {
			ch, err := watcher.WatchRun(ctx, j.name, rc.Slot)
			if err != nil {
				s.backendError(j, rc.Slot, "watch", err)
			}
			changed = ch
		}
		if !first {
			res, sent, err := s.claimLease(j, rc, s.clock.Now().Add(j.cfg.lease))
			if err != nil {
				cancel()
				if s.loopCtx.Err() != nil {
					return
				}
				continue // the store did not answer for a whole lease: keep standing by
			}
			if res.Outcome != OutcomeRunning {
				cancel()
				if res.Outcome == OutcomeWon {
					s.runLeased(j, rc, res, sent)
				} else {
					s.emit(Event{Kind: EventLost, Job: j.name, Slot: rc.Slot, Token: rc.Token, Outcome: res.Outcome})
				}
				return
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
			return
		}
	}
}

// recordOnce stores a result for a slot that did not run (skipped, late) from exactly
// one instance: the backend's claim picks which.
func (s *Scheduler) recordOnce(j *job, slot time.Time, status Status, why string) {
	in := s.claimInput(j, slot, 1)
	ctx, cancel := s.callCtx(s.loopCtx)
	won, err := s.backend.Claim(ctx, in)
	cancel()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.backendError(j, slot, "claim", err)
		}
		return
	}
	if !won {
		return
	}
	now := s.clock.Now()
	s.save(j, in, 0, execResult{Status: status, StartedAt: time.Time{}, FinishedAt: now, Error: why})
}
