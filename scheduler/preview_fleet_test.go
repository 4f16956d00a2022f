package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/scheduler"
)

// heldBack is, for each kind of note that keeps a slot from running, the
// record History holds for the slot afterwards; "" for none. A kind that may
// leave no record maps to the status it leaves when it leaves one (see
// mayLeaveNone).
var heldBack = map[scheduler.PreviewKind]scheduler.Status{
	scheduler.PreviewExcluded:    scheduler.StatusExcluded,
	scheduler.PreviewPaused:      scheduler.StatusPaused,
	scheduler.PreviewEntryPaused: "", // a paused entry's slots leave no record
	scheduler.PreviewLimit:       scheduler.StatusLimit,
}

// mayLeaveNone are the held-back kinds whose slot may have no record: once the
// run limit is reached every replica's loop of the job ends, and the slots
// after the first beyond the limit are claimed by nobody.
var mayLeaveNone = map[scheduler.PreviewKind]bool{scheduler.PreviewLimit: true}

// assertAsPreviewed checks the history of the job, or of its schedule entry
// when entry is set, after the fleet ran through until against preview, a
// Preview of it taken before: each slot previewed to run due by until ran to
// completion once, its other attempts lost to a takeover; each slot previewed
// not to run has the record its note says (heldBack); and no slot the preview
// did not list has a record. The preview speaks for the time up to its last
// slot, or up to until when it ends with PreviewLast. A "may" note fails the
// check: the preview must be sure.
func assertAsPreviewed(t *testing.T, f *anarchontest.Fleet, job, entry string, preview []scheduler.PreviewSlot, until time.Time) {
	t.Helper()
	name := fmt.Sprintf("job %q", job)
	recs, err := f.History(t.Context(), job)
	if entry != "" {
		name = fmt.Sprintf("entry %q of job %q", entry, job)
		recs, err = f.EntryHistory(t.Context(), job, entry)
	}
	require.NoError(t, err)
	require.NotEmpty(t, preview, "%s: an empty preview checks nothing", name)
	bySlot := map[int64][]scheduler.RunRecord{}
	for _, r := range slices.Backward(recs) {
		bySlot[r.Slot.UnixMilli()] = append(bySlot[r.Slot.UnixMilli()], r)
	}
	last := preview[len(preview)-1]
	spans := last.Slot
	if slices.ContainsFunc(last.Notes, func(n scheduler.PreviewNote) bool { return n.Kind == scheduler.PreviewLast }) {
		spans = until
	}
	listed := map[int64]bool{}
	for _, ps := range preview {
		listed[ps.Slot.UnixMilli()] = true
		if ps.Slot.After(until) {
			continue
		}
		rs := bySlot[ps.Slot.UnixMilli()]
		for _, n := range ps.Notes {
			if strings.HasPrefix(string(n.Kind), "may-") {
				t.Errorf("%s slot %s: preview says %q: %s; the check needs a sure preview", name, ps.Slot, n.Kind, n.Text)
			}
		}
		if ps.Runs {
			oks := 0
			for _, r := range rs {
				switch r.Status {
				case scheduler.StatusOK:
					oks++
				case scheduler.StatusLost, scheduler.StatusSuperseded: // taken over
				default:
					t.Errorf("%s slot %s: previewed to run, has a record %s", name, ps.Slot, r.Status)
				}
			}
			assert.Equal(t, 1, oks, "%s slot %s previewed to run (notes %v) ran ok once; records:\n%s", name, ps.Slot, ps.Notes, anarchontest.Describe(rs))
			continue
		}
		var want scheduler.Status
		var kind scheduler.PreviewKind
		for _, n := range ps.Notes {
			if st, ok := heldBack[n.Kind]; ok {
				want, kind = st, n.Kind
			}
		}
		switch {
		case kind == "":
			t.Errorf("%s slot %s: previewed not to run, by no note the check knows (heldBack): %v", name, ps.Slot, ps.Notes)
			continue
		case want == "":
			assert.Empty(t, rs, "%s slot %s previewed %s: no record", name, ps.Slot, kind)
			continue
		case len(rs) == 0 && mayLeaveNone[kind]:
			continue
		}
		if assert.Len(t, rs, 1, "%s slot %s previewed %s: one record; records:\n%s", name, ps.Slot, kind, anarchontest.Describe(rs)) {
			assert.Equal(t, want, rs[0].Status, "%s slot %s previewed %s", name, ps.Slot, kind)
		}
	}
	for ms, rs := range bySlot {
		if at := time.UnixMilli(ms); !listed[ms] && !at.After(spans) {
			t.Errorf("%s slot %s: not in the preview, yet recorded:\n%s", name, at.UTC(), anarchontest.Describe(rs))
		}
	}
}

// A fleet of three replicas runs what Preview said before it ran: cron jobs in
// New York across both of 2026's clock changes under non-default DST policies,
// schedule entries (one under a DST policy, one paused), and an hourly job
// paused until a given time, limited to four runs, whose holder is killed
// mid-run and taken over. Why then tells the takeover.
func TestPreviewThenHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ny, err := time.LoadLocation("America/New_York")
		require.NoError(t, err)
		start := time.Date(2026, 3, 7, 4, 50, 0, 0, time.UTC) // 23:50 EST, between two hourly slots
		time.Sleep(time.Until(start))

		work := func(ctx context.Context, r scheduler.Run) error {
			select {
			case <-time.After(20 * time.Minute):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		noop := func(context.Context, scheduler.Run) error { return nil }
		springEnd := time.Date(2026, 3, 12, 0, 0, 0, 0, time.UTC)
		fallStart := time.Date(2026, 10, 30, 0, 0, 0, 0, time.UTC)
		setup := func(s *scheduler.Scheduler) error {
			return errors.Join(
				// 02:30 does not exist on 8 Mar: no slot that night.
				s.Cron("spring-skip", "30 2 * * *", noop, scheduler.WithLocation(ny),
					scheduler.WithDST(scheduler.DSTPolicy{Missing: scheduler.DSTSkip}), scheduler.WithEndAt(springEnd)),
				// The default shifts it to 03:30 EDT.
				s.Cron("spring-shift", "30 2 * * *", noop, scheduler.WithLocation(ny), scheduler.WithEndAt(springEnd)),
				// 01:30 happens twice on 1 Nov: both are slots.
				s.Cron("fall-both", "30 1 * * *", noop, scheduler.WithLocation(ny),
					scheduler.WithDST(scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}), scheduler.WithStartAt(fallStart)),
				s.Every("report", time.Hour, work, scheduler.WithLease(30*time.Second), scheduler.WithMaxRuns(4)),
				s.Declare("tenants", noop),
				// Not on weekends (in New York: the calendar has no zone) nor on 10 Mar.
				s.Cron("weekday", "0 9 * * *", noop, scheduler.WithLocation(ny), scheduler.WithEndAt(springEnd),
					scheduler.WithCalendars("weekends", "holidays")),
			)
		}
		f := anarchontest.Start(t, anarchontest.Config{Replicas: 3, Setup: setup})
		for _, c := range []scheduler.Calendar{{Name: "weekends", Weekdays: []time.Weekday{time.Saturday, time.Sunday}},
			{Name: "holidays", Dates: []string{"2026-03-10"}}} {
			_, err := f.Replica(2).Scheduler().PutCalendar(t.Context(), c, 0)
			require.NoError(t, err)
		}
		pauseEnd := start.Add(3*time.Hour + 40*time.Minute) // 08:30Z
		require.NoError(t, f.Replica(0).Scheduler().Pause(t.Context(), "report", scheduler.PauseOptions{Reason: "migration", By: "ops", Until: pauseEnd}))
		_, err = f.Replica(0).Scheduler().AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Cron: "30 2 * * *", Zone: "America/New_York",
			DST: scheduler.DSTPolicy{Missing: scheduler.DSTSkip}, End: springEnd})
		require.NoError(t, err)
		_, err = f.Replica(0).Scheduler().AddEntry(t.Context(), "tenants", "idle", scheduler.EntrySpec{Every: 6 * time.Hour, Paused: true, End: springEnd})
		require.NoError(t, err)
		anarchontest.Advance(0) // every replica sees the pause and the entries

		s := f.Replica(1).Scheduler()
		preview := map[string][]scheduler.PreviewSlot{}
		for job, n := range map[string]int{"spring-skip": 10, "spring-shift": 10, "fall-both": 10, "report": 12, "weekday": 10} {
			out, err := s.Preview(t.Context(), job, scheduler.PreviewOptions{N: n})
			require.NoError(t, err)
			preview[job] = out
		}
		entries := map[string][]scheduler.PreviewSlot{}
		for _, id := range []string{"acme", "idle"} {
			out, err := s.Preview(t.Context(), "tenants", scheduler.PreviewOptions{Entry: id, N: 30})
			require.NoError(t, err)
			entries[id] = out
		}

		// What the preview says, before anything ran.
		at := func(ps []scheduler.PreviewSlot) []time.Time {
			var out []time.Time
			for _, p := range ps {
				out = append(out, p.Slot)
			}
			return out
		}
		utcAt := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 30, 0, 0, time.UTC) }
		assert.Equal(t, []time.Time{utcAt(7, 7), utcAt(9, 6), utcAt(10, 6), utcAt(11, 6)}, at(preview["spring-skip"]), "no slot on 8 Mar, none after the end bound")
		assert.Equal(t, []time.Time{utcAt(7, 7), utcAt(8, 7), utcAt(9, 6), utcAt(10, 6), utcAt(11, 6)}, at(preview["spring-shift"]))
		assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewDSTShifted}, kinds(preview["spring-shift"][1]))
		assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewLast}, kinds(preview["spring-skip"][3]))
		assert.Equal(t, at(preview["spring-skip"]), at(entries["acme"]), "the entry's DST policy is the job's")
		require.Len(t, entries["idle"], 19, "every 6 hours from 06:00Z on 7 Mar until the end bound")
		for _, ps := range entries["idle"] {
			assert.False(t, ps.Runs)
			assert.Contains(t, kinds(ps), scheduler.PreviewEntryPaused)
		}
		weekday := preview["weekday"]
		require.Len(t, weekday, 5, "7 to 11 Mar at 09:00 in New York")
		for i, ps := range weekday {
			excluded := i != 2 && i != 4 // Saturday, Sunday (a DST day), the holiday
			assert.Equal(t, !excluded, ps.Runs, "slot %s", ps.Slot)
			if excluded {
				assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewExcluded}, kinds(ps)[:1], "slot %s", ps.Slot)
			}
		}
		fall := preview["fall-both"]
		require.Len(t, fall, 10)
		assert.Equal(t, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), fall[2].Slot)
		assert.Equal(t, time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), fall[3].Slot)
		assert.Contains(t, kinds(fall[2]), scheduler.PreviewDSTRepeated)
		assert.Contains(t, kinds(fall[3]), scheduler.PreviewDSTRepeated)
		report := preview["report"]
		require.Len(t, report, 12)
		for i, ps := range report {
			assert.Equal(t, start.Truncate(time.Hour).Add(time.Duration(i+1)*time.Hour), ps.Slot)
			switch {
			case i < 4:
				assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewPaused}, kinds(ps), "slot %d is paused", i)
			case i < 8:
				assert.True(t, ps.Runs, "slot %d runs", i)
				assert.Empty(t, ps.Notes, "slot %d", i)
			default:
				assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewLimit}, kinds(ps), "slot %d is beyond the limit", i)
			}
		}

		// Drive the fleet: kill the holder of the second run mid-run.
		taken := report[5].Slot // 10:00Z
		anarchontest.AdvanceTo(taken.Add(5 * time.Minute))
		holder := f.Holder("report", taken)
		require.NotNil(t, holder, "a replica runs slot %s", taken)
		holder.Kill()
		anarchontest.Advance(30 * time.Minute)
		takeovers := f.Events(anarchontest.Match("report", scheduler.EventTakeover))
		require.Len(t, takeovers, 1)
		backup := takeovers[0].Instance
		assert.NotEqual(t, holder.Name(), backup)
		require.NoError(t, holder.Restart(t.Context()), "the killed replica comes back")

		until := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
		anarchontest.AdvanceTo(until)

		for job, ps := range preview {
			assertAsPreviewed(t, f, job, "", ps, until)
		}
		for id, ps := range entries {
			assertAsPreviewed(t, f, "tenants", id, ps, until)
		}
		runs, err := f.RunsOf(t.Context(), "report", taken)
		require.NoError(t, err)
		require.Len(t, runs, 2, anarchontest.Describe(runs))
		assert.Equal(t, holder.Name(), runs[0].Instance)
		assert.Equal(t, backup, runs[1].Instance)

		why, err := f.Replica(2).Scheduler().Why(t.Context(), "report", scheduler.WhyOptions{Slot: taken})
		require.NoError(t, err)
		var kinds []scheduler.WhyKind
		for _, st := range why.Steps {
			kinds = append(kinds, st.Kind)
		}
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyRan, scheduler.WhyTakeover}, kinds, "%+v", why.Steps)
		assert.False(t, why.Open)
		assert.Equal(t, holder.Name(), why.Steps[0].Instance)
		assert.Equal(t, backup, why.Steps[1].Instance)
		assert.Contains(t, why.Steps[1].Text, "ran on "+backup+" as attempt 2 after the lease of "+holder.Name()+" ended")
	})
}
