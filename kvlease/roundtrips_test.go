package kvlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	js "github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
)

// roundTrips counts the requests (messages with a reply subject: one round trip
// each for its sender) that a server of its own receives for f.
type roundTrips struct {
	spy   *nats.Conn
	subs  []*nats.Subscription
	conns []*nats.Conn
}

func (r *roundTrips) count(t *testing.T, what string, f func()) int64 {
	t.Helper()
	drain := func() int64 {
		for _, nc := range append(r.conns, r.spy) {
			require.NoError(t, nc.Flush())
		}
		var reqs int64
		for _, sub := range r.subs {
			n, _, err := sub.Pending()
			require.NoError(t, err)
			reqs += drainSub(t, sub, n)
		}
		return reqs
	}
	drain()
	f()
	n := drain()
	t.Logf("%s: %d requests", what, n)
	return n
}

// drainSub reads n messages of sub and counts those with a reply subject.
func drainSub(t *testing.T, sub *nats.Subscription, n int) int64 {
	var reqs int64
	for range n {
		m, err := sub.NextMsg(time.Second)
		require.NoError(t, err)
		if m.Reply != "" {
			reqs++
		}
	}
	return reqs
}

// The requests of each operation on one server (file storage), the stores'
// records written into a job stream (jetstream.NewLeased), with the figures of
// docs/benchmarks.md's claim section beside them. Run with -v to read them:
//
//	go test ./kvlease/ -run TestRoundTrips -v
func TestRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Options{})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	job := "trips"
	mk := func() (*kvlease.Store, *nats.Conn) {
		nc := natstest.Conn(t, srv)
		j := natstest.JetStream(t, nc)
		s := newStore(t, j)
		h, err := js.NewLeased(j, s)
		require.NoError(t, err)
		require.NoError(t, h.Init(t.Context()))
		require.NoError(t, h.PrepareJob(t.Context(), backend.JobLimits{Job: job, Schedule: "every 1m", Interval: time.Minute,
			MaxLate: time.Minute, Retention: backend.Retention{Size: 50}}))
		return s, nc
	}
	a, anc := mk()
	b, bnc := mk()
	spy := natstest.Conn(t, srv)
	rt := &roundTrips{spy: spy, conns: []*nats.Conn{anc, bnc}}
	// Requests go to the API, the keys and the job's stream; deliveries to the
	// watchers' inboxes are none of them.
	for _, subj := range []string{"$JS.API.>", "$KV.>", "anarchon.>"} {
		sub, err := spy.SubscribeSync(subj)
		require.NoError(t, err)
		rt.subs = append(rt.subs, sub)
	}
	keep := backend.Retention{Size: 50}
	claim := func(k int, p backend.OverlapPolicy) backend.RunClaim {
		in := bufferClaim(job, k, p, 0)
		in.Retention = keep
		return in
	}
	// Each store's first claim reads the server's clock; b's watcher starts.
	mustClaim(t, a, claim(0, backend.OverlapAllow), backend.OutcomeWon)
	mustClaim(t, b, claim(0, backend.OverlapAllow), backend.OutcomeRunning)
	w, err := b.WatchRun(t.Context(), job, slotAt(0))
	require.NoError(t, err)
	_ = w

	won := claim(1, backend.OverlapAllow)
	assert.EqualValues(t, 2, rt.count(t, "win (benchmarks: 2)", func() { mustClaim(t, a, won, backend.OutcomeWon) }))
	assert.LessOrEqual(t, rt.count(t, "lost, holder running, shared watcher running (benchmarks: 2)", func() {
		mustClaim(t, b, claim(1, backend.OverlapAllow), backend.OutcomeRunning)
	}), int64(3))
	assert.EqualValues(t, 1, rt.count(t, "heartbeat (benchmarks: 1)", func() {
		require.NoError(t, a.Heartbeat(t.Context(), won.Key(), time.Minute))
	}))
	assert.EqualValues(t, 2, rt.count(t, "settle: run record, record (benchmarks: finish 1 + the scheduler's SaveResult 1)", func() {
		require.NoError(t, a.Settle(t.Context(), backend.Settlement{Key: won.Key(), Status: backend.StatusOK, Retention: keep}))
	}))
	require.Eventually(t, func() bool {
		return rt.count(t, "claim of the finished slot after the watcher saw the finish (benchmarks: 0.15)", func() {
			mustClaim(t, b, claim(1, backend.OverlapAllow), backend.OutcomeDone)
		}) == 0
	}, 5*time.Second, 10*time.Millisecond)

	retried := claim(2, backend.OverlapAllow)
	mustClaim(t, a, retried, backend.OutcomeWon)
	assert.LessOrEqual(t, rt.count(t, "retry stored (benchmarks: 2, without the record)", func() {
		require.NoError(t, a.Retry(t.Context(), retried.Key(), 0, time.Hour))
	}), int64(3))
	assert.LessOrEqual(t, rt.count(t, "retry claimed by another replica (benchmarks: 6)", func() {
		res := mustClaim(t, b, claim(2, backend.OverlapAllow), backend.OutcomeWon)
		assert.True(t, res.Retried)
	}), int64(6))

	dead := claim(3, backend.OverlapAllow)
	dead.Lease = time.Second
	mustClaim(t, a, dead, backend.OutcomeWon)
	require.Eventually(t, func() bool {
		runs, err := b.Active(t.Context(), job)
		require.NoError(t, err)
		for _, r := range runs {
			if r.Slot.Equal(dead.Slot) {
				return !r.Live
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	rt.count(t, "takeover: read, lease key, run record, the lost record", func() {
		res := mustClaim(t, b, claim(3, backend.OverlapAllow), backend.OutcomeWon)
		assert.Equal(t, 2, res.Attempt)
	})

	one := backend.OverlapBufferOne
	first := claim(10, one)
	rt.count(t, "buffer-one: first claim, nothing held (before: 6)", func() { mustClaim(t, a, first, backend.OutcomeWon) })
	second := claim(11, one)
	rt.count(t, "buffer-one: first claim buffered behind a run (before: 7)", func() { mustClaim(t, b, second, backend.OutcomeBuffered) })
	rt.count(t, "buffer-one: claim of the buffered slot while the run holds the job (before: 5)", func() {
		mustClaim(t, b, claim(11, one), backend.OutcomeBuffered)
	})
	rt.count(t, "buffer-one: skipped, the buffer full (before: —)", func() { mustClaim(t, b, claim(12, one), backend.OutcomeOverlap) })
	require.NoError(t, a.Finish(t.Context(), first.Key(), backend.StatusOK))
	rt.count(t, "buffer-one: claim of the buffered slot once the run ended (before: 10)", func() {
		mustClaim(t, b, claim(11, one), backend.OutcomeWon)
	})
	third := claim(13, one)
	mustClaim(t, a, third, backend.OutcomeBuffered)
	rt.count(t, "buffer-one: withdrawal (before: 6)", func() { require.NoError(t, a.Finish(t.Context(), third.Key(), backend.StatusCancelled)) })
}
