package modelcheck

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
)

// An instance's view keeps the entries and calendars of the store it wraps.
func TestFaultyKeepsTheStoresCapabilities(t *testing.T) {
	v := faulty(&inst{name: "A"}, memory.New())
	_, entries := v.(backend.EntryStore)
	_, cals := v.(backend.CalendarStore)
	_, pauses := v.(backend.Pauser)
	assert.True(t, entries, "EntryStore")
	assert.True(t, cals, "CalendarStore")
	assert.True(t, pauses, "Pauser")
}
