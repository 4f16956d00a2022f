package fleet_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// TestServeFollowsJobs: a job registered after Serve is served and declared in
// the registry; once removed from a replica, the others serve it; once removed
// from every replica, nobody answers for it.
func TestServeFollowsJobs(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A", "B"}, quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const late = "late"
	h := func(context.Context, scheduler.Run) error { return nil }
	for _, r := range f.replicas {
		require.NoError(t, r.s.Every(late, time.Hour, h, scheduler.WithStartAt(f.start)))
	}
	declaredOn := func(want ...string) func() bool {
		return func() bool {
			fl, err := f.client.Jobs(ctx)
			if err != nil {
				return false
			}
			var on []string
			for _, j := range fl.Jobs {
				if j.Name == late {
					on = j.Replicas
				}
			}
			var registered []string
			for _, reg := range fl.Registered {
				for _, d := range reg.Jobs {
					if d.Name == late {
						registered = append(registered, reg.Instance)
					}
				}
			}
			slices.Sort(registered)
			return slices.Equal(on, want) && slices.Equal(registered, want)
		}
	}
	require.Eventually(t, declaredOn("A", "B"), 10*time.Second, 20*time.Millisecond, "the jobs view and the registry show the job")
	require.Eventually(t, func() bool {
		_, err := f.client.History(ctx, late, 5)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the job's endpoints are served")
	rec, err := f.client.Trigger(ctx, late, fleet.TriggerRequest{Wait: true})
	require.NoError(t, err)
	assert.Equal(t, scheduler.StatusOK, rec.Run.Status)

	require.NoError(t, f.replicas[0].s.RemoveJob(late))
	require.Eventually(t, declaredOn("B"), 10*time.Second, 20*time.Millisecond, "A no longer declares it")
	for range 10 {
		rec, err := f.client.Trigger(ctx, late, fleet.TriggerRequest{Wait: true})
		require.NoError(t, err, "B serves the job A removed")
		assert.Equal(t, "B", rec.Run.Instance)
	}

	require.NoError(t, f.replicas[1].s.RemoveJob(late))
	var last error
	require.Eventually(t, func() bool {
		_, last = f.client.History(ctx, late, 5)
		return errors.Is(last, fleet.ErrNoReplica)
	}, 10*time.Second, 20*time.Millisecond, "no replica declares it: %v", last)
	_, err = f.client.History(ctx, jobReport, 5)
	require.NoError(t, err, "the other jobs are still served")
}
