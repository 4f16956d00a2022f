package kvlease_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// bucketKey is a key of a bucket.
type bucketKey struct{ bucket, key string }

// put writes a raw value to a key (bucketKey names it), as a writer of this or
// another version would, creating the key (expected last sequence 0), with a TTL
// when ttl > 0.
func put(t *testing.T, js jetstream.JetStream, key bucketKey, v any, ttl time.Duration) {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	m := nats.NewMsg("$KV." + key.bucket + "." + key.key)
	m.Data = data
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(0)}
	if ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	_, err = js.PublishMsg(t.Context(), m, opts...)
	require.NoError(t, err)
}

// eventually claims until the outcome is no longer running (the orphan's lease
// expired on the server), within a bound.
func claimAfterExpiry(t *testing.T, s *kvlease.Store, in backend.RunClaim) backend.ClaimResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := s.Claim(t.Context(), in)
		require.NoError(t, err)
		if res.Outcome != backend.OutcomeRunning {
			return res
		}
		require.True(t, time.Now().Before(deadline), "the orphan lease never expired")
		time.Sleep(50 * time.Millisecond)
	}
}

// Scenario 2: a claimer wrote the lease key and died before the run record. Others
// see it running until the lease expires; then the slot is claimed while its deadline
// allows, or stored late: never forgotten.
func TestOrphanLeaseKeyIsDecided(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	orphan := map[string]any{"v": 1, "token": "dead-" + token(), "instance": "dead", "lease_ms": 1000}

	t.Run("taken while the deadline allows", func(t *testing.T) {
		job, slot := "orphan "+token(), time.UnixMilli(1_900_000_000_000)
		put(t, js, bucketKey{bucket, leaseKey(job, slot)}, orphan, time.Second)
		in := claimOf(job, slot, token(), 2*time.Second)
		running := mustClaim(t, s, in, backend.OutcomeRunning)
		assert.Equal(t, "dead", running.Holder)
		res := claimAfterExpiry(t, s, in)
		assert.Equal(t, backend.OutcomeWon, res.Outcome)
		assert.Equal(t, 1, res.Attempt, "nobody ran it: a first attempt")
	})
	t.Run("stored late past the deadline", func(t *testing.T) {
		job, slot := "orphan "+token(), time.UnixMilli(1_900_000_000_000)
		put(t, js, bucketKey{bucket, leaseKey(job, slot)}, orphan, time.Second)
		in := claimOf(job, slot, token(), 2*time.Second)
		in.Deadline = time.Now().Add(-time.Second)
		res := claimAfterExpiry(t, s, in)
		assert.Equal(t, backend.OutcomeLate, res.Outcome)
		other := claimOf(job, slot, token(), 2*time.Second)
		done := mustClaim(t, s, other, backend.OutcomeDone)
		assert.Equal(t, backend.StatusLate, done.Status, "the late decision is stored")
	})
}

// Scenario 12: fences never go backwards when the bucket is deleted and created
// again (its stream sequences start at 1 again).
func TestFencesGrowAcrossBucketRecreation(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	const b = "kvlease_fence_recreate"
	// A job of its own: the server is the package's, and the bucket outlives the
	// test (go test -count=2 ran into the first run's lease).
	job, slot := "fence "+token(), time.UnixMilli(1_900_000_000_000)
	s1 := newStore(t, js, kvlease.WithBucket(b))
	old := mustClaim(t, s1, claimOf(job, slot, token(), time.Minute), backend.OutcomeWon)
	require.NoError(t, js.DeleteStream(t.Context(), "KV_"+b))

	s2 := newStore(t, js, kvlease.WithBucket(b))
	renewed := mustClaim(t, s2, claimOf(job, slot, token(), time.Minute), backend.OutcomeWon)
	assert.Equal(t, 1, renewed.Attempt, "the run was forgotten with the bucket")
	assert.Greater(t, renewed.Fence, old.Fence, "a holder after the recreation beats the replaced one downstream")
}

// Scenario 12: fences never go backwards across a server restart that empties a
// memory-storage bucket.
func TestFencesGrowAcrossMemoryBucketRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() (*embedded.Server, jetstream.JetStream) {
		srv := natstest.Server(t, embedded.Options{StoreDir: dir})
		return srv, natstest.JetStream(t, natstest.Conn(t, srv))
	}
	job, slot := "fence", time.UnixMilli(1_900_000_000_000)
	srv, js := start()
	s1 := newStore(t, js, kvlease.WithStorage(jetstream.MemoryStorage))
	var old backend.ClaimResult
	for i := range 5 { // a few holders, so the old sequence is not 1
		old = mustClaim(t, s1, claimOf(job, slot.Add(time.Duration(i)*time.Minute), token(), time.Minute), backend.OutcomeWon)
	}
	srv.Shutdown()

	_, js = start()
	s2 := newStore(t, js, kvlease.WithStorage(jetstream.MemoryStorage))
	renewed := mustClaim(t, s2, claimOf(job, slot.Add(4*time.Minute), token(), time.Minute), backend.OutcomeWon)
	assert.Equal(t, 1, renewed.Attempt, "a memory bucket forgets its runs in a restart")
	assert.Greater(t, renewed.Fence, old.Fence, "a holder after the restart beats the replaced one downstream")
}

// Scenario 13: a run record written by a newer version (a state and fields this one
// does not know) reads as done, not as corrupt: claims of the slot keep working on
// the older instances during a rolling upgrade, and nothing is rewritten.
func TestRunRecordFromANewerVersion(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job, slot := "newer "+token(), time.UnixMilli(1_900_000_000_000)
	put(t, js, bucketKey{bucket, runKey(job, slot)}, map[string]any{
		"v": 7, "job": job, "slot_ms": slot.UnixMilli(), "token": "t-new", "instance": "v7", "attempt": 1,
		"fence": 42, "state": "parked", "status": "parked", "lease_ms": 1000, "keep_ms": 3600000,
		"parked_by": "operator", "labels": map[string]string{"team": "ops"},
	}, time.Hour)
	before := lastMsg(t, js, runKey(job, slot))

	res := mustClaim(t, s, claimOf(job, slot, token(), time.Second), backend.OutcomeDone)
	assert.Equal(t, "v7", res.Holder)
	assert.EqualValues(t, "parked", res.Status)
	probe := claimOf(job, slot, token(), time.Second)
	probe.TakeoverOnly = true
	mustClaim(t, s, probe, backend.OutcomeDone)
	active, err := s.Active(t.Context(), job)
	require.NoError(t, err)
	assert.Empty(t, active, "a decided run is not active")
	assert.ErrorIs(t, s.Finish(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: "t-old"}, backend.StatusOK), backend.ErrStaleToken)
	assert.Equal(t, before.Sequence, lastMsg(t, js, runKey(job, slot)).Sequence, "the newer record is left as it is")
}
