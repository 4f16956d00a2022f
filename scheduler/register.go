package scheduler

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Every registers a job that runs every interval, on slots aligned to the Unix epoch.
// Jobs are registered before Start, or on a started scheduler: the backend then
// prepares the job first (bounded by Config.CallTimeout), its unfinished runs are
// adopted and its loop starts, as Start does for every job. After Stop it returns
// ErrStopped. RemoveJob removes a job.
func (s *Scheduler) Every(name string, interval time.Duration, h Handler, opts ...JobOption) error {
	if err := s.registerErr(name); err != nil {
		return err
	}
	sched, err := NewIntervalSchedule(interval)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	return s.add(name, sched, interval, h, opts)
}

// At registers a job that runs once, at the instant at (truncated to the
// millisecond), on one instance of the fleet, with the same claims, leases,
// history and options as any job. Every replica must declare the same instant:
// take it from configuration, never from the clock (replicas that compute it from
// time.Now declare different slots, and each runs its own). A replica that starts
// later than at plus the job's max lateness does not run it (a catch-up policy runs
// it within its window); Jobs then shows no next slot. With leases, the run store
// remembers the slot for at least backend.DefaultRunKeep, so an instance started
// within that time never runs it again.
func (s *Scheduler) At(name string, at time.Time, h Handler, opts ...JobOption) error {
	if err := s.registerErr(name); err != nil {
		return err
	}
	if at.IsZero() || at.Before(firstMillis) || at.After(lastMillis) {
		return fmt.Errorf("job %q: %w: the instant %v is zero or outside the range of slots (milliseconds since 1970 in 64 bits)", name, ErrInvalidSchedule, at)
	}
	once := OnceSchedule{At: time.UnixMilli(at.UnixMilli()).UTC()}
	if once.At.IsZero() {
		return fmt.Errorf("job %q: %w: the instant %v is the zero time once truncated to the millisecond", name, ErrInvalidSchedule, at)
	}
	return s.add(name, once, 0, h, opts)
}

// Cron registers a job on a cron expression (5 fields, or 6 with seconds first; see
// CronSchedule for the time zone and daylight saving rules). Like Every, it is
// called before Start or on a started scheduler.
func (s *Scheduler) Cron(name, expr string, h Handler, opts ...JobOption) error {
	if err := s.registerErr(name); err != nil {
		return err
	}
	var cfg jobConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	sched, err := ParseCronDST(expr, cfg.location, cfg.dst)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	return s.add(name, sched, 0, h, opts)
}

// registerErr is registerErrLocked under the lock: checked first, as no job can be
// added in a state that refuses them, whatever the job.
func (s *Scheduler) registerErr(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registerErrLocked(name)
}

func (s *Scheduler) add(name string, sched Schedule, interval time.Duration, h Handler, opts []JobOption) error {
	if err := backend.ValidateJobName(name); err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("job %q: %w", name, ErrNilHandler)
	}
	h, err := s.wrap(name, h)
	if err != nil {
		return err
	}
	cfg := jobConfig{lease: DefaultLease, historySize: DefaultHistorySize, catchUpConcurrency: 1, maxManual: DefaultMaxManualRuns}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	cron, isCron := sched.(*CronSchedule)
	if cfg.dstSet && !isCron {
		return fmt.Errorf("job %q: %w: WithDST applies to a Cron job's schedule; this job's is %s (an entry carries its own policy, EntrySpec.DST)", name, ErrInvalidOption, sched)
	}
	if !cfg.maxLateSet {
		cfg.maxLate = min(DefaultMaxLate, shortestGap(sched, interval))
	}
	if err := cfg.checkDurations(); err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	if sched, err = cfg.spread(name, sched, interval); err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	if sched, err = cfg.bound(sched); err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	if err := cfg.checkDeadline(sched, interval, s.maxSkew); err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	if cfg.jitter > 0 && cfg.jitter >= cfg.maxLate {
		return fmt.Errorf("job %q: %w: jitter %v must be below max lateness %v, or every slot could start late", name, ErrInvalidOption, cfg.jitter, cfg.maxLate)
	}
	if !isOnce(sched) {
		if err := cfg.retry.check(shortestGap(sched, interval)); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	if _, ok := s.runs.(backend.Retrier); cfg.retry != nil && s.runs != nil && !ok {
		return fmt.Errorf("job %q: %w: retries need a run store that stores them (backend.Retrier); the %s backend's has none", name, ErrInvalidOption, s.backend.Name())
	}
	if c, ok := s.runs.(backend.OverlapCanceller); cfg.overlap == OverlapCancelOther && s.runs != nil && (!ok || !c.CancelsOverlap()) {
		return fmt.Errorf("job %q: %w: overlap policy cancel-other needs a run store that stores cancel requests (backend.OverlapCanceller); the %s backend's has none", name, ErrInvalidOption, s.backend.Name())
	}
	if b, ok := s.runs.(backend.OverlapBufferer); cfg.overlap.Buffers() && s.runs != nil && (!ok || !b.BuffersOverlap()) {
		return fmt.Errorf("job %q: %w: overlap policy %s needs a run store that stores buffered slots (backend.OverlapBufferer); the %s backend's has none", name, ErrInvalidOption, cfg.overlap, s.backend.Name())
	}
	if c, ok := s.runs.(backend.RunCounter); cfg.maxRuns > 0 && (!ok || !c.CountsRuns()) {
		if s.runs == nil {
			return fmt.Errorf("job %q: %w: WithMaxRuns needs a backend with leases whose run store counts runs (backend.RunCounter); %q has none", name, ErrInvalidOption, s.backend.Name())
		}
		return fmt.Errorf("job %q: %w: WithMaxRuns needs a run store that counts runs (backend.RunCounter); the %s backend's does not", name, ErrInvalidOption, s.backend.Name())
	}
	if c, ok := s.runs.(backend.BufferedRunCounter); cfg.maxRuns > 0 && cfg.overlap.Buffers() && s.runs != nil && (!ok || !c.CountsBufferedRuns()) {
		return fmt.Errorf("job %q: %w: WithMaxRuns with overlap policy %s needs a run store that counts a buffered slot as it stores it (backend.BufferedRunCounter); the %s backend's does not", name, ErrInvalidOption, cfg.overlap, s.backend.Name())
	}
	if cfg.concurrency > 1 && cfg.overlap != OverlapSkip && !cfg.overlap.Buffers() {
		return fmt.Errorf("job %q: %w: WithConcurrency(%d) needs overlap policy skip, buffer-one or buffer-all, not %s", name, ErrInvalidOption, cfg.concurrency, cfg.overlap)
	}
	if c, ok := s.runs.(backend.ConcurrencyCapper); cfg.concurrency > 1 && s.runs != nil && (!ok || !c.CapsConcurrency()) {
		return fmt.Errorf("job %q: %w: WithConcurrency needs a run store that applies it (backend.ConcurrencyCapper); the %s backend's does not", name, ErrInvalidOption, s.backend.Name())
	}
	if cfg.bufferCap > 0 && cfg.overlap != OverlapBufferAll {
		return fmt.Errorf("job %q: %w: WithBufferCap needs overlap policy buffer-all, not %s", name, ErrInvalidOption, cfg.overlap)
	}
	if _, ok := s.backend.(backend.CalendarStore); len(cfg.calendars) > 0 && !ok {
		return fmt.Errorf("job %q: %w: WithCalendars needs a backend that stores calendars (backend.CalendarStore); %q has none", name, ErrInvalidOption, s.backend.Name())
	}
	if _, ok := s.backend.(backend.Pauser); cfg.pauseAfter > 0 && !ok {
		return fmt.Errorf("job %q: %w: pausing after failed slots needs a backend that stores pauses (backend.Pauser); %q has none", name, ErrInvalidOption, s.backend.Name())
	}
	if s.runs == nil {
		if cfg.overlap != OverlapAllow {
			return fmt.Errorf("job %q: %w: overlap policy %s needs a backend with leases; %q has none", name, ErrInvalidOption, cfg.overlap, s.backend.Name())
		}
		if cfg.catchUp != CatchUpNone {
			return fmt.Errorf("job %q: %w: catch-up policy %s needs a backend with leases; %q has none", name, ErrInvalidOption, cfg.catchUp, s.backend.Name())
		}
	}
	limits := backend.JobLimits{
		Job:           name,
		Schedule:      sched.String(),
		Interval:      interval,
		Jitter:        cfg.jitter,
		MaxLate:       cfg.maxLate,
		Timeout:       cfg.timeout,
		Lease:         cfg.lease,
		Overlap:       cfg.overlap,
		CatchUp:       cfg.catchUp,
		CatchUpWindow: cfg.catchUpWindow,
		DedupeWindow:  cfg.window,
		ClockSkew:     s.maxSkew,
		CallTimeout:   s.callTO,
		Retention:     backend.Retention{Size: cfg.historySize, TTL: cfg.historyTTL},
		MaxRuns:       cfg.maxRuns,
		Retry:         cfg.retry.limits(),
		MaxManual:     cfg.maxManual,
		PauseAfter:    cfg.pauseAfter,
		BufferCap:     cfg.bufferCap,
		Concurrency:   cfg.concurrency,
	}
	if isCron {
		limits.DST = new(cron.DST().Normal())
	}
	window := s.backend.DedupeWindow()
	if w, ok := s.backend.(backend.JobWindower); ok {
		window = w.WindowFor(limits)
	}
	limits.Window = window
	if reach := cfg.jitter + cfg.maxLate + s.maxSkew; window != backend.Forever && reach >= window {
		return fmt.Errorf("job %q: %w: jitter %v + max lateness %v + clock skew allowance %v = %v is not below the %s backend's dedupe window %v; a claim that late could run the slot again (lower them, raise the window, or lower Config.MaxClockSkew)",
			name, ErrWindowTooShort, cfg.jitter, cfg.maxLate, s.maxSkew, reach, s.backend.Name(), window)
	}
	if c, ok := s.backend.(backend.JobChecker); ok {
		if err := c.CheckJob(limits); err != nil {
			return fmt.Errorf("job %q: rejected by the %s backend: %w", name, s.backend.Name(), err)
		}
	}
	j := &job{name: name, sched: sched, handler: h, cfg: cfg, limits: limits, interval: interval}
	j.judgedSince.Store(math.MaxInt64)
	j.ended, j.end = context.WithCancel(context.Background())
	j.gone, j.remove = context.WithCancel(context.Background())
	for _, check := range s.jobChecks() {
		if err := (*check)(name); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	return s.insert(j)
}

// AddJobCheck adds check to the registration of every job from now on, after
// the scheduler's own checks and before the backend prepares the job: an error
// refuses the registration, wrapped. A plug-in that serves the jobs (fleet)
// refuses with it a name it cannot serve. The returned func removes the check.
func (s *Scheduler) AddJobCheck(check func(job string) error) (remove func()) {
	c := &check // its identity, for remove
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, c)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.checks = slices.DeleteFunc(s.checks, func(x *func(string) error) bool { return x == c })
	}
}

func (s *Scheduler) jobChecks() []*func(string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.checks)
}

// insert adds j to the jobs. Before Start that is all; once Start has begun,
// the backend prepares j first (PrepareJob, bounded by Config.CallTimeout), and
// a started scheduler then starts it as Start starts every job.
func (s *Scheduler) insert(j *job) error {
	prepared := false
	for {
		s.mu.Lock()
		if err := s.registerErrLocked(j.name); err != nil {
			s.mu.Unlock()
			return err
		}
		if _, ok := s.jobs[j.name]; ok {
			s.mu.Unlock()
			return fmt.Errorf("job %q: %w", j.name, ErrJobExists)
		}
		if s.state == stateNew || prepared {
			break
		}
		s.mu.Unlock()
		ctx, cancel := s.callCtx(context.Background())
		err := s.backend.PrepareJob(ctx, j.limits)
		cancel()
		if err != nil {
			return fmt.Errorf("scheduler: prepare job %q on %s: %w", j.name, s.backend.Name(), err)
		}
		prepared = true
	}
	defer s.mu.Unlock()
	s.jobs[j.name] = j
	s.order = append(s.order, j)
	s.notifyJobsLocked()
	if s.state == stateStarted {
		s.startJobsLocked([]*job{j}, s.clock.Now())
	}
	return nil
}

// RemoveJob removes a job from this instance, before or after Start. It no
// longer claims the job's slots, its schedule entries' or its runs' takeovers,
// and stands by for none. It answers RunNow, Backfill and pauses with
// ErrJobNotFound. Slots it is running finish, and are recorded as usual. A slot
// whose claim this instance won as RemoveJob was called may still start. The job's
// records, pauses and schedule entries stay stored: the instances that still
// declare it go on running it, and its entries are orphaned here (EntryCounts)
// until it is registered again.
func (s *Scheduler) RemoveJob(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateStopped {
		return fmt.Errorf("job %q: %w: the scheduler was stopped", name, ErrStopped)
	}
	j, ok := s.jobs[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrJobNotFound, name)
	}
	delete(s.jobs, name)
	for i, o := range s.order {
		if o == j {
			s.order = append(s.order[:i:i], s.order[i+1:]...)
			break
		}
	}
	j.remove()
	s.entries.orphanJob(name)
	s.notifyJobsLocked()
	s.log.Info("job removed from this instance", "job", name)
	return nil
}

// JobsChanged returns a channel closed at the next registration or removal of
// a job: a plug-in that serves the jobs (fleet) follows them with it.
func (s *Scheduler) JobsChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobsChanged
}

func (s *Scheduler) notifyJobsLocked() {
	close(s.jobsChanged)
	s.jobsChanged = make(chan struct{})
}

// shortestGap is the interval of an Every job, or the shortest gap between the next
// few slots of a cron job. It caps the default max lateness, so that never spans
// two slots and a (re)started instance never claims a burst of past slots.
func shortestGap(sched Schedule, interval time.Duration) time.Duration {
	if interval > 0 {
		return interval
	}
	gap := DefaultMaxLate
	prev := sched.Next(time.Now())
	for range 16 {
		next := sched.Next(prev)
		if next.IsZero() || prev.IsZero() {
			break
		}
		gap = min(gap, next.Sub(prev))
		prev = next
	}
	return gap
}
