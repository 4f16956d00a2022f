package scheduler_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// 29 February comes eight years apart across 2100: a cron of it finds the
// next in a zone or not, is accepted in 2097, and Preview lists its slots.
func TestCronLeapDayAcrossACentury(t *testing.T) {
	for _, loc := range []*time.Location{time.UTC, mustLoad(t, "America/New_York")} {
		c, err := scheduler.ParseCron("0 0 29 2 *", loc)
		require.NoError(t, err)
		next := c.Next(time.Date(2097, 1, 1, 0, 0, 0, 0, loc))
		assert.True(t, next.Equal(time.Date(2104, 2, 29, 0, 0, 0, 0, loc)), "in %s: %v", loc, next)
	}

	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Date(2097, 1, 1, 0, 0, 0, 0, time.UTC)))
		_, err := scheduler.ParseCron("0 0 29 2 *", nil)
		assert.NoError(t, err, "accepted while the next 29 February is seven years away")
	})

	c := stepclock.New(time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC))
	s := newScheduler(t, memory.NewWithClock(c), "A", func(cfg *scheduler.Config) { cfg.Clock = c })
	require.NoError(t, s.Cron("leap", "0 0 29 2 *", func(context.Context, scheduler.Run) error { return nil }))
	out, err := s.Preview(t.Context(), "leap", scheduler.PreviewOptions{N: 2})
	require.NoError(t, err)
	require.Len(t, out, 2)
	assert.Equal(t, time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC), out[0].Slot)
	assert.Equal(t, time.Date(2108, 2, 29, 0, 0, 0, 0, time.UTC), out[1].Slot)
	assert.Empty(t, out[0].Notes, "not the last slot")
}

// A zone that skipped a whole day (Kiritimati, 31 December 1994): a weekly
// slot of that day fires on the next, by the jump, and Preview says so with
// the day that was skipped.
func TestPreviewDayLongJump(t *testing.T) {
	c := stepclock.New(time.Date(1994, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newScheduler(t, memory.NewWithClock(c), "A", func(cfg *scheduler.Config) { cfg.Clock = c })
	kiritimati := mustLoad(t, "Pacific/Kiritimati")
	require.NoError(t, s.Cron("saturdays", "30 1 * * 6", func(context.Context, scheduler.Run) error { return nil }, scheduler.WithLocation(kiritimati)))
	out, err := s.Preview(t.Context(), "saturdays", scheduler.PreviewOptions{From: time.Date(1994, 12, 25, 0, 0, 0, 0, time.UTC), N: 2})
	require.NoError(t, err)
	require.Len(t, out, 2)
	assert.Equal(t, time.Date(1994, 12, 31, 11, 30, 0, 0, time.UTC), out[0].Slot, "01:30 of Saturday 31 Dec -10, which is Sunday 1 Jan +14")
	require.Equal(t, []scheduler.PreviewKind{scheduler.PreviewDSTShifted}, kinds(out[0]))
	assert.Equal(t, "01:30 does not exist on Sat 31 Dec 1994 in Pacific/Kiritimati (the clocks jump forward 24h): shifted by the jump to 01:30 UTC+14:00, the instant it would have been", out[0].Notes[0].Text)
	assert.Empty(t, out[1].Notes)
}
