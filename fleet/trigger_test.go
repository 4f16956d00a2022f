package fleet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// trigger triggers job until a replica accepts it: a 429 (the replica runs as many
// manual runs as it allows) is asked again.
func trigger(t testing.TB, c *fleet.Client, job string, in fleet.TriggerRequest) fleet.TriggerReply {
	t.Helper()
	for {
		r, err := c.Trigger(requestCtx(t), job, in)
		if errors.Is(err, fleet.ErrTooManyManualRuns) {
			continue
		}
		require.NoError(t, err)
		return r
	}
}

// TestTriggerAnswersOnceStarted: accepted means the run was recorded and its
// handler starts: the reply names the run, which history shows; a trigger beyond
// the replica's bound of manual runs is refused with 429 and runs nothing; it runs
// again once one has ended.
func TestTriggerAnswersOnceStarted(t *testing.T) {
	release := make(chan struct{})
	f := startFleet(t, fleetSetup{
		instances: []string{"A"},
		quiet:     true,
		jobs: func(string) []testJob {
			j := every(jobReport, time.Hour)
			j.Opts = []scheduler.JobOption{scheduler.WithMaxManualRuns(1)}
			return []testJob{j}
		},
		handler: func(ctx context.Context, run scheduler.Run) error {
			if run.Manual {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		},
	})
	ctx := requestCtx(t)

	r, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "ana"})
	require.NoError(t, err)
	assert.Equal(t, fleet.StateAccepted, r.State)
	assert.NotEmpty(t, r.Token)
	assert.False(t, r.Slot.IsZero())
	h, err := f.client.History(ctx, jobReport, 10)
	require.NoError(t, err)
	require.Len(t, h.Runs, 1, "accepted: the run is recorded")
	assert.Equal(t, r.Token, h.Runs[0].Token)
	assert.Equal(t, scheduler.StatusRunning, h.Runs[0].Status)

	// Refused, not waiting: a trigger that waited would wait for the run that
	// waits for release.
	_, err = f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "bo", Wait: true})
	require.ErrorIs(t, err, fleet.ErrTooManyManualRuns)
	require.ErrorIs(t, err, scheduler.ErrTooManyManualRuns)
	var se *fleet.ServiceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, fleet.CodeTooManyManualRuns, se.Code)
	assert.Contains(t, se.Description, "1 in progress on A, at most 1 (WithMaxManualRuns)")
	assert.Equal(t, 1, f.manualRuns(), "the refused trigger ran nothing")

	close(release)
	r2 := trigger(t, f.client, jobReport, fleet.TriggerRequest{By: "bo", Wait: true})
	assert.Equal(t, fleet.StateFinished, r2.State)
	assert.Equal(t, scheduler.StatusOK, r2.Run.Status)
	assert.Equal(t, r2.Token, r2.Run.Token, "the finished reply names the run the accepted one did")
	assert.Equal(t, 2, f.manualRuns())
}

// TestTriggerOfABusyJob: a trigger of a job that forbids overlap while a
// scheduled run of it goes on (on any replica) is answered 409 (ErrJobBusy), with
// or without wait, and runs nothing.
func TestTriggerOfABusyJob(t *testing.T) {
	release := make(chan struct{})
	var scheduled atomic.Int32
	f := startFleet(t, fleetSetup{
		jobs: func(string) []testJob {
			return []testJob{{Name: jobReport, Schedule: scheduler.IntervalSchedule{Interval: time.Second},
				Opts: []scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(time.Minute)}}}
		},
		handler: func(ctx context.Context, r scheduler.Run) error {
			if !r.Manual {
				scheduled.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		},
	})
	defer close(release)
	require.Eventually(t, func() bool { return scheduled.Load() > 0 }, 10*time.Second, 10*time.Millisecond, "a scheduled run holds the job")
	for _, wait := range []bool{false, true} {
		_, err := f.client.Trigger(requestCtx(t), jobReport, fleet.TriggerRequest{Wait: wait})
		require.ErrorIs(t, err, fleet.ErrJobBusy)
		require.ErrorIs(t, err, scheduler.ErrJobBusy)
		var se *fleet.ServiceError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, fleet.CodeJobBusy, se.Code)
		assert.Contains(t, se.Description, "forbids overlap")
	}
	assert.Zero(t, f.manualRuns())
	assert.Equal(t, int32(1), scheduled.Load(), "the overlap-forbidden job runs one slot at a time")
}
