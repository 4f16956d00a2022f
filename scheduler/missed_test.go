package scheduler_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// fleetGone runs job every minute on one replica from 0:00 to 0:04:30 (slots
// 0:00 … 0:04 run), then leaves the store with no replica up until 0:15:30.
func fleetGone(t *testing.T, b backend.Backend, opts ...scheduler.JobOption) time.Time {
	t.Helper()
	base := time.Now()
	a := newScheduler(t, b, "A")
	require.NoError(t, a.Every("job", time.Minute, func(context.Context, scheduler.Run) error { return nil }, opts...))
	require.NoError(t, a.Start(t.Context()))
	time.Sleep(4*time.Minute + 30*time.Second)
	require.NoError(t, a.Stop(t.Context()))
	time.Sleep(11 * time.Minute) // 0:05 … 0:15 fall with no replica up
	return base
}

// Every replica down for 11 minutes: the two replicas that come back together
// record each slot that fell meanwhile missed, once across the fleet, run none
// of them, and tell it once per record (EventMissed). The slot within the max
// lateness of their start (0:15) is the loop's and runs.
func TestMissedSlotsAreRecordedOnceWhenTheFleetIsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := fleetGone(t, b)
		events := newEventLog(scheduler.EventMissed)
		var ran atomic.Int32
		var fleet []*scheduler.Scheduler
		for _, name := range []string{"B", "C"} {
			s := newScheduler(t, b, name, func(c *scheduler.Config) { c.OnEvent = events.hook })
			require.NoError(t, s.Every("job", time.Minute, func(_ context.Context, r scheduler.Run) error {
				if r.Slot.Before(base.Add(15 * time.Minute)) {
					ran.Add(1)
				}
				return nil
			}))
			require.NoError(t, s.Start(t.Context()))
			fleet = append(fleet, s)
		}
		time.Sleep(time.Minute) // 0:16:30
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}

		recs := records(t, fleet[0], "job")
		for m := 0; m <= 16; m++ {
			rs := recs[base.Add(time.Duration(m)*time.Minute).Unix()]
			require.Len(t, rs, 1, "slot 0:%02d has one record: %+v", m, rs)
			want := scheduler.StatusOK
			if m >= 5 && m <= 14 {
				want = scheduler.StatusMissed
				assert.Contains(t, []string{"B", "C"}, rs[0].Instance)
				assert.True(t, rs[0].StartedAt.IsZero(), "not run")
				assert.Equal(t, "due while no instance could claim it", rs[0].Error, "%+v", rs[0])
			}
			assert.Equal(t, want, rs[0].Status, "slot 0:%02d", m)
		}
		assert.Zero(t, ran.Load(), "no missed slot ran")
		missed := events.of(scheduler.EventMissed)
		assert.Len(t, missed, 10, "one event per record")
		for _, e := range missed {
			assert.Equal(t, 1, e.Count)
			assert.Equal(t, scheduler.StatusMissed, e.Status)
		}
	})
}

// A job that never ran owes nothing: its first Start records no slot missed.
func TestNewJobRecordsNothingMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(3 * time.Hour)
		b := memory.New()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", time.Minute, func(context.Context, scheduler.Run) error { return nil }))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(90 * time.Second)
		require.NoError(t, s.Stop(t.Context()))
		hist, err := s.History(t.Context(), "job", 100)
		require.NoError(t, err)
		for _, r := range hist {
			assert.Equal(t, scheduler.StatusOK, r.Status, "slot %s", r.Slot)
		}
	})
}

// A job every second, every replica down for two hours: the newest
// MaxMissedRecords slots are recorded one by one, the older ones as one record
// at the oldest that names the range and how many; the events add up to every
// slot that fell.
func TestMissedSlotsOfALongOutageAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		ok := func(context.Context, scheduler.Run) error { return nil }
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("job", time.Second, ok))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(10*time.Second + 500*time.Millisecond)
		require.NoError(t, a.Stop(t.Context()))
		last := time.Now().Truncate(time.Second) // the slot it ran last
		time.Sleep(2 * time.Hour)

		events := newEventLog(scheduler.EventMissed)
		s := newScheduler(t, b, "B", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("job", time.Second, ok, scheduler.WithHistory(1000, 0)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(5 * time.Second)
		require.NoError(t, s.Stop(t.Context()))

		total := 0
		var ranges []scheduler.Event
		for _, e := range events.of(scheduler.EventMissed) {
			total += e.Count
			if e.Count > 1 {
				ranges = append(ranges, e)
			}
		}
		require.Len(t, ranges, 1, "one record for the oldest")
		assert.WithinDuration(t, last.Add(time.Second), ranges[0].Slot, 0, "at the first slot nobody ran")
		assert.Len(t, events.of(scheduler.EventMissed), scheduler.MaxMissedRecords+1)
		// The slots after last up to the start, but the one the loop runs
		// (within the max lateness).
		fell := int(time.Now().Add(-5*time.Second).Sub(last)/time.Second) - 1
		assert.InDelta(t, fell, total, 1, "every slot that fell is counted once")
		recs := records(t, s, "job")
		rs := recs[ranges[0].Slot.Unix()]
		require.Len(t, rs, 1)
		assert.Equal(t, scheduler.StatusMissed, rs[0].Status)
		assert.Contains(t, rs[0].Error, "one record for "+strconv.Itoa(ranges[0].Count)+" slots due from ")
		n := 0
		for _, rs := range recs {
			if rs[0].Status == scheduler.StatusMissed {
				n++
			}
		}
		assert.Equal(t, scheduler.MaxMissedRecords+1, n)
	})
}

// A job paused while every replica was down: the slots that fell are recorded
// paused, not missed (a paused job owes nothing).
func TestSlotsOfAPausedJobAreNotMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now()
		a := newScheduler(t, b, "A")
		ok := func(context.Context, scheduler.Run) error { return nil }
		require.NoError(t, a.Every("job", time.Minute, ok))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(2*time.Minute + 30*time.Second)
		require.NoError(t, a.Pause(t.Context(), "job", scheduler.PauseOptions{Reason: "maintenance", By: "ops"}))
		require.NoError(t, a.Stop(t.Context()))
		time.Sleep(10 * time.Minute)

		s := newScheduler(t, b, "B")
		require.NoError(t, s.Every("job", time.Minute, ok))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		recs := records(t, s, "job")
		for m := 3; m <= 12; m++ {
			rs := recs[base.Add(time.Duration(m)*time.Minute).Unix()]
			require.Len(t, rs, 1, "slot 0:%02d", m)
			assert.Equal(t, scheduler.StatusPaused, rs[0].Status, "slot 0:%02d", m)
		}
	})
}

// A job whose run limit was reached had ended: a replica back after every one
// was down records nothing missed.
func TestSlotsAfterTheRunLimitAreNotMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		fleetGone(t, b, scheduler.WithMaxRuns(3))
		events := newEventLog(scheduler.EventMissed)
		s := newScheduler(t, b, "B", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("job", time.Minute, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxRuns(3)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		assert.Empty(t, events.of(scheduler.EventMissed))
		hist, err := s.History(t.Context(), "job", 100)
		require.NoError(t, err)
		for _, r := range hist {
			assert.NotEqual(t, scheduler.StatusMissed, r.Status, "slot %s", r.Slot)
		}
	})
}

// Catch-up latest runs the newest slot of its window (0:14; 0:15 is the loop's);
// the older ones that fell while every replica was down are recorded missed.
func TestCatchUpLatestRecordsTheOthersMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		opt := scheduler.WithCatchUp(scheduler.CatchUpLatest, time.Hour)
		base := fleetGone(t, b, opt)
		s := newScheduler(t, b, "B")
		require.NoError(t, s.Every("job", time.Minute, func(context.Context, scheduler.Run) error { return nil }, opt))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		recs := records(t, s, "job")
		for m := 5; m <= 15; m++ {
			rs := recs[base.Add(time.Duration(m)*time.Minute).Unix()]
			require.Len(t, rs, 1, "slot 0:%02d", m)
			want := scheduler.StatusMissed
			if m >= 14 {
				want = scheduler.StatusOK
			}
			assert.Equal(t, want, rs[0].Status, "slot 0:%02d", m)
		}
	})
}
