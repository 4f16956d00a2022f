package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// A minimal program: one job every minute on the memory backend. The example's
// clock stands still until it is moved, so the output is fixed; a real program
// leaves Config.Clock unset.
func Example() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 0, 0))
	onEvent, done := finished()

	b := memory.NewWithClock(clock) // memory.New() in a real program
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "replica-1", Clock: clock, OnEvent: onEvent})
	if err != nil {
		panic(err)
	}
	err = s.Every("reconcile", time.Minute, func(ctx context.Context, run scheduler.Run) error {
		fmt.Println(run.Job, run.Slot.Format("15:04:05"), "ran on", run.Instance, "attempt", run.Attempt)
		return nil
	})
	if err != nil {
		panic(err) // bad names, intervals and options fail here, not at run time
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	<-done                           // the 12:00:00 slot is due at Start
	clock.AdvanceTo(at(12, 1, 0), 1) // a minute later
	<-done                           // the 12:01:00 slot
	// Output:
	// reconcile 12:00:00 ran on replica-1 attempt 1
	// reconcile 12:01:00 ran on replica-1 attempt 1
}

// Three replicas declare the same job on one shared backend (in a real fleet: one
// process each, on the JetStream backend). Each slot runs on exactly one of them.
func ExampleScheduler_Every() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 0, 0))
	b := memory.NewWithClock(clock)

	var mu sync.Mutex
	runs := map[string]int{} // slot → how many replicas ran it
	// asked receives one event per replica and slot, when the replica has the
	// store's first answer: it won the slot (claimed), another replica holds it and
	// this one stands by as a backup (standby), or another replica ran it (lost).
	asked := make(chan scheduler.Event, 64)
	onFinished, done := finished()
	var first sync.Map
	onEvent := func(e scheduler.Event) {
		switch e.Kind {
		case scheduler.EventClaimed, scheduler.EventStandby, scheduler.EventLost:
			if _, again := first.LoadOrStore(e.Instance+" "+e.Slot.String(), true); !again {
				asked <- e
			}
		}
		onFinished(e)
	}
	var fleet []*scheduler.Scheduler
	for _, name := range []string{"a", "b", "c"} {
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: name, Clock: clock, OnEvent: onEvent})
		if err != nil {
			panic(err)
		}
		err = s.Every("sync", time.Minute, func(ctx context.Context, run scheduler.Run) error {
			mu.Lock()
			defer mu.Unlock()
			runs[run.Slot.Format("15:04:05")]++
			return nil
		})
		if err != nil {
			panic(err)
		}
		fleet = append(fleet, s)
	}
	for _, s := range fleet {
		if err := s.Start(ctx); err != nil {
			panic(err)
		}
	}
	wait := func() { // until every replica has asked and the winner's run is over
		for range fleet {
			<-asked
		}
		<-done
	}
	wait()                                    // 12:00:00, due at Start
	clock.AdvanceTo(at(12, 1, 0), len(fleet)) // every replica wakes up for 12:01:00
	wait()
	for _, s := range fleet {
		if err := s.Stop(ctx); err != nil {
			panic(err)
		}
	}
	fmt.Println("runs per slot:", runs)

	hist, err := fleet[0].History(ctx, "sync", 10) // any replica reads the same history
	if err != nil {
		panic(err)
	}
	fmt.Println("history records:", len(hist))
	// Output:
	// runs per slot: map[12:00:00:1 12:01:00:1]
	// history records: 2
}

// Registration checks everything it can: a job that could not run as asked is an
// error from Every or Cron, matched with errors.Is, never a surprise at run time.
func ExampleScheduler_Every_invalid() {
	s, err := scheduler.New(scheduler.Config{Backend: memory.New()})
	if err != nil {
		panic(err)
	}
	noop := func(context.Context, scheduler.Run) error { return nil }

	err = s.Every("", time.Minute, noop)
	fmt.Println("empty name:", errors.Is(err, scheduler.ErrInvalidJobName))
	err = s.Every("tick", 0, noop)
	fmt.Println("zero interval:", errors.Is(err, scheduler.ErrInvalidSchedule))
	err = s.Every("tick", time.Minute, noop, scheduler.WithJitter(2*time.Minute))
	fmt.Println("jitter above max lateness:", errors.Is(err, scheduler.ErrInvalidOption))
	err = s.Every("tick", time.Minute, nil)
	fmt.Println("nil handler:", errors.Is(err, scheduler.ErrNilHandler))
	err = s.Cron("tick", "0 0 30 2 *", noop)
	fmt.Println("cron that never fires:", errors.Is(err, scheduler.ErrInvalidSchedule))

	fmt.Println("valid:", s.Every("tick", time.Minute, noop))
	err = s.Every("tick", time.Hour, noop)
	fmt.Println("same name twice:", errors.Is(err, scheduler.ErrJobExists))
	// Output:
	// empty name: true
	// zero interval: true
	// jitter above max lateness: true
	// nil handler: true
	// cron that never fires: true
	// valid: <nil>
	// same name twice: true
}

// RunNow runs a job at once on this instance, whatever its schedule, and records it
// as a manual run: never de-duplicated, so two RunNow calls are two runs.
func ExampleScheduler_RunNow() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 30, 0))
	b := memory.NewWithClock(clock)
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "replica-1", Clock: clock})
	if err != nil {
		panic(err)
	}
	err = s.Every("rebuild-index", time.Hour, func(ctx context.Context, run scheduler.Run) error {
		fmt.Println("handler: manual =", run.Manual)
		return nil
	})
	if err != nil {
		panic(err)
	}

	_, err = s.RunNow(ctx, "rebuild-index")
	fmt.Println("before Start:", errors.Is(err, scheduler.ErrNotStarted))

	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	rec, err := s.RunNow(ctx, "rebuild-index")
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.Job, rec.Slot.Format("15:04:05"), rec.Instance, rec.Status)

	_, err = s.RunNow(ctx, "no-such-job")
	fmt.Println("unknown job:", errors.Is(err, scheduler.ErrJobNotFound))
	// Output:
	// before Start: true
	// handler: manual = true
	// rebuild-index 12:30:00 replica-1 ok
	// unknown job: true
}

// History reads a job's recent runs, newest first, from the backend: every replica
// sees the runs of all of them, scheduled and manual, and how each ended.
func ExampleScheduler_History() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 30, 0))
	onEvent, done := finished()
	b := memory.NewWithClock(clock)
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "replica-1", Clock: clock, OnEvent: onEvent})
	if err != nil {
		panic(err)
	}
	var fail atomic.Bool
	err = s.Every("export", time.Hour, func(ctx context.Context, run scheduler.Run) error {
		if fail.Load() {
			return errors.New("disk full")
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	if _, err := s.RunNow(ctx, "export"); err != nil { // 12:30:00, ok
		panic(err)
	}
	clock.WaitTimers(at(13, 0, 0), 1) // the loop waits for 13:00:00
	clock.Set(at(12, 45, 0))
	fail.Store(true)
	if _, err := s.RunNow(ctx, "export"); err != nil { // 12:45:00, error
		panic(err)
	}
	<-done
	<-done
	fail.Store(false)
	clock.AdvanceTo(at(13, 0, 0), 1) // the scheduled slot 13:00:00
	<-done

	hist, err := s.History(ctx, "export", 10)
	if err != nil {
		panic(err)
	}
	for _, r := range hist {
		kind := "scheduled"
		if r.Manual {
			kind = "manual"
		}
		line := fmt.Sprintf("%s %-9s %s", r.Slot.Format("15:04:05"), kind, r.Status)
		if r.Error != "" {
			line += ": " + r.Error
		}
		fmt.Println(line)
	}
	// Output:
	// 13:00:00 scheduled ok
	// 12:45:00 manual    error: disk full
	// 12:30:00 manual    ok
}

// Stop stops claiming, lets running handlers finish until its context ends, then
// cancels them with the cause ErrStopped. Stop without Start is not an error, and a
// stopped scheduler does not start again.
func ExampleScheduler_Stop() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 30, 0))
	b := memory.NewWithClock(clock)

	idle, err := scheduler.New(scheduler.Config{Backend: b, Clock: clock})
	if err != nil {
		panic(err)
	}
	fmt.Println("Stop without Start:", idle.Stop(ctx))
	fmt.Println("Start after Stop:", errors.Is(idle.Start(ctx), scheduler.ErrStopped))

	s, err := scheduler.New(scheduler.Config{Backend: b, Clock: clock})
	if err != nil {
		panic(err)
	}
	started := make(chan struct{})
	err = s.Every("migrate", time.Hour, func(ctx context.Context, run scheduler.Run) error {
		close(started)
		<-ctx.Done() // a long job that watches its context
		fmt.Println("handler cancelled by Stop:", errors.Is(context.Cause(ctx), scheduler.ErrStopped))
		return ctx.Err()
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	result := make(chan scheduler.RunRecord, 1)
	go func() {
		rec, _ := s.RunNow(ctx, "migrate")
		result <- rec
	}()
	<-started

	// A deadline that has already passed: no grace period for running handlers.
	stopCtx, cancel := context.WithCancel(ctx)
	cancel()
	err = s.Stop(stopCtx)
	fmt.Println("Stop reports the cancelled handlers:", errors.Is(err, context.Canceled))
	fmt.Println("run:", (<-result).Status)
	// Output:
	// Stop without Start: <nil>
	// Start after Stop: true
	// handler cancelled by Stop: true
	// Stop reports the cancelled handlers: true
	// run: cancelled
}
