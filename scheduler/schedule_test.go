package scheduler_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

func TestIntervalSlotsAreEpochAligned(t *testing.T) {
	s, err := scheduler.NewIntervalSchedule(10 * time.Second)
	require.NoError(t, err)
	// Two instances started at different times agree on the slots.
	a := s.Next(time.Date(2026, 5, 1, 12, 0, 3, 123456789, time.UTC))
	b := s.Next(time.Date(2026, 5, 1, 15, 0, 9, 999000000, time.FixedZone("UTC+3", 3*3600)))
	assert.True(t, a.Equal(b))
	assert.Equal(t, time.Date(2026, 5, 1, 12, 0, 10, 0, time.UTC), a)
	// Next is strictly after t.
	assert.Equal(t, time.Date(2026, 5, 1, 12, 0, 20, 0, time.UTC), s.Next(a))
	// Odd intervals are multiples of themselves since the epoch.
	odd, err := scheduler.NewIntervalSchedule(7 * time.Second)
	require.NoError(t, err)
	n := odd.Next(time.Now())
	assert.Zero(t, n.UnixMilli()%7000)
	// Long intervals and times before 1970 still work.
	century, err := scheduler.NewIntervalSchedule(100 * 365 * 24 * time.Hour)
	require.NoError(t, err)
	assert.True(t, century.Next(time.Now()).After(time.Now()))
	minute, _ := scheduler.NewIntervalSchedule(time.Minute)
	assert.Equal(t, time.Date(1969, 7, 20, 20, 18, 0, 0, time.UTC), minute.Next(time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)))
}

func TestCronLocationAndFields(t *testing.T) {
	athens, err := time.LoadLocation("Europe/Athens")
	require.NoError(t, err)
	s, err := scheduler.ParseCron("0 9 * * MON-FRI", athens)
	require.NoError(t, err)
	// Friday 2026-11-27 10:00 Athens → Monday 09:00 Athens (07:00 UTC in winter).
	next := s.Next(time.Date(2026, 11, 27, 10, 0, 0, 0, athens))
	assert.Equal(t, time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC), next)
	assert.Equal(t, "CRON_TZ=Europe/Athens 0 9 * * MON-FRI", s.String())

	// Six fields: seconds first.
	sec, err := scheduler.ParseCron("*/15 * * * * *", nil)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 1, 1, 0, 0, 15, 0, time.UTC), sec.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))

	// A zone in the expression; UTC by default otherwise (never the host's zone).
	tz, err := scheduler.ParseCron("CRON_TZ=Asia/Tokyo 0 6 * * *", nil)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 1, 1, 21, 0, 0, 0, time.UTC), tz.Next(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)))
	utc, err := scheduler.ParseCron("30 2 * * *", nil)
	require.NoError(t, err)
	assert.Equal(t, time.UTC, utc.Location())

	// Day-of-month OR day-of-week, as in Vixie cron and Kubernetes CronJob.
	or, err := scheduler.ParseCron("0 0 1 * MON", nil)
	require.NoError(t, err)
	// 2026-06-01 is a Monday; 2026-06-08 is a Monday but not the 1st.
	assert.Equal(t, time.Date(2026, 6, 8, 0, 0, 0, 0, time.UTC), or.Next(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)))
}

// The DST policy users get, in a real zone: each calendar day gives a listed time
// exactly one slot.
func TestCronDaylightSaving(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	slotsOn := func(t *testing.T, expr string, day time.Time) []time.Time {
		t.Helper()
		s, err := scheduler.ParseCron(expr, ny)
		require.NoError(t, err)
		var out []time.Time
		end := day.AddDate(0, 0, 1)
		for n := s.Next(day.Add(-time.Millisecond)); n.Before(end); n = s.Next(n) {
			out = append(out, n)
		}
		return out
	}

	// 2026-03-08: clocks jump from 02:00 EST to 03:00 EDT; 02:30 does not exist.
	spring := time.Date(2026, 3, 8, 0, 0, 0, 0, ny)
	got := slotsOn(t, "30 2 * * *", spring)
	require.Len(t, got, 1, "a 02:30 job runs once on the spring-forward day, not zero times")
	assert.Equal(t, time.Date(2026, 3, 8, 3, 30, 0, 0, ny), got[0].In(ny), "shifted by the jump: 02:30 EST does not exist, 03:30 EDT is the same instant")

	// 2026-11-01: clocks fall back from 02:00 EDT to 01:00 EST; 01:30 happens twice.
	fall := time.Date(2026, 11, 1, 0, 0, 0, 0, ny)
	got = slotsOn(t, "30 1 * * *", fall)
	require.Len(t, got, 1, "a 01:30 job runs once on the fall-back day, not twice")
	assert.Equal(t, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), got[0], "on the first occurrence (EDT)")
	got = slotsOn(t, "30 2 * * *", fall)
	require.Len(t, got, 1, "02:30 is unambiguous on the fall-back day")
	assert.Equal(t, time.Date(2026, 11, 1, 7, 30, 0, 0, time.UTC), got[0])

	// The days around keep their normal slot.
	got = slotsOn(t, "30 2 * * *", spring.AddDate(0, 0, 1))
	require.Len(t, got, 1)
	assert.Equal(t, 2, got[0].In(ny).Hour())
}

// On the day clocks jump forward, a cron time inside the skipped hour has one slot,
// shifted by the jump, and Next finds it from any instant before it: also from
// inside the skipped hour and from just before the slot, which is how an instance
// started then, and the check that a claimed slot is on the schedule, ask for it.
func TestCronSpringForwardSlotFromAnyInstant(t *testing.T) {
	for _, tc := range []struct {
		zone, expr string
		slot       time.Time // the shifted slot, UTC
	}{
		{"America/New_York", "30 2 * * *", time.Date(2030, 3, 10, 7, 30, 0, 0, time.UTC)}, // 02:30 EST skipped: 03:30 EDT
		{"Europe/Athens", "30 3 * * *", time.Date(2030, 3, 31, 1, 30, 0, 0, time.UTC)},    // 03:30 EET skipped: 04:30 EEST
	} {
		loc, err := time.LoadLocation(tc.zone)
		require.NoError(t, err)
		c, err := scheduler.ParseCron(tc.expr, loc)
		require.NoError(t, err)
		for _, from := range []time.Duration{-24 * time.Hour, -2 * time.Hour, -31 * time.Minute, -29 * time.Minute, -time.Second, -time.Millisecond} {
			assert.Equal(t, tc.slot, c.Next(tc.slot.Add(from)), "%s %q from %v before the slot", tc.zone, tc.expr, -from)
		}
		next := c.Next(tc.slot)
		assert.Equal(t, 24*time.Hour-time.Hour, next.Sub(tc.slot)+0, "%s: the next day's slot, unshifted (an hour less in between): %v", tc.zone, next)
	}
}

// A job on a cron time inside the hour skipped when clocks jump forward runs its
// shifted slot once, on a backend with leases, whether its instance started the day
// before or inside the skipped hour (it was taken for a manual run's slot, ended
// unrun).
func TestCronSpringForwardSlotRuns(t *testing.T) {
	athens, err := time.LoadLocation("Europe/Athens")
	require.NoError(t, err)
	slot := time.Date(2030, 3, 31, 1, 30, 0, 0, time.UTC) // 03:30 EET does not exist: 04:30 EEST
	for _, started := range []time.Time{slot.Add(-13 * time.Hour), slot.Add(-20 * time.Minute)} {
		synctest.Test(t, func(t *testing.T) {
			clock := scheduler.OffsetClock{Offset: time.Until(started)}
			log := newRunLog()
			s := newScheduler(t, memory.NewWithClock(clock), "A", func(c *scheduler.Config) { c.Clock = clock })
			require.NoError(t, s.Cron("c", "30 3 * * *", log.handler, scheduler.WithLocation(athens), scheduler.WithMaxLate(30*time.Minute)))
			require.NoError(t, s.Start(t.Context()))
			assert.Equal(t, slot, s.Jobs()[0].Next, "started %v: the next slot is the shifted one", started)
			time.Sleep(time.Until(time.Now().Add(slot.Sub(started) + time.Minute)))
			hist, err := s.History(t.Context(), "c", 10)
			require.NoError(t, err)
			require.NoError(t, s.Stop(t.Context()))
			assert.Equal(t, map[int64][]string{slot.UnixMilli(): {"A"}}, log.snapshot(), "started %v: the shifted slot ran once", started)
			require.Len(t, hist, 1)
			assert.Equal(t, scheduler.StatusOK, hist[0].Status)
			assert.False(t, hist[0].Manual, "a scheduled run")
		})
	}
}
