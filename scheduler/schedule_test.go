package scheduler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
