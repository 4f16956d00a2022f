package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// TestStartReadsTheRunStoreOnce: a scheduler that starts with many jobs reads their
// unfinished runs from the lease bucket in one reading, not one per job (a request
// per job and replica at once overflowed the server's JetStream API queue on a
// cluster), and still adopts a run handed over before it started.
func TestStartReadsTheRunStoreOnce(t *testing.T) {
	for _, c := range []struct {
		name     string
		replicas int
	}{{"R1", 1}, {"R3", 3}} {
		t.Run(c.name, func(t *testing.T) {
			var url string
			if c.replicas == 1 {
				url = natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"}).ClientURL()
			} else {
				url = strings.Join(faultCluster(t).ClientURLs(), ",")
			}
			startReadsOnce(t, url, c.replicas)
		})
	}
}

func startReadsOnce(t *testing.T, url string, replicas int) {
	const jobs = 60
	bucket := "start-reads"
	nc := dial(t, url)
	js := natstest.JetStream(t, nc)
	store, err := kvlease.New(js, kvlease.WithBucket(bucket), kvlease.WithReplicas(replicas))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	b, err := jetstream.NewLeased(js, store, jetstream.WithReplicas(replicas), jetstream.WithSubjectPrefix("start-reads"))
	require.NoError(t, err)
	ctx := ctxT(t, 2*time.Minute)

	// A run handed over (released) by an instance that then stopped, of a slot
	// past the loop's first: only the adoption at Start takes it over.
	name := func(i int) string { return fmt.Sprintf("job-%02d", i) }
	const day = 24 * time.Hour
	slot := time.Now().Truncate(day).Add(-day)
	handOver(ctx, t, store, name(jobs-1), slot, "gone")

	adopted := make(chan scheduler.Run, 1)
	s := newSched(t, b, "a", nil)
	for i := range jobs {
		// No slot of these daily jobs falls within a second of Start: only the
		// reads at start-up reach the bucket.
		require.NoError(t, s.Every(name(i), day, func(_ context.Context, r scheduler.Run) error {
			adopted <- r
			return nil
		}, scheduler.WithMaxLate(time.Second)))
	}

	spy := dial(t, url)
	var subs []*nats.Subscription
	for _, api := range []string{"STREAM.INFO", "DIRECT.GET", "STREAM.MSG.GET"} {
		sub, err := spy.SubscribeSync("$JS.API." + api + ".KV_" + bucket + ".>")
		require.NoError(t, err)
		subs = append(subs, sub)
		sub, err = spy.SubscribeSync("$JS.API." + api + ".KV_" + bucket)
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	require.NoError(t, spy.Flush())

	require.NoError(t, s.Start(ctx))
	select {
	case r := <-adopted:
		assert.Equal(t, name(jobs-1), r.Job)
		assert.True(t, slot.Equal(r.Slot), "the handed-over run's slot %v, got %v", slot, r.Slot)
		assert.Equal(t, 2, r.Attempt, "taken over")
	case <-ctx.Done():
		t.Fatal("the run handed over before Start was not adopted")
	}
	require.NoError(t, nc.Flush())
	require.NoError(t, spy.Flush())
	reads := 0
	for _, sub := range subs {
		n, _, err := sub.Pending()
		require.NoError(t, err)
		reads += n
	}
	// Init's look at the bucket, one reading of every job's runs, the server's
	// clock for the takeover's fence and the takeover's own reads: a handful,
	// where a reading per job is at least one request per job.
	t.Logf("%d jobs: %d reads of the lease bucket from Start to the adoption", jobs, reads)
	assert.Less(t, reads, 12, "the reads at start-up grow with the jobs")
}

// handOver stores job's run of slot as won by token, then released: a run handed
// over by an instance that has stopped since.
func handOver(ctx context.Context, t *testing.T, store backend.RunStore, job string, slot time.Time, token string) {
	t.Helper()
	c := backend.RunClaim{Job: job, Slot: slot, Token: token, Instance: "gone",
		Lease: time.Minute, Deadline: time.Now().Add(time.Hour), Keep: time.Hour}
	res, err := store.Claim(ctx, c)
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeWon, res.Outcome)
	require.NoError(t, store.Release(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}))
}
