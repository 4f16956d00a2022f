package scheduler

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// loop walks a job's slots in order. Each due slot is handled in its own goroutine,
// so a long handler never delays the next slot's claim.
// It starts at now, the instant its recovery (recover) was computed for.
func (s *Scheduler) loop(j *job, now time.Time) {
	defer s.loops.Done()
	// The loop ends with the scheduler's loops, or once the job's run limit is
	// reached.
	ctx, cancel := s.jobCtx(j)
	defer cancel()
	defer context.AfterFunc(j.ended, cancel)()
	// A slot whose deadline has not passed is still ours to claim: an instance
	// (re)started just after a slot does not skip it.
	next := j.sched.Next(now.Add(-j.cfg.maxLate))
	for !next.IsZero() {
		s.emit(Event{Kind: EventScheduled, Job: j.name, Next: next})
		delay := j.cfg.jitterDelay()
		if !s.sleepUntil(ctx, next.Add(delay)) {
			switch {
			case s.loopCtx.Err() != nil, j.gone.Err() != nil:
			case j.ended.Err() != nil:
				s.log.Info("job's loop ended: its run limit was reached", j.logAttr(), "max_runs", j.cfg.maxRuns)
			}
			return
		}
		slot := next
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.handleSlot(j, slot, claimScheduled)
		}()
		next = j.sched.Next(slot)
	}
	s.log.Info("job has no further slots: its schedule ended", j.logAttr(), "schedule", j.sched.String())
}

func (c jobConfig) jitterDelay() time.Duration {
	if c.jitter <= 0 {
		return 0
	}
	return rand.N(c.jitter)
}

// recover starts, beside the loop, what a (re)started instance owes the slots
// before the loop's first: the missed slots the catch-up policy asks for. It
// returns the adoption of the job's unfinished runs that neither catch-up nor the
// loop claims (released or expired ones are taken over, live ones stood by for),
// so that a hand-over nobody was waiting for still finds a taker.
func (s *Scheduler) recover(j *job, now time.Time) adoption {
	return s.recoverWith(j, now, func(catchUp func()) {
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			catchUp()
		}()
	})
}

// recoverWith is recover with the catch-up started by start.
func (s *Scheduler) recoverWith(j *job, now time.Time, start func(catchUp func())) adoption {
	missed, capped := j.missedSlots(now, s.excludes(j))
	claimed := make(map[int64]bool, len(missed)+len(capped))
	for _, t := range append(missed, capped...) {
		claimed[t.UnixMilli()] = true
	}
	switch {
	case j.entry == nil:
		start(func() { s.recoverJob(j, now, missed, capped) })
	case len(missed)+len(capped) > 0:
		start(func() {
			s.recordMissed(j, now, missed, capped, time.Time{})
			s.catchUp(j, missed)
		})
	}
	return adoption{j: j, before: now.Add(-j.cfg.maxLate), claimed: claimed}
}

// missedSlots lists, oldest first, the slots catch-up runs and the older ones of
// its window past MaxCatchUpSlots (recorded missed). The loop claims the slots
// after now - max lateness itself.
func (j *job) missedSlots(now time.Time, excluded func(time.Time) bool) (run, capped []time.Time) {
	return j.catchUpSlots(now.Add(-j.cfg.catchUpWindow), now.Add(-j.cfg.maxLate), excluded)
}

// catchUpSlots lists, oldest first, the job's slots after from and up to last that
// its catch-up policy runs (none for CatchUpNone, the newest for CatchUpLatest, the
// newest MaxCatchUpSlots for CatchUpAll) and the older ones past that cap.
// CatchUpLatest takes the newest slot that excluded does not hold, if any.
func (j *job) catchUpSlots(from, last time.Time, excluded func(time.Time) bool) (run, capped []time.Time) {
	if j.cfg.catchUp == CatchUpNone {
		return nil, nil
	}
	for t := j.sched.Next(from); !t.IsZero() && !t.After(last); t = j.sched.Next(t) {
		run = append(run, t)
	}
	if j.cfg.catchUp == CatchUpLatest && len(run) > 1 {
		i := len(run) - 1
		for i > 0 && excluded(run[i]) {
			i--
		}
		if excluded(run[i]) {
			i = len(run) - 1 // every one excluded: the newest is recorded so
		}
		run = run[i : i+1]
	}
	if len(run) > MaxCatchUpSlots {
		capped, run = run[:len(run)-MaxCatchUpSlots], run[len(run)-MaxCatchUpSlots:]
	}
	return run, capped
}

// adoption is what a starting job owes its unfinished runs: it claims, as
// takeovers, those of slots up to before that catch-up does not claim (claimed).
type adoption struct {
	j       *job
	before  time.Time
	claimed map[int64]bool
}

// adoptAll reads the unfinished runs of the starting jobs and adopts them. It
// reads the run store once when it is an ActiveLister, else job by job. So the
// reads at start-up need not grow with the number of jobs. A failed read is
// asked again until it is answered: a run nobody stands by for (a manual run, a
// hand-over) has no other taker.
func (s *Scheduler) adoptAll(owed []adoption) {
	lister, ok := s.runs.(backend.ActiveLister)
	if ok {
		s.adoptFrom(lister, owed)
		return
	}
	for _, a := range owed {
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.adoptFrom(activeOfOne{s.runs}, []adoption{a})
		}()
	}
}

// adoptFrom reads the unfinished runs owed by the jobs from lister and adopts them,
// asking again for the jobs it could not read until they are answered.
func (s *Scheduler) adoptFrom(lister backend.ActiveLister, owed []adoption) {
	names := make([]string, len(owed))
	byName := make(map[string]adoption, len(owed))
	for i, a := range owed {
		names[i], byName[a.j.name] = a.j.name, a
	}
	s.readActive(lister, names, func(name string, runs []ActiveRun) { s.adoptRuns(byName[name], runs) })
}

// readActive reads the unfinished runs of the jobs (run names) from lister and
// passes each job's to use, asking again for the jobs it could not read until
// they are answered, or until the loops stop.
func (s *Scheduler) readActive(lister backend.ActiveLister, names []string, use func(name string, runs []ActiveRun)) {
	for attempt := 0; len(names) > 0; attempt++ {
		// One call reads every job: its timeout grows with them.
		ctx, cancel := context.WithTimeout(s.loopCtx, s.callTO*time.Duration(1+len(names)/activeJobsPerCallTimeout))
		active, err := lister.ActiveJobs(ctx, names)
		cancel()
		var unread []string
		for _, name := range names {
			runs, ok := active[name]
			if !ok && err != nil {
				unread = append(unread, name)
				continue
			}
			use(name, runs)
		}
		if err == nil {
			return
		}
		if s.loopCtx.Err() != nil {
			return
		}
		s.log.Warn("backend call failed", "op", "active", "jobs", len(unread), "first", firstOf(unread), "err", err)
		for _, name := range unread {
			s.emit(Event{Kind: EventBackendError, Job: name, Op: "active", Err: err})
		}
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return
		}
		names = unread
	}
}

// firstOf is the first of names, or "" when there is none.
func firstOf(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// activeJobsPerCallTimeout is how many jobs one ActiveJobs call may read per
// Config.CallTimeout.
const activeJobsPerCallTimeout = 256

// activeOfOne reads one job's unfinished runs from a run store without
// ActiveJobs, as an ActiveLister of that job.
type activeOfOne struct{ runs backend.RunStore }

func (o activeOfOne) ActiveJobs(ctx context.Context, jobs []string) (map[string][]ActiveRun, error) {
	runs, err := o.runs.Active(ctx, jobs[0])
	if err != nil {
		return nil, err
	}
	return map[string][]ActiveRun{jobs[0]: runs}, nil
}

// adoptRuns claims, each as a takeover in its own goroutine, the runs of active
// that a owes.
func (s *Scheduler) adoptRuns(a adoption, active []ActiveRun) {
	for _, r := range active {
		// The loop claims the slots after before itself; a manual run's slot
		// (not on the schedule) is nobody else's to end.
		if (r.Slot.After(a.before) && a.j.onSchedule(r.Slot)) || a.claimed[r.Slot.UnixMilli()] {
			continue
		}
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.handleSlot(a.j, r.Slot, claimAdopt)
		}()
	}
}

// catchUp claims missed slots oldest first, at most the job's catch-up concurrency
// at a time (1 by default: one after the other). Each is claimed like any slot,
// so it still runs once.
func (s *Scheduler) catchUp(j *job, missed []time.Time) {
	ctx, cancel := s.jobCtx(j)
	defer cancel()
	sem := make(chan struct{}, j.cfg.catchUpConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, slot := range missed {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.handleSlot(j, slot, claimCatchUp)
		}()
	}
}

// MaxCatchUpSlots bounds how many missed slots of one job a Start runs. Older missed
// slots in the catch-up window are recorded missed (with the reason), not dropped.
const MaxCatchUpSlots = 1000

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

// handleSlot claims one slot of kind and follows it (claim.go).
func (s *Scheduler) handleSlot(j *job, slot time.Time, kind claimKind) {
	if kind == claimScheduled && !s.takeTurn(j, slot) {
		return // left to the members ranked above, who judge it too
	}
	if kind == claimScheduled || kind == claimCatchUp && slot.UnixMilli() > j.judgedSince.Load() {
		s.judgeLater(j, slot)
	}
	s.drive(s.newAttempt(j, slot, kind))
}

// jobCtx is the context of j's loop, claims and stand-bys on this instance:
// done when the loops stop or j is removed here (RemoveJob).
func (s *Scheduler) jobCtx(j *job) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.loopCtx)
	stop := context.AfterFunc(j.gone, cancel)
	return ctx, func() { stop(); cancel() }
}

func retryDelay(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 5)
	return d/2 + rand.N(d/2)
}
