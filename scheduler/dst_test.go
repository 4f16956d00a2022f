package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// allDST is every policy, the defaults spelled out and left empty.
var allDST = func() []scheduler.DSTPolicy {
	var out []scheduler.DSTPolicy
	for _, r := range []scheduler.DSTRepeated{"", scheduler.DSTFirst, scheduler.DSTLast, scheduler.DSTBoth} {
		for _, m := range []scheduler.DSTMissing{"", scheduler.DSTShift, scheduler.DSTSkip} {
			out = append(out, scheduler.DSTPolicy{Repeated: r, Missing: m})
		}
	}
	return out
}()

// slotsBetween lists the slots in [from, to).
func slotsBetween(s scheduler.Schedule, from, to time.Time) []time.Time {
	var out []time.Time
	for n := s.Next(from.Add(-time.Millisecond)); !n.IsZero() && n.Before(to); n = s.Next(n) {
		out = append(out, n)
	}
	return out
}

func utc(y int, m time.Month, d, hh, mm int) time.Time {
	return time.Date(y, m, d, hh, mm, 0, 0, time.UTC)
}

// A daily cron on the days clocks change in Athens and New York in 2026, under
// every policy: a time inside the repeated hour has its first, last or both
// occurrences; one inside the skipped hour is shifted by the jump or skipped; any
// other time has its one slot whatever the policy.
func TestCronDSTPoliciesDaily(t *testing.T) {
	type day struct {
		date time.Time // the local day
		// once is the one slot of a time the change leaves alone; first and last
		// the occurrences of a repeated time; shifted the slot of a skipped time.
		once, first, last, shifted time.Time
	}
	for _, tc := range []struct {
		zone, expr   string
		spring, fall day
	}{
		// New York: 02:00 EST → 03:00 EDT on 8 March, 02:00 EDT → 01:00 EST on 1 November.
		{"America/New_York", "30 2 * * *",
			day{date: time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), shifted: utc(2026, 3, 8, 7, 30)}, // 03:30 EDT
			day{date: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), once: utc(2026, 11, 1, 7, 30)}}, // 02:30 EST
		{"America/New_York", "30 1 * * *",
			day{date: time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), once: utc(2026, 3, 8, 6, 30)},                                    // 01:30 EST
			day{date: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), first: utc(2026, 11, 1, 5, 30), last: utc(2026, 11, 1, 6, 30)}}, // EDT, EST
		// Athens: 03:00 EET → 04:00 EEST on 29 March, 04:00 EEST → 03:00 EET on 25 October.
		{"Europe/Athens", "30 2 * * *",
			day{date: time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), once: utc(2026, 3, 29, 0, 30)},     // 02:30 EET
			day{date: time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), once: utc(2026, 10, 24, 23, 30)}}, // 02:30 EEST
		{"Europe/Athens", "30 3 * * *",
			day{date: time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), shifted: utc(2026, 3, 29, 1, 30)},                                  // 04:30 EEST
			day{date: time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), first: utc(2026, 10, 25, 0, 30), last: utc(2026, 10, 25, 1, 30)}}, // EEST, EET
	} {
		loc := mustLoad(t, tc.zone)
		for _, p := range allDST {
			c, err := scheduler.ParseCronDST(tc.expr, loc, p)
			require.NoError(t, err)
			n := p.Normal()
			for _, d := range []day{tc.spring, tc.fall} {
				var want []time.Time
				switch {
				case !d.once.IsZero():
					want = []time.Time{d.once}
				case !d.shifted.IsZero() && n.Missing == scheduler.DSTShift:
					want = []time.Time{d.shifted}
				case !d.first.IsZero() && n.Repeated != scheduler.DSTLast:
					want = append(want, d.first)
				}
				if !d.last.IsZero() && n.Repeated != scheduler.DSTFirst {
					want = append(want, d.last)
				}
				start := time.Date(d.date.Year(), d.date.Month(), d.date.Day(), 0, 0, 0, 0, loc)
				got := slotsBetween(c, start, start.AddDate(0, 0, 1))
				assert.Equal(t, want, got, "%s %q %s on %s", tc.zone, tc.expr, p, d.date.Format(time.DateOnly))
			}
			// The days around keep their one slot at the listed time.
			for _, d := range []time.Time{tc.spring.date.AddDate(0, 0, -1), tc.spring.date.AddDate(0, 0, 1), tc.fall.date.AddDate(0, 0, -1), tc.fall.date.AddDate(0, 0, 1)} {
				start := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, loc)
				got := slotsBetween(c, start, start.AddDate(0, 0, 1))
				require.Len(t, got, 1, "%s %q %s on %s", tc.zone, tc.expr, p, d.Format(time.DateOnly))
				f := strings.Fields(tc.expr)
				assert.Equal(t, fmt.Sprintf("%02s:%s", f[1], f[0]), got[0].In(loc).Format("15:04"), "%s %q %s on %s", tc.zone, tc.expr, p, d.Format(time.DateOnly))
			}
			// Over the year: 365 slots, one less for a skipped time, one more for
			// a repeated time run twice.
			want := 365
			if !tc.spring.shifted.IsZero() && n.Missing == scheduler.DSTSkip {
				want--
			}
			if !tc.fall.last.IsZero() && n.Repeated == scheduler.DSTBoth {
				want++
			}
			year := slotsBetween(c, time.Date(2026, 1, 1, 0, 0, 0, 0, loc), time.Date(2027, 1, 1, 0, 0, 0, 0, loc))
			assert.Len(t, year, want, "%s %q %s over 2026", tc.zone, tc.expr, p)
		}
	}
}

// With DSTBoth, a frequent cron runs each wall time of the repeated hour twice, in
// order, without a duplicate: its slots keep their spacing through the change.
// DSTFirst and DSTLast leave a gap of the hour before or after it.
func TestCronDSTRepeatedHourFrequent(t *testing.T) {
	for _, tc := range []struct {
		zone   string
		change time.Time // the instant clocks fall back
	}{
		{"America/New_York", utc(2026, 11, 1, 6, 0)}, // 02:00 EDT → 01:00 EST
		{"Europe/Athens", utc(2026, 10, 25, 1, 0)},   // 04:00 EEST → 03:00 EET
	} {
		loc := mustLoad(t, tc.zone)
		for _, tt := range []struct {
			expr string
			step time.Duration
		}{{"0 * * * *", time.Hour}, {"*/15 * * * *", 15 * time.Minute}, {"* * * * *", time.Minute}, {"*/30 * * * * *", 30 * time.Second}} {
			expr, step := tt.expr, tt.step
			from, to := tc.change.Add(-3*time.Hour), tc.change.Add(3*time.Hour)
			both, err := scheduler.ParseCronDST(expr, loc, scheduler.DSTPolicy{Repeated: scheduler.DSTBoth})
			require.NoError(t, err)
			got := slotsBetween(both, from, to)
			require.Len(t, got, int(6*time.Hour/step), "%s %q: every step of six hours", tc.zone, expr)
			walls := map[string][]time.Time{}
			for i, n := range got {
				if i > 0 {
					assert.Equal(t, step, n.Sub(got[i-1]), "%s %q: %v after %v", tc.zone, expr, n, got[i-1])
				}
				w := n.In(loc).Format("15:04:05")
				walls[w] = append(walls[w], n)
			}
			repeated := tc.change.Add(-time.Hour) // the first occurrence of the repeated hour
			for k := time.Duration(0); k < time.Hour; k += step {
				first := repeated.Add(k)
				w := first.In(loc).Format("15:04:05")
				assert.Equal(t, []time.Time{first, first.Add(time.Hour)}, walls[w], "%s %q: %s twice, an hour apart", tc.zone, expr, w)
			}

			for _, r := range []scheduler.DSTRepeated{scheduler.DSTFirst, scheduler.DSTLast} {
				c, err := scheduler.ParseCronDST(expr, loc, scheduler.DSTPolicy{Repeated: r})
				require.NoError(t, err)
				got := slotsBetween(c, from, to)
				require.Len(t, got, int(5*time.Hour/step), "%s %q %s: the repeated hour once", tc.zone, expr, r)
				gapAfter := repeated.Add(time.Hour - step) // DSTFirst: after the last first occurrence
				if r == scheduler.DSTLast {
					gapAfter = repeated.Add(-step) // DSTLast: after the last slot before the repeated hour
				}
				for i, n := range got[1:] {
					want := step
					if got[i].Equal(gapAfter) {
						want = step + time.Hour
					}
					assert.Equal(t, want, n.Sub(got[i]), "%s %q %s: %v after %v", tc.zone, expr, r, n, got[i])
				}
			}
		}
	}
}

// A time inside the hour clocks skip is shifted by the jump or skipped; shifted
// slots that fall on a listed time are one slot, not two.
func TestCronDSTMissingHour(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	day := time.Date(2026, 3, 8, 0, 0, 0, 0, ny) // 02:00 EST → 03:00 EDT
	walls := func(c *scheduler.CronSchedule) []string {
		var out []string
		for _, n := range slotsBetween(c, day, day.AddDate(0, 0, 1)) {
			out = append(out, n.In(ny).Format("15:04 MST"))
		}
		return out
	}
	for _, tc := range []struct {
		expr        string
		shift, skip []string
	}{
		{"*/20 2 * * *", []string{"03:00 EDT", "03:20 EDT", "03:40 EDT"}, nil},
		{"30 2,3 * * *", []string{"03:30 EDT"}, []string{"03:30 EDT"}},
		{"0 1-4 * * *", []string{"01:00 EST", "03:00 EDT", "04:00 EDT"}, []string{"01:00 EST", "03:00 EDT", "04:00 EDT"}},
	} {
		shift, err := scheduler.ParseCronDST(tc.expr, ny, scheduler.DSTPolicy{Missing: scheduler.DSTShift})
		require.NoError(t, err)
		skip, err := scheduler.ParseCronDST(tc.expr, ny, scheduler.DSTPolicy{Missing: scheduler.DSTSkip})
		require.NoError(t, err)
		assert.Equal(t, tc.shift, walls(shift), "%q shifted", tc.expr)
		assert.Equal(t, tc.skip, walls(skip), "%q skipped", tc.expr)
	}
}

// Any change of a zone's offset follows the policy: half an hour on Lord Howe
// Island, two hours at Troll, at midnight in Santiago.
func TestCronDSTOtherChanges(t *testing.T) {
	for _, tc := range []struct {
		zone, expr string
		day        time.Time // UTC date of the local day
		policy     scheduler.DSTPolicy
		want       []string
	}{
		// Lord Howe: 02:00 → 02:30 on 4 October 2026, 02:00 → 01:30 on 5 April 2026.
		{"Australia/Lord_Howe", "15 2 * * *", utc(2026, 10, 4, 0, 0), scheduler.DSTPolicy{}, []string{"02:45 +11"}},
		{"Australia/Lord_Howe", "15 2 * * *", utc(2026, 10, 4, 0, 0), scheduler.DSTPolicy{Missing: scheduler.DSTSkip}, nil},
		{"Australia/Lord_Howe", "45 1 * * *", utc(2026, 4, 5, 0, 0), scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}, []string{"01:45 +11", "01:45 +1030"}},
		{"Australia/Lord_Howe", "45 1 * * *", utc(2026, 4, 5, 0, 0), scheduler.DSTPolicy{Repeated: scheduler.DSTLast}, []string{"01:45 +1030"}},
		// Troll: 01:00 +00 → 03:00 +02 on 29 March 2026.
		{"Antarctica/Troll", "30 2 * * *", utc(2026, 3, 29, 0, 0), scheduler.DSTPolicy{}, []string{"04:30 +02"}},
		// Santiago: 24:00 -04 → 01:00 -03 on 6 September 2026; 24:00 -03 → 23:00 -04 on 4 April 2026.
		{"America/Santiago", "30 0 * * *", utc(2026, 9, 6, 0, 0), scheduler.DSTPolicy{}, []string{"01:30 -03"}},
		{"America/Santiago", "30 0 * * *", utc(2026, 9, 6, 0, 0), scheduler.DSTPolicy{Missing: scheduler.DSTSkip}, nil},
		{"America/Santiago", "30 23 * * *", utc(2026, 4, 4, 0, 0), scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}, []string{"23:30 -03", "23:30 -04"}},
	} {
		loc := mustLoad(t, tc.zone)
		c, err := scheduler.ParseCronDST(tc.expr, loc, tc.policy)
		require.NoError(t, err)
		start := time.Date(tc.day.Year(), tc.day.Month(), tc.day.Day(), 0, 0, 0, 0, loc)
		var got []string
		for _, n := range slotsBetween(c, start, start.AddDate(0, 0, 1)) {
			got = append(got, n.In(loc).Format("15:04 MST"))
		}
		assert.Equal(t, tc.want, got, "%s %q %s on %s", tc.zone, tc.expr, tc.policy, tc.day.Format(time.DateOnly))
	}
}

// Next gives the same slot from any instant before it: from inside the
// repeated or skipped hour as from the slot before. It is how an instance
// started then, and the check that a claimed slot is on the schedule, ask.
func TestCronDSTNextFromAnyInstant(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/Athens"} {
		loc := mustLoad(t, zone)
		for _, expr := range []string{"30 1 * * *", "30 2 * * *", "30 3 * * *", "*/20 * * * *"} {
			for _, p := range allDST {
				c, err := scheduler.ParseCronDST(expr, loc, p)
				require.NoError(t, err)
				for _, change := range []time.Time{utc(2026, 3, 7, 20, 0), utc(2026, 3, 28, 20, 0), utc(2026, 10, 24, 20, 0), utc(2026, 10, 31, 20, 0)} {
					from, to := change, change.Add(48*time.Hour)
					slots := slotsBetween(c, from, to)
					require.NotEmpty(t, slots, "%s %q %s from %v", zone, expr, p, from)
					i := 0
					for at := from; at.Before(slots[len(slots)-1]); at = at.Add(7 * time.Minute) {
						for !slots[i].After(at) {
							i++
						}
						if !assert.Equal(t, slots[i], c.Next(at), "%s %q %s from %v", zone, expr, p, at.In(loc)) {
							break
						}
					}
				}
			}
		}
	}
}

// The policy is part of the schedule's text, which replicas compare: a policy
// other than the default is said, the default is not, whether spelled out or
// left empty.
func TestCronDSTText(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	for _, tc := range []struct {
		policy      scheduler.DSTPolicy
		text, words string
	}{
		{scheduler.DSTPolicy{}, "CRON_TZ=America/New_York 30 1 * * *", "at 01:30 every day (America/New_York)"},
		{scheduler.DSTPolicy{Repeated: scheduler.DSTFirst, Missing: scheduler.DSTShift}, "CRON_TZ=America/New_York 30 1 * * *", "at 01:30 every day (America/New_York)"},
		{scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}, "CRON_TZ=America/New_York 30 1 * * *; DST repeated=both", "at 01:30 every day (America/New_York; DST repeated=both)"},
		{scheduler.DSTPolicy{Repeated: scheduler.DSTLast, Missing: scheduler.DSTSkip}, "CRON_TZ=America/New_York 30 1 * * *; DST repeated=last missing=skip", "at 01:30 every day (America/New_York; DST repeated=last missing=skip)"},
		{scheduler.DSTPolicy{Missing: scheduler.DSTSkip}, "CRON_TZ=America/New_York 30 1 * * *; DST missing=skip", "at 01:30 every day (America/New_York; DST missing=skip)"},
	} {
		c, err := scheduler.ParseCronDST("30 1 * * *", ny, tc.policy)
		require.NoError(t, err)
		assert.Equal(t, tc.text, c.String())
		assert.Equal(t, tc.policy, c.DST())
		assert.Equal(t, tc.words, scheduler.DescribeSchedule(c.String()))
		assert.Equal(t, tc.text, scheduler.CronText("30 1 * * *", "America/New_York", tc.policy))
	}
	// With a spread and bounds around it.
	assert.Equal(t, "at 01:30 every day (America/New_York; DST repeated=both), spread over 1m0s (+5s), until 2030-01-01T00:00:00.000Z",
		scheduler.DescribeSchedule("CRON_TZ=America/New_York 30 1 * * *; DST repeated=both, spread over 1m0s (+5s) until 2030-01-01T00:00:00.000Z"))
}

// WithDST at registration: the job's schedule says it; a value that is no
// policy, a job that is not a Cron job and a zone without clock changes are
// refused with a clear error.
func TestWithDST(t *testing.T) {
	noop := func(context.Context, scheduler.Run) error { return nil }
	ny := mustLoad(t, "America/New_York")
	s := newScheduler(t, memory.New(), "A")
	require.NoError(t, s.Cron("both", "30 1 * * *", noop, scheduler.WithDST(scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}), scheduler.WithLocation(ny)))
	require.NoError(t, s.Cron("tz", "CRON_TZ=Europe/Athens 30 3 * * *", noop, scheduler.WithDST(scheduler.DSTPolicy{Missing: scheduler.DSTSkip})))
	require.NoError(t, s.Cron("plain", "30 1 * * *", noop, scheduler.WithLocation(ny)))
	require.NoError(t, s.Every("every", time.Minute, noop))
	jobs := map[string]scheduler.JobInfo{}
	for _, j := range s.Jobs() {
		jobs[j.Job] = j
	}
	assert.Equal(t, "CRON_TZ=America/New_York 30 1 * * *; DST repeated=both", jobs["both"].Schedule)
	assert.Equal(t, &scheduler.DSTPolicy{Repeated: scheduler.DSTBoth, Missing: scheduler.DSTShift}, jobs["both"].DST)
	assert.Equal(t, "CRON_TZ=Europe/Athens 30 3 * * *; DST missing=skip", jobs["tz"].Schedule)
	assert.Equal(t, &scheduler.DSTPolicy{Repeated: scheduler.DSTFirst, Missing: scheduler.DSTShift}, jobs["plain"].DST, "a cron job declares the default")
	assert.Nil(t, jobs["every"].DST, "an Every job has none")

	for _, tc := range []struct {
		name string
		call func() error
		text string
	}{
		{"unknown repeated", func() error {
			return s.Cron("x", "30 1 * * *", noop, scheduler.WithLocation(ny), scheduler.WithDST(scheduler.DSTPolicy{Repeated: "twice"}))
		}, `DST policy for a repeated wall time "twice": want first, last or both`},
		{"unknown missing", func() error {
			return s.Cron("x", "30 1 * * *", noop, scheduler.WithLocation(ny), scheduler.WithDST(scheduler.DSTPolicy{Missing: "later"}))
		}, `DST policy for a missing wall time "later": want shift or skip`},
		{"every job", func() error {
			return s.Every("x", time.Hour, noop, scheduler.WithDST(scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}))
		}, "WithDST applies to a Cron job's schedule; this job's is every 1h0m0s"},
		{"one-time job", func() error {
			return s.At("x", time.Now().Add(time.Hour), noop, scheduler.WithDST(scheduler.DSTPolicy{Missing: scheduler.DSTSkip}))
		}, "WithDST applies to a Cron job's schedule"},
		{"entries only", func() error {
			return s.Declare("x", noop, scheduler.WithDST(scheduler.DSTPolicy{Missing: scheduler.DSTSkip}))
		}, "an entry carries its own policy"},
		{"utc", func() error {
			return s.Cron("x", "30 1 * * *", noop, scheduler.WithDST(scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}))
		}, "zone UTC never changes its clocks"},
		{"fixed zone", func() error {
			return s.Cron("x", "30 1 * * *", noop, scheduler.WithLocation(time.FixedZone("X", 3600)), scheduler.WithDST(scheduler.DSTPolicy{Repeated: scheduler.DSTFirst}))
		}, "zone X never changes its clocks"},
	} {
		err := tc.call()
		require.Error(t, err, tc.name)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, tc.name)
		assert.Contains(t, err.Error(), tc.text, tc.name)
		assert.Contains(t, err.Error(), `job "x"`, tc.name)
	}
	assert.Len(t, s.Jobs(), 4, "nothing refused was registered")
}

// Entries carry their own policy: it is stored, applied to their slots, and
// refused when unknown, on a schedule that is not a cron, or in UTC.
func TestEntryDST(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "A")
		noop := func(context.Context, scheduler.Run) error { return nil }
		require.NoError(t, s.Declare("tenants", noop))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		spec := scheduler.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DST: scheduler.DSTPolicy{Repeated: scheduler.DSTLast, Missing: scheduler.DSTSkip}}
		added, err := s.AddEntry(t.Context(), "tenants", "acme", spec)
		require.NoError(t, err)
		assert.Equal(t, spec.DST, added.DST)
		got, err := s.GetEntry(t.Context(), "tenants", "acme")
		require.NoError(t, err)
		assert.Equal(t, spec.DST, got.DST, "stored")

		spec.DST = scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}
		changed, err := s.UpdateEntry(t.Context(), "tenants", "acme", spec, got.Revision)
		require.NoError(t, err)
		got, err = s.GetEntry(t.Context(), "tenants", "acme")
		require.NoError(t, err)
		assert.Equal(t, scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}, got.DST, "changed")
		assert.Equal(t, changed.Revision, got.Revision)

		for _, tc := range []struct {
			name string
			spec scheduler.EntrySpec
			text string
		}{
			{"unknown", scheduler.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DST: scheduler.DSTPolicy{Repeated: "twice"}}, `repeated wall time "twice"`},
			{"every", scheduler.EntrySpec{Every: time.Hour, DST: scheduler.DSTPolicy{Missing: scheduler.DSTSkip}}, "a DST policy applies to Cron only"},
			{"at", scheduler.EntrySpec{At: time.Now().Add(time.Hour), DST: scheduler.DSTPolicy{Missing: scheduler.DSTSkip}}, "a DST policy applies to Cron only"},
			{"utc", scheduler.EntrySpec{Cron: "30 1 * * *", DST: scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}}, "zone UTC never changes its clocks"},
		} {
			_, err := s.AddEntry(t.Context(), "tenants", "bad", tc.spec)
			require.Error(t, err, tc.name)
			assert.ErrorIs(t, err, scheduler.ErrInvalidEntry, tc.name)
			assert.Contains(t, err.Error(), tc.text, tc.name)
		}
		_, err = s.GetEntry(t.Context(), "tenants", "bad")
		assert.ErrorIs(t, err, scheduler.ErrEntryNotFound, "nothing refused was stored")
	})
}

// A job and an entry run across the days New York's clocks change, each with
// its policy: the slots that ran are the policy's.
func TestDSTJobsRunThePolicysSlots(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	for _, tc := range []struct {
		name       string
		from, to   time.Time
		job, entry scheduler.DSTPolicy
		expr       string
		wantJob    []time.Time
		wantEntry  []time.Time
	}{
		{"fall back", utc(2030, 11, 2, 20, 0), utc(2030, 11, 3, 20, 0),
			scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}, scheduler.DSTPolicy{Repeated: scheduler.DSTLast}, "30 1 * * *",
			[]time.Time{utc(2030, 11, 3, 5, 30), utc(2030, 11, 3, 6, 30)}, []time.Time{utc(2030, 11, 3, 6, 30)}},
		{"spring forward", utc(2030, 3, 9, 20, 0), utc(2030, 3, 11, 20, 0),
			scheduler.DSTPolicy{Missing: scheduler.DSTSkip}, scheduler.DSTPolicy{}, "30 2 * * *",
			[]time.Time{utc(2030, 3, 11, 6, 30)}, []time.Time{utc(2030, 3, 10, 7, 30), utc(2030, 3, 11, 6, 30)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := scheduler.OffsetClock{Offset: time.Until(tc.from)}
				b := memory.NewWithClock(clock)
				jobRuns, entryRuns := newRunLog(), newEntryRuns()
				s := newScheduler(t, b, "A", func(c *scheduler.Config) { c.Clock = clock })
				require.NoError(t, s.Cron("job", tc.expr, jobRuns.handler, scheduler.WithLocation(ny), scheduler.WithDST(tc.job)))
				require.NoError(t, s.Declare("tenants", entryRuns.handler))
				require.NoError(t, s.Start(t.Context()))
				require.NoError(t, s.EntriesLoaded(t.Context()))
				_, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Cron: tc.expr, Zone: "America/New_York", DST: tc.entry})
				require.NoError(t, err)
				time.Sleep(tc.to.Sub(tc.from))
				require.NoError(t, s.Stop(t.Context()))

				want := func(slots []time.Time) map[int64][]string {
					out := map[int64][]string{}
					for _, at := range slots {
						out[at.UnixMilli()] = []string{"A"}
					}
					return out
				}
				assert.Equal(t, want(tc.wantJob), jobRuns.snapshot(), "the job's slots, each run once")
				assert.Equal(t, want(tc.wantEntry), entryRuns.slots("acme"), "the entry's slots, each run once")
			})
		})
	}
}

// Preview lists the policy's slots and says what the policy does to each.
func TestPreviewDSTPolicy(t *testing.T) {
	c := stepclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newScheduler(t, memory.NewWithClock(c), "A", func(cfg *scheduler.Config) { cfg.Clock = c })
	noop := func(context.Context, scheduler.Run) error { return nil }
	ny := mustLoad(t, "America/New_York")
	for name, p := range map[string]scheduler.DSTPolicy{
		"first": {}, "last": {Repeated: scheduler.DSTLast}, "both": {Repeated: scheduler.DSTBoth}, "skip": {Missing: scheduler.DSTSkip},
	} {
		require.NoError(t, s.Cron(name+" 01:30", "30 1 * * *", noop, scheduler.WithLocation(ny), scheduler.WithDST(p)))
		require.NoError(t, s.Cron(name+" 02:30", "30 2 * * *", noop, scheduler.WithLocation(ny), scheduler.WithDST(p)))
	}
	type note struct {
		at   time.Time
		text string
	}
	preview := func(job string, from time.Time) []note {
		out, err := s.Preview(t.Context(), job, scheduler.PreviewOptions{From: from, N: 2})
		require.NoError(t, err)
		var got []note
		for _, ps := range out {
			n := note{at: ps.Slot}
			for _, pn := range ps.Notes {
				n.text += string(pn.Kind) + ": " + pn.Text
			}
			got = append(got, n)
		}
		return got
	}
	fall, spring := utc(2026, 11, 1, 4, 0), utc(2026, 3, 8, 4, 0) // 00:00 EDT, 23:00 EST
	const twice = "01:30 happens twice on Sun 1 Nov 2026 in America/New_York (the clocks fall back 1h): "
	const shifted = "dst-shifted: 02:30 does not exist on Sun 8 Mar 2026 in America/New_York (the clocks jump forward 1h): shifted by the jump to 03:30 EDT, the instant it would have been"
	for _, tc := range []struct {
		job  string
		from time.Time
		want []note
	}{
		{"first 01:30", fall, []note{{utc(2026, 11, 1, 5, 30), "dst-repeated: " + twice + "it fires once, at the first (01:30 EDT)"}, {utc(2026, 11, 2, 6, 30), ""}}},
		{"last 01:30", fall, []note{{utc(2026, 11, 1, 6, 30), "dst-repeated: " + twice + "it fires once, at the second (01:30 EST)"}, {utc(2026, 11, 2, 6, 30), ""}}},
		{"both 01:30", fall, []note{
			{utc(2026, 11, 1, 5, 30), "dst-repeated: " + twice + "it fires at both (01:30 EDT, 01:30 EST); this is the first"},
			{utc(2026, 11, 1, 6, 30), "dst-repeated: " + twice + "it fires at both (01:30 EDT, 01:30 EST); this is the second"}}},
		{"first 02:30", spring, []note{{utc(2026, 3, 8, 7, 30), shifted}, {utc(2026, 3, 9, 6, 30), ""}}},
		{"skip 02:30", spring, []note{{utc(2026, 3, 9, 6, 30), ""}, {utc(2026, 3, 10, 6, 30), ""}}},
	} {
		assert.Equal(t, tc.want, preview(tc.job, tc.from), tc.job)
	}
}

// A job at 01:30 in New York, where 01:30 happens twice on the night clocks
// fall back: the default runs the first, DSTBoth runs both.
func ExampleWithDST() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	s, err := scheduler.New(scheduler.Config{Backend: memory.New()})
	if err != nil {
		panic(err)
	}
	report := func(ctx context.Context, run scheduler.Run) error { return nil }
	err = s.Cron("report", "30 1 * * *", report, scheduler.WithLocation(ny),
		scheduler.WithDST(scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}))
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Jobs()[0].Schedule)

	night := time.Date(2030, 11, 3, 0, 0, 0, 0, ny)
	for _, p := range []scheduler.DSTPolicy{{}, {Repeated: scheduler.DSTBoth}} {
		c, err := scheduler.ParseCronDST("30 1 * * *", ny, p)
		if err != nil {
			panic(err)
		}
		var slots []string
		for n := c.Next(night); n.Before(night.Add(6 * time.Hour)); n = c.Next(n) {
			slots = append(slots, n.In(ny).Format("15:04 MST"))
		}
		fmt.Println(strings.Join(slots, ", "))
	}
	// Output:
	// CRON_TZ=America/New_York 30 1 * * *; DST repeated=both
	// 01:30 EDT
	// 01:30 EDT, 01:30 EST
}
