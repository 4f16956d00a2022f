package scheduler_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// slotsOf lists the slots runs holds, oldest first, each with how often it ran.
func slotsOf(runs map[int64][]string) (slots []time.Time, times map[int64]int) {
	times = map[int64]int{}
	for ms, who := range runs {
		slots = append(slots, time.UnixMilli(ms).UTC())
		times[ms] = len(who)
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	return slots, times
}

// A job bounded by WithStartAt and WithEndAt runs the slots from its start (included)
// until its end (not included), each once across three instances, and no other;
// once its end has passed, Jobs shows no next slot.
func TestBoundedJobRunsOnlyItsSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(5 * time.Second) // between slots
		b := memory.New()
		log := newRunLog()
		t0 := time.Now().UTC().Truncate(10 * time.Second)
		start, end := t0.Add(30*time.Second), t0.Add(70*time.Second)
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("bounded", 10*time.Second, log.handler,
				scheduler.WithStartAt(start), scheduler.WithEndAt(end), scheduler.WithJitter(time.Second)))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		assert.Equal(t, start, scheds[0].Jobs()[0].Next, "before its start, the next slot is the start")
		time.Sleep(2 * time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		slots, times := slotsOf(log.snapshot())
		want := []time.Time{start, start.Add(10 * time.Second), start.Add(20 * time.Second), start.Add(30 * time.Second)}
		assert.Equal(t, want, slots, "the slots from the start until the end, no other")
		for ms, n := range times {
			assert.Equal(t, 1, n, "slot %v ran %d times", time.UnixMilli(ms).UTC(), n)
		}
		info := scheds[0].Jobs()[0]
		assert.True(t, info.Next.IsZero(), "past its end, the job has no next slot: %v", info.Next)
		assert.Equal(t, "every 10s (aligned to UTC), from "+start.UTC().Format("2006-01-02T15:04:05.000Z")+" until "+end.UTC().Format("2006-01-02T15:04:05.000Z"),
			scheduler.DescribeSchedule(info.Schedule), "the schedule's words carry its bounds")
	})
}

// At runs a job once, at its instant, on one of three instances, recorded in
// history like any run; Jobs shows the instant before and no next slot after.
func TestAtRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := newRunLog()
		at := time.Now().Add(90*time.Second + 123456789) // truncated to the millisecond
		want := time.UnixMilli(at.UnixMilli()).UTC()
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.At("once", at, log.handler))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		assert.Equal(t, want, scheds[1].Jobs()[0].Next)
		time.Sleep(5 * time.Minute)
		slots, times := slotsOf(log.snapshot())
		assert.Equal(t, []time.Time{want}, slots, "one run, at the instant")
		assert.Equal(t, 1, times[want.UnixMilli()], "on one instance")
		hist, err := scheds[2].History(t.Context(), "once", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status)
		assert.True(t, scheds[0].Jobs()[0].Next.IsZero(), "after its run, no next slot")
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
	})
}

// An instant that passed before any instance was up is not run, unless the job's
// catch-up policy asks for it within its window: then it runs once, at Start.
func TestAtMissedRunsOnlyWithCatchUp(t *testing.T) {
	for _, catchUp := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			log := newRunLog()
			at := time.Now().Add(-10 * time.Minute)
			var opts []scheduler.JobOption
			if catchUp {
				opts = append(opts, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour))
			}
			var scheds []*scheduler.Scheduler
			for _, id := range []string{"A", "B"} {
				s := newScheduler(t, b, id)
				require.NoError(t, s.At("missed", at, log.handler, opts...))
				require.NoError(t, s.Start(t.Context()))
				scheds = append(scheds, s)
			}
			time.Sleep(time.Minute)
			for _, s := range scheds {
				require.NoError(t, s.Stop(t.Context()))
			}
			runs := 0
			for _, who := range log.snapshot() {
				runs += len(who)
			}
			if catchUp {
				assert.Equal(t, 1, runs, "caught up once across the fleet")
			} else {
				assert.Zero(t, runs, "missed without catch-up: not run")
			}
		})
	}
}

// Bounds that cannot work are refused at registration, naming them.
func TestBoundsAreChecked(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	h := func(context.Context, scheduler.Run) error { return nil }
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		err  error
		call func() error
	}{
		"end before start": {scheduler.ErrInvalidOption, func() error {
			return s.Every("a", time.Minute, h, scheduler.WithStartAt(at), scheduler.WithEndAt(at.Add(-time.Hour)))
		}},
		"end at start": {scheduler.ErrInvalidOption, func() error {
			return s.Every("b", time.Minute, h, scheduler.WithStartAt(at), scheduler.WithEndAt(at))
		}},
		"no slot within": {scheduler.ErrInvalidSchedule, func() error {
			return s.Cron("c", "0 9 * * *", h, scheduler.WithStartAt(at), scheduler.WithEndAt(at.Add(time.Hour)))
		}},
		"once before its start": {scheduler.ErrInvalidSchedule, func() error {
			return s.At("d", at, h, scheduler.WithStartAt(at.Add(time.Second)))
		}},
		"zero start":   {scheduler.ErrInvalidOption, func() error { return s.Every("e", time.Minute, h, scheduler.WithStartAt(time.Time{})) }},
		"zero end":     {scheduler.ErrInvalidOption, func() error { return s.Every("f", time.Minute, h, scheduler.WithEndAt(time.Time{})) }},
		"zero instant": {scheduler.ErrInvalidSchedule, func() error { return s.At("g", time.Time{}, h) }},
	} {
		err := tc.call()
		assert.ErrorIs(t, err, tc.err, name)
	}
	assert.Empty(t, s.Jobs(), "nothing refused was registered")
	require.NoError(t, s.At("ok", at, h, scheduler.WithStartAt(at)), "a start at the instant keeps it")
}

// The bounds hold at the millisecond: a slot is run exactly when it is at or after
// the start and before the end, whatever the bounds' sub-millisecond part; instants
// and bounds slots cannot reach are refused.
func TestBoundsAtTheMillisecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newRunLog()
		s := newScheduler(t, memory.New(), "A")
		base := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
		// start just after the first slot: it is not run; end just after the fourth:
		// it is run.
		require.NoError(t, s.Every("ms", time.Minute, log.handler,
			scheduler.WithStartAt(base.Add(500*time.Microsecond)), scheduler.WithEndAt(base.Add(3*time.Minute+500*time.Microsecond))))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(6 * time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		slots, _ := slotsOf(log.snapshot())
		assert.Equal(t, []time.Time{base.Add(time.Minute), base.Add(2 * time.Minute), base.Add(3 * time.Minute)}, slots)
	})
	s := newScheduler(t, memory.New(), "B")
	h := func(context.Context, scheduler.Run) error { return nil }
	far := time.Date(300000000, 1, 1, 0, 0, 0, 0, time.UTC)
	assert.ErrorIs(t, s.At("far", far, h), scheduler.ErrInvalidSchedule, "an instant past the range of slots")
	assert.ErrorIs(t, s.At("zero", time.Time{}.Add(500*time.Microsecond), h), scheduler.ErrInvalidSchedule, "an instant that truncates to zero")
	assert.ErrorIs(t, s.Every("far-end", time.Minute, h, scheduler.WithEndAt(far)), scheduler.ErrInvalidOption)
	assert.ErrorIs(t, s.Every("far-start", time.Minute, h, scheduler.WithStartAt(far)), scheduler.ErrInvalidOption)
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	assert.ErrorIs(t, s.At("ends-before", at, h, scheduler.WithEndAt(at)), scheduler.ErrInvalidSchedule, "a one-time job whose end is not after its instant")
	require.NoError(t, s.At("ends-after", at, h, scheduler.WithEndAt(at.Add(time.Millisecond))))
	require.NoError(t, s.Every("ended", time.Minute, h, scheduler.WithEndAt(time.Now().Add(-time.Hour))), "an end already past is accepted")
	assert.Equal(t, "once at 2030-01-01T12:00:00.000Z, until 2030-01-01T12:00:00.001Z", scheduler.DescribeSchedule(s.Jobs()[0].Schedule))
}

// A one-time job that ran is not run again by a replica started later with a
// catch-up policy reaching back past it (a redeploy that adds catch-up): the run
// store still remembers the slot.
func TestAtIsNotRunAgainByALaterCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := newRunLog()
		at := time.Now().Add(time.Minute)
		s := newScheduler(t, b, "A")
		require.NoError(t, s.At("once", at, log.handler))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(31 * time.Minute)
		require.NoError(t, s.Stop(t.Context()))

		s2 := newScheduler(t, b, "A2")
		require.NoError(t, s2.At("once", at, log.handler, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour)))
		require.NoError(t, s2.Start(t.Context()))
		time.Sleep(5 * time.Minute)
		require.NoError(t, s2.Stop(t.Context()))
		runs := 0
		for _, who := range log.snapshot() {
			runs += len(who)
		}
		assert.Equal(t, 1, runs, "run once, by the first replica")
	})
}
