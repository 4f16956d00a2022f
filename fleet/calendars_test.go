package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// holidays is a calendar as an operator writes one.
func holidays() fleet.Calendar {
	return fleet.Calendar{Name: "holidays", Zone: "Europe/Athens", Dates: []string{"2026-12-25", "2026-12-26"},
		Ranges: []fleet.DateRange{{From: "2026-08-01", To: "2026-08-15"}}, Yearly: []string{"01-01"},
		Weekdays: []string{"sat", "Sunday"}, Description: "closed"}
}

// TestCalendarsOverTheFleet: an operator creates a calendar through one
// replica, reads it back whole and in the list, replaces it on its revision
// and deletes it; each refusal says which it is and matches the scheduler's
// sentinel, not an entry's.
func TestCalendarsOverTheFleet(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds})
	ctx, c := requestCtx(t), f.client

	list, err := c.Calendars(ctx)
	require.NoError(t, err)
	assert.Empty(t, list.Calendars)
	assert.NotNil(t, list.Calendars, "an empty list, not null")

	put, err := c.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: holidays(), By: "ana"})
	require.NoError(t, err)
	assert.Contains(t, []string{"A", "B", "C"}, put.Instance)
	assert.NotZero(t, put.Calendar.Revision)
	assert.Equal(t, "ana", put.Calendar.By)
	assert.Equal(t, []string{"saturday", "sunday"}, put.Calendar.Weekdays, "weekdays named in full")
	assert.False(t, put.Calendar.At.IsZero())
	stored, err := f.backend.GetCalendar(context.Background(), "holidays")
	require.NoError(t, err)
	assert.Equal(t, []time.Weekday{time.Saturday, time.Sunday}, stored.Weekdays)
	assert.Equal(t, put.Calendar.Revision, stored.Revision)

	_, err = c.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: holidays()})
	require.ErrorIs(t, err, fleet.ErrCalendarExists)
	assert.ErrorIs(t, err, scheduler.ErrCalendarExists)
	assert.NotErrorIs(t, err, fleet.ErrEntryExists, "a calendar's refusal is not an entry's")

	got, err := c.Calendar(ctx, "holidays")
	require.NoError(t, err)
	assert.Equal(t, put.Calendar, got.Calendar)

	list, err = c.Calendars(ctx)
	require.NoError(t, err)
	require.Len(t, list.Calendars, 1)
	assert.Equal(t, fleet.CalendarSummary{Name: "holidays", Zone: "Europe/Athens", Dates: 2, Ranges: 1, Yearly: 1,
		Weekdays: []string{"saturday", "sunday"}, Description: "closed", By: "ana", At: put.Calendar.At, Revision: put.Calendar.Revision},
		list.Calendars[0])

	changed := holidays()
	changed.Dates = append(changed.Dates, "2026-12-31")
	up, err := c.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: changed, Rev: put.Calendar.Revision, By: "bo"})
	require.NoError(t, err)
	assert.Greater(t, up.Calendar.Revision, put.Calendar.Revision)
	assert.Len(t, up.Calendar.Dates, 3)

	_, err = c.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: holidays(), Rev: put.Calendar.Revision})
	require.ErrorIs(t, err, fleet.ErrCalendarConflict)
	assert.ErrorIs(t, err, scheduler.ErrCalendarConflict)
	_, err = c.DeleteCalendar(ctx, fleet.DeleteCalendarRequest{Name: "holidays", Rev: put.Calendar.Revision})
	require.ErrorIs(t, err, fleet.ErrCalendarConflict)
	now, err := f.backend.GetCalendar(context.Background(), "holidays")
	require.NoError(t, err)
	assert.Equal(t, up.Calendar.Revision, now.Revision, "nothing stored by a refusal")

	del, err := c.DeleteCalendar(ctx, fleet.DeleteCalendarRequest{Name: "holidays", Rev: up.Calendar.Revision, By: "bo"})
	require.NoError(t, err)
	assert.Equal(t, "holidays", del.Name)
	_, err = c.Calendar(ctx, "holidays")
	require.ErrorIs(t, err, fleet.ErrCalendarNotFound)
	assert.ErrorIs(t, err, scheduler.ErrCalendarNotFound)
	assert.NotErrorIs(t, err, fleet.ErrEntryNotFound)
	var se *fleet.ServiceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, fleet.CodeEntryNotFound, se.Code)
	_, err = c.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: holidays(), Rev: 1})
	assert.ErrorIs(t, err, fleet.ErrCalendarNotFound, "an update of a calendar not stored")
}

// TestEntryCalendarsOnTheWire: an entry's calendars are stored as sent and
// read back; a bad one is refused.
func TestEntryCalendarsOnTheWire(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds, instances: []string{"A"}})
	ctx, c := requestCtx(t), f.client
	added, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "acme",
		EntrySpec: fleet.EntrySpec{Every: "1h", Calendars: []string{"holidays", "strikes"}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"holidays", "strikes"}, added.Entry.Calendars)
	stored := storedEntries(t, f.backend, jobFeeds)
	require.Len(t, stored, 1)
	assert.Equal(t, []string{"holidays", "strikes"}, stored[0].Calendars)
	got, err := c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "acme"})
	require.NoError(t, err)
	assert.Equal(t, []string{"holidays", "strikes"}, got.Entry.Calendars)

	for _, cals := range [][]string{{"a", "a"}, {" x"}, {""}, {strings.Repeat("c", backend.MaxCalendarNameLen+1)}} {
		_, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "bad", EntrySpec: fleet.EntrySpec{Every: "1h", Calendars: cals}})
		assert.ErrorIs(t, err, fleet.ErrBadRequest, "%q", cals)
	}
	assert.Len(t, storedEntries(t, f.backend, jobFeeds), 1)
}

// TestCalendarsRefuseHostileInput: a request for a calendar that cannot be is
// refused with what is wrong, and nothing is stored.
func TestCalendarsRefuseHostileInput(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, instances: []string{"A"}})
	ctx, c := requestCtx(t), f.client
	many := make([]string, backend.MaxCalendarDays+1)
	for i := range many {
		many[i] = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format(time.DateOnly)
	}
	for _, tc := range []struct {
		name string
		edit func(*fleet.Calendar)
		by   string
		want string
	}{
		{"empty name", func(c *fleet.Calendar) { c.Name = "" }, "", "empty name"},
		{"control in name", func(c *fleet.Calendar) { c.Name = "a\x00b" }, "", "control character"},
		{"space around name", func(c *fleet.Calendar) { c.Name = " a" }, "", "leading or trailing space"},
		{"long name", func(c *fleet.Calendar) { c.Name = strings.Repeat("n", backend.MaxCalendarNameLen+1) }, "", "at most 256"},
		{"unknown zone", func(c *fleet.Calendar) { c.Zone = "Mars/Olympus" }, "", `unknown zone "Mars/Olympus"`},
		{"local zone", func(c *fleet.Calendar) { c.Zone = "Local" }, "", "unknown zone"},
		{"bad date", func(c *fleet.Calendar) { c.Dates = []string{"2026-02-30"} }, "", `date "2026-02-30"`},
		{"date no date", func(c *fleet.Calendar) { c.Dates = []string{"<script>"} }, "", "want YYYY-MM-DD"},
		{"range backwards", func(c *fleet.Calendar) { c.Ranges = []fleet.DateRange{{From: "2026-02-02", To: "2026-02-01"}} }, "", "ends before it starts"},
		{"bad yearly", func(c *fleet.Calendar) { c.Yearly = []string{"13-01"} }, "", "want MM-DD"},
		{"bad weekday", func(c *fleet.Calendar) { c.Weekdays = []string{"caturday"} }, "", `weekday "caturday"`},
		{"too many weekdays", func(c *fleet.Calendar) { c.Weekdays = strings.Fields("mon tue wed thu fri sat sun mon") }, "", "at most 7"},
		{"too many days", func(c *fleet.Calendar) { c.Dates = many }, "", "at most 20000"},
		{"long description", func(c *fleet.Calendar) { c.Description = strings.Repeat("d", backend.MaxCalendarText+1) }, "", "at most 1024"},
		{"long by", func(*fleet.Calendar) {}, strings.Repeat("b", scheduler.MaxPauseText+1), "by must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cal := holidays()
			tc.edit(&cal)
			_, err := c.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: cal, By: tc.by})
			require.ErrorIs(t, err, fleet.ErrBadRequest)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	for _, name := range []string{"", "a\nb"} {
		_, err := c.Calendar(ctx, name)
		assert.ErrorIs(t, err, fleet.ErrBadRequest, "get %q", name)
		_, err = c.DeleteCalendar(ctx, fleet.DeleteCalendarRequest{Name: name})
		assert.ErrorIs(t, err, fleet.ErrBadRequest, "delete %q", name)
	}
	all, err := f.backend.Calendars(context.Background())
	require.NoError(t, err)
	assert.Empty(t, all, "nothing stored")
}

// withoutCalendars is a backend that stores no calendars.
type withoutCalendars struct{ backend.Backend }

// TestCalendarsNotSupported: on a backend without calendars, each request is
// refused with 501, matching scheduler.ErrCalendarsNotSupported.
func TestCalendarsNotSupported(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, instances: []string{"A"}, backendFor: func(testing.TB, *nats.Conn) backend.Backend {
		return withoutCalendars{memory.New()}
	}})
	ctx, c := requestCtx(t), f.client
	_, err := c.Calendars(ctx)
	require.ErrorIs(t, err, fleet.ErrNotSupported)
	assert.ErrorIs(t, err, scheduler.ErrCalendarsNotSupported)
	_, err = c.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: holidays()})
	assert.ErrorIs(t, err, scheduler.ErrCalendarsNotSupported)
	_, err = c.DeleteCalendar(ctx, fleet.DeleteCalendarRequest{Name: "holidays"})
	assert.ErrorIs(t, err, scheduler.ErrCalendarsNotSupported)
}

// TestHistoryFiltersExcluded: excluded is a status a history request filters
// by.
func TestHistoryFiltersExcluded(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, instances: []string{"A"}})
	r, err := f.client.HistoryOf(requestCtx(t), jobReport, fleet.HistoryRequest{Status: []scheduler.Status{scheduler.StatusExcluded}})
	require.NoError(t, err)
	assert.Empty(t, r.Runs)
}

// TestCalendarsByRoleOnARealServer: on a nats-server whose users have the
// roles' permissions, a viewer lists and reads calendars, only an operator
// stores or deletes one; the server refuses the others, and nothing changes.
// The replica runs on the memory backend: the role fleet's kvlease store
// (startRoleFleet) is to be tried as well once it stores calendars.
func TestCalendarsByRoleOnARealServer(t *testing.T) {
	s := startAuthServer(t, false)
	replicaSeen := newViolations()
	f := startFleet(t, fleetSetup{quiet: true, instances: []string{"A"}, dial: dialAs(s, fleet.RoleReplica, replicaSeen)})
	ctx := requestCtx(t)
	clients, seen := map[fleet.Role]*fleet.Client{}, map[fleet.Role]*violations{}
	for _, role := range fleet.Roles {
		seen[role] = newViolations()
		c, err := fleet.NewClient(natstest.Dial(t, dialAs(s, role, seen[role])))
		require.NoError(t, err)
		clients[role] = c
	}
	op := clients[fleet.RoleOperator]
	put, err := op.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: holidays(), By: "ana"})
	require.NoError(t, err)
	for _, role := range []fleet.Role{fleet.RoleViewer, fleet.RoleOperator} {
		list, err := clients[role].Calendars(ctx)
		require.NoError(t, err, role)
		assert.Len(t, list.Calendars, 1, role)
		got, err := clients[role].Calendar(ctx, "holidays")
		require.NoError(t, err, role)
		assert.Equal(t, put.Calendar.Revision, got.Calendar.Revision, role)
	}
	for _, role := range []fleet.Role{fleet.RoleViewer, fleet.RoleReplica} {
		c, v := clients[role], seen[role]
		changed := holidays()
		changed.Description = "by " + string(role)
		_, err := c.PutCalendar(short(t), fleet.PutCalendarRequest{Calendar: changed, Rev: put.Calendar.Revision})
		require.Error(t, err, role)
		v.refused(t, "Publish", "anarchon.CALENDARS.PUT")
		_, err = c.DeleteCalendar(short(t), fleet.DeleteCalendarRequest{Name: "holidays"})
		require.Error(t, err, role)
		v.refused(t, "Publish", "anarchon.CALENDARS.DELETE")
	}
	stored, err := f.backend.GetCalendar(context.Background(), "holidays")
	require.NoError(t, err)
	assert.Equal(t, put.Calendar.Revision, stored.Revision, "nothing changed")
	_, err = op.DeleteCalendar(ctx, fleet.DeleteCalendarRequest{Name: "holidays", Rev: put.Calendar.Revision})
	require.NoError(t, err)
	assert.Empty(t, replicaSeen.all(), "the replica was refused nothing")
}
