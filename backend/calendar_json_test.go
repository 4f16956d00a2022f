package backend_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// The largest calendar the other limits allow, its texts escaped six bytes a
// byte, fits in MaxCalendarJSON.
func TestCalendarLargestFitsJSONBound(t *testing.T) {
	c := backend.Calendar{
		Name: strings.Repeat("<", backend.MaxCalendarNameLen), Zone: "America/Argentina/ComodRivadavia",
		Description: strings.Repeat("\xff", backend.MaxCalendarText), By: strings.Repeat("\xff", backend.MaxCalendarText),
		Weekdays: []time.Weekday{0, 1, 2, 3, 4, 5, 6},
		At:       time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(7*3600+1800))),
		Ranges:   make([]backend.DateRange, backend.MaxCalendarDays), Revision: ^uint64(0),
	}
	for i := range c.Ranges {
		c.Ranges[i] = backend.DateRange{From: "2030-01-01", To: "2030-12-31"}
	}
	require.NoError(t, c.Check())
	data, err := json.Marshal(c)
	require.NoError(t, err)
	assert.Less(t, len(data), backend.MaxCalendarJSON-50_000, "a margin for longer zone names")
	assert.Less(t, backend.MaxCalendarJSON, 1<<20-10_000, "room for headers under NATS's default max payload")
}

func TestCalendarCheckRefusesWhatDoesNotEncode(t *testing.T) {
	c := backend.Calendar{Name: "far", Weekdays: []time.Weekday{time.Sunday}, At: time.Date(10_000, 1, 1, 0, 0, 0, 0, time.UTC)}
	assert.ErrorIs(t, c.Check(), backend.ErrInvalidCalendar)
	c.At = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	assert.NoError(t, c.Check())
}
