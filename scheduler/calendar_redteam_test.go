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

// A calendar without a zone counts days in the cron schedule's zone, also
// when a spread or a start bound wraps the schedule: Saturday 01:00 in Tokyo
// is Friday 16:00 UTC, and a weekend calendar excludes it.
func TestCalendarZoneOfWrappedCron(t *testing.T) {
	for name, opt := range map[string]scheduler.JobOption{
		"plain":  nil,
		"spread": scheduler.WithSpread(time.Minute),
		"start":  scheduler.WithStartAt(time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tokyo, err := time.LoadLocation("Asia/Tokyo")
				require.NoError(t, err)
				b := memory.New()
				log := newRunLog()
				s := newScheduler(t, b, "A")
				opts := []scheduler.JobOption{scheduler.WithCalendars("weekend"), scheduler.WithHistory(1000, 0)}
				if opt != nil {
					opts = append(opts, opt)
				}
				require.NoError(t, s.Cron("job", "CRON_TZ=Asia/Tokyo 0 1 * * *", log.handler, opts...))
				_, err = s.PutCalendar(t.Context(), scheduler.Calendar{Name: "weekend", Weekdays: []time.Weekday{time.Saturday, time.Sunday}}, 0)
				require.NoError(t, err)
				require.NoError(t, s.Start(t.Context()))
				preview, err := s.Preview(t.Context(), "job", scheduler.PreviewOptions{N: 7})
				require.NoError(t, err)
				for _, ps := range preview {
					weekend := ps.Nominal.In(tokyo).Weekday() == time.Saturday || ps.Nominal.In(tokyo).Weekday() == time.Sunday
					assert.Equal(t, !weekend, ps.Runs, "preview of %v (%v in Tokyo)", ps.Slot, ps.Nominal.In(tokyo).Weekday())
				}
				time.Sleep(8 * 24 * time.Hour)
				require.NoError(t, s.Stop(t.Context()))

				hist, err := s.History(t.Context(), "job", 100)
				require.NoError(t, err)
				require.GreaterOrEqual(t, len(hist), 7)
				for _, r := range hist {
					wd := r.Slot.In(tokyo).Weekday() // 01:00 and up to a minute of spread
					if wd == time.Saturday || wd == time.Sunday {
						assert.Equal(t, scheduler.StatusExcluded, r.Status, "slot %v, %v in Tokyo", r.Slot, wd)
					} else {
						assert.Equal(t, scheduler.StatusOK, r.Status, "slot %v, %v in Tokyo", r.Slot, wd)
					}
				}
			})
		})
	}
}

// CatchUpLatest after a fleet stop whose newest missed slot a calendar
// excludes runs the newest slot it does not exclude: the excluded ones are
// recorded excluded, the older ones missed.
func TestCalendarCatchUpLatestSkipsExcludedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		day := time.Now().UTC().Truncate(24 * time.Hour) // a Saturday in synctest's bubble
		log := newRunLog()
		declare := func(s *scheduler.Scheduler) {
			require.NoError(t, s.Every("job", 6*time.Hour, log.handler, scheduler.WithCalendars("off"),
				scheduler.WithCatchUp(scheduler.CatchUpLatest, 72*time.Hour), scheduler.WithHistory(1000, 0)))
		}
		s := newScheduler(t, b, "A")
		declare(s)
		// The second day is off: the fleet comes back at its end.
		_, err := s.PutCalendar(t.Context(), scheduler.Calendar{Name: "off", Dates: []string{day.Add(24 * time.Hour).Format(time.DateOnly)}}, 0)
		require.NoError(t, err)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		time.Sleep(time.Until(day.Add(48*time.Hour - time.Minute)))
		s = newScheduler(t, b, "B")
		declare(s)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute + time.Hour)
		require.NoError(t, s.Stop(t.Context()))

		recs := recordsBySlot(t, s, "job")
		runs := log.snapshot()
		want := map[int]scheduler.Status{1: scheduler.StatusMissed, 2: scheduler.StatusMissed, 3: scheduler.StatusOK,
			4: scheduler.StatusExcluded, 5: scheduler.StatusExcluded, 6: scheduler.StatusExcluded, 7: scheduler.StatusExcluded}
		for k := 1; k <= 7; k++ {
			slot := day.Add(time.Duration(k) * 6 * time.Hour)
			rs := recs[slot]
			require.Len(t, rs, 1, "slot %d (%v)", k, slot)
			assert.Equal(t, want[k], rs[0].Status, "slot %d (%v)", k, slot)
			if want[k] == scheduler.StatusOK {
				assert.Len(t, runs[slot.UnixMilli()], 1)
			} else {
				assert.Empty(t, runs[slot.UnixMilli()], "slot %d never ran", k)
			}
		}
	})
}

// Backfill over a calendar's day runs none of its slots and reports each
// excluded, with why, whether it decides the slot or finds it decided.
func TestCalendarBackfillReportsExcluded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		day := time.Now().UTC().Truncate(24 * time.Hour)
		log := newRunLog()
		// The job is new on the third day: nobody claimed the second day's slots.
		time.Sleep(time.Until(day.Add(48*time.Hour + time.Minute)))
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", 6*time.Hour, log.handler, scheduler.WithCalendars("off"), scheduler.WithHistory(1000, 0)))
		_, err := s.PutCalendar(t.Context(), scheduler.Calendar{Name: "off", Dates: []string{day.Add(24 * time.Hour).Format(time.DateOnly)}}, 0)
		require.NoError(t, err)
		require.NoError(t, s.Start(t.Context()))
		from, to := day.Add(24*time.Hour), day.Add(36*time.Hour)
		check := func(res scheduler.BackfillResult) {
			t.Helper()
			require.Len(t, res.Slots, 2)
			for _, sl := range res.Slots {
				assert.Equal(t, scheduler.BackfillExcluded, sl.Outcome, "slot %v", sl.Slot)
				assert.Equal(t, scheduler.StatusExcluded, sl.Status, "slot %v", sl.Slot)
				assert.Contains(t, sl.Error, `excluded by calendar "off"`, "slot %v", sl.Slot)
			}
			assert.Equal(t, 2, res.Count(scheduler.BackfillExcluded))
		}
		res, err := s.Backfill(t.Context(), "job", from, to)
		require.NoError(t, err)
		check(res)
		res, err = s.Backfill(t.Context(), "job", from, to)
		require.NoError(t, err)
		check(res) // decided already: the same report
		require.NoError(t, s.Stop(t.Context()))
		assert.Empty(t, log.snapshot()[from.UnixMilli()])
		assert.Empty(t, log.snapshot()[from.Add(6*time.Hour).UnixMilli()])
	})
}
