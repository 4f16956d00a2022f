package backend_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// A calendar at its limit compiles and finds each of its days, and only them;
// one day more is refused.
func TestCalendarOfManyDays(t *testing.T) {
	first := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	c := backend.Calendar{Name: "every other day"}
	for i := range backend.MaxCalendarDays {
		c.Dates = append(c.Dates, first.AddDate(0, 0, 2*i).Format(time.DateOnly))
	}
	d, err := c.Days()
	require.NoError(t, err)
	for i := range 2 * backend.MaxCalendarDays {
		day := first.AddDate(0, 0, i).Add(13 * time.Hour)
		_, excluded := d.Excludes(day, nil)
		require.Equal(t, i%2 == 0, excluded, "%v", day)
	}
	c.Yearly = []string{"01-01"}
	require.ErrorIs(t, c.Check(), backend.ErrInvalidCalendar)
}

// Names follow the rules of job names; what a calendar cannot be is refused
// with what is wrong.
func TestCalendarCheck(t *testing.T) {
	for _, name := range []string{"holidays-gr", "../etc", "a.b.>", "*", "with space", "Ελληνικές αργίες", strings.Repeat("x", backend.MaxCalendarNameLen)} {
		assert.NoError(t, backend.Calendar{Name: name}.Check(), "%q", name)
	}
	for _, c := range []struct {
		cal  backend.Calendar
		want string
	}{
		{backend.Calendar{Name: ""}, "empty"},
		{backend.Calendar{Name: strings.Repeat("x", backend.MaxCalendarNameLen+1)}, "bytes"},
		{backend.Calendar{Name: "a\nb"}, "control"},
		{backend.Calendar{Name: "x", Zone: "Local"}, "zone"},
		{backend.Calendar{Name: "x", Dates: []string{"2026-2-1"}}, "YYYY-MM-DD"},
		{backend.Calendar{Name: "x", Dates: []string{"2026-02-29"}}, "a real day"},
		{backend.Calendar{Name: "x", Yearly: []string{"2-29"}}, "MM-DD"},
		{backend.Calendar{Name: "x", Weekdays: []time.Weekday{-1}}, "weekday"},
		{backend.Calendar{Name: "x", Weekdays: make([]time.Weekday, 8)}, "at most 7"},
		{backend.Calendar{Name: "x", Description: strings.Repeat("d", backend.MaxCalendarText+1)}, "bytes"},
	} {
		err := c.cal.Check()
		require.ErrorIs(t, err, backend.ErrInvalidCalendar, "%+v", c.cal)
		assert.Contains(t, err.Error(), c.want)
	}
}

// Days are counted in the calendar's zone at its extremes: Kiritimati (+14)
// and Pago Pago (-11) are a day apart at every instant.
func TestCalendarZonesAtTheirExtremes(t *testing.T) {
	instant := time.Date(2026, 12, 25, 5, 0, 0, 0, time.UTC)
	for zone, want := range map[string]bool{"Pacific/Kiritimati": true, "Pacific/Pago_Pago": false, "UTC": true, "America/Adak": false} {
		d, err := backend.Calendar{Name: "christmas", Zone: zone, Yearly: []string{"12-25"}}.Days()
		require.NoError(t, err)
		_, got := d.Excludes(instant, nil)
		assert.Equal(t, want, got, zone)
	}
}
