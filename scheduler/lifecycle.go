package scheduler

import (
	"context"
	"errors"
	"fmt"
)

// Start initialises the backend, prepares every job and starts their loops. It
// returns the first error; on error nothing is left running.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case stateStarted:
		s.mu.Unlock()
		return ErrStarted
	case stateStopped:
		s.mu.Unlock()
		return ErrStopped
	}
	jobs := append([]*job(nil), s.order...)
	s.mu.Unlock()

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
	pauser, _ := s.backend.(Pauser)
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

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateNew {
		return ErrStarted
	}
	s.state = stateStarted
	s.loopCtx, s.stopLoops = context.WithCancel(context.WithoutCancel(ctx))
	s.hardCtx, s.hardCancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if pauser != nil {
		s.loops.Add(1)
		go s.watchPauses(pauser)
	}
	for _, j := range jobs {
		s.loops.Add(1)
		go s.loop(j)
	}
	s.log.Info("scheduler started", "instance", s.instance, "backend", s.backend.Name(), "jobs", len(jobs), "leases", s.runs != nil)
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
// to return. With leases, runs that did not finish are released so a backup takes
// over at once. Stop without Start and a second Stop return nil.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.state != stateStarted {
		s.state = stateStopped
		s.mu.Unlock()
		return nil
	}
	s.state = stateStopped
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
	s.log.Info("scheduler stopped", "instance", s.instance)
	return err
}
