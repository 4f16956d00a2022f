package backend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// Days are counted in zones at their extremes: UTC+14, UTC-11 and a zone
// whose offset moves by two hours. The same instant is a different day in each.
func TestCalendarExtremeZones(t *testing.T) {
	at := time.Date(2026, 12, 25, 10, 30, 0, 0, time.UTC)
	for zone, day := range map[string]string{
		"Pacific/Kiritimati": "2026-12-26", // 00:30 the next day
		"Pacific/Pago_Pago":  "2026-12-24", // 23:30 the day before
		"Antarctica/Troll":   "2026-12-25",
	} {
		c := backend.Calendar{Name: "z", Zone: zone, Dates: []string{day}}
		d, err := c.Days()
		require.NoError(t, err, zone)
		rule, ok := d.Excludes(at, nil)
		assert.True(t, ok, zone)
		assert.Equal(t, day, rule, zone)
		c.Zone = ""
		d, err = c.Days()
		require.NoError(t, err)
		_, ok = d.Excludes(at, nil)
		assert.Equal(t, day == "2026-12-25", ok, "%s: no zone counts in UTC", zone)
	}
	// Troll keeps summer time (UTC+2) in the austral winter.
	c := backend.Calendar{Name: "t", Zone: "Antarctica/Troll", Dates: []string{"2026-07-01"}}
	d, err := c.Days()
	require.NoError(t, err)
	_, ok := d.Excludes(time.Date(2026, 6, 30, 22, 30, 0, 0, time.UTC), nil)
	assert.True(t, ok, "00:30 on July 1st in Troll")
}

// The size limits hold at their edge, counting a range once; duplicates and
// overlaps are accepted and merged; a range over centuries covers them all.
func TestCalendarSizesAtTheEdge(t *testing.T) {
	day := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	var dates []string
	for i := range backend.MaxCalendarDays {
		dates = append(dates, day.AddDate(0, 0, i%10_000).Format(time.DateOnly)) // each twice
	}
	c := backend.Calendar{Name: "big", Dates: dates}
	d, err := c.Days()
	require.NoError(t, err, "20,000 dates, duplicates included")
	_, ok := d.Excludes(day.AddDate(0, 0, 9_999).Add(time.Hour), nil)
	assert.True(t, ok)
	_, ok = d.Excludes(day.AddDate(0, 0, 10_000).Add(time.Hour), nil)
	assert.False(t, ok)
	c.Yearly = []string{"02-29"}
	require.ErrorIs(t, c.Check(), backend.ErrInvalidCalendar, "20,001 entries")

	ages := backend.Calendar{Name: "ages", Ranges: []backend.DateRange{{From: "0001-01-01", To: "9999-12-31"}, {From: "2000-01-01", To: "2000-01-02"}}}
	d, err = ages.Days()
	require.NoError(t, err)
	for _, y := range []int{1, 1600, 2026, 9999} {
		rule, ok := d.Excludes(time.Date(y, 6, 1, 0, 0, 0, 0, time.UTC), nil)
		assert.True(t, ok, "year %d", y)
		assert.Equal(t, "0001-01-01..9999-12-31", rule)
	}
	for _, bad := range []string{"2026-02-29", "2026-13-01", "10000-01-01", "2026-1-01", " 2026-01-01"} {
		assert.ErrorIs(t, backend.Calendar{Name: "x", Dates: []string{bad}}.Check(), backend.ErrInvalidCalendar, bad)
	}
	for _, bad := range []string{"02-30", "2-29", "13-01", "00-10"} {
		assert.ErrorIs(t, backend.Calendar{Name: "x", Yearly: []string{bad}}.Check(), backend.ErrInvalidCalendar, bad)
	}
	for _, name := range []string{">", "*", ".", "a b", "a.b.>", "..", "/"} {
		assert.NoError(t, backend.ValidateCalendarName(name), "%q: a store must encode it in its keys", name)
	}
	for _, name := range []string{"", " a", "a\n", string([]byte{0xff}), fmt.Sprintf("%0257d", 0)} {
		assert.ErrorIs(t, backend.ValidateCalendarName(name), backend.ErrInvalidCalendar, "%q", name)
	}
}
