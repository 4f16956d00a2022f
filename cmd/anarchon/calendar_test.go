package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
)

func (f *testFleet) storedCalendar(t *testing.T, name string) (backend.Calendar, error) {
	t.Helper()
	return f.backend.GetCalendar(context.Background(), name)
}

// TestCalendarSetShowListRemove: set creates a calendar, then changes the
// flags given on it as read; a change based on an old revision stores
// nothing; rm removes it.
func TestCalendarSetShowListRemove(t *testing.T) {
	f := startFleet(t, nil)
	srv := []string{"--server", f.url}
	r := anarchon(t, append(srv, "calendar", "ls")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no calendars\n", r.stdout)

	r = anarchon(t, append(srv, "calendar", "set", "holidays", "--zone", "Europe/Athens", "--date", "2026-12-25,2026-12-26",
		"--range", "2026-08-01..2026-08-15", "--yearly", "01-01", "--weekday", "sat", "--weekday", "Sunday",
		"--description", "office closed", "--by", "ana")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^created calendar "holidays" on [ABC]: 2 dates, 1 range, 1 yearly day, every saturday, sunday \(Europe/Athens\), revision \d+; every replica follows within a second\n$`, r.stdout)
	first, err := f.storedCalendar(t, "holidays")
	require.NoError(t, err)
	assert.Equal(t, []string{"2026-12-25", "2026-12-26"}, first.Dates)
	assert.Equal(t, []time.Weekday{time.Saturday, time.Sunday}, first.Weekdays)
	assert.Equal(t, "ana", first.By)

	r = anarchon(t, append(srv, "calendar", "ls")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 2, r.stdout)
	assert.Equal(t, "NAME ZONE DATES RANGES YEARLY WEEKDAYS REV CHANGED DESCRIPTION", ls[0])
	assert.Regexp(t, `^holidays Europe/Athens 2 1 1 sat,sun `+strconv.FormatUint(first.Revision, 10)+` (now|\S+ ago) office closed$`, ls[1])
	r = anarchon(t, append(srv, "calendar", "list", "-o", "wide")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^holidays Europe/Athens 2 1 1 sat,sun \d+ ana \S+ office closed$`, strings.Join(lines(r.stdout), "\n"))

	r = anarchon(t, append(srv, "calendar", "show", "holidays")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "calendar     holidays\n")
	assert.Contains(t, r.stdout, "dates        (2) 2026-12-25 2026-12-26\n")
	assert.Contains(t, r.stdout, "ranges       (1) 2026-08-01..2026-08-15\n")
	assert.Contains(t, r.stdout, "weekdays     saturday, sunday\n")
	assert.Contains(t, r.stdout, "changed by   ana\n")

	// set changes what it is given on the calendar as read.
	r = anarchon(t, append(srv, "calendar", "set", "holidays", "--date", "2026-12-31")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^updated calendar "holidays" on [ABC]: 1 date, 1 range, 1 yearly day,`, r.stdout)
	second, err := f.storedCalendar(t, "holidays")
	require.NoError(t, err)
	assert.Equal(t, []string{"2026-12-31"}, second.Dates)
	assert.Equal(t, first.Ranges, second.Ranges, "the ranges kept")
	assert.Equal(t, "Europe/Athens", second.Zone, "the zone kept")
	r = anarchon(t, append(srv, "calendar", "set", "holidays", "--weekday=")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	second, err = f.storedCalendar(t, "holidays")
	require.NoError(t, err)
	assert.Empty(t, second.Weekdays, "an empty flag empties its list")

	// A change based on the first revision is refused: nothing stored.
	rev := strconv.FormatUint(first.Revision, 10)
	r = anarchon(t, append(srv, "calendar", "set", "holidays", "--date", "2027-01-01", "--rev", rev)...)
	oneErrorLine(t, r, `anarchon: calendar set "holidays": the calendar was changed by another writer`)
	r = anarchon(t, append(srv, "calendar", "rm", "holidays", "--rev", rev)...)
	oneErrorLine(t, r, "changed by another writer")
	r = anarchon(t, append(srv, "calendar", "set", "holidays", "--date", "2027-01-01", "--rev", "0")...)
	oneErrorLine(t, r, `anarchon: calendar set "holidays": a calendar of that name exists`)
	now, err := f.storedCalendar(t, "holidays")
	require.NoError(t, err)
	assert.Equal(t, second, now)

	r = anarchon(t, append(srv, "--json", "calendar", "show", "holidays")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var got fleet.CalendarReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, second.Revision, got.Calendar.Revision)

	r = anarchon(t, append(srv, "calendar", "delete", "holidays")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^removed calendar "holidays" on [ABC];`, r.stdout)
	_, err = f.storedCalendar(t, "holidays")
	require.ErrorIs(t, err, backend.ErrCalendarNotFound)
	r = anarchon(t, append(srv, "calendar", "show", "holidays")...)
	oneErrorLine(t, r, `anarchon: calendar show "holidays": no calendar has that name (replica `)
	r = anarchon(t, append(srv, "calendar", "set", "holidays", "--date", "2027-01-01", "--rev", "5")...)
	oneErrorLine(t, r, `no calendar has that name`)
}

// TestCalendarBadInput: what the command can tell is refused as usage, what
// the replica refuses says why; nothing is stored.
func TestCalendarBadInput(t *testing.T) {
	f := startFleet(t, nil)
	srv := []string{"--server", f.url}
	for _, args := range [][]string{
		{"calendar"},
		{"calendar", "frob"},
		{"calendar", "ls", "x"},
		{"calendar", "show"},
		{"calendar", "show", "a", "b"},
		{"calendar", "show", " a"},
		{"calendar", "set", "x"},
		{"calendar", "set", "x", "--rev", "2"},
		{"calendar", "set", "x", "--range", "2026-01-01"},
		{"calendar", "set", "x", "--weekday", "caturday"},
		{"calendar", "rm", "x", "--date", "2026-01-01"},
	} {
		r := anarchon(t, append(srv, args...)...)
		assert.Equal(t, exitUsage, r.code, "%q", args)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q: one line", args)
		assert.Regexp(t, `\(anarchon [^)]+\)\n$`, r.stderr, "%q: what to do", args)
	}
	for _, tc := range []struct{ flag, value, want string }{
		{"--date", "2026-02-30", `date "2026-02-30"`},
		{"--zone", "Mars/Olympus", `unknown zone "Mars/Olympus"`},
		{"--yearly", "1-1", `yearly day "1-1"`},
		{"--range", "2026-02-02..2026-02-01", "range 2026-02-02..2026-02-01 ends before it starts"},
	} {
		r := anarchon(t, append(srv, "calendar", "set", "x", tc.flag, tc.value)...)
		oneErrorLine(t, r, `anarchon: calendar set "x": invalid calendar: calendar "x": `+tc.want)
		assert.Regexp(t, `\(replica [ABC]\)\n$`, r.stderr)
	}
	all, err := f.backend.Calendars(context.Background())
	require.NoError(t, err)
	assert.Empty(t, all)
}

// TestScheduleCalendars: an entry names calendars with --calendar, show says
// which, set replaces them; excluded is a status history filters by.
func TestScheduleCalendars(t *testing.T) {
	f := feedsFleet(t)
	srv := []string{"--server", f.url}
	r := anarchon(t, append(srv, "schedule", "add", "feeds", "acme", "--every", "1h", "--calendar", "holidays", "--calendar", "strikes")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	e, err := f.stored(t, "acme")
	require.NoError(t, err)
	assert.Equal(t, []string{"holidays", "strikes"}, e.Calendars)
	r = anarchon(t, append(srv, "schedule", "show", "feeds", "acme")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "calendars     holidays, strikes\n")
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "acme", "--calendar", "weekends")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	e, err = f.stored(t, "acme")
	require.NoError(t, err)
	assert.Equal(t, []string{"weekends"}, e.Calendars)
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "acme", "--calendar=")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	e, err = f.stored(t, "acme")
	require.NoError(t, err)
	assert.Empty(t, e.Calendars)
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "acme", "--calendar", "a,a")...)
	oneErrorLine(t, r, `calendar "a" named twice`)

	r = anarchon(t, append(srv, "history", "feeds", "--status", "excluded")...)
	require.Equal(t, exitOK, r.code, r.stderr)
}
