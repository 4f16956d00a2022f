package scheduler_test

import (
	"context"
	"errors"
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

// recordsBySlot returns name's history records by slot, the newest last.
func recordsBySlot(t *testing.T, s *scheduler.Scheduler, name string) map[time.Time][]scheduler.RunRecord {
	t.Helper()
	hist, err := s.History(t.Context(), name, 10_000)
	require.NoError(t, err)
	out := map[time.Time][]scheduler.RunRecord{}
	for _, r := range hist {
		out[r.Slot.UTC()] = append(out[r.Slot.UTC()], r)
	}
	return out
}

// A fleet of three follows one stored calendar: a slot on one of its days is
// recorded excluded once, told once, never run; every other slot runs once.
func TestCalendarExcludesSlotsOnceAcrossTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		day := time.Now().UTC().Truncate(24 * time.Hour)
		holiday := day.Add(24 * time.Hour)
		events := newEventLog(scheduler.EventExcluded)
		log := newRunLog()
		var fleet []*scheduler.Scheduler
		for _, name := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, name, func(c *scheduler.Config) { c.OnEvent = events.hook })
			require.NoError(t, s.Every("job", time.Hour, log.handler, scheduler.WithCalendars("holidays"), scheduler.WithHistory(1000, 0)))
			fleet = append(fleet, s)
		}
		_, err := fleet[0].PutCalendar(t.Context(), scheduler.Calendar{Name: "holidays", Dates: []string{holiday.Format(time.DateOnly)}, By: "ops"}, 0)
		require.NoError(t, err)
		for _, s := range fleet {
			require.NoError(t, s.Start(t.Context()))
		}
		preview, err := fleet[1].Preview(t.Context(), "job", scheduler.PreviewOptions{From: day.Add(time.Hour), N: 71})
		require.NoError(t, err)
		time.Sleep(time.Until(day.Add(72*time.Hour + time.Minute)))
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}

		runs := log.snapshot()
		recs := recordsBySlot(t, fleet[0], "job")
		excluded := 0
		for slot := day.Add(time.Hour); slot.Before(day.Add(72 * time.Hour)); slot = slot.Add(time.Hour) {
			rs := recs[slot]
			require.Len(t, rs, 1, "slot %v: one record", slot)
			if slot.Truncate(24 * time.Hour).Equal(holiday) {
				excluded++
				assert.Equal(t, scheduler.StatusExcluded, rs[0].Status, "slot %v", slot)
				assert.Contains(t, rs[0].Error, `excluded by calendar "holidays" (`+holiday.Format(time.DateOnly)+`)`)
				assert.Empty(t, runs[slot.UnixMilli()], "slot %v never ran", slot)
				continue
			}
			assert.Equal(t, scheduler.StatusOK, rs[0].Status, "slot %v", slot)
			assert.Len(t, runs[slot.UnixMilli()], 1, "slot %v ran once", slot)
		}
		require.Equal(t, 24, excluded)
		require.Len(t, preview, 71)
		for _, ps := range preview {
			rs := recs[ps.Slot.UTC()]
			require.Len(t, rs, 1)
			assert.Equal(t, rs[0].Status == scheduler.StatusOK, ps.Runs, "preview of %v agrees with history", ps.Slot)
			if rs[0].Status == scheduler.StatusExcluded {
				require.Len(t, ps.Notes, 1)
				assert.Equal(t, scheduler.PreviewExcluded, ps.Notes[0].Kind)
				assert.Contains(t, ps.Notes[0].Text, `"holidays"`)
			}
		}
		why, err := fleet[2].Why(t.Context(), "job", scheduler.WhyOptions{Slot: holiday.Add(9 * time.Hour)})
		require.NoError(t, err)
		require.Len(t, why.Steps, 1)
		assert.Equal(t, scheduler.WhyExcluded, why.Steps[0].Kind)
		assert.Contains(t, why.Steps[0].Text, `excluded by calendar "holidays"`)
		assert.False(t, why.Open)
		evs := events.of(scheduler.EventExcluded)
		assert.Len(t, evs, 24, "one event per excluded slot across the fleet")
		for _, e := range evs {
			assert.Equal(t, recs[e.Slot.UTC()][0].Instance, e.Instance, "told by the instance whose claim stored it")
		}
	})
}

// A calendar stored while a slot runs leaves that run alone: it ends ok. The
// slots after it on the calendar's days are excluded; once the calendar is
// deleted, slots run again.
func TestCalendarChangedMidRunAffectsOnlyLaterSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now().UTC()
		started := make(chan time.Time, 100)
		release := make(chan struct{})
		handler := func(ctx context.Context, r scheduler.Run) error {
			started <- r.Slot
			if r.Slot.Equal(base) {
				<-release
			}
			return nil
		}
		var fleet []*scheduler.Scheduler
		for _, name := range []string{"A", "B"} {
			s := newScheduler(t, b, name)
			require.NoError(t, s.Every("job", time.Minute, handler, scheduler.WithCalendars("freeze"),
				scheduler.WithOverlap(scheduler.OverlapAllow), scheduler.WithHistory(1000, 0)))
			require.NoError(t, s.Start(t.Context()))
			fleet = append(fleet, s)
		}
		first := <-started
		require.Equal(t, base, first)
		cal, err := fleet[1].PutCalendar(t.Context(), scheduler.Calendar{Name: "freeze", Weekdays: []time.Weekday{first.Weekday()}}, 0)
		require.NoError(t, err)
		synctest.Wait()
		time.Sleep(3*time.Minute + 30*time.Second)
		close(release)
		require.NoError(t, fleet[0].DeleteCalendar(t.Context(), "freeze", cal.Revision))
		synctest.Wait()
		time.Sleep(2*time.Minute + 30*time.Second)
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}

		recs := recordsBySlot(t, fleet[0], "job")
		last := func(slot time.Time) scheduler.Status {
			rs := recs[slot]
			require.NotEmpty(t, rs, "slot %v has a record", slot)
			return rs[len(rs)-1].Status
		}
		assert.Equal(t, scheduler.StatusOK, last(base), "the run in progress ends as it would have")
		for k := 1; k <= 3; k++ {
			assert.Equal(t, scheduler.StatusExcluded, last(base.Add(time.Duration(k)*time.Minute)), "slot %d after the change", k)
		}
		assert.Equal(t, scheduler.StatusOK, last(base.Add(4*time.Minute)), "after the delete")
		assert.Equal(t, scheduler.StatusOK, last(base.Add(5*time.Minute)))
	})
}

// A job that names a calendar nobody stored runs its slots: a missing
// calendar excludes nothing.
func TestCalendarNotStoredExcludesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var ran atomic.Int32
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", time.Minute, func(context.Context, scheduler.Run) error { ran.Add(1); return nil },
			scheduler.WithCalendars("nobody-stored-this")))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(3*time.Minute + time.Second)
		require.NoError(t, s.Stop(t.Context()))
		assert.Equal(t, int32(4), ran.Load(), "the slots at 0, 1, 2 and 3 minutes")
	})
}

// An entry excludes by its job's calendars and its own; RunNow runs on an
// excluded day; a deadline does not judge an excluded slot.
func TestCalendarEntriesRunNowAndDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		day := time.Now().UTC().Truncate(24 * time.Hour)
		s := newScheduler(t, b, "A")
		var manual atomic.Int32
		require.NoError(t, s.Every("job", time.Hour, func(_ context.Context, r scheduler.Run) error {
			if r.Manual {
				manual.Add(1)
			}
			return nil
		}, scheduler.WithCalendars("job-days"), scheduler.WithDeadline(10*time.Minute)))
		ctx := t.Context()
		_, err := s.PutCalendar(ctx, scheduler.Calendar{Name: "job-days", Dates: []string{day.Format(time.DateOnly)}}, 0)
		require.NoError(t, err)
		_, err = s.PutCalendar(ctx, scheduler.Calendar{Name: "tenant-days", Ranges: []scheduler.DateRange{{
			From: day.Add(24 * time.Hour).Format(time.DateOnly), To: day.Add(24 * time.Hour).Format(time.DateOnly)}}}, 0)
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		_, err = s.AddEntry(ctx, "job", "tenant", scheduler.EntrySpec{Every: time.Hour, Calendars: []string{"tenant-days"}})
		require.NoError(t, err)
		_, err = s.RunNow(ctx, "job")
		require.NoError(t, err)
		time.Sleep(time.Until(day.Add(72 * time.Hour)))
		require.NoError(t, s.Stop(ctx))
		assert.Equal(t, int32(1), manual.Load(), "RunNow runs on an excluded day")

		count := func(name string, from, to time.Time) map[scheduler.Status]int {
			hist, err := s.History(ctx, name, 10_000)
			require.NoError(t, err)
			out := map[scheduler.Status]int{}
			for _, r := range hist {
				if !r.Manual && !r.Slot.Before(from) && r.Slot.Before(to) {
					out[r.Status]++
				}
			}
			return out
		}
		entry := backend.EntryRunName("job", "tenant")
		d1, d2, d3 := day.Add(time.Hour), day.Add(24*time.Hour), day.Add(48*time.Hour)
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusExcluded: 23}, count("job", d1, d2), "the job's own calendar")
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 24}, count("job", d2, d3))
		assert.Equal(t, 0, count(entry, d1, d2)[scheduler.StatusOK], "the entry excludes by its job's calendar too")
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusExcluded: 24}, count(entry, d2, d3), "and by its own")
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 24}, count(entry, d3, d3.Add(24*time.Hour)))
	})
}

// Calendars are refused where they cannot work: a backend without them, bad
// names, too many.
func TestCalendarRefusedAtRegistration(t *testing.T) {
	bare := struct{ backend.Backend }{memory.New()}
	s := newScheduler(t, bare, "A")
	h := func(context.Context, scheduler.Run) error { return nil }
	err := s.Every("job", time.Minute, h, scheduler.WithCalendars("x"))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "CalendarStore")
	_, err = s.PutCalendar(t.Context(), scheduler.Calendar{Name: "x"}, 0)
	require.ErrorIs(t, err, scheduler.ErrCalendarsNotSupported)

	s = newScheduler(t, memory.New(), "A")
	for _, names := range [][]string{{""}, {"a\x00b"}, {"x", "x"}, make([]string, backend.MaxCalendarsPerSchedule+1)} {
		for i := range names {
			if names[i] == "" && len(names) > 1 {
				names[i] = string(rune('a'+i%26)) + string(rune('a'+i/26))
			}
		}
		assert.ErrorIs(t, s.Every("job", time.Minute, h, scheduler.WithCalendars(names...)), scheduler.ErrInvalidOption, "%q", names)
	}
	for _, c := range []scheduler.Calendar{
		{Name: "bad-date", Dates: []string{"2026-02-30"}},
		{Name: "bad-zone", Zone: "Mars/Olympus"},
		{Name: "backwards", Ranges: []scheduler.DateRange{{From: "2026-02-02", To: "2026-02-01"}}},
		{Name: "bad-yearly", Yearly: []string{"13-01"}},
		{Name: "bad-weekday", Weekdays: []time.Weekday{7}},
		{Name: " spaced"},
	} {
		_, err := s.PutCalendar(t.Context(), c, 0)
		assert.ErrorIs(t, err, scheduler.ErrInvalidCalendar, "%+v", c)
	}
	_, err = s.PutCalendar(t.Context(), scheduler.Calendar{Name: "ok", Yearly: []string{"02-29"}}, 0)
	require.NoError(t, err)
	_, err = s.PutCalendar(t.Context(), scheduler.Calendar{Name: "ok"}, 0)
	require.ErrorIs(t, err, scheduler.ErrCalendarExists)
	_, err = s.PutCalendar(t.Context(), scheduler.Calendar{Name: "ok"}, 99)
	require.True(t, errors.Is(err, scheduler.ErrCalendarConflict), "%v", err)
}

// A calendar's days are counted in its zone, or the cron schedule's: a
// weekend in Tokyo starts on Friday 15:00 UTC.
func TestCalendarZones(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	weekend := backend.Calendar{Name: "weekend", Weekdays: []time.Weekday{time.Saturday, time.Sunday}}
	d, err := weekend.Days()
	require.NoError(t, err)
	fri := time.Date(2026, 12, 4, 16, 0, 0, 0, time.UTC) // Saturday 01:00 in Tokyo
	_, excl := d.Excludes(fri, nil)
	assert.False(t, excl, "UTC: Friday")
	rule, excl := d.Excludes(fri, tokyo)
	assert.True(t, excl, "the schedule's zone: Saturday")
	assert.Equal(t, "every Saturday", rule)
	weekend.Zone = "America/New_York"
	d, err = weekend.Days()
	require.NoError(t, err)
	_, excl = d.Excludes(fri, tokyo)
	assert.False(t, excl, "the calendar's own zone wins: Friday 11:00 in New York")

	overlapping := backend.Calendar{Name: "o", Ranges: []backend.DateRange{{From: "2026-12-20", To: "2026-12-27"},
		{From: "2026-12-24", To: "2027-01-02"}, {From: "2026-12-21", To: "2026-12-22"}}, Yearly: []string{"12-25"}}
	d, err = overlapping.Days()
	require.NoError(t, err)
	for day, want := range map[string]bool{"2026-12-19": false, "2026-12-20": true, "2026-12-26": true, "2027-01-02": true, "2027-01-03": false, "2027-12-25": true} {
		at, _ := time.Parse(time.DateOnly, day)
		_, got := d.Excludes(at.Add(12*time.Hour), nil)
		assert.Equal(t, want, got, day)
	}
	leap := backend.Calendar{Name: "leap", Yearly: []string{"02-29"}}
	d, err = leap.Days()
	require.NoError(t, err)
	_, got := d.Excludes(time.Date(2028, 2, 29, 1, 0, 0, 0, time.UTC), nil)
	assert.True(t, got)
	_, got = d.Excludes(time.Date(2027, 3, 1, 1, 0, 0, 0, time.UTC), nil)
	assert.False(t, got)
}

// A fleet down over a calendar's day and back with catch-up records that
// day's slots excluded, never run, and runs the others; one down without
// catch-up records the others missed.
func TestCalendarCatchUpAndMissed(t *testing.T) {
	for _, catchUp := range []scheduler.CatchUpPolicy{scheduler.CatchUpAll, scheduler.CatchUpNone} {
		t.Run(catchUp.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				day := time.Now().UTC().Truncate(24 * time.Hour)
				log := newRunLog()
				declare := func(s *scheduler.Scheduler) {
					require.NoError(t, s.Every("job", 6*time.Hour, log.handler, scheduler.WithCalendars("off"),
						scheduler.WithCatchUp(catchUp, 72*time.Hour), scheduler.WithHistory(1000, 0)))
				}
				s := newScheduler(t, b, "A")
				declare(s)
				_, err := s.PutCalendar(t.Context(), scheduler.Calendar{Name: "off", Dates: []string{day.Add(24 * time.Hour).Format(time.DateOnly)}}, 0)
				require.NoError(t, err)
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(time.Hour)
				require.NoError(t, s.Stop(t.Context()))
				time.Sleep(time.Until(day.Add(48*time.Hour + time.Hour)))
				s = newScheduler(t, b, "B")
				declare(s)
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(time.Hour)
				require.NoError(t, s.Stop(t.Context()))

				recs := recordsBySlot(t, s, "job")
				runs := log.snapshot()
				for k := 1; k <= 8; k++ {
					slot := day.Add(time.Duration(k) * 6 * time.Hour)
					rs := recs[slot]
					require.Len(t, rs, 1, "slot %v", slot)
					switch {
					case k >= 4 && k <= 7:
						assert.Equal(t, scheduler.StatusExcluded, rs[0].Status, "slot %v", slot)
						assert.Empty(t, runs[slot.UnixMilli()])
					case catchUp == scheduler.CatchUpAll:
						assert.Equal(t, scheduler.StatusOK, rs[0].Status, "slot %v", slot)
					default:
						assert.Equal(t, scheduler.StatusMissed, rs[0].Status, "slot %v", slot)
					}
				}
			})
		})
	}
}
