package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// withoutLeases hides a backend's optional capabilities: embedding the Backend
// interface keeps only its methods, so the scheduler finds no RunStore.
type withoutLeases struct{ scheduler.Backend }

// With catch-up, the slots missed while no replica was up run at Start, oldest
// first and one at a time, each claimed like any slot (so still run once). It needs
// a backend with leases.
func ExampleWithCatchUp() {
	ctx := context.Background()
	// The fleet comes back at 12:30 after a few hours down: 10:00, 11:00 and 12:00
	// were missed.
	clock := newStepClock(at(12, 30, 0))
	onEvent, done := finished()
	b := scheduler.NewMemoryBackendWithClock(clock) // has leases, like jetstream.NewLeased
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
	plain, err := scheduler.New(scheduler.Config{Backend: withoutLeases{scheduler.NewMemoryBackend()}})
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
	clock := newStepClock(at(12, 0, 0))
	started := make(chan struct{}, 1)
	skipped := make(chan scheduler.Event, 1)
	onFinished, done := finished()
	onEvent := func(e scheduler.Event) {
		if e.Kind == scheduler.EventSkipped {
			skipped <- e
		}
		onFinished(e)
	}
	b := scheduler.NewMemoryBackendWithClock(clock)
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
	res, err := b.Runs().Claim(ctx, scheduler.RunClaim{
		Job: "import", Slot: at(12, 1, 0), Token: "late-replica", Instance: "late-replica",
		Lease: time.Minute, Deadline: at(12, 2, 0), Overlap: scheduler.OverlapSkip,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(e.Slot.Format("15:04:05"), res.Outcome, res.Status)

	// Without leases, the policy is refused when the job is registered.
	plain, err := scheduler.New(scheduler.Config{Backend: withoutLeases{scheduler.NewMemoryBackend()}})
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

// A RunStore gives each run one lease holder at a time; the store's clock decides
// when a lease has expired. When the holder dies (stops heartbeating), a backup's
// claim takes the run over with a new attempt and a larger fence, and the old
// holder can no longer finish it.
func ExampleMemoryRunStore() {
	ctx := context.Background()
	clock := newStepClock(at(12, 0, 0))
	store := scheduler.NewMemoryRunStore(clock)
	claim := func(token, instance string) scheduler.ClaimResult {
		res, err := store.Claim(ctx, scheduler.RunClaim{
			Job: "billing", Slot: at(12, 0, 0), Token: token, Instance: instance,
			Lease: 30 * time.Second, Deadline: at(12, 1, 0),
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s (attempt %d, fence %d, holder %s)\n", instance, res.Outcome, res.Attempt, res.Fence, res.Holder)
		return res
	}

	claim("token-a", "a") // a wins and would now run the handler
	claim("token-b", "b") // b stands by as a backup
	clock.Set(at(12, 0, 31))
	claim("token-b", "b") // a's lease expired unfinished: b takes over

	err := store.Finish(ctx, "billing", at(12, 0, 0), "token-a", scheduler.StatusOK)
	fmt.Println("a finishes late:", errors.Is(err, scheduler.ErrStaleToken))
	if err := store.Finish(ctx, "billing", at(12, 0, 0), "token-b", scheduler.StatusOK); err != nil {
		panic(err)
	}
	claim("token-c", "c") // anyone later is told it is done
	// Output:
	// a: won (attempt 1, fence 1, holder a)
	// b: running (attempt 1, fence 1, holder a)
	// b: won (attempt 2, fence 2, holder b)
	// a finishes late: true
	// c: done (attempt 2, fence 2, holder b)
}

// Every decision is stored before anyone acts on it. A claim answered overlap has
// stored the slot as skipped, so every later claim of that slot is answered done.
func ExampleMemoryRunStore_overlap() {
	ctx := context.Background()
	clock := newStepClock(at(12, 1, 0))
	store := scheduler.NewMemoryRunStore(clock)
	claim := func(slot time.Time, token string) {
		res, err := store.Claim(ctx, scheduler.RunClaim{
			Job: "import", Slot: slot, Token: token, Instance: token,
			Lease: 5 * time.Minute, Deadline: slot.Add(time.Minute), Overlap: scheduler.OverlapSkip,
		})
		if err != nil {
			panic(err)
		}
		line := fmt.Sprintf("%s %s: %s", slot.Format("15:04"), token, res.Outcome)
		if res.Status != "" {
			line += ", stored " + string(res.Status)
		}
		fmt.Println(line)
	}
	claim(at(12, 0, 0), "a") // still running at 12:01
	claim(at(12, 1, 0), "b") // forbidden beside it: stored skipped
	claim(at(12, 1, 0), "c") // a later claim follows the stored decision
	// Output:
	// 12:00 a: won
	// 12:01 b: overlap, stored skipped
	// 12:01 c: done, stored skipped
}
