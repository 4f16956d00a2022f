package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// TestRedTeamCorruptRunOfOneJobBlocksNoAdoption: junk published by someone else
// onto one job's run key ($KV.<bucket>.run.<tok>.<ms>) must not keep a starting
// scheduler from adopting the runs handed over in the OTHER jobs (ActiveJobs
// promises: "A job whose runs could not be read is left out of the map and named in
// the error; the others are in it"), on a single-replica bucket (the batched direct
// get path) as on the listing path.
func TestRedTeamCorruptRunOfOneJobBlocksNoAdoption(t *testing.T) {
	url := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"}).ClientURL()
	const bucket = "rt-corrupt"
	nc := dial(t, url)
	js := natstest.JetStream(t, nc)
	store, err := kvlease.New(js, kvlease.WithBucket(bucket))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	b, err := jetstream.NewLeased(js, store, jetstream.WithSubjectPrefix("rt-corrupt"))
	require.NoError(t, err)
	ctx := ctxT(t, time.Minute)

	const day = 24 * time.Hour
	slot := time.Now().Truncate(day).Add(-day)
	// The bad job's run key, then junk on it from someone else.
	handOver(ctx, t, store, "bad", slot, "bad-token")
	kv, err := js.KeyValue(ctx, bucket)
	require.NoError(t, err)
	keys, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	var runKey string
	for k := range keys.Keys() {
		if strings.HasPrefix(k, "run.") {
			runKey = k
		}
	}
	require.NotEmpty(t, runKey)
	_, err = kv.Put(ctx, runKey, []byte("not a run record"))
	require.NoError(t, err)
	// A good job's run handed over: only the adoption at Start takes it over.
	handOver(ctx, t, store, "good", slot, "good-token")

	adopted := make(chan scheduler.Run, 2)
	s := newSched(t, b, "a", nil)
	for _, job := range []string{"bad", "good"} {
		require.NoError(t, s.Every(job, day, func(_ context.Context, r scheduler.Run) error {
			adopted <- r
			return nil
		}, scheduler.WithMaxLate(time.Second)))
	}
	require.NoError(t, s.Start(ctx))
	wait := ctxT(t, 20*time.Second)
	select {
	case r := <-adopted:
		assert.Equal(t, "good", r.Job)
		assert.Equal(t, 2, r.Attempt, "taken over")
	case <-wait.Done():
		t.Fatal("the good job's run handed over before Start was not adopted: one job's corrupt run record blocks every job's adoption")
	}
}
