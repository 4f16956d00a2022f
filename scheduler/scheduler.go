package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Handler runs one slot of a job. Its context is cancelled on timeout, when the run
// loses its lease, and on a hard stop; context.Cause tells which.
type Handler func(ctx context.Context, run Run) error

// Run is what a handler is told about the run it executes.
type Run struct {
	Job      string
	Slot     time.Time
	Instance string
	// Token is unique to this attempt. With Fence it is the fencing token: pass it to
	// systems you write to, so they can refuse a holder that has been replaced.
	Token string
	// Fence grows with every new holder of the same slot (0 without leases).
	Fence   uint64
	Attempt int
	Manual  bool
}

// Config configures a Scheduler. Only Backend is required.
type Config struct {
	// Backend decides which instance runs each slot. Required.
	Backend Backend
	// Instance names this replica in claims and history. Defaults to the host name,
	// the process ID and a random suffix.
	Instance string
	// Logger receives the scheduler's logs. Defaults to a logger that discards.
	Logger *slog.Logger
	// Clock is the source of time. Defaults to SystemClock.
	Clock Clock
	// OnEvent, when set, receives every event synchronously. It must return quickly.
	OnEvent func(Event)
	// CallTimeout bounds each backend call. Defaults to DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxClockSkew is how far apart the instances' clocks, and the store's, may be
	// while every slot still runs once. Lateness is judged on each instance's own
	// clock; a run store refuses a first claim later than max lateness plus
	// MaxClockSkew after the slot by its own clock (late, and stored so); a backend
	// without leases needs jitter + max lateness + MaxClockSkew below its dedupe
	// window, checked at registration. Defaults to DefaultMaxClockSkew.
	MaxClockSkew time.Duration
}

// DefaultCallTimeout bounds a backend call made without a deadline.
const DefaultCallTimeout = 10 * time.Second

// DefaultMaxClockSkew is the clock skew allowance when Config gives none: clocks
// kept by NTP agree within milliseconds, so two seconds leave room for a replica
// whose clock is badly kept without weakening the checks much.
const DefaultMaxClockSkew = 2 * time.Second

// MaxJobNameLen is the longest job name accepted, in bytes.
const MaxJobNameLen = 1024

// Scheduler runs jobs so that each slot runs on exactly one of the instances sharing
// a backend.
type Scheduler struct {
	backend  Backend
	runs     RunStore // nil without leases
	instance string
	log      *slog.Logger
	clock    Clock
	onEvent  func(Event)
	callTO   time.Duration
	maxSkew  time.Duration

	mu     sync.Mutex
	jobs   map[string]*job
	order  []*job
	state  int // 0 new, 1 started, 2 stopped
	inited bool

	loopCtx    context.Context // stops loops, backups and new claims
	stopLoops  context.CancelFunc
	loops      sync.WaitGroup
	handlers   sync.WaitGroup // running slots (claims, handlers, results)
	hardCtx    context.Context
	hardCancel context.CancelCauseFunc
}

const (
	stateNew = iota
	stateStarted
	stateStopped
)

type job struct {
	name     string
	sched    Schedule
	handler  Handler
	cfg      jobConfig
	limits   JobLimits
	interval time.Duration
}

// New returns a Scheduler, or an error naming the field that is invalid.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Backend == nil {
		return nil, fmt.Errorf("%w: Backend is required", ErrInvalidConfig)
	}
	if cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("%w: CallTimeout %v is negative", ErrInvalidConfig, cfg.CallTimeout)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxClockSkew < 0 {
		return nil, fmt.Errorf("%w: MaxClockSkew %v is negative", ErrInvalidConfig, cfg.MaxClockSkew)
	}
	if cfg.MaxClockSkew == 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.Instance == "" {
		cfg.Instance = defaultInstance()
	} else if !utf8.ValidString(cfg.Instance) || len(cfg.Instance) > MaxJobNameLen {
		return nil, fmt.Errorf("%w: Instance must be valid UTF-8 of at most %d bytes", ErrInvalidConfig, MaxJobNameLen)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	s := &Scheduler{
		backend:  cfg.Backend,
		instance: cfg.Instance,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		onEvent:  cfg.OnEvent,
		callTO:   cfg.CallTimeout,
		maxSkew:  cfg.MaxClockSkew,
		jobs:     make(map[string]*job),
	}
	if lb, ok := cfg.Backend.(LeaseBackend); ok {
		s.runs = lb.Runs()
	}
	return s, nil
}

// Instance returns this scheduler's instance ID.
func (s *Scheduler) Instance() string { return s.instance }

// Backend returns the scheduler's backend.
func (s *Scheduler) Backend() Backend { return s.backend }

// Every registers a job that runs every interval, on slots aligned to the Unix epoch.
func (s *Scheduler) Every(name string, interval time.Duration, h Handler, opts ...JobOption) error {
	sched, err := NewIntervalSchedule(interval)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	return s.add(name, sched, interval, h, opts)
}

// Cron registers a job on a cron expression (5 fields, or 6 with seconds first; see
// CronSchedule for the time zone and daylight saving rules).
func (s *Scheduler) Cron(name, expr string, h Handler, opts ...JobOption) error {
	var cfg jobConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	sched, err := ParseCron(expr, cfg.location)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	return s.add(name, sched, 0, h, opts)
}

// ValidateJobName reports whether name can name a job: non-empty valid UTF-8, at
// most MaxJobNameLen bytes, no control characters, no leading or trailing space.
// Backends encode the name for their own stores; they do not restrict it further.
func ValidateJobName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidJobName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidJobName, name)
	case len(name) > MaxJobNameLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidJobName, len(name), MaxJobNameLen)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: %q has leading or trailing space", ErrInvalidJobName, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %q contains a control character", ErrInvalidJobName, name)
	}
	return nil
}

func (s *Scheduler) add(name string, sched Schedule, interval time.Duration, h Handler, opts []JobOption) error {
	if err := ValidateJobName(name); err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("job %q: %w", name, ErrNilHandler)
	}
	cfg := jobConfig{lease: DefaultLease, historySize: DefaultHistorySize, catchUpConcurrency: 1}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	if !cfg.maxLateSet {
		cfg.maxLate = min(DefaultMaxLate, shortestGap(sched, interval))
	}
	if cfg.jitter > 0 && cfg.jitter >= cfg.maxLate {
		return fmt.Errorf("job %q: %w: jitter %v must be below max lateness %v, or every slot could start late", name, ErrInvalidOption, cfg.jitter, cfg.maxLate)
	}
	if s.runs == nil {
		if cfg.overlap != OverlapAllow {
			return fmt.Errorf("job %q: %w: overlap policy %s needs a backend with leases; %q has none", name, ErrInvalidOption, cfg.overlap, s.backend.Name())
		}
		if cfg.catchUp != CatchUpNone {
			return fmt.Errorf("job %q: %w: catch-up policy %s needs a backend with leases; %q has none", name, ErrInvalidOption, cfg.catchUp, s.backend.Name())
		}
	}
	limits := JobLimits{
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
		Retention:     Retention{Size: cfg.historySize, TTL: cfg.historyTTL},
	}
	window := s.backend.DedupeWindow()
	if w, ok := s.backend.(JobWindower); ok {
		window = w.WindowFor(limits)
	}
	if reach := cfg.jitter + cfg.maxLate + s.maxSkew; window != Forever && reach >= window {
		return fmt.Errorf("job %q: %w: jitter %v + max lateness %v + clock skew allowance %v = %v is not below the %s backend's dedupe window %v; a claim that late could run the slot again (lower them, raise the window, or lower Config.MaxClockSkew)",
			name, ErrWindowTooShort, cfg.jitter, cfg.maxLate, s.maxSkew, reach, s.backend.Name(), window)
	}
	if c, ok := s.backend.(JobChecker); ok {
		if err := c.CheckJob(limits); err != nil {
			return fmt.Errorf("job %q: rejected by the %s backend: %w", name, s.backend.Name(), err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateNew {
		return fmt.Errorf("job %q: %w: register jobs before Start", name, ErrStarted)
	}
	if _, ok := s.jobs[name]; ok {
		return fmt.Errorf("job %q: %w", name, ErrJobExists)
	}
	j := &job{name: name, sched: sched, handler: h, cfg: cfg, limits: limits, interval: interval}
	s.jobs[name] = j
	s.order = append(s.order, j)
	return nil
}

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

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateNew {
		return ErrStarted
	}
	s.state = stateStarted
	s.loopCtx, s.stopLoops = context.WithCancel(context.WithoutCancel(ctx))
	s.hardCtx, s.hardCancel = context.WithCancelCause(context.WithoutCancel(ctx))
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

// History returns the job's recent runs on every instance, newest first.
func (s *Scheduler) History(ctx context.Context, name string, limit int) ([]RunRecord, error) {
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	recs, err := s.backend.History(cctx, name, limit)
	if err != nil {
		return nil, fmt.Errorf("scheduler: history of %q: %w", name, err)
	}
	return recs, nil
}

// RunNow runs the job at once on this instance, recorded as a manual run (never
// de-duplicated), and returns its record. The scheduler must be started. The handler
// is cancelled when ctx is done, and by Stop like any other handler.
func (s *Scheduler) RunNow(ctx context.Context, name string) (RunRecord, error) {
	s.mu.Lock()
	j, ok := s.jobs[name]
	state := s.state
	if ok && state == stateStarted {
		s.handlers.Add(1) // under the lock that Stop changes the state under
	}
	s.mu.Unlock()
	if !ok {
		return RunRecord{}, fmt.Errorf("%w: %q", ErrJobNotFound, name)
	}
	if state != stateStarted {
		return RunRecord{}, fmt.Errorf("run %q now: %w", name, ErrNotStarted)
	}
	defer s.handlers.Done()
	now := s.clock.Now()
	in := s.claimInput(j, time.UnixMilli(now.UnixMilli()).UTC(), 1)
	in.Manual = true
	cctx, cancel := s.callCtx(ctx)
	slot, err := s.backend.RecordManualRun(cctx, in)
	cancel()
	if err != nil {
		s.backendError(j, in.Slot, "record_manual_run", err)
		return RunRecord{}, fmt.Errorf("scheduler: run %q now: %w", name, err)
	}
	if !slot.IsZero() {
		in.Slot = slot
	}
	// The handler's context ends with the caller's or with a hard stop.
	hctx, hcancel := context.WithCancelCause(s.hardCtx)
	defer hcancel(nil)
	defer context.AfterFunc(ctx, func() { hcancel(context.Cause(ctx)) })()
	res := s.execute(hctx, j, in, 0, nil)
	return RunRecord{
		Job: name, Slot: in.Slot, Instance: s.instance, Token: in.Token, Attempt: 1, Manual: true,
		Status: res.Status, ClaimedAt: in.At, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt,
		Duration: res.FinishedAt.Sub(res.StartedAt), Error: res.Error,
	}, nil
}

func (s *Scheduler) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.callTO)
}

func (s *Scheduler) emit(e Event) {
	if s.onEvent == nil {
		return
	}
	e.Instance = s.instance
	if e.At.IsZero() {
		e.At = s.clock.Now()
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("event hook panicked", "panic", r)
		}
	}()
	s.onEvent(e)
}

func (s *Scheduler) backendError(j *job, slot time.Time, op string, err error) {
	s.log.Warn("backend call failed", "job", j.name, "slot", slot, "op", op, "err", err)
	s.emit(Event{Kind: EventBackendError, Job: j.name, Slot: slot, Op: op, Err: err})
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "instance"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newToken()[:6])
}

// shortestGap is the interval of an Every job, or the shortest gap between the next
// few slots of a cron job: the default max lateness never spans two slots, so a
// (re)started instance never claims a burst of past slots.
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

var errTimeout = errors.New("scheduler: handler timed out")
