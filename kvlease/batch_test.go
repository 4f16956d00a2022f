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

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// requestSpy counts the requests the server receives on the JetStream API and the
// bucket's subjects: messages with a reply subject, each one a round trip for its
// sender. A message published without a reply (an atomic batch's messages before
// its commit, a purge that asks for no answer) is none.
type requestSpy struct {
	nc     *nats.Conn
	subs   []*nats.Subscription
	bucket string
	n      int64
}

func newSpy(t *testing.T, connect func(...nats.Option) (*nats.Conn, error), bucket string) *requestSpy {
	t.Helper()
	nc := natstest.Dial(t, connect)
	sp := &requestSpy{nc: nc, bucket: bucket}
	for _, subj := range []string{"$JS.API.>", "$KV." + bucket + ".>"} {
		sub, err := nc.SubscribeSync(subj)
		require.NoError(t, err)
		sp.subs = append(sp.subs, sub)
	}
	require.NoError(t, nc.Flush())
	return sp
}

// count runs f and returns the requests it sent. conns are every connection the
// test uses: each is flushed before and after f, and the server routes a
// connection's messages to the spy before it answers the flush; a flush of the
// spy's own connection then has them queued on its synchronous subscriptions,
// which count reads.
func (sp *requestSpy) count(t *testing.T, conns []*nats.Conn, f func()) int64 {
	t.Helper()
	settle := func() int64 {
		for _, nc := range conns {
			require.NoError(t, nc.Flush())
		}
		require.NoError(t, sp.nc.Flush())
		for _, sub := range sp.subs {
			n, _, err := sub.Pending()
			require.NoError(t, err)
			for range n {
				m, err := sub.NextMsg(time.Second)
				require.NoError(t, err)
				// Requests about this bucket only: other tests share the server.
				if m.Reply != "" && (strings.Contains(m.Subject, "KV_"+sp.bucket) || strings.HasPrefix(m.Subject, "$KV."+sp.bucket+".")) {
					sp.n++
				}
			}
		}
		return sp.n
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

// On one server, in requests (messages with a reply): a first claim won is two (the
// lease key and the run record, each created by compare-and-set without a read
// first, sent chained in one round trip), one with atomic batches; a claim lost to
// a running holder three (its two writes lose, one read of the lease key); a
// heartbeat one, Finish one (the lease key's purge asks for no answer, or rides in
// the batch); a claim of a finished slot one read.
func TestClaimRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kvlease.Option
		won  int64
	}{
		{"one key at a time", nil, 2},
		{"atomic batches", []kvlease.Option{kvlease.WithAtomicBatches()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := singleServer(t)
			js := natstest.JetStream(t, natstest.Conn(t, srv))
			b := initBucket("rt")
			s := newStore(t, js, append([]kvlease.Option{kvlease.WithBucket(b)}, tc.opts...)...)
			ojs := natstest.JetStream(t, natstest.Conn(t, srv))
			other := newStore(t, ojs, kvlease.WithBucket(b))
			cfg := bucketConfig(t, js, b)
			require.True(t, cfg.AllowAtomicPublish, "Init sets AllowAtomicPublish on a 2.12+ server")
			sp := newSpy(t, srv.Connect, b)
			nc := []*nats.Conn{js.Conn(), ojs.Conn()}

			job := "rt " + token()
			slot, a := time.UnixMilli(2_000), token()
			n := sp.count(t, nc, func() { mustClaim(t, s, claimOf(job, slot, a, time.Minute), backend.OutcomeWon) })
			assert.EqualValues(t, tc.won, n, "a first claim won")
			run, lease := lastOf(t, js, b, runKey(job, slot)), lastOf(t, js, b, leaseKey(job, slot))
			require.NotNil(t, run)
			require.NotNil(t, lease)
			assert.Equal(t, lease.Sequence+1, run.Sequence, "lease key, then run record")

			n = sp.count(t, nc, func() {
				mustClaim(t, other, claimOf(job, slot, token(), time.Minute), backend.OutcomeRunning)
			})
			assert.EqualValues(t, 3, n, "a claim lost to a running holder, with no shared watcher: its two writes sent together (a first claim, chained), one read")

			n = sp.count(t, nc, func() {
				require.NoError(t, s.Heartbeat(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, time.Minute))
			})
			assert.EqualValues(t, 1, n, "a heartbeat: one compare-and-set from the remembered revision")

			n = sp.count(t, nc, func() {
				require.NoError(t, s.Finish(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, backend.StatusOK))
			})
			assert.EqualValues(t, 1, n, "finish: one round trip")
			require.Eventually(t, func() bool {
				return lastOf(t, js, b, leaseKey(job, slot)).Header.Get("KV-Operation") == "PURGE"
			}, 5*time.Second, 5*time.Millisecond, "the lease key is purged")

			n = sp.count(t, nc, func() {
				mustClaim(t, other, claimOf(job, slot, token(), time.Minute), backend.OutcomeDone)
			})
			assert.EqualValues(t, 1, n, "a claim of a finished slot it saw before: one read")
		})
	}
}

// A bucket made without atomic batches (by an older release) gets them at Init. A
// store whose batches the server refuses (the setting turned off under it) writes
// one key at a time, and racing it against a store that writes batches, each slot
// still has exactly one winner: the rolling upgrade's mixed fleet.
func TestBatchUpgradeAndMixedFleet(t *testing.T) {
	t.Parallel()
	srv := singleServer(t)
	js := natstest.JetStream(t, natstest.Conn(t, srv))
	b := initBucket("mixed")
	// One key at a time: this release's default, and what a release before atomic
	// batches does. Its bucket, as an older release made it, has no atomic batches.
	plain := newStore(t, js, kvlease.WithBucket(b))
	rewriteBucket(t, js, b, func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = false })

	batched := newStore(t, natstest.JetStream(t, natstest.Conn(t, srv)), kvlease.WithBucket(b), kvlease.WithAtomicBatches())
	require.True(t, bucketConfig(t, js, b).AllowAtomicPublish, "Init upgrades the bucket")

	job := "mixed " + token()
	const slots = 40
	stores := []*kvlease.Store{plain, batched, plain, batched}
	won := make([]atomic.Int32, slots)
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			for k := range slots {
				res, err := st.Claim(t.Context(), claimOf(job, time.UnixMilli(int64(10_000+k*1000)), token(), time.Minute))
				if !assert.NoError(t, err, "store %d slot %d", i, k) {
					return
				}
				if res.Outcome == backend.OutcomeWon {
					won[k].Add(1)
				} else {
					assert.Equal(t, backend.OutcomeRunning, res.Outcome)
				}
			}
		})
	}
	wg.Wait()
	for k := range slots {
		assert.EqualValues(t, 1, won[k].Load(), "slot %d has one winner", k)
	}

	// Atomic batches turned off under a store that uses them: its claim meets
	// "atomic publish is disabled" and writes one key at a time.
	rewriteBucket(t, js, b, func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = false })
	mustClaim(t, batched, claimOf(job, time.UnixMilli(500_000), token(), time.Minute), backend.OutcomeWon)
	mustClaim(t, plain, claimOf(job, time.UnixMilli(500_000), token(), time.Minute), backend.OutcomeRunning)
}
