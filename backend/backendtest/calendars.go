package backendtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// RunCalendars runs the calendar section of the conformance suite on a backend
// that implements backend.CalendarStore: changes by revision compare-and-set
// (one of eight writers wins), the largest calendars, names that are not
// identifiers, the watch seen from another backend value, and MaxCalendars.
// Like Run, every backend newBackend returns within one test shares one store.
// The cases use names of their own; Limit fills the store up to MaxCalendars,
// so no other test may store calendars in it meanwhile.
func RunCalendars(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, f *calFixture)
	}{
		{"RoundTrip", testCalendarRoundTrip},
		{"CreateTwice", testCalendarCreateTwice},
		{"UpdateCompareAndSet", testCalendarUpdateCAS},
		{"Delete", testCalendarDelete},
		{"WritersRace", testCalendarWritersRace},
		{"Largest", testCalendarLargest},
		{"Names", testCalendarNames},
		{"Watch", testCalendarWatch},
		{"Invalid", testCalendarInvalid},
	}
	fixture := func(t *testing.T, name string) *calFixture {
		a, b := setup(t, newBackend), setup(t, newBackend)
		ca, ok := a.(backend.CalendarStore)
		require.True(t, ok, "%T is not a backend.CalendarStore", a)
		return &calFixture{t: t, newBackend: newBackend, ca: ca, cb: b.(backend.CalendarStore), ctx: Context(t),
			prefix: JobName("cal ✓ "+name) + " "}
	}
	t.Run("Calendars", func(t *testing.T) {
		t.Run("Cases", func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, fixture(t, c.name))
				})
			}
		})
		// After the others: it fills the store.
		t.Run("Limit", func(t *testing.T) { testCalendarLimit(t, fixture(t, "Limit")) })
	})
}

// calFixture is one case's two backend values on one store, and the prefix of
// its calendars' names.
type calFixture struct {
	t          *testing.T
	newBackend func(t *testing.T) backend.Backend
	ca, cb     backend.CalendarStore
	ctx        context.Context
	prefix     string
}

// calendar is a calendar of every field, named prefix+name.
func (f *calFixture) calendar(name string) backend.Calendar {
	return backend.Calendar{
		Name:        f.prefix + name,
		Zone:        "Europe/Athens",
		Dates:       []string{"2030-01-01", "2030-04-19"},
		Ranges:      []backend.DateRange{{From: "2030-08-01", To: "2030-08-15"}},
		Yearly:      []string{"12-25", "02-29"},
		Weekdays:    []time.Weekday{time.Saturday, time.Sunday},
		Description: "holidays of " + name + " <&> ✓",
		By:          "ops-1 (account OPS)",
		At:          time.UnixMilli(1_900_000_000_123).UTC(),
	}
}

func (f *calFixture) put(s backend.CalendarStore, c backend.Calendar, rev uint64) uint64 {
	f.t.Helper()
	next, err := s.PutCalendar(f.ctx, c, rev)
	require.NoError(f.t, err, "PutCalendar %q at %d", c.Name, rev)
	require.NotZero(f.t, next, "a stored calendar has a revision")
	require.NotEqual(f.t, rev, next, "a change gives a new revision")
	return next
}

// mine returns the calendars of all that are this case's, in their order.
func (f *calFixture) mine(all []backend.Calendar) []backend.Calendar {
	var out []backend.Calendar
	for _, c := range all {
		if strings.HasPrefix(c.Name, f.prefix) {
			out = append(out, c)
		}
	}
	return out
}

// sameCalendar compares what a user stored, and the revision when want has one.
func sameCalendar(t *testing.T, want, got backend.Calendar, msg string) {
	t.Helper()
	assert.Equal(t, want.Name, got.Name, msg)
	assert.Equal(t, want.Zone, got.Zone, msg)
	assert.Equal(t, want.Dates, got.Dates, msg)
	assert.Equal(t, want.Ranges, got.Ranges, msg)
	assert.Equal(t, want.Yearly, got.Yearly, msg)
	assert.Equal(t, want.Weekdays, got.Weekdays, msg)
	assert.Equal(t, want.Description, got.Description, msg)
	assert.Equal(t, want.By, got.By, msg)
	assert.True(t, want.At.Equal(got.At), "%s: At %v, want %v", msg, got.At, want.At)
	if want.Revision != 0 {
		assert.Equal(t, want.Revision, got.Revision, "%s: revision", msg)
	}
}

func testCalendarRoundTrip(t *testing.T, f *calFixture) {
	// Stored out of order: listed by name.
	var want []backend.Calendar
	for _, name := range []string{"b", "a", "c.d", "B"} {
		c := f.calendar(name)
		c.Revision = f.put(f.ca, c, 0)
		want = append(want, c)
		got, err := f.cb.GetCalendar(f.ctx, c.Name)
		require.NoError(t, err, "another instance reads the calendar")
		sameCalendar(t, c, got, name)
	}
	bare := backend.Calendar{Name: f.prefix + "bare", Weekdays: []time.Weekday{time.Monday}}
	bare.Revision = f.put(f.ca, bare, 0)
	got, err := f.cb.GetCalendar(f.ctx, bare.Name)
	require.NoError(t, err)
	sameCalendar(t, bare, got, "a calendar of one field")
	assert.Empty(t, got.Dates)
	assert.True(t, got.At.IsZero())
	want = append(want, bare)
	slices.SortFunc(want, func(x, y backend.Calendar) int { return strings.Compare(x.Name, y.Name) })

	all, err := f.cb.Calendars(f.ctx)
	require.NoError(t, err)
	assert.True(t, slices.IsSortedFunc(all, func(x, y backend.Calendar) int { return strings.Compare(x.Name, y.Name) }),
		"Calendars is ordered by name")
	listed := f.mine(all)
	require.Len(t, listed, len(want), "listed: %+v", listed)
	for i := range want {
		sameCalendar(t, want[i], listed[i], "listed "+want[i].Name)
	}

	_, err = f.cb.GetCalendar(f.ctx, f.prefix+"absent")
	assert.ErrorIs(t, err, backend.ErrCalendarNotFound)
}

func testCalendarCreateTwice(t *testing.T, f *calFixture) {
	c := f.calendar("x")
	rev := f.put(f.ca, c, 0)
	c.Description = "the second"
	_, err := f.cb.PutCalendar(f.ctx, c, 0)
	require.ErrorIs(t, err, backend.ErrCalendarExists)
	got, err := f.ca.GetCalendar(f.ctx, c.Name)
	require.NoError(t, err)
	assert.Equal(t, rev, got.Revision, "the first is kept")
	assert.NotEqual(t, "the second", got.Description)
}

func testCalendarUpdateCAS(t *testing.T, f *calFixture) {
	c := f.calendar("x")
	rev := f.put(f.ca, c, 0)
	c.Dates = append(c.Dates, "2031-01-01")
	c.Description, c.By = "updated", "bo"
	next := f.put(f.cb, c, rev)
	got, err := f.ca.GetCalendar(f.ctx, c.Name)
	require.NoError(t, err)
	c.Revision = next
	sameCalendar(t, c, got, "updated")

	c.Description = "stale"
	_, err = f.ca.PutCalendar(f.ctx, c, rev)
	require.ErrorIs(t, err, backend.ErrCalendarConflict, "a change based on an older revision")
	_, err = f.ca.PutCalendar(f.ctx, c, next+1000)
	require.ErrorIs(t, err, backend.ErrCalendarConflict, "a change based on a revision it never had")
	got, err = f.cb.GetCalendar(f.ctx, c.Name)
	require.NoError(t, err)
	assert.Equal(t, "updated", got.Description, "a lost change stores nothing")

	missing := f.calendar("missing")
	_, err = f.ca.PutCalendar(f.ctx, missing, next)
	require.ErrorIs(t, err, backend.ErrCalendarNotFound, "an update of a calendar never stored")
	_, err = f.cb.GetCalendar(f.ctx, missing.Name)
	require.ErrorIs(t, err, backend.ErrCalendarNotFound, "an update stores no new calendar")
}

func testCalendarDelete(t *testing.T, f *calFixture) {
	c := f.calendar("x")
	require.ErrorIs(t, f.ca.DeleteCalendar(f.ctx, c.Name, 0), backend.ErrCalendarNotFound)
	rev := f.put(f.ca, c, 0)
	require.ErrorIs(t, f.cb.DeleteCalendar(f.ctx, c.Name, rev+1000), backend.ErrCalendarConflict)
	require.NoError(t, f.cb.DeleteCalendar(f.ctx, c.Name, rev), "with its revision")
	_, err := f.ca.GetCalendar(f.ctx, c.Name)
	require.ErrorIs(t, err, backend.ErrCalendarNotFound)
	require.ErrorIs(t, f.ca.DeleteCalendar(f.ctx, c.Name, rev), backend.ErrCalendarNotFound, "deleted twice")
	_, err = f.ca.PutCalendar(f.ctx, c, rev)
	require.ErrorIs(t, err, backend.ErrCalendarNotFound, "an update of a deleted calendar does not bring it back")

	// Created again: a new revision, which the old one does not match.
	again := f.put(f.cb, c, 0)
	assert.NotEqual(t, rev, again)
	require.ErrorIs(t, f.ca.DeleteCalendar(f.ctx, c.Name, rev), backend.ErrCalendarConflict, "the revision of before")
	_, err = f.ca.PutCalendar(f.ctx, c, rev)
	require.ErrorIs(t, err, backend.ErrCalendarConflict, "the revision of before")
	require.NoError(t, f.ca.DeleteCalendar(f.ctx, c.Name, 0), "whatever its revision")
	all, err := f.cb.Calendars(f.ctx)
	require.NoError(t, err)
	assert.Empty(t, f.mine(all))
}

// testCalendarWritersRace: eight writers, each on its own backend value, change
// one calendar from the same revision: one wins, the others conflict.
func testCalendarWritersRace(t *testing.T, f *calFixture) {
	const writers = 8
	stores := make([]backend.CalendarStore, writers)
	for i := range stores {
		stores[i] = setup(t, f.newBackend).(backend.CalendarStore)
	}
	for round := range 3 {
		c := f.calendar(fmt.Sprintf("race %d", round))
		base := f.put(f.ca, c, 0)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			revs  = make([]uint64, writers)
			errs  = make([]error, writers)
		)
		for i := range writers {
			wg.Go(func() {
				mine := c
				mine.Description = fmt.Sprintf("writer %d", i)
				<-start
				revs[i], errs[i] = stores[i].PutCalendar(f.ctx, mine, base)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				assert.Equal(t, -1, winner, "round %d: writers %d and %d both won", round, winner, i)
				winner = i
			default:
				assert.ErrorIs(t, err, backend.ErrCalendarConflict, "round %d: writer %d", round, i)
			}
		}
		require.NotEqual(t, -1, winner, "round %d: one writer wins: %v", round, errs)
		got, err := f.cb.GetCalendar(f.ctx, c.Name)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("writer %d", winner), got.Description, "round %d: the winner's change is stored", round)
		assert.Equal(t, revs[winner], got.Revision)
	}
}

// testCalendarLargest stores the largest calendars Check accepts: 10,000
// dates, and MaxCalendarDays ranges with the longest texts.
func testCalendarLargest(t *testing.T, f *calFixture) {
	day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	dates := f.calendar("dates")
	dates.Dates = make([]string, 10_000)
	for i := range dates.Dates {
		dates.Dates[i] = day.AddDate(0, 0, i).Format(time.DateOnly)
	}
	ranges := backend.Calendar{Name: f.prefix + "ranges " + strings.Repeat("<", 64),
		Description: strings.Repeat("<", backend.MaxCalendarText), By: strings.Repeat("&", backend.MaxCalendarText),
		Ranges: make([]backend.DateRange, backend.MaxCalendarDays)}
	for i := range ranges.Ranges {
		d := day.AddDate(0, 0, 2*i).Format(time.DateOnly)
		ranges.Ranges[i] = backend.DateRange{From: d, To: d}
	}
	for _, c := range []backend.Calendar{dates, ranges} {
		require.NoError(t, c.Check())
		c.Revision = f.put(f.ca, c, 0)
		got, err := f.cb.GetCalendar(f.ctx, c.Name)
		require.NoError(t, err)
		sameCalendar(t, c, got, "the largest calendars")
		c.Revision = f.put(f.cb, c, c.Revision)
		all, err := f.ca.Calendars(f.ctx)
		require.NoError(t, err)
		i := slices.IndexFunc(all, func(x backend.Calendar) bool { return x.Name == c.Name })
		require.GreaterOrEqual(t, i, 0, "listed")
		sameCalendar(t, c, all[i], "listed")
		require.NoError(t, f.ca.DeleteCalendar(f.ctx, c.Name, c.Revision))
	}
}

// testCalendarNames: names that are paths, subject wildcards, or long.
func testCalendarNames(t *testing.T, f *calFixture) {
	long := strings.Repeat("é", backend.MaxCalendarNameLen/2)
	names := []string{"../x", "a.b.>", "*", ">", "a b\u00a0c", "$KV.x", "%2F..%00", "a/b\\c", `'; DROP TABLE x; --`, long,
		f.prefix + "x"}
	for _, name := range names {
		if err := f.ca.DeleteCalendar(f.ctx, name, 0); err != nil {
			require.ErrorIs(t, err, backend.ErrCalendarNotFound, "a leftover of an earlier run")
		}
	}
	revs := map[string]uint64{}
	for _, name := range names {
		c := backend.Calendar{Name: name, Dates: []string{"2030-01-01"}, Description: "named " + name}
		require.NoError(t, c.Check(), "%q is a valid name", name)
		revs[name] = f.put(f.ca, c, 0)
	}
	all, err := f.cb.Calendars(f.ctx)
	require.NoError(t, err)
	listed := map[string]uint64{}
	for _, c := range all {
		if _, ok := revs[c.Name]; ok {
			listed[c.Name] = c.Revision
			assert.Equal(t, "named "+c.Name, c.Description)
		}
	}
	assert.Equal(t, revs, listed, "each listed under its own name")
	for _, name := range names {
		got, err := f.cb.GetCalendar(f.ctx, name)
		require.NoError(t, err, "%q", name)
		assert.Equal(t, name, got.Name)
		assert.Equal(t, revs[name], got.Revision, "%q", name)
	}
	for _, name := range names {
		require.NoError(t, f.cb.DeleteCalendar(f.ctx, name, revs[name]), "%q", name)
		_, err := f.ca.GetCalendar(f.ctx, name)
		require.ErrorIs(t, err, backend.ErrCalendarNotFound, "%q is deleted", name)
	}
	all, err = f.cb.Calendars(f.ctx)
	require.NoError(t, err)
	for _, c := range all {
		assert.NotContains(t, revs, c.Name, "deleted")
	}
}

func testCalendarWatch(t *testing.T, f *calFixture) {
	before := f.calendar("before")
	before.Revision = f.put(f.ca, before, 0)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	sets := make(chan []backend.Calendar, 64)
	done := make(chan error, 1)
	go func() {
		done <- f.cb.WatchCalendars(ctx, func(all []backend.Calendar) {
			if !slices.IsSortedFunc(all, func(x, y backend.Calendar) int { return strings.Compare(x.Name, y.Name) }) {
				t.Errorf("a watch delivered calendars out of order")
			}
			sets <- f.mine(all)
		})
	}()
	// await reads the watch's sets until one that ok accepts.
	await := func(what string, ok func([]backend.Calendar) bool) []backend.Calendar {
		t.Helper()
		for {
			select {
			case set := <-sets:
				if ok(set) {
					return set
				}
			case err := <-done:
				require.FailNow(t, "the watch ended", "waiting for %s: %v", what, err)
			case <-f.ctx.Done():
				require.FailNow(t, "the watch never showed it", what)
			}
		}
	}
	select {
	case first := <-sets:
		require.Len(t, first, 1, "the first set is the stored calendars: %+v", first)
		sameCalendar(t, before, first[0], "stored before the watch")
	case err := <-done:
		require.FailNow(t, "the watch ended", "%v", err)
	case <-f.ctx.Done():
		require.FailNow(t, "no first set")
	}

	created := f.calendar("created")
	created.Revision = f.put(f.ca, created, 0)
	set := await("a created calendar", func(s []backend.Calendar) bool { return len(s) == 2 })
	sameCalendar(t, before, set[0], "kept")
	sameCalendar(t, created, set[1], "created")

	created.Dates, created.Description = []string{"2031-12-31"}, "updated"
	created.Revision = f.put(f.cb, created, created.Revision)
	set = await("an updated calendar", func(s []backend.Calendar) bool {
		return len(s) == 2 && s[1].Revision == created.Revision
	})
	sameCalendar(t, created, set[1], "updated")

	require.NoError(t, f.ca.DeleteCalendar(f.ctx, before.Name, before.Revision))
	set = await("a deleted calendar", func(s []backend.Calendar) bool { return len(s) == 1 })
	sameCalendar(t, created, set[0], "the one left")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "a watch ended by its context returns nil")
	case <-f.ctx.Done():
		t.Fatal("the watch did not end with its context")
	}
	require.NoError(t, f.ca.DeleteCalendar(f.ctx, created.Name, 0))
}

func testCalendarInvalid(t *testing.T, f *calFixture) {
	bad := []backend.Calendar{
		{Name: ""},
		{Name: " " + f.prefix + "space"},
		{Name: f.prefix + "ctl\n"},
		{Name: f.prefix + strings.Repeat("x", backend.MaxCalendarNameLen)},
		{Name: f.prefix + "date", Dates: []string{"2030-02-30"}},
		{Name: f.prefix + "range", Ranges: []backend.DateRange{{From: "2030-02-02", To: "2030-02-01"}}},
		{Name: f.prefix + "zone", Zone: "Mars/Olympus"},
		{Name: f.prefix + "weekday", Weekdays: []time.Weekday{7}},
		{Name: f.prefix + "days", Dates: make([]string, backend.MaxCalendarDays+1)},
	}
	for _, c := range bad {
		_, err := f.ca.PutCalendar(f.ctx, c, 0)
		require.ErrorIs(t, err, backend.ErrInvalidCalendar, "%.60q", c.Name)
	}
	ok := f.calendar("ok")
	rev := f.put(f.ca, ok, 0)
	broken := ok
	broken.Yearly = []string{"13-01"}
	_, err := f.cb.PutCalendar(f.ctx, broken, rev)
	require.ErrorIs(t, err, backend.ErrInvalidCalendar, "an invalid change of a stored calendar")
	got, err := f.cb.GetCalendar(f.ctx, ok.Name)
	require.NoError(t, err)
	assert.Equal(t, rev, got.Revision, "the stored one is kept")
	all, err := f.cb.Calendars(f.ctx)
	require.NoError(t, err)
	assert.Len(t, f.mine(all), 1, "nothing invalid is stored")
}

// testCalendarLimit fills the store to MaxCalendars: one more is refused, a
// stored one still changes, and a deleted one makes room.
func testCalendarLimit(t *testing.T, f *calFixture) {
	// A thousand writes: longer than Context allows on a slow replicated store.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	f.ctx = ctx
	all, err := f.ca.Calendars(f.ctx)
	require.NoError(t, err)
	stored := len(all)
	require.LessOrEqual(t, stored, backend.MaxCalendars)
	defer func() {
		// Emptied again, also when the case fails.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		all, err := f.ca.Calendars(ctx)
		require.NoError(t, err)
		for _, c := range f.mine(all) {
			assert.NoError(t, f.ca.DeleteCalendar(ctx, c.Name, 0))
		}
	}()
	var revs []uint64
	for i := stored; i < backend.MaxCalendars; i++ {
		c := backend.Calendar{Name: fmt.Sprintf("%s%04d", f.prefix, i), Weekdays: []time.Weekday{time.Sunday}}
		rev, err := f.ca.PutCalendar(f.ctx, c, 0)
		require.NoError(t, err, "calendar %d of %d", i+1, backend.MaxCalendars)
		revs = append(revs, rev)
	}
	over := backend.Calendar{Name: f.prefix + "over", Weekdays: []time.Weekday{time.Sunday}}
	_, err = f.cb.PutCalendar(f.ctx, over, 0)
	require.ErrorIs(t, err, backend.ErrInvalidCalendar, "one more than MaxCalendars")
	require.Positive(t, len(revs), "the case stored calendars")
	first := backend.Calendar{Name: fmt.Sprintf("%s%04d", f.prefix, stored), Weekdays: []time.Weekday{time.Monday}}
	_, err = f.cb.PutCalendar(f.ctx, first, revs[0])
	require.NoError(t, err, "a stored calendar changes at the limit")
	require.NoError(t, f.cb.DeleteCalendar(f.ctx, first.Name, 0))
	_, err = f.cb.PutCalendar(f.ctx, over, 0)
	require.NoError(t, err, "a deleted calendar makes room")
}
