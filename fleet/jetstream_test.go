package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// leasedBackend is one replica's JetStream backend with a kvlease store, on its own
// connection, as a real replica has.
func leasedBackend(t testing.TB, nc *nats.Conn) backend.Backend {
	t.Helper()
	js := natstest.JetStream(t, nc)
	runs, err := kvlease.New(js)
	require.NoError(t, err)
	t.Cleanup(runs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, runs.Init(ctx))
	b, err := jetstream.NewLeased(js, runs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// TestOnJetStream runs the fleet over the real store: three replicas, each with its
// own connection, JetStream backend and kvlease store; pauses travel through the KV
// bucket's watch.
func TestOnJetStream(t *testing.T) {
	f := startFleet(t, fleetSetup{server: embedded.Options{}, backendFor: leasedBackend, quiet: true})
	ctx := requestCtx(t)

	r, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "ana", Wait: true})
	require.NoError(t, err)
	require.NotNil(t, r.Run)
	assert.Equal(t, scheduler.StatusOK, r.Run.Status)
	assert.Equal(t, 1, f.manualRuns())
	h, err := f.client.History(ctx, jobReport, 0)
	require.NoError(t, err)
	require.Len(t, h.Runs, 1)
	assert.Equal(t, "ana", h.Runs[0].RequestedBy)

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	for _, rep := range fl.Replicas {
		assert.Equal(t, "jetstream", rep.Backend)
		assert.True(t, rep.PauseSupported, "LeasedBackend stores pauses in the kvlease bucket")
	}

	const n = 200
	var accepted, finished []time.Duration
	for _, wait := range []bool{false, true} {
		for range n {
			t0 := time.Now()
			trigger(t, f.client, jobReport, fleet.TriggerRequest{By: "bench", Wait: wait})
			if wait {
				finished = append(finished, time.Since(t0))
			} else {
				accepted = append(accepted, time.Since(t0))
			}
		}
	}
	require.Eventually(t, func() bool { return f.manualRuns() == 1+2*n }, 10*time.Second, 5*time.Millisecond)
	p50, p99, top := percentiles(accepted)
	t.Logf("JetStream: trigger, accepted reply: p50 %v, p99 %v, max %v (%d triggers)", p50, p99, top, n)
	p50, p99, top = percentiles(finished)
	t.Logf("JetStream: trigger --wait, finished reply (manual run recorded in the job's stream): p50 %v, p99 %v, max %v (%d triggers)", p50, p99, top, n)

	var paused, resumed []time.Duration
	for range 10 {
		t0 := time.Now()
		_, err := f.client.Pause(ctx, jobReport, fleet.PauseRequest{Reason: "migrating", By: "ana"})
		require.NoError(t, err)
		paused = append(paused, f.waitView(t, jobReport, true, t0))
		t0 = time.Now()
		res, err := f.client.Resume(ctx, jobReport, fleet.ResumeRequest{By: "ana"})
		require.NoError(t, err)
		assert.False(t, res.NotPaused, "the pause is read in the bucket before it is removed")
		resumed = append(resumed, f.waitView(t, jobReport, false, t0))
	}
	p50, _, top = percentiles(paused)
	t.Logf("JetStream: pause request → every replica paused: p50 %v, max %v (10 rounds)", p50, top)
	p50, _, top = percentiles(resumed)
	t.Logf("JetStream: resume request → every replica running: p50 %v, max %v (10 rounds)", p50, top)

	_, err = f.client.Pause(ctx, jobBackup, fleet.PauseRequest{Reason: "short", For: "1s"})
	require.NoError(t, err)
	f.waitView(t, jobBackup, true, time.Time{})
	require.Eventually(t, func() bool {
		for _, r := range f.replicas {
			if _, ok := r.s.Paused(jobBackup); ok {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "a pause with for ends by itself")
}
