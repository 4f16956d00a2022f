package fleet_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
)

// percentiles returns p50, p99 and the maximum of ds.
func percentiles(ds []time.Duration) (p50, p99, top time.Duration) {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return at(0.50), at(0.99), ds[len(ds)-1]
}

// TestTriggerAndPauseLatency measures, on one embedded server with three replicas:
// a trigger's accepted reply, a waited trigger's finished reply (a handler that
// returns at once), and the time from a pause request until every replica sees the
// pause. It logs the figures and asserts none: they depend on the machine.
func TestTriggerAndPauseLatency(t *testing.T) {
	f := startFleet(t, fleetSetup{})
	ctx := requestCtx(t)
	const n = 200

	measure := func(wait bool) []time.Duration {
		out := make([]time.Duration, 0, n)
		for range n {
			t0 := time.Now()
			trigger(t, f.client, jobReport, fleet.TriggerRequest{By: "bench", Wait: wait})
			out = append(out, time.Since(t0))
		}
		return out
	}
	accepted := measure(false)
	finished := measure(true)
	require.Eventually(t, func() bool { return f.manualRuns() == 2*n }, 10*time.Second, 5*time.Millisecond)
	p50, p99, top := percentiles(accepted)
	t.Logf("trigger, accepted reply: p50 %v, p99 %v, max %v (%d triggers)", p50, p99, top, n)
	p50, p99, top = percentiles(finished)
	t.Logf("trigger --wait, finished reply: p50 %v, p99 %v, max %v (%d triggers)", p50, p99, top, n)

	const rounds = 20
	var paused, resumed []time.Duration
	for range rounds {
		t0 := time.Now()
		_, err := f.client.Pause(ctx, jobBackup, fleet.PauseRequest{Reason: "bench", By: "bench"})
		require.NoError(t, err)
		paused = append(paused, f.waitView(t, jobBackup, true, t0))
		t0 = time.Now()
		_, err = f.client.Resume(ctx, jobBackup, fleet.ResumeRequest{By: "bench"})
		require.NoError(t, err)
		resumed = append(resumed, f.waitView(t, jobBackup, false, t0))
	}
	p50, p99, top = percentiles(paused)
	t.Logf("pause request → every replica paused: p50 %v, max %v (%d rounds; p99 %v)", p50, top, rounds, p99)
	p50, _, top = percentiles(resumed)
	t.Logf("resume request → every replica running: p50 %v, max %v (%d rounds)", p50, top, rounds)
}
