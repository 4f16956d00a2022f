package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// A single server with file storage is restarted while three instances run: they
// reconnect by themselves, no slot runs twice across the restart, and history
// written before it is intact.
func TestServerRestart(t *testing.T) {
	store := t.TempDir()
	srv := natstest.Server(t, embedded.Options{StoreDir: store, Listen: "127.0.0.1:0"})
	url := srv.ClientURL()
	addr := url[len("nats://"):]

	log := newLedger()
	const job, interval = "restart", time.Second
	var scheds []*scheduler.Scheduler
	for i := range 3 {
		s := newSched(t, plainBackend(t, dial(t, url)), fmt.Sprintf("i%d", i), nil)
		require.NoError(t, s.Every(job, interval, log.handler, scheduler.WithJitter(100*time.Millisecond), scheduler.WithMaxLate(900*time.Millisecond)))
		require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
		scheds = append(scheds, s)
	}
	start := time.Now()
	sleepCtx(t, 3500*time.Millisecond)
	before, err := scheds[0].History(ctxT(t, 5*time.Second), job, 100)
	require.NoError(t, err)
	require.NotEmpty(t, before)

	srv.Shutdown()
	down := time.Now()
	sleepCtx(t, 1500*time.Millisecond)
	natstest.Server(t, embedded.Options{StoreDir: store, Listen: addr}) // the same store and port
	up := time.Now()
	sleepCtx(t, 4*time.Second)
	stopAll(t, scheds)
	end := time.Now()

	assert.Empty(t, log.duplicates(job), "no slot runs twice across the restart")
	after := log.count(job, interval, up.Add(2*time.Second), end.Add(-interval))
	assert.Zero(t, after.missed, "instances reconnected by themselves and kept running: %v", after)
	assert.Positive(t, after.ran)

	hist, err := scheds[0].History(ctxT(t, 5*time.Second), job, 100)
	require.NoError(t, err)
	byToken := map[string]scheduler.RunRecord{}
	for _, r := range hist {
		byToken[r.Token] = r
	}
	for _, r := range before {
		got, ok := byToken[r.Token]
		if assert.True(t, ok, "record of slot %v written before the restart is still there", r.Slot) && r.Status.Finished() {
			assert.Equal(t, r.Status, got.Status)
			assert.Equal(t, r.Instance, got.Instance)
		}
	}
	whole := log.count(job, interval, start.Add(time.Millisecond), end.Add(-interval))
	t.Logf("server restart: outage %v; %v over the whole run (slots missed during the outage are expected); %d records before, %d after",
		up.Sub(down).Round(time.Millisecond), whole, len(before), len(hist))
}
