package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// A replica previews a job's slots, or an entry's, as its scheduler does: the
// start bound, a pause that reaches every replica, the default and the clamp
// of N. Bad requests are refused with the scheduler's reason.
func TestPreview(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, instances: []string{"A"}, jobs: func(string) []testJob {
		return []testJob{every(jobReport, time.Hour), {Name: jobBackup, Schedule: backupSchedule(t)}, {Name: jobFeeds}}
	}})
	ctx := requestCtx(t)
	p, err := f.client.Preview(ctx, jobReport, fleet.PreviewRequest{N: 3})
	require.NoError(t, err)
	assert.Equal(t, "A", p.Instance)
	assert.Equal(t, 3, p.N)
	require.Len(t, p.Slots, 3)
	first := f.start.Truncate(time.Hour)
	if first.Before(f.start) {
		first = first.Add(time.Hour)
	}
	for i, s := range p.Slots {
		assert.True(t, first.Add(time.Duration(i)*time.Hour).Equal(s.Slot), "slot %d: %v", i, s.Slot)
		assert.True(t, s.Runs)
	}
	require.Len(t, p.Slots[0].Notes, 1)
	assert.Equal(t, string(scheduler.PreviewStartBound), p.Slots[0].Notes[0].Kind, "the start bound")

	p, err = f.client.Preview(ctx, jobBackup, fleet.PreviewRequest{})
	require.NoError(t, err)
	assert.Equal(t, fleet.DefaultPreviewSlots, p.N)
	assert.Len(t, p.Slots, fleet.DefaultPreviewSlots, "a job whose name is no subject token")
	p, err = f.client.Preview(ctx, jobReport, fleet.PreviewRequest{N: scheduler.MaxPreviewSlots + 5})
	require.NoError(t, err)
	assert.Equal(t, scheduler.MaxPreviewSlots, p.N, "clamped")
	assert.Len(t, p.Slots, scheduler.MaxPreviewSlots, "more than one message holds")

	since := time.Now()
	_, err = f.client.Pause(ctx, jobReport, fleet.PauseRequest{Reason: "migration", By: "ops", Until: first.Add(90 * time.Minute)})
	require.NoError(t, err)
	f.waitView(t, jobReport, true, since)
	p, err = f.client.Preview(ctx, jobReport, fleet.PreviewRequest{N: 3})
	require.NoError(t, err)
	var runs []bool
	for _, s := range p.Slots {
		runs = append(runs, s.Runs)
	}
	assert.Equal(t, []bool{false, false, true}, runs, "the two slots before the pause's end are paused")
	assert.Equal(t, string(scheduler.PreviewPaused), p.Slots[1].Notes[0].Kind)
	assert.Contains(t, p.Slots[1].Notes[0].Text, "job paused by ops until ")
	assert.Contains(t, p.Slots[1].Notes[0].Text, ": migration")

	_, err = f.client.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "eu-west", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.NoError(t, err)
	p, err = f.client.Preview(ctx, jobFeeds, fleet.PreviewRequest{Entry: "eu-west", N: 2})
	require.NoError(t, err)
	assert.Equal(t, "eu-west", p.Entry)
	assert.Len(t, p.Slots, 2)

	for _, c := range []struct {
		job  string
		in   fleet.PreviewRequest
		want error
	}{
		{jobReport, fleet.PreviewRequest{N: -1}, fleet.ErrBadRequest},
		{jobFeeds, fleet.PreviewRequest{}, fleet.ErrBadRequest},
		{jobFeeds, fleet.PreviewRequest{Entry: "a\x00b"}, fleet.ErrBadRequest},
		{jobFeeds, fleet.PreviewRequest{Entry: "nope"}, fleet.ErrEntryNotFound},
	} {
		_, err := f.client.Preview(ctx, c.job, c.in)
		assert.ErrorIs(t, err, c.want, "%s %+v", c.job, c.in)
	}

	// JSON carries no time after the year 9999: the list stops before it.
	p, err = f.client.Preview(ctx, jobBackup, fleet.PreviewRequest{From: time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC), N: 5})
	require.NoError(t, err)
	assert.Len(t, p.Slots, 2, "03:00 on 30 and 31 December 9999")
	assert.True(t, p.Cut)
}
