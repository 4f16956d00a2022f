package scheduler

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
)

// Config configures a Scheduler. Only Backend is required.
type Config struct {
	// Backend decides which instance runs each slot. Required.
	Backend backend.Backend
	// Instance names this replica in claims and history. Defaults to the host name,
	// the process ID and a random suffix.
	Instance string
	// Logger receives the scheduler's logs: start and stop, and what went wrong (a
	// run that failed at warn level, a handler's panic at error level with its
	// stack, lost leases, failed backend calls). A slot this instance lost to
	// another is not logged here (LogEvents logs it at debug level). Defaults to a
	// logger that discards.
	Logger *slog.Logger
	// Clock is the source of time. Defaults to SystemClock.
	Clock Clock
	// OnEvent, when set, receives every event synchronously. It must return quickly.
	OnEvent func(Event)
	// CallTimeout bounds each backend call. Defaults to DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxClockSkew is how far apart the instances' clocks, and the store's, may be
	// while every slot still runs once. Lateness is judged on each instance's own
	// clock. A run store refuses, as late, a first claim later than max lateness
	// plus MaxClockSkew after the slot by its own clock. A backend without leases
	// needs jitter + max lateness + MaxClockSkew below its dedupe window, checked
	// at registration. Defaults to DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// Middleware wraps every job's handler, for scheduled and manual runs alike,
	// the first outermost: Middleware[0] sees the attempt first and its error
	// last. Nil entries are an error. Defaults to none.
	Middleware []Middleware
	// Turns shares out the slots among the instances instead of every instance
	// claiming every slot. For each job, and each schedule entry, one instance
	// (chosen from the live instances that would claim the same slots, by a
	// hash of the job or entry and the instance) claims the slots at their time;
	// a second claims them a grace later (at most 1 s, half the max lateness when
	// that is shorter), in case the first has just died; the others claim a slot
	// only once the first two are gone, and the first two take over what a member
	// that is gone held. So the claims, messages and store writes per slot do not
	// grow with the fleet. Each slot still runs once: the store decides every
	// claim, and instances that see the fleet differently for a moment cost a
	// lost claim. Instances store that they are alive every second; one not seen
	// for 3 s is gone. It needs a backend with leases that keeps members
	// (backend.Membership). docs/concepts.md ("Turns") has the rules.
	Turns bool
}

// DefaultCallTimeout bounds a backend call made without a deadline.
const DefaultCallTimeout = 10 * time.Second

// MaxDuration bounds every duration a Config or a job option sets: ten years.
// The times the scheduler and its stores compute add several of them to a slot;
// longer values would overflow those sums.
const MaxDuration = 10 * 365 * 24 * time.Hour

// DefaultMaxClockSkew is the clock skew allowance when Config gives none: clocks
// kept by NTP agree within milliseconds, so two seconds leave room for a replica
// whose clock is badly kept without weakening the checks much.
const DefaultMaxClockSkew = 2 * time.Second

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
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"CallTimeout", cfg.CallTimeout}, {"MaxClockSkew", cfg.MaxClockSkew}} {
		if d.v > MaxDuration {
			return nil, fmt.Errorf("%w: %s %v is above MaxDuration (%v)", ErrInvalidConfig, d.name, d.v, MaxDuration)
		}
	}
	for i, m := range cfg.Middleware {
		if m == nil {
			return nil, fmt.Errorf("%w: Middleware[%d] is nil", ErrInvalidConfig, i)
		}
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
		entries:  newEntrySet(),
		// closed and replaced at each change of the jobs
		jobsChanged: make(chan struct{}),
		marks:       make(chan struct{}, maxMarkReads),

		middleware: append([]Middleware(nil), cfg.Middleware...),
	}
	if lb, ok := cfg.Backend.(backend.LeaseBackend); ok {
		s.runs = lb.Runs()
	}
	if cfg.Turns {
		m, ok := cfg.Backend.(backend.Membership)
		if !ok || s.runs == nil {
			return nil, fmt.Errorf("%w: Turns needs a backend with leases that keeps members (backend.Membership); %s does not", ErrInvalidConfig, cfg.Backend.Name())
		}
		s.turns = newTurns(m)
	}
	s.store = s.newSlotStore()
	s.out.init()
	s.judged.byKey, s.judged.wake = map[judgeKey]*judgement{}, make(chan struct{}, 1)
	return s, nil
}

func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "instance"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newToken()[:6])
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
