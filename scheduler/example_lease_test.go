package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// withoutLeases hides a backend's optional capabilities: embedding the Backend
// interface keeps only its methods, so the scheduler finds no RunStore.
type withoutLeases struct{ backend.Backend }

// With catch-up, the slots missed while no replica was up run at Start, oldest
// first and one at a time, each claimed like any slot (so still run once). It needs
// a backend with leases.
func ExampleWithCatchUp() {
	ctx := context.Background()
	// The fleet comes back at 12:30 after a few hours down: 10:00, 11:00 and 12:00
	// were missed.
	clock := stepclock.New(at(12, 30, 0))
	onEvent, done := finished()
	b := memory.NewWithClock(clock) // has leases, like jetstream.NewLeased
	s, err := scheduler.New(scheduler.Config{Backend: b, Clock: clock, OnEvent: onEvent})
	if err != nil {
		panic(err)
	}
	rollup := func(ctx context.Context, run scheduler.Run) error {
		fmt.Println("rollup of", run.Slot.Format("15:04"))
		return nil
	}
	err = s.Every("rollup", time.Hour, rollup, scheduler.WithCatchUp(scheduler.CatchUpAll, 3*time.Hour))
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	for range 3 {
		<-done
	}
	if err := s.Stop(ctx); err != nil {
		panic(err)
	}

	// Without leases, catch-up is refused when the job is registered.
	plain, err := scheduler.New(scheduler.Config{Backend: withoutLeases{memory.New()}})
	if err != nil {
		panic(err)
	}
	err = plain.Every("rollup", time.Hour, rollup, scheduler.WithCatchUp(scheduler.CatchUpLatest, 0))
	fmt.Println("without leases:", errors.Is(err, scheduler.ErrInvalidOption))
	// Output:
	// rollup of 10:00
	// rollup of 11:00
	// rollup of 12:00
	// without leases: true
}

// A job that forbids overlap skips a slot while another of its slots still runs,
// and the skip is a stored decision: no replica runs that slot afterwards. It needs
// a backend with leases.
func ExampleWithOverlap() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 0, 0))
	started := make(chan struct{}, 1)
	skipped := make(chan scheduler.Event, 1)
	onFinished, done := finished()
	onEvent := func(e scheduler.Event) {
		if e.Kind == scheduler.EventSkipped {
			skipped <- e
		}
		onFinished(e)
	}
	b := memory.NewWithClock(clock)
	s, err := scheduler.New(scheduler.Config{Backend: b, Clock: clock, OnEvent: onEvent})
	if err != nil {
		panic(err)
	}
	release := make(chan struct{})
	err = s.Every("import", time.Minute, func(ctx context.Context, run scheduler.Run) error {
		started <- struct{}{}
		<-release // this run takes longer than a minute
		return nil
	}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(5*time.Minute))
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	<-started                        // 12:00:00 runs
	clock.AdvanceTo(at(12, 1, 0), 1) // 12:01:00 is due while 12:00:00 still runs
	e := <-skipped
	fmt.Println(e.Slot.Format("15:04:05"), e.Kind)
	close(release)
	<-done
	if err := s.Stop(ctx); err != nil {
		panic(err)
	}

	// Any replica claiming 12:01:00 later is told the stored decision.
	res, err := b.Runs().Claim(ctx, backend.RunClaim{
		Job: "import", Slot: at(12, 1, 0), Token: "late-replica", Instance: "late-replica",
		Lease: time.Minute, Deadline: at(12, 2, 0), Overlap: scheduler.OverlapSkip,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(e.Slot.Format("15:04:05"), res.Outcome, res.Status)

	// Without leases, the policy is refused when the job is registered.
	plain, err := scheduler.New(scheduler.Config{Backend: withoutLeases{memory.New()}})
	if err != nil {
		panic(err)
	}
	err = plain.Every("import", time.Minute, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithOverlap(scheduler.OverlapSkip))
	fmt.Println("without leases:", errors.Is(err, scheduler.ErrInvalidOption))
	// Output:
	// 12:01:00 skipped
	// 12:01:00 done skipped
	// without leases: true
}
