package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Why reads back the range a missed record of a long outage names, as
// missedRange.why writes it.
func TestParseMissedRange(t *testing.T) {
	first := time.Date(2030, 1, 1, 0, 5, 0, 0, time.UTC)
	until := first.Add(15 * time.Minute)
	for _, r := range []missedRange{{first: first, until: until, count: 15}, {first: first, until: until, count: missedScanLimit, more: true}} {
		from, to, ok := parseMissedRange(r.why())
		assert.True(t, ok, r.why())
		assert.True(t, first.Equal(from), "%v", from)
		assert.True(t, until.Equal(to), "%v", to)
	}
	_, _, ok := parseMissedRange("due while no instance could claim it")
	assert.False(t, ok)
}
