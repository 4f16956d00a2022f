package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// A cron job runs in the zone it names, UTC when it names none: never the host's
// zone, so replicas on differently configured hosts agree on every slot. The zone
// comes from WithLocation or from a CRON_TZ= prefix; given both, they must agree.
func ExampleScheduler_Cron() {
	ctx := context.Background()
	athens, err := time.LoadLocation("Europe/Athens")
	if err != nil {
		panic(err)
	}
	// Saturday 30 March 2030, 12:00 UTC; Greece moves to summer time on Sunday.
	clock := stepclock.New(time.Date(2030, 3, 30, 12, 0, 0, 0, time.UTC))
	next := make(chan time.Time, 1)
	s, err := scheduler.New(scheduler.Config{
		Backend: memory.NewWithClock(clock),
		Clock:   clock,
		OnEvent: func(e scheduler.Event) {
			if e.Kind == scheduler.EventScheduled {
				select { // a hook must never block the scheduler
				case next <- e.Next: // the job's next slot
				default:
				}
			}
		},
	})
	if err != nil {
		panic(err)
	}
	report := func(ctx context.Context, run scheduler.Run) error { return nil }

	err = s.Cron("report", "0 9 * * MON-FRI", report, scheduler.WithLocation(athens))
	if err != nil {
		panic(err)
	}
	err = s.Cron("digest", "CRON_TZ=America/New_York 0 9 * * *", report, scheduler.WithLocation(athens))
	fmt.Println("zones disagree:", errors.Is(err, scheduler.ErrInvalidSchedule))

	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	slot := <-next
	fmt.Println("next report:", slot.In(athens).Format("Mon 2 Jan 15:04 MST"), "=", slot.Format("15:04 MST"))
	// Output:
	// zones disagree: true
	// next report: Mon 1 Apr 09:00 EEST = 06:00 UTC
}

// At runs a job once, at an instant every replica declares alike; WithStartAt and
// WithEndAt bound a recurring job's slots. Once a schedule has ended, Jobs shows no
// next slot.
func ExampleScheduler_At() {
	ctx := context.Background()
	clock := stepclock.New(at(11, 59, 0))
	ran := make(chan string, 8)
	s, err := scheduler.New(scheduler.Config{Backend: memory.NewWithClock(clock), Clock: clock})
	if err != nil {
		panic(err)
	}
	record := func(ctx context.Context, run scheduler.Run) error {
		ran <- run.Job + " " + run.Slot.Format(time.TimeOnly)
		return nil
	}
	if err := s.At("migrate", at(12, 0, 0), record); err != nil {
		panic(err)
	}
	err = s.Every("warmup", time.Minute, record, scheduler.WithStartAt(at(12, 0, 0)), scheduler.WithEndAt(at(12, 2, 0)))
	if err != nil {
		panic(err)
	}
	for _, j := range s.Jobs() {
		fmt.Println(j.Job+":", scheduler.DescribeSchedule(j.Schedule))
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	clock.AdvanceTo(at(12, 0, 0), 2) // both loops wait for 12:00
	first := []string{<-ran, <-ran}  // the two runs of 12:00, in either order
	slices.Sort(first)
	fmt.Println(strings.Join(first, ", "))
	clock.AdvanceTo(at(12, 1, 0), 1) // only warmup's loop is left
	fmt.Println(<-ran)
	for _, j := range s.Jobs() {
		fmt.Println(j.Job, "next:", j.Next.IsZero())
	}
	// Output:
	// migrate: once at 2030-01-01T12:00:00.000Z
	// warmup: every 1m0s (aligned to UTC), from 2030-01-01T12:00:00.000Z until 2030-01-01T12:02:00.000Z
	// migrate 12:00:00, warmup 12:00:00
	// warmup 12:01:00
	// migrate next: true
	// warmup next: true
}

// ParseCron gives the slots of an expression without a scheduler: Next is a pure
// function of the time it is given.
func ExampleParseCron() {
	athens, err := time.LoadLocation("Europe/Athens")
	if err != nil {
		panic(err)
	}
	sched, err := scheduler.ParseCron("0 9 * * MON-FRI", athens)
	if err != nil {
		panic(err)
	}
	fmt.Println(sched)
	thursday := time.Date(2030, 3, 28, 12, 0, 0, 0, time.UTC)
	t := thursday
	for range 3 {
		t = sched.Next(t)
		fmt.Println(t.In(athens).Format("Mon 2 Jan 15:04 MST"), "=", t.Format("15:04 MST"))
	}

	// The same with the zone in the expression. A prefix that contradicts the
	// location passed is an error, not a silent choice.
	same, err := scheduler.ParseCron("CRON_TZ=Europe/Athens 0 9 * * MON-FRI", athens)
	fmt.Println(same.Next(thursday).Equal(sched.Next(thursday)), err)
	_, err = scheduler.ParseCron("CRON_TZ=Asia/Tokyo 0 9 * * MON-FRI", athens)
	fmt.Println(errors.Is(err, scheduler.ErrInvalidSchedule))
	// Output:
	// CRON_TZ=Europe/Athens 0 9 * * MON-FRI
	// Fri 29 Mar 09:00 EET = 07:00 UTC
	// Mon 1 Apr 09:00 EEST = 06:00 UTC
	// Tue 2 Apr 09:00 EEST = 06:00 UTC
	// true <nil>
	// true
}

// Daylight saving time gives every listed time exactly one slot per day: a time in
// the hour skipped in spring runs at the instant it would have been, and a time in
// the hour repeated in autumn runs once, on its first occurrence.
func ExampleParseCron_daylightSaving() {
	spring, err := scheduler.ParseCron("CRON_TZ=America/New_York 30 2 * * *", nil)
	if err != nil {
		panic(err)
	}
	autumn, err := scheduler.ParseCron("CRON_TZ=America/New_York 30 1 * * *", nil)
	if err != nil {
		panic(err)
	}
	ny := spring.Location()
	show := func(sched *scheduler.CronSchedule, from time.Time) {
		var slots []string
		for t := from; len(slots) < 3; {
			t = sched.Next(t)
			slots = append(slots, t.In(ny).Format("Jan 2 15:04 MST"))
		}
		fmt.Println(strings.Join(slots, ", "))
	}
	show(spring, time.Date(2030, 3, 9, 0, 0, 0, 0, ny))  // clocks go 02:00 → 03:00 on 10 March
	show(autumn, time.Date(2030, 11, 2, 0, 0, 0, 0, ny)) // clocks go 02:00 → 01:00 on 3 November
	// Output:
	// Mar 9 02:30 EST, Mar 10 03:30 EDT, Mar 11 02:30 EDT
	// Nov 2 01:30 EDT, Nov 3 01:30 EDT, Nov 4 01:30 EST
}

// Every's slots are the multiples of the interval since the Unix epoch, so replicas
// started at different times compute the same ones without talking to each other.
func ExampleNewIntervalSchedule() {
	sched, err := scheduler.NewIntervalSchedule(15 * time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println(sched)
	started := time.Date(2030, 1, 1, 12, 7, 13, 0, time.UTC) // one replica starts here,
	other := time.Date(2030, 1, 1, 12, 14, 59, 0, time.UTC)  // another one here
	fmt.Println(sched.Next(started).Format("15:04:05"), sched.Next(other).Format("15:04:05"))
	fmt.Println(sched.Next(sched.Next(started)).Format("15:04:05")) // strictly after

	// Slots are identified at millisecond precision: anything finer is refused.
	_, err = scheduler.NewIntervalSchedule(1500 * time.Microsecond)
	fmt.Println(errors.Is(err, scheduler.ErrInvalidSchedule))
	// Output:
	// every 15m0s
	// 12:15:00 12:15:00
	// 12:30:00
	// true
}
