package scheduler

import (
	"context"
	"math/rand/v2"
	"time"
)

// loop walks a job's slots in order. Each due slot is handled in its own goroutine,
// so a long handler never delays the next slot's claim.
func (s *Scheduler) loop(j *job) {
	defer s.loops.Done()
	ctx := s.loopCtx
	now := s.clock.Now()
	if j.cfg.catchUp != CatchUpNone {
		s.catchUp(j, now)
	}
	// A slot whose deadline has not passed is still ours to claim: an instance
	// (re)started just after a slot does not skip it.
	next := j.sched.Next(now.Add(-j.cfg.maxLate))
	for !next.IsZero() {
		s.emit(Event{Kind: EventScheduled, Job: j.name, Next: next})
		delay := j.cfg.jitterDelay()
		if !s.sleepUntil(ctx, next.Add(delay)) {
			return
		}
		slot := next
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.handleSlot(j, slot, false)
		}()
		next = j.sched.Next(slot)
	}
	s.log.Warn("job has no further slots", "job", j.name)
}

func (c jobConfig) jitterDelay() time.Duration {
	if c.jitter <= 0 {
		return 0
	}
	return rand.N(c.jitter)
}

// catchUp claims the slots missed while no instance was up, as the policy says. Each
// is claimed like any slot, so it still runs once.
func (s *Scheduler) catchUp(j *job, now time.Time) {
	from := now.Add(-j.cfg.catchUpWindow)
	last := now.Add(-j.cfg.maxLate) // later slots are handled by the loop itself
	var slots []time.Time
	for t := j.sched.Next(from); !t.IsZero() && !t.After(last); t = j.sched.Next(t) {
		slots = append(slots, t)
		if len(slots) > maxCatchUpSlots {
			slots = slots[1:]
		}
	}
	if j.cfg.catchUp == CatchUpLatest && len(slots) > 1 {
		slots = slots[len(slots)-1:]
	}
	for _, slot := range slots {
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.handleSlot(j, slot, true)
		}()
	}
}

// maxCatchUpSlots bounds how many missed slots one Start claims for a job.
const maxCatchUpSlots = 1000

// sleepUntil waits until t by the scheduler's clock; false if ctx ended first.
func (s *Scheduler) sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		d := t.Sub(s.clock.Now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		timer := s.clock.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C():
		}
	}
}

// handleSlot claims one slot and, if this instance wins, runs it.
func (s *Scheduler) handleSlot(j *job, slot time.Time, catchUp bool) {
	if s.runs != nil {
		s.handleLeased(j, slot, catchUp)
		return
	}
	deadline := slot.Add(j.cfg.maxLate)
	in := s.claimInput(j, slot, 1)
	for attempt := 0; ; attempt++ {
		if s.clock.Now().After(deadline) {
			s.emit(Event{Kind: EventLate, Job: j.name, Slot: slot, Token: in.Token, Outcome: OutcomeLate})
			return
		}
		ctx, cancel := s.callCtx(s.loopCtx)
		won, err := s.backend.Claim(ctx, in)
		cancel()
		if err == nil {
			if !won {
				s.emit(Event{Kind: EventLost, Job: j.name, Slot: slot, Token: in.Token, Outcome: OutcomeDone})
				return
			}
			s.emit(Event{Kind: EventClaimed, Job: j.name, Slot: slot, Token: in.Token, Attempt: 1, Outcome: OutcomeWon})
			s.execute(s.hardCtx, j, in, 0, nil)
			return
		}
		s.backendError(j, slot, "claim", err)
		// Retry with the same token: the claim is repeat-safe, so a retry after a
		// lost answer still gives exactly one winner.
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return
		}
	}
}

func retryDelay(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 5)
	return d/2 + rand.N(d/2)
}

func (s *Scheduler) claimInput(j *job, slot time.Time, attempt int) ClaimInput {
	return ClaimInput{
		Job:         j.name,
		Slot:        slot,
		Token:       newToken(),
		Instance:    s.instance,
		Attempt:     attempt,
		At:          s.clock.Now(),
		HistorySize: j.cfg.historySize,
		HistoryTTL:  j.cfg.historyTTL,
	}
}
