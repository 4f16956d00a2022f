package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Start initialises the backend, prepares every job, reads the pauses in force and
// starts the jobs' loops. It returns the first error; on error nothing is left
// running. A scheduler starts once: a second Start returns ErrStarted, a Start
// after Stop ErrStopped (make a new Scheduler).
//
// ctx bounds Start's own work only: the backend's Init, each job's PrepareJob and
// the first read of the stored pauses, each call by ctx's deadline when it has
// one, else by Config.CallTimeout. The loops, the pause watch and the handlers run
// on a context detached from ctx: they keep its values, not its cancellation or
// deadline, so cancelling ctx after Start returned stops nothing; Stop does.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	if err := s.startErrLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	s.state = stateStarting
	jobs := append([]*job(nil), s.order...)
	s.mu.Unlock()
	started := false
	defer func() {
		if !started {
			s.mu.Lock()
			if s.state == stateStarting {
				s.state = stateNew
			}
			s.mu.Unlock()
		}
	}()

	if err := s.init(ctx); err != nil {
		return err
	}
	for _, j := range jobs {
		cctx, cancel := s.callCtx(ctx)
		err := s.backend.PrepareJob(cctx, j.limits)
		cancel()
		if err != nil {
			return fmt.Errorf("scheduler: prepare job %q on %s: %w", j.name, s.backend.Name(), err)
		}
	}
	pauser, _ := s.backend.(backend.Pauser)
	if pauser != nil {
		// The pauses in force before the first slot is claimed; the watch keeps
		// them current afterwards.
		cctx, cancel := s.callCtx(ctx)
		all, err := pauser.Pauses(cctx)
		cancel()
		switch {
		case errors.Is(err, ErrPauseNotSupported):
			pauser = nil // a backend that forwards to a store without pauses
		case err != nil:
			return fmt.Errorf("scheduler: read pauses on %s: %w", s.backend.Name(), err)
		default:
			s.notePauses(all)
		}
	}

	calStore, _ := s.backend.(backend.CalendarStore)
	if calStore != nil {
		// The calendars before the first slot is claimed; the watch keeps them
		// current afterwards.
		cctx, cancel := s.callCtx(ctx)
		all, err := calStore.Calendars(cctx)
		cancel()
		switch {
		case errors.Is(err, ErrCalendarsNotSupported):
			calStore = nil
		case err != nil:
			return fmt.Errorf("scheduler: read calendars on %s: %w", s.backend.Name(), err)
		default:
			s.noteCalendars(all)
		}
	}

	if s.turns != nil {
		s.firstMembers(ctx)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarting { // stopped meanwhile
		return s.startErrLocked()
	}
	started = true
	s.state = stateStarted
	s.loopCtx, s.stopLoops = context.WithCancel(context.WithoutCancel(ctx))
	s.hardCtx, s.hardCancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if pauser != nil {
		s.loops.Add(1)
		go s.watchPauses(pauser)
	}
	if calStore != nil {
		s.loops.Add(1)
		go s.watchCalendars(calStore)
	}
	if s.turns != nil {
		s.loops.Add(2)
		go s.beatMembers()
		go s.watchMembers()
	}
	s.loops.Add(1)
	go s.judgeDeadlines()
	// The jobs registered now, those registered during Start included (their
	// registration prepared them).
	s.startJobsLocked(s.order, s.clock.Now())
	if !s.entries.watching {
		s.entries.markSynced() // nothing to load while no job is registered
	}
	s.log.Info("scheduler started", "instance", s.instance, "backend", s.backend.Name(), "jobs", len(s.order), "leases", s.runs != nil)
	return nil
}

// startJobsLocked starts the loops of jobs, registered on a started scheduler
// (under s.mu), as of now: each job's recovery and loop, its schedule entries
// kept as orphans so far, and the watch of the entries when none runs yet.
func (s *Scheduler) startJobsLocked(jobs []*job, now time.Time) {
	var owed []adoption
	for _, j := range jobs {
		if s.runs != nil {
			owed = append(owed, s.recover(j, now))
		}
		if _, none := j.sched.(noSchedule); !none {
			s.loops.Add(1)
			go s.loop(j, now)
		}
	}
	if store, ok := s.backend.(backend.EntryStore); ok && len(jobs) > 0 {
		if !s.entries.watching {
			s.entries.watching = true
			es := s.entries
			es.mu.Lock()
			select {
			case <-es.synced: // a Start with no job: they are read now
				es.synced = make(chan struct{})
			default:
			}
			es.mu.Unlock()
			s.loops.Add(1)
			go s.watchEntries(store)
		} else {
			for _, j := range jobs {
				owed = append(owed, s.followOrphans(j)...)
			}
			s.findRemovedEntriesOf(jobs)
		}
	}
	if len(owed) > 0 {
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.adoptAll(owed)
		}()
	}
}

// startErrLocked says why the scheduler cannot start, if it cannot: it was
// started or stopped before.
func (s *Scheduler) startErrLocked() error {
	switch s.state {
	case stateStarting:
		return fmt.Errorf("%w: Start is in progress (a scheduler starts once)", ErrStarted)
	case stateStarted:
		return fmt.Errorf("%w: Start was called before (a scheduler starts once)", ErrStarted)
	case stateStopped:
		return fmt.Errorf("%w: Start after Stop (a scheduler starts once: make a new one)", ErrStopped)
	}
	return nil
}

// registerErrLocked says why no job can be registered now, if none can: the
// scheduler was stopped.
func (s *Scheduler) registerErrLocked(name string) error {
	if s.state == stateStopped {
		return fmt.Errorf("job %q: %w: no job is registered once the scheduler was stopped", name, ErrStopped)
	}
	return nil
}

func (s *Scheduler) init(ctx context.Context) error {
	s.mu.Lock()
	done := s.inited
	s.mu.Unlock()
	if done {
		return nil
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := s.backend.Init(cctx); err != nil {
		return fmt.Errorf("scheduler: init %s backend: %w", s.backend.Name(), err)
	}
	s.mu.Lock()
	s.inited = true
	s.mu.Unlock()
	return nil
}

// Stop stops claiming new slots and stand-by backups, lets running handlers finish
// until ctx is done, then cancels them (context.Cause is ErrStopped) and waits for them
// to return. With leases, runs that did not finish are handed over so a backup takes
// over at once. Writes left are tried until a grace after ctx ends (at most a
// second). Those not stored make Stop return an error matching ErrNotStored.
//
// Stop before Start and a second Stop have nothing to stop: they return nil and
// say so in the log. Stop before Start logs at info level, as the scheduler can
// no longer start: Start then returns ErrStopped, and Every and Cron too.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case stateNew, stateStarting: // a Start in progress then returns ErrStopped
		s.state = stateStopped
		s.mu.Unlock()
		s.log.Info("Stop before Start: nothing was running; the scheduler cannot be started now", "instance", s.instance)
		return nil
	case stateStopped:
		s.mu.Unlock()
		s.log.Debug("Stop again: the scheduler was stopped already", "instance", s.instance)
		return nil
	}
	s.state = stateStopped
	// Writes after the handlers (settles, the outbox) end soon after ctx does.
	if deadline, ok := ctx.Deadline(); ok {
		s.writesBy.Store(deadline.Add(s.stopGrace()).UnixNano())
	}
	s.mu.Unlock()

	s.stopLoops()
	s.loops.Wait()

	done := make(chan struct{})
	go func() { s.handlers.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.hardCancel(ErrStopped)
		<-done
		err = fmt.Errorf("scheduler: stop: running handlers were cancelled: %w", context.Cause(ctx))
	}
	s.hardCancel(ErrStopped)
	if n := s.drainOutbox(ctx); n > 0 {
		err = errors.Join(err, fmt.Errorf("scheduler: stop: %w: %d records that complete a slot (the backend did not answer)", ErrNotStored, n))
	}
	s.log.Info("scheduler stopped", "instance", s.instance)
	return err
}

// drainOutbox writes the records still waiting in the outbox: for 2 ×
// CallTimeout when ctx has no deadline, else until a grace after it (a write
// that began later had a grace of its own). It returns how many were left.
func (s *Scheduler) drainOutbox(ctx context.Context) int {
	deadline, ok := ctx.Deadline()
	if ok {
		deadline = deadline.Add(s.stopGrace())
	} else {
		deadline = time.Now().Add(2 * s.callTO)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	n := s.out.drain(ctx)
	if n > 0 {
		s.log.Error("records that complete a slot were not stored before Stop returned", "records", n)
		s.emit(Event{Kind: EventBackendError, Op: "save_result", Err: fmt.Errorf("scheduler: %d records not stored at Stop", n)})
	}
	return n
}

// stopGrace is how long after Stop's context ends its last writes may take.
func (s *Scheduler) stopGrace() time.Duration { return min(s.callTO, time.Second) }

// writeCtx is the context of one write that completes a slot: bounded by the
// call timeout, and once Stop has a deadline by that deadline and a grace (a
// write that begins later has the grace).
func (s *Scheduler) writeCtx() (context.Context, context.CancelFunc) {
	d := s.callTO
	if by := s.writesBy.Load(); by != 0 {
		d = min(d, max(time.Until(time.Unix(0, by)), s.stopGrace()))
	}
	return context.WithTimeout(context.Background(), d)
}
