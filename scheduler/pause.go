package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
)

// PauseOptions describe a pause asked for with Scheduler.Pause.
type PauseOptions struct {
	// Reason is required: whoever finds the job paused must be able to tell why.
	Reason string
	// By names who asked (a user, a service); defaults to the instance.
	By string
	// Until, when set, ends the pause by itself; it must be in the future.
	Until time.Time
}

// pauses is the scheduler's view of the stored pauses, updated by the watch, and
// what it needs to notice a pause end: since when each job is seen paused, and the
// Until times a wake-up is set for.
type pauses struct {
	mu    sync.Mutex
	all   []Pause
	since map[string]time.Time // job → when its pause began (its At, or when first seen)
	wakes map[int64]bool       // Until (unix ms) → a wake-up is set
	// held is, by job, the pause that holds it now, and ended the last pauses of it
	// this instance saw end: a slot that fell during one is still a paused slot.
	held  map[string]Pause
	ended map[string][]pauseSpan
}

// pauseSpan is a pause of a job, from when it began to when it ended.
type pauseSpan struct {
	from, to time.Time
	p        Pause
}

// maxEndedPauses bounds the ended pauses of one job an instance remembers.
const maxEndedPauses = 8

// heldAt returns the pause this instance saw hold job at t, over: one that ended
// since (a slot of t that is claimed only now fell while paused).
func (p *pauses) heldAt(job string, t time.Time) (Pause, bool) {
	job = backend.JobOf(job)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sp := range p.ended[job] {
		if !t.Before(sp.from) && t.Before(sp.to) {
			return sp.p, true
		}
	}
	return Pause{}, false
}

func (p *pauses) set(all []Pause) (changed []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := map[string]Pause{}
	for _, x := range p.all {
		old[x.Job] = x
	}
	now := map[string]Pause{}
	for _, x := range all {
		now[x.Job] = x
	}
	for job, x := range now {
		if o, ok := old[job]; !ok || o != x {
			changed = append(changed, job)
		}
	}
	for job := range old {
		if _, ok := now[job]; !ok {
			changed = append(changed, job)
		}
	}
	p.all = slices.Clone(all)
	slices.Sort(changed)
	return changed
}

// of returns the pause in force for job at now: the job's own, else the all-jobs one.
func (p *pauses) of(job string, now time.Time) (Pause, bool) {
	job = backend.JobOf(job) // an entry is paused with its job
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ofLocked(job, now)
}

func (p *pauses) ofLocked(job string, now time.Time) (Pause, bool) {
	var all *Pause
	for i := range p.all {
		x := &p.all[i]
		if !x.InForce(now) {
			continue
		}
		if x.Job == job {
			return *x, true
		}
		if x.Job == "" {
			all = x
		}
	}
	if all != nil {
		return *all, true
	}
	return Pause{}, false
}

// Pause stores a pause of job (declared on this instance), so that every instance
// sharing the backend records its slots paused instead of running them, within a
// second (the backend's watch), until Resume or opts.Until. A run already going
// when the pause arrives finishes: nothing is cancelled. Pausing a paused job
// replaces its pause.
func (s *Scheduler) Pause(ctx context.Context, job string, opts PauseOptions) error {
	if _, err := s.declared(job); err != nil {
		return err
	}
	return s.storePause(ctx, job, opts)
}

// PauseAll stores a pause of every job, as Pause does for one.
func (s *Scheduler) PauseAll(ctx context.Context, opts PauseOptions) error {
	return s.storePause(ctx, "", opts)
}

// Resume removes job's pause. A slot recorded paused stays so: it is not run
// afterwards. Resuming a job that is not paused is not an error. It does not end an
// all-jobs pause (ResumeAll does).
func (s *Scheduler) Resume(ctx context.Context, job string) error {
	if _, err := s.declared(job); err != nil {
		return err
	}
	return s.clearPause(ctx, job)
}

// ResumeAll removes the all-jobs pause (not the pauses of single jobs).
func (s *Scheduler) ResumeAll(ctx context.Context) error { return s.clearPause(ctx, "") }

// Paused returns the pause in force for job on this instance's view, if any.
func (s *Scheduler) Paused(job string) (Pause, bool) {
	return s.pauses.of(job, s.clock.Now())
}

func (s *Scheduler) declared(job string) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[job]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrJobNotFound, job)
	}
	return j, nil
}

func (s *Scheduler) pauser() (backend.Pauser, error) {
	p, ok := s.backend.(backend.Pauser)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrPauseNotSupported, s.backend.Name())
	}
	return p, nil
}

func (s *Scheduler) storePause(ctx context.Context, job string, opts PauseOptions) error {
	p, err := s.pauser()
	if err != nil {
		return err
	}
	now := s.clock.Now()
	switch {
	case opts.Reason == "":
		return fmt.Errorf("%w: a pause needs a reason", ErrInvalidOption)
	case !utf8.ValidString(opts.Reason) || !utf8.ValidString(opts.By) || len(opts.Reason) > MaxPauseText || len(opts.By) > MaxPauseText:
		return fmt.Errorf("%w: a pause's reason and by are valid UTF-8 of at most %d bytes", ErrInvalidOption, MaxPauseText)
	case !opts.Until.IsZero() && !opts.Until.After(now):
		return fmt.Errorf("%w: pause until %s is not in the future", ErrInvalidOption, opts.Until.Format(time.RFC3339))
	}
	if opts.By == "" {
		opts.By = s.instance
	}
	if err := s.init(ctx); err != nil {
		return err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := p.SetPause(cctx, Pause{Job: job, Reason: opts.Reason, By: opts.By, At: now, Until: opts.Until}); err != nil {
		return fmt.Errorf("scheduler: pause %q on %s: %w", job, s.backend.Name(), err)
	}
	return nil
}

func (s *Scheduler) clearPause(ctx context.Context, job string) error {
	p, err := s.pauser()
	if err != nil {
		return err
	}
	if err := s.init(ctx); err != nil {
		return err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := p.ClearPause(cctx, job); err != nil {
		return fmt.Errorf("scheduler: resume %q on %s: %w", job, s.backend.Name(), err)
	}
	return nil
}

// watchPauses keeps the scheduler's view of the pauses current until the loops
// stop, watching again after a failed watch.
func (s *Scheduler) watchPauses(p backend.Pauser) {
	defer s.loops.Done()
	for attempt := 0; s.loopCtx.Err() == nil; attempt++ {
		err := p.WatchPauses(s.loopCtx, func(all []Pause) {
			attempt = 0
			s.notePauses(all)
		})
		if s.loopCtx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("watching pauses failed; watching again", "err", err)
			s.emit(Event{Kind: EventBackendError, Op: "watch_pauses", Err: err})
		}
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return
		}
	}
}

// notePauses takes the stored pauses as this instance's view, and reports each
// change (EventPauseChanged, and a log line).
func (s *Scheduler) notePauses(all []Pause) {
	for _, job := range s.pauses.set(all) {
		e := Event{Kind: EventPauseChanged, Job: job}
		for _, x := range all {
			if x.Job == job && x.InForce(s.clock.Now()) {
				e.Pause = &x
			}
		}
		s.log.Info("pause changed", "job", job, "paused", e.Pause != nil)
		s.emit(e)
	}
	s.checkResumes()
}

// pauseEnd is a job whose pause ended, and since when it had been paused.
type pauseEnd struct {
	j     *job
	since time.Time
}

// checkResumes notes, for every declared job, whether its pause began or ended;
// for a pause that ended (Resume, or its Until passed) it starts catch-up of the
// slots paused meanwhile when the job's catch-up policy asks. It sets a wake-up at
// each Until in the future, as an Until passing changes nothing stored.
func (s *Scheduler) checkResumes() {
	now := s.clock.Now()
	s.mu.Lock()
	jobs := append([]*job(nil), s.order...)
	started := s.state == stateStarted
	s.mu.Unlock()

	var ended []pauseEnd
	var wakes []time.Time
	s.pauses.mu.Lock()
	if s.pauses.since == nil {
		s.pauses.since, s.pauses.wakes = map[string]time.Time{}, map[int64]bool{}
		s.pauses.held, s.pauses.ended = map[string]Pause{}, map[string][]pauseSpan{}
	}
	for _, j := range jobs {
		p, paused := s.pauses.ofLocked(j.name, now)
		since, was := s.pauses.since[j.name]
		switch {
		case paused && !was:
			at := p.At
			if at.IsZero() || at.After(now) {
				at = now
			}
			s.pauses.since[j.name] = at
		case !paused && was:
			delete(s.pauses.since, j.name)
			ended = append(ended, pauseEnd{j, since})
			spans := append(s.pauses.ended[j.name], pauseSpan{from: since, to: now, p: s.pauses.held[j.name]})
			if len(spans) > maxEndedPauses {
				spans = spans[len(spans)-maxEndedPauses:]
			}
			s.pauses.ended[j.name] = spans
		}
		if paused {
			s.pauses.held[j.name] = p
		} else {
			delete(s.pauses.held, j.name)
		}
	}
	for _, x := range s.pauses.all {
		if started && x.Until.After(now) && !s.pauses.wakes[x.Until.UnixMilli()] {
			s.pauses.wakes[x.Until.UnixMilli()] = true
			wakes = append(wakes, x.Until)
		}
	}
	s.pauses.mu.Unlock()
	if !started {
		return // Start's catch-up covers the slots paused before it
	}
	for _, until := range wakes {
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			if s.sleepUntil(s.loopCtx, until) {
				s.pauses.mu.Lock()
				delete(s.pauses.wakes, until.UnixMilli())
				s.pauses.mu.Unlock()
				s.checkResumes()
			}
		}()
	}
	for _, e := range ended {
		slots := e.j.pausedSlots(e.since, now, s.excludes(e.j))
		if s.runs == nil || len(slots) == 0 {
			continue
		}
		s.log.Info("pause ended; catching up the slots paused meanwhile", e.j.logAttr(), "policy", e.j.cfg.catchUp, "slots", len(slots))
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.catchUp(e.j, slots)
		}()
	}
}

// pausedSlots lists, oldest first, the slots that catch-up runs once a pause that
// began at since ended at now. They are the slots of the catch-up window that fell
// since the pause began, as the job's policy picks them (catchUpSlots). Those past
// the cap stay paused. Each is claimed with ReopenPaused: the store runs those
// recorded paused, once.
func (j *job) pausedSlots(since, now time.Time, excluded func(time.Time) bool) []time.Time {
	from := since.Add(-j.cfg.maxLate)
	if w := now.Add(-j.cfg.catchUpWindow); from.Before(w) {
		from = w
	}
	run, _ := j.catchUpSlots(from.Add(-time.Millisecond), now, excluded)
	return run
}
