package kvlease_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// requestSpy counts the requests the server receives on the JetStream API and the
// bucket's subjects: messages with a reply subject, each one a round trip for its
// sender. A batch's messages before its commit carry none.
type requestSpy struct {
	nc *nats.Conn
	n  atomic.Int64
}

func newSpy(t *testing.T, connect func(...nats.Option) (*nats.Conn, error), bucket string) *requestSpy {
	t.Helper()
	nc, err := connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	sp := &requestSpy{nc: nc}
	for _, subj := range []string{"$JS.API.>", "$KV." + bucket + ".>"} {
		_, err := nc.Subscribe(subj, func(m *nats.Msg) {
			// Requests about this bucket only: other tests share the server.
			if m.Reply != "" && (strings.Contains(m.Subject, "KV_"+bucket) || strings.HasPrefix(m.Subject, "$KV."+bucket+".")) {
				sp.n.Add(1)
			}
		})
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	return sp
}

// count runs f and returns the requests it sent. conns are every connection the
// test uses: each is flushed before and after f, and the server routes a
// connection's messages to the spy before it answers the flush; a flush of the
// spy's own connection then makes sure it has read them.
func (sp *requestSpy) count(t *testing.T, conns []*nats.Conn, f func()) int64 {
	t.Helper()
	settle := func() int64 {
		for _, nc := range conns {
			require.NoError(t, nc.Flush())
		}
		require.NoError(t, sp.nc.Flush())
		return sp.n.Load()
	}
	before := settle()
	f()
	return settle() - before
}

// lastOf reads a key's last message in bucket b.
func lastOf(t *testing.T, js jetstream.JetStream, b, key string) *jetstream.RawStreamMsg {
	t.Helper()
	st, err := js.Stream(t.Context(), "KV_"+b)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), "$KV."+b+"."+key)
	require.NoError(t, err)
	return m
}

// On one server, with atomic batches: a first claim won is two round trips (both
// keys in one read, both written in one batch), a lost claim one, Finish one, a
// heartbeat one; the lease key's revision the claim remembered is the stored one.
func TestBatchedPathRoundTrips(t *testing.T) {
	t.Parallel()
	srv := singleServer(t)
	js := jsOn(t, srv.Connect)
	b := initBucket("rt")
	s := newStore(t, js, kvlease.WithBucket(b))
	ojs := jsOn(t, srv.Connect)
	other := newStore(t, ojs, kvlease.WithBucket(b))
	cfg := bucketConfig(t, js, b)
	require.True(t, cfg.AllowAtomicPublish, "Init sets AllowAtomicPublish on a 2.12+ server")
	sp := newSpy(t, srv.Connect, b)
	nc := []*nats.Conn{js.Conn(), ojs.Conn()}

	job := "rt " + token()
	// Warm the store's estimate of the server's clock, as any running store has.
	mustClaim(t, s, claimOf(job, time.UnixMilli(1_000), token(), time.Minute), scheduler.OutcomeWon)

	slot, a := time.UnixMilli(2_000), token()
	n := sp.count(t, nc, func() { mustClaim(t, s, claimOf(job, slot, a, time.Minute), scheduler.OutcomeWon) })
	assert.EqualValues(t, 2, n, "a first claim won: one read of both keys, one atomic batch")
	run, lease := lastOf(t, js, b, runKey(job, slot)), lastOf(t, js, b, leaseKey(job, slot))
	require.NotNil(t, run)
	require.NotNil(t, lease)
	assert.Equal(t, lease.Sequence+1, run.Sequence, "lease key and run record stored together")

	n = sp.count(t, nc, func() {
		mustClaim(t, other, claimOf(job, slot, token(), time.Minute), scheduler.OutcomeRunning)
	})
	assert.EqualValues(t, 1, n, "a claim lost to a running holder: one read")

	n = sp.count(t, nc, func() { require.NoError(t, s.Heartbeat(t.Context(), job, slot, a, time.Minute)) })
	assert.EqualValues(t, 1, n, "a heartbeat: one compare-and-set from the remembered revision")

	n = sp.count(t, nc, func() { require.NoError(t, s.Finish(t.Context(), job, slot, a, scheduler.StatusOK)) })
	assert.EqualValues(t, 1, n, "finish: the run record and the lease key's purge in one batch")
	assert.Equal(t, "PURGE", lastOf(t, js, b, leaseKey(job, slot)).Header.Get("KV-Operation"), "the lease key is purged")

	n = sp.count(t, nc, func() {
		mustClaim(t, other, claimOf(job, slot, token(), time.Minute), scheduler.OutcomeDone)
	})
	assert.EqualValues(t, 1, n, "a claim of a finished slot: one read")
}

// A bucket made without atomic batches (by an older release) gets them at Init. A
// store whose batches the server refuses (the setting turned off under it) writes
// one key at a time, and racing it against a store that writes batches, each slot
// still has exactly one winner: the rolling upgrade's mixed fleet.
func TestBatchUpgradeAndMixedFleet(t *testing.T) {
	t.Parallel()
	srv := singleServer(t)
	js := jsOn(t, srv.Connect)
	b := initBucket("mixed")
	old := newStore(t, js, kvlease.WithBucket(b))
	rewriteBucket(t, js, b, func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = false })

	// The old-style store: its first claim meets "atomic publish is disabled" and
	// falls back to two compare-and-sets, and keeps to them.
	job := "mixed " + token()
	mustClaim(t, old, claimOf(job, time.UnixMilli(1_000), token(), time.Minute), scheduler.OutcomeWon)
	require.False(t, bucketConfig(t, js, b).AllowAtomicPublish)

	// A new store's Init turns atomic batches on again.
	batched := newStore(t, jsOn(t, srv.Connect), kvlease.WithBucket(b))
	require.True(t, bucketConfig(t, js, b).AllowAtomicPublish, "Init upgrades the bucket")

	const slots = 40
	stores := []*kvlease.Store{old, batched, old, batched}
	won := make([]atomic.Int32, slots)
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			for k := range slots {
				res, err := st.Claim(t.Context(), claimOf(job, time.UnixMilli(int64(10_000+k*1000)), token(), time.Minute))
				if !assert.NoError(t, err, "store %d slot %d", i, k) {
					return
				}
				if res.Outcome == scheduler.OutcomeWon {
					won[k].Add(1)
				} else {
					assert.Equal(t, scheduler.OutcomeRunning, res.Outcome)
				}
			}
		})
	}
	wg.Wait()
	for k := range slots {
		assert.EqualValues(t, 1, won[k].Load(), "slot %d has one winner", k)
	}
}
