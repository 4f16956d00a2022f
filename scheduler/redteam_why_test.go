package scheduler_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/scheduler"
)

// A paused schedule entry runs no slot and records none: Why says so, before
// the slot and after it, instead of promising a paused record or blaming a
// fleet that was down.
func TestWhyPausedEntryRecordsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
			return s.Declare("tenants", func(context.Context, scheduler.Run) error { return nil })
		}})
		s := f.Replica(0).Scheduler()
		_, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Minute, Paused: true})
		require.NoError(t, err)
		slot := t0.Add(2 * time.Minute)
		anarchontest.Advance(time.Second)
		r := whyOf(t, s, "tenants", slot, "acme")
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyNotDue}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "; the schedule entry is paused now (changed by replica-1 at 2000-01-01T00:00:00Z): unless it is resumed by then, the slot is not run, and leaves no record")

		anarchontest.Advance(5 * time.Minute)
		recs, err := f.EntryHistory(t.Context(), "tenants", "acme")
		require.NoError(t, err)
		require.Empty(t, recs, "a paused entry records nothing")
		r = whyOf(t, s, "tenants", slot, "acme")
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyNone}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "no decision stored: the schedule entry is paused since 2000-01-01T00:00:00Z (changed by replica-1), before this slot, and a paused entry's slots are not run and leave no record", r.Steps[0].Text)
		assert.False(t, r.Open)
	})
}
