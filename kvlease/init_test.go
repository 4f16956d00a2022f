package kvlease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/kvlease"
)

// initCounter counts the requests that create or change streams.
type initCounter struct {
	jetstream.JetStream
	creates, updates atomic.Int32
}

func (c *initCounter) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	c.creates.Add(1)
	return c.JetStream.CreateStream(ctx, cfg)
}

func (c *initCounter) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	c.updates.Add(1)
	return c.JetStream.UpdateStream(ctx, cfg)
}

func (c *initCounter) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	c.updates.Add(1)
	return c.JetStream.CreateOrUpdateStream(ctx, cfg)
}

// initBucket makes a bucket name of its own for a test.
func initBucket(prefix string) string { return prefix + "_" + token() }

func bucketConfig(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(t.Context(), "KV_"+bucket)
	require.NoError(t, err)
	return st.CachedInfo().Config
}

// rewriteBucket changes the bucket's stream as another release would.
func rewriteBucket(t *testing.T, js jetstream.JetStream, bucket string, change func(cfg *jetstream.StreamConfig)) {
	t.Helper()
	cfg := bucketConfig(t, js, bucket)
	change(&cfg)
	_, err := js.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
}

// A bucket that already is as the store needs gets no update (N instances sending
// N updates that change nothing at once is what timed out on a fresh cluster), on
// one server and on R3, where the server fills in settings of its own.
func TestInitSendsNoUpdateWhenBucketMatches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		js       func(testing.TB) jetstream.JetStream
	}{
		{"single", 1, singleJS},
		{"R3", 3, clusterJS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js := tc.js(t)
			b := initBucket("nochange")
			newStore(t, js, kvlease.WithBucket(b), kvlease.WithReplicas(tc.replicas))

			counted := &initCounter{JetStream: js}
			s := newStore(t, counted, kvlease.WithBucket(b), kvlease.WithReplicas(tc.replicas))
			assert.Zero(t, counted.updates.Load(), "no update for a bucket that matches")
			assert.Zero(t, counted.creates.Load(), "no create for a bucket that exists")
			mustClaim(t, s, claimOf("job", time.UnixMilli(1_900_000_000_000), token(), 5*time.Second), backend.OutcomeWon)
		})
	}
}

// Stores that start at once all succeed, and between them leave one bucket as the
// store needs it.
func TestInitConcurrent(t *testing.T) {
	t.Parallel()
	c := testCluster(t)
	b := initBucket("together")
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	stores := make([]*kvlease.Store, n)
	gate := make(chan struct{})
	for i := range n {
		s, err := kvlease.New(natstest.JetStream(t, natstest.Dial(t, c.Connect)), kvlease.WithBucket(b), kvlease.WithReplicas(3))
		require.NoError(t, err)
		t.Cleanup(s.Close)
		stores[i] = s
		wg.Go(func() {
			<-gate
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs[i] = s.Init(ctx)
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "store %d", i)
	}
	cfg := bucketConfig(t, natstest.JetStream(t, natstest.Dial(t, c.Connect)), b)
	assert.Equal(t, 3, cfg.Replicas)
	assert.Equal(t, "2", cfg.Metadata[natsutil.LayoutKey])
	slot := time.UnixMilli(1_900_000_000_000)
	mustClaim(t, stores[0], claimOf("job", slot, token(), 5*time.Second), backend.OutcomeWon)
	mustClaim(t, stores[n-1], claimOf("job", slot, token(), 5*time.Second), backend.OutcomeRunning)
}

// A bucket set up by a newer release (a higher layout number, settings of its own)
// is left as it is rather than rewritten to this release's, which would flip-flop
// with the newer instances during a rolling upgrade; the store still works on it.
func TestInitLeavesNewerLayoutAlone(t *testing.T) {
	// "10" is newer than "1" as a number, not as a string.
	for _, newer := range []string{"3", "10"} {
		t.Run("layout "+newer, func(t *testing.T) {
			t.Parallel()
			js := singleJS(t)
			b := initBucket("newer")
			newStore(t, js, kvlease.WithBucket(b))
			rewriteBucket(t, js, b, func(cfg *jetstream.StreamConfig) {
				cfg.Metadata[natsutil.LayoutKey] = newer
				cfg.Metadata["anarchon.newer"] = "yes"
				cfg.Duplicates = 5 * time.Minute
				cfg.Description = "anarchon leases, newer"
			})

			counted := &initCounter{JetStream: js}
			s := newStore(t, counted, kvlease.WithBucket(b))
			assert.Zero(t, counted.updates.Load(), "a newer layout is not rewritten")
			cfg := bucketConfig(t, js, b)
			assert.Equal(t, newer, cfg.Metadata[natsutil.LayoutKey])
			assert.Equal(t, "yes", cfg.Metadata["anarchon.newer"])
			assert.Equal(t, 5*time.Minute, cfg.Duplicates)
			assert.Equal(t, "anarchon leases, newer", cfg.Description)

			slot := time.UnixMilli(1_900_000_000_000)
			a := claimOf("job", slot, token(), 5*time.Second)
			mustClaim(t, s, a, backend.OutcomeWon)
			mustClaim(t, s, claimOf("job", slot, token(), 5*time.Second), backend.OutcomeRunning)
		})
	}
}

// A bucket of an older layout (or none: every bucket from before layouts were kept)
// is brought up to this release's with one update, keeping other metadata; a bucket
// whose settings drifted is brought back too.
func TestInitUpgradesOlderLayout(t *testing.T) {
	for _, older := range []string{"", "0", "x", "1"} {
		t.Run("layout "+older, func(t *testing.T) {
			t.Parallel()
			js := singleJS(t)
			b := initBucket("older")
			newStore(t, js, kvlease.WithBucket(b))
			rewriteBucket(t, js, b, func(cfg *jetstream.StreamConfig) {
				if older == "" {
					delete(cfg.Metadata, natsutil.LayoutKey)
				} else {
					cfg.Metadata[natsutil.LayoutKey] = older
				}
				cfg.Metadata["operator.note"] = "kept"
				cfg.MaxAge = time.Hour // would expire leases: ours to fix
			})

			counted := &initCounter{JetStream: js}
			s := newStore(t, counted, kvlease.WithBucket(b))
			assert.EqualValues(t, 1, counted.updates.Load(), "one update")
			cfg := bucketConfig(t, js, b)
			assert.Equal(t, "2", cfg.Metadata[natsutil.LayoutKey])
			assert.Equal(t, "kept", cfg.Metadata["operator.note"])
			assert.Zero(t, cfg.MaxAge)
			mustClaim(t, s, claimOf("job", time.UnixMilli(1_900_000_000_000), token(), 5*time.Second), backend.OutcomeWon)
		})
	}
}

// A bucket of layout 1 that holds leases or run records (written by the
// previous release, in a format this one cannot read) is refused at Init with an
// error naming the bucket and the way on; once they are purged, it is upgraded.
func TestInitRefusesOlderRecords(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	b := initBucket("layout1")
	newStore(t, js, kvlease.WithBucket(b))
	rewriteBucket(t, js, b, func(cfg *jetstream.StreamConfig) { cfg.Metadata[natsutil.LayoutKey] = "1" })
	kv, err := js.KeyValue(t.Context(), b)
	require.NoError(t, err)
	_, err = kv.Put(t.Context(), "run.am9i.1900000000000", []byte(`{"v":1,"token":"t","attempt":1,"state":"running"}`))
	require.NoError(t, err)

	s, err := kvlease.New(js, kvlease.WithBucket(b))
	require.NoError(t, err)
	err = s.Init(t.Context())
	require.ErrorIs(t, err, kvlease.ErrOlderLayout)
	assert.ErrorContains(t, err, b)
	assert.ErrorContains(t, err, "docs/backends.md")
	assert.Equal(t, "1", bucketConfig(t, js, b).Metadata[natsutil.LayoutKey], "left as it is")

	st, err := js.Stream(t.Context(), "KV_"+b)
	require.NoError(t, err)
	require.NoError(t, st.Purge(t.Context(), jetstream.WithPurgeSubject("$KV."+b+".run.>")))
	s = newStore(t, js, kvlease.WithBucket(b))
	assert.Equal(t, "2", bucketConfig(t, js, b).Metadata[natsutil.LayoutKey])
	mustClaim(t, s, claimOf("job", time.UnixMilli(1_900_000_000_000), token(), 5*time.Second), backend.OutcomeWon)
}
