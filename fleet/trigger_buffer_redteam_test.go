package fleet_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// A fleet trigger of a buffer-one job while its run is in progress: the
// replica's RunNow waits, buffered, for as long as the run lasts, and answers
// nothing until its run starts. A requester that gives up meanwhile is told
// there was no answer, as if nothing was done, and the run it asked for still
// runs later. An error from Trigger means nothing ran (fleet.Client.Trigger),
// or says that the run goes on: one of the two must hold.
func TestRedteamTriggerBufferedGivesUp(t *testing.T) {
	release := make(chan struct{})
	var manual atomic.Int32
	var once sync.Once
	f := startFleet(t, fleetSetup{
		instances: []string{"A", "B"}, quiet: true,
		jobs: func(string) []testJob {
			j := every("buf", time.Hour)
			j.Opts = []scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapBufferOne)}
			return []testJob{j}
		},
		handler: func(ctx context.Context, r scheduler.Run) error {
			if !r.Manual {
				return nil
			}
			first := false
			once.Do(func() { first = true })
			manual.Add(1)
			if first {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		},
	})
	ctx := requestCtx(t)
	r, err := f.client.Trigger(ctx, "buf", fleet.TriggerRequest{By: "ana"})
	require.NoError(t, err)
	require.Equal(t, fleet.StateAccepted, r.State)

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = f.client.Trigger(short, "buf", fleet.TriggerRequest{By: "bob"})
	gaveUp := err != nil
	if gaveUp {
		t.Logf("the second trigger: %v", err)
	}
	close(release)

	// Wait until nothing of the job is left unfinished: the buffered slot ran
	// (or was withdrawn).
	deadline := time.Now().Add(20 * time.Second)
	for {
		active, err := f.client.Active(ctx, "buf")
		require.NoError(t, err)
		if len(active.Runs) == 0 && manual.Load() >= 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the job's runs end: %+v", active)
		time.Sleep(50 * time.Millisecond)
	}
	if gaveUp {
		ranAnyway := manual.Load() > 1
		assert.False(t, ranAnyway && !strings.Contains(err.Error(), "buffered"),
			"the trigger answered %q (nothing said it was buffered), and its run ran anyway (%d manual runs)", err, manual.Load())
	}
}
