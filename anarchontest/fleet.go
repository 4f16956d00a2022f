package anarchontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// Config configures a fleet. Only Setup is required.
type Config struct {
	// Replicas is how many replicas the fleet runs. Defaults to 3.
	Replicas int
	// Setup registers the jobs of one replica on its scheduler: the code of
	// the service under test. It runs for every process the fleet starts,
	// Restart's included. Required.
	Setup func(s *scheduler.Scheduler) error
	// Scheduler is the configuration every replica's scheduler gets:
	// Middleware, Logger, CallTimeout, MaxClockSkew, OnEvent. The fleet sets
	// Backend, Instance and Clock, which must be left zero. OnEvent is called
	// after the fleet has recorded the event; Middleware runs inside the
	// fleet's own, which cancels the handlers of a killed process.
	Scheduler scheduler.Config
	// Clock is the fleet's time: the store's, and every replica's before its
	// skew. Defaults to the system clock, which testing/synctest fakes: run the
	// fleet inside synctest.Test and move the time with Advance. A clock of
	// one's own (a stepclock.Clock) serves where a bubble cannot, such as a
	// runnable example; Freeze then thaws as that clock moves.
	Clock scheduler.Clock
}

// DefaultReplicas is how many replicas a fleet runs when Config.Replicas is
// zero.
const DefaultReplicas = 3

// A Fleet is replicas of one scheduler configuration on one shared memory
// store, each replica with its own instance name ("replica-1", "replica-2",
// ...), faults on demand and the fleet's record of their events.
type Fleet struct {
	cfg      Config
	clock    scheduler.Clock
	mem      *memory.Backend
	reader   *scheduler.Scheduler // reads the store past every fault
	replicas []*Replica
	events   eventLog

	closeOnce sync.Once
	closeErr  error
}

// Start starts a fleet for the test t, or fails the test, and closes the
// fleet when the test ends. Call it inside synctest.Test, unless
// Config.Clock is set.
func Start(t testing.TB, cfg Config) *Fleet {
	t.Helper()
	f, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// New starts a fleet: a memory store and every replica on it, each started
// with ctx. On error nothing is left running.
func New(ctx context.Context, cfg Config) (*Fleet, error) {
	if err := check(&cfg); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, clock: cfg.Clock}
	f.events.init()
	f.mem = memory.NewWithClock(f.clock)
	reader, err := scheduler.New(scheduler.Config{Backend: f.mem, Instance: "anarchontest", Clock: f.clock})
	if err != nil {
		return nil, fmt.Errorf("anarchontest: %w", err)
	}
	f.reader = reader
	for i := range cfg.Replicas {
		r := &Replica{f: f, name: fmt.Sprintf("replica-%d", i+1), cut: make(chan struct{})}
		f.replicas = append(f.replicas, r)
		if err := r.start(ctx); err != nil {
			return nil, errors.Join(err, f.Close())
		}
	}
	return f, nil
}

// check validates cfg and sets its defaults.
func check(cfg *Config) error {
	switch {
	case cfg.Setup == nil:
		return fmt.Errorf("%w: anarchontest: Setup is required", scheduler.ErrInvalidConfig)
	case cfg.Replicas < 0:
		return fmt.Errorf("%w: anarchontest: Replicas %d is negative", scheduler.ErrInvalidConfig, cfg.Replicas)
	case cfg.Scheduler.Backend != nil:
		return fmt.Errorf("%w: anarchontest: Scheduler.Backend is the fleet's: leave it nil", scheduler.ErrInvalidConfig)
	case cfg.Scheduler.Instance != "":
		return fmt.Errorf("%w: anarchontest: Scheduler.Instance is the fleet's: leave it empty", scheduler.ErrInvalidConfig)
	case cfg.Scheduler.Clock != nil:
		return fmt.Errorf("%w: anarchontest: Scheduler.Clock is the fleet's: set Config.Clock", scheduler.ErrInvalidConfig)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = DefaultReplicas
	}
	if cfg.Clock == nil {
		cfg.Clock = scheduler.SystemClock{}
	}
	return nil
}

// Replica returns the i-th replica, from 0.
func (f *Fleet) Replica(i int) *Replica { return f.replicas[i] }

// Replicas returns every replica, in order.
func (f *Fleet) Replicas() []*Replica { return append([]*Replica(nil), f.replicas...) }

// Named returns the replica with instance name name, or nil.
func (f *Fleet) Named(name string) *Replica {
	for _, r := range f.replicas {
		if r.name == name {
			return r
		}
	}
	return nil
}

// Store returns the memory store the replicas share, as it is: no fault of
// any replica applies to it.
func (f *Fleet) Store() *memory.Backend { return f.mem }

// Close stops the fleet. The faults end first (partitions heal, freezes
// thaw, lost answers are forgotten); killed processes are reaped, and every
// other one is stopped at once: its handlers are cancelled and its runs
// handed over. It returns an error matching scheduler.ErrNotStored if a
// replica could not store what its runs came to. Close more than once returns
// the first result.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		for _, r := range f.replicas {
			r.mu.Lock()
			r.losses = nil
			r.mu.Unlock()
			r.Heal()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 0)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, len(f.replicas))
		for i, r := range f.replicas {
			p := r.current()
			if p == nil {
				continue
			}
			wg.Go(func() {
				if err := p.stop(ctx); errors.Is(err, scheduler.ErrNotStored) {
					errs[i] = err
				}
			})
		}
		wg.Wait()
		f.closeErr = errors.Join(errs...)
	})
	return f.closeErr
}
