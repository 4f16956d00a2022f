package fleet

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/backend"
)

// A calendar records who asked and the NATS user the server named, within the
// calendar's bound.
func TestCalendarBy(t *testing.T) {
	ctx := context.Background()
	ops := withUser(ctx, "ops-1 (account OPS)")
	assert.Equal(t, "ana", calendarBy(ctx, "ana"))
	assert.Empty(t, calendarBy(ctx, ""), "the scheduler names the replica")
	assert.Equal(t, "ana (NATS user ops-1 (account OPS))", calendarBy(ops, "ana"))
	assert.Equal(t, "NATS user ops-1 (account OPS)", calendarBy(ops, ""))
	long := calendarBy(ops, strings.Repeat("b", backend.MaxCalendarText))
	assert.LessOrEqual(t, len(long), backend.MaxCalendarText)
}
