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
// replica's RunNow waits, buffered, for as long as the run lasts. An error from
// Trigger means nothing ran (fleet.Client.Trigger), or says that the run goes
// on: a requester must not be told "no answer" for a run that runs later. (It
// was: the replica answered nothing until the run started.) The trigger is
// answered buffered at once, and runs once the run ended; a further one, the
// cap taken, is busy.
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
	r, err = f.client.Trigger(short, "buf", fleet.TriggerRequest{By: "bob"})
	gaveUp := err != nil
	if gaveUp {
		t.Logf("the second trigger: %v", err)
	} else {
		assert.Equal(t, fleet.StateBuffered, r.State, "told it is buffered: %+v", r)
	}
	// One that waits for the end, and gives up first: its error says the run
	// goes on. (The cap of one is taken, so it is busy.)
	short2, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	_, err2 := f.client.Trigger(short2, "buf", fleet.TriggerRequest{By: "eve", Wait: true})
	require.Error(t, err2)
	assert.ErrorIs(t, err2, scheduler.ErrJobBusy, "one buffered already: %v", err2)
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
	if !gaveUp {
		assert.Equal(t, int32(2), manual.Load(), "the buffered trigger ran once the run ended")
	}
	if gaveUp {
		ranAnyway := manual.Load() > 1
		assert.False(t, ranAnyway && !strings.Contains(err.Error(), "buffered"),
			"the trigger answered %q (nothing said it was buffered), and its run ran anyway (%d manual runs)", err, manual.Load())
	}
}
