package anarchontest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/scheduler"
)

// The fleet's replicas store calendars (backend.CalendarStore): a job that
// names one is accepted, and a calendar stored through one replica excludes
// the slots of every replica, each recorded once.
func TestFleetForwardsCalendars(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		day := time.Now().UTC().Truncate(24 * time.Hour)
		f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithCalendars("off"))
		}})
		_, err := f.Replica(0).Scheduler().PutCalendar(t.Context(),
			scheduler.Calendar{Name: "off", Dates: []string{day.Add(24 * time.Hour).Format(time.DateOnly)}}, 0)
		require.NoError(t, err)
		anarchontest.AdvanceTo(day.Add(48*time.Hour + time.Minute))
		recs, err := f.History(t.Context(), "job")
		require.NoError(t, err)
		by := map[scheduler.Status]int{}
		for _, r := range recs {
			by[r.Status]++
		}
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 25, scheduler.StatusExcluded: 24}, by)
		assert.Len(t, f.Events(anarchontest.Match("job", scheduler.EventExcluded)), 24, "each told once across the fleet")
	})
}

// A PutCalendar whose answer is lost, found stored as asked, is done: the
// caller gets the calendar stored, not an error. A different write stored
// meanwhile is not taken for it.
func TestPutCalendarAnswerLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := anarchontest.Start(t, anarchontest.Config{Replicas: 2, Setup: func(s *scheduler.Scheduler) error { return nil }})
		a, b := f.Replica(0), f.Replica(1)
		a.LoseAnswers(1, anarchontest.OpPutCalendar)
		got, err := a.Scheduler().PutCalendar(t.Context(), scheduler.Calendar{Name: "off", Dates: []string{"2026-12-25"}}, 0)
		require.NoError(t, err, "stored as asked: done")
		stored, err := f.Store().GetCalendar(t.Context(), "off")
		require.NoError(t, err)
		assert.Equal(t, stored.Revision, got.Revision)
		assert.Equal(t, []string{"2026-12-25"}, got.Dates)

		// A lost answer of a change that lost to another writer's stays an
		// error: the other write, stored meanwhile, is not taken for it.
		a.LoseAnswers(1, anarchontest.OpPutCalendar)
		_, err = b.Scheduler().PutCalendar(t.Context(), scheduler.Calendar{Name: "off", Dates: []string{"2026-12-26"}}, stored.Revision)
		require.NoError(t, err)
		_, err = a.Scheduler().PutCalendar(t.Context(), scheduler.Calendar{Name: "off", Dates: []string{"2026-12-27"}}, stored.Revision)
		require.ErrorIs(t, err, anarchontest.ErrAnswerLost)
		now, err := f.Store().GetCalendar(t.Context(), "off")
		require.NoError(t, err)
		assert.Equal(t, []string{"2026-12-26"}, now.Dates)

		// A lost answer of a removal that was applied is done too.
		a.LoseAnswers(1, anarchontest.OpDeleteCalendar)
		require.NoError(t, a.Scheduler().DeleteCalendar(t.Context(), "off", now.Revision))
		_, err = f.Store().GetCalendar(t.Context(), "off")
		require.ErrorIs(t, err, scheduler.ErrCalendarNotFound)
	})
}

// A replica whose calendar watch keeps failing while its claims are answered
// still follows a change: it reads the calendars each time it watches again.
func TestCalendarWatchFailingStillFollowsChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		day := time.Now().UTC().Truncate(24 * time.Hour)
		f := anarchontest.Start(t, anarchontest.Config{Replicas: 1, Setup: func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithCalendars("off"))
		}})
		r := f.Replica(0)
		r.LoseAnswers(1_000_000, anarchontest.OpWatchCalendars)
		require.NoError(t, r.Restart(t.Context()))
		anarchontest.Advance(time.Minute)
		require.NotEmpty(t, f.Events(anarchontest.Match("", scheduler.EventBackendError)), "its watch fails")
		_, err := f.Store().PutCalendar(t.Context(), scheduler.Calendar{Name: "off", Dates: []string{day.Add(24 * time.Hour).Format(time.DateOnly)}}, 0)
		require.NoError(t, err)
		anarchontest.AdvanceTo(day.Add(48*time.Hour + time.Minute))
		recs, err := f.History(t.Context(), "job")
		require.NoError(t, err)
		for _, rec := range recs {
			if rec.Slot.Truncate(24 * time.Hour).Equal(day.Add(24 * time.Hour)) {
				assert.Equal(t, scheduler.StatusExcluded, rec.Status, "slot %v", rec.Slot)
			}
		}
	})
}
