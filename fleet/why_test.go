package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// A replica says what was decided for a slot as its scheduler does: a manual
// run with who asked and its record, an entry's, a slot still to come, an
// instant before the start bound with the first slot. Bad requests are refused
// with the scheduler's reason.
func TestWhy(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, instances: []string{"A", "B"}, jobs: func(string) []testJob {
		return []testJob{every(jobReport, time.Hour), {Name: jobBackup, Schedule: backupSchedule(t)}, {Name: jobFeeds}}
	}})
	ctx := requestCtx(t)
	tr, err := f.client.Trigger(ctx, jobBackup, fleet.TriggerRequest{By: "ana", Wait: true})
	require.NoError(t, err)
	w, err := f.client.Why(ctx, jobBackup, fleet.WhyRequest{Slot: tr.Slot})
	require.NoError(t, err)
	assert.Contains(t, []string{"A", "B"}, w.Instance)
	assert.True(t, tr.Slot.Equal(w.Slot))
	assert.False(t, w.Open)
	assert.True(t, w.Reached)
	require.Len(t, w.Steps, 1, "%+v", w.Steps)
	st := w.Steps[0]
	assert.Equal(t, string(scheduler.WhyManual), st.Kind)
	assert.Regexp(t, `^manual run requested by ana: ran on `+tr.Instance+` as attempt 1: ended ok( in \S+)?$`, st.Text)
	assert.Equal(t, scheduler.StatusOK, st.Status)
	require.NotNil(t, st.Run, "the record the step says")
	assert.Equal(t, tr.Token, st.Run.Token)

	first := f.start.Truncate(time.Hour)
	if first.Before(f.start) {
		first = first.Add(time.Hour)
	}
	w, err = f.client.Why(ctx, jobReport, fleet.WhyRequest{Slot: first})
	require.NoError(t, err)
	require.Len(t, w.Steps, 1)
	assert.Equal(t, string(scheduler.WhyNotDue), w.Steps[0].Kind)
	assert.True(t, w.Open)
	w, err = f.client.Why(ctx, jobReport, fleet.WhyRequest{Slot: first.Add(-2 * time.Hour)})
	require.NoError(t, err)
	require.Len(t, w.Steps, 1)
	assert.Equal(t, string(scheduler.WhyNotASlot), w.Steps[0].Kind)
	assert.Contains(t, w.Steps[0].Text, "the nearest slot is "+first.UTC().Format(time.RFC3339)+" (the start bound ")

	_, err = f.client.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "eu-west", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.NoError(t, err)
	tr, err = f.client.TriggerEntry(ctx, jobFeeds, fleet.TriggerEntryRequest{ID: "eu-west", By: "bo", Wait: true})
	require.NoError(t, err)
	w, err = f.client.Why(ctx, jobFeeds, fleet.WhyRequest{Entry: "eu-west", Slot: tr.Slot})
	require.NoError(t, err)
	assert.Equal(t, "eu-west", w.Entry)
	require.Len(t, w.Steps, 1)
	assert.Equal(t, string(scheduler.WhyManual), w.Steps[0].Kind)
	require.NotNil(t, w.Steps[0].Run)
	assert.Equal(t, "eu-west", w.Steps[0].Run.Entry)

	for _, c := range []struct {
		job  string
		in   fleet.WhyRequest
		want error
	}{
		{jobReport, fleet.WhyRequest{}, fleet.ErrBadRequest},
		{jobReport, fleet.WhyRequest{Slot: first.Add(time.Microsecond)}, fleet.ErrBadRequest},
		{jobFeeds, fleet.WhyRequest{Entry: "a\x00b", Slot: first}, fleet.ErrBadRequest},
		{jobFeeds, fleet.WhyRequest{Entry: "nope", Slot: first}, fleet.ErrEntryNotFound},
		{"nope", fleet.WhyRequest{Slot: first}, fleet.ErrUnknownJob},
	} {
		_, err := f.client.Why(ctx, c.job, c.in)
		assert.ErrorIs(t, err, c.want, "%s %+v", c.job, c.in)
	}
}
