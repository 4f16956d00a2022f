package kvlease_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// overlapClaim is a claim of slot k (minutes) of job under OverlapSkip.
func overlapClaim(job string, k int, instance string) backend.RunClaim {
	return backend.RunClaim{
		Job: job, Slot: slotAt(k), Token: token(), Instance: instance,
		Lease: time.Minute, Deadline: time.Now().Add(time.Hour), Keep: time.Hour, Overlap: backend.OverlapSkip,
	}
}

// slotAt is the k-th minute's slot of the tests' jobs.
func slotAt(k int) time.Time { return time.UnixMilli(1_900_000_000_000 + int64(k)*60_000).UTC() }

// bufferClaim is a claim of slot k of job under p, with cap.
func bufferClaim(job string, k int, p backend.OverlapPolicy, cap int) backend.RunClaim {
	in := overlapClaim(job, k, "i"+token()[:4])
	in.Overlap, in.BufferCap = p, cap
	return in
}

// limitClaim is a claim of slot k of job under p with a run limit of n.
func limitClaim(job string, k int, p backend.OverlapPolicy, n int) backend.RunClaim {
	in := overlapClaim(job, k, "i"+token()[:4])
	in.Overlap, in.MaxRuns = p, n
	return in
}

func finishAt(t *testing.T, s *kvlease.Store, in backend.RunClaim, st backend.Status) {
	t.Helper()
	require.NoError(t, s.Finish(t.Context(), in.Key(), st))
}

// bufferStores are two stores on their own connections, on one server and on R3.
func bufferStores(t *testing.T) map[string][2]*kvlease.Store {
	r3 := []kvlease.Option{kvlease.WithBucket("buffer_r3"), kvlease.WithReplicas(3)}
	return map[string][2]*kvlease.Store{
		"R1": {newStore(t, singleJS(t), kvlease.WithBucket(bucket)), newStore(t, singleJS(t), kvlease.WithBucket(bucket))},
		"R3": {newStore(t, clusterJS(t), r3...), newStore(t, clusterJS(t), r3...)},
	}
}

// dieAt has s stop at step of slot's calls, once.
func dieAt(s *kvlease.Store, slot time.Time, step string) {
	var once sync.Once
	kvlease.OnStepForTest(s, func(_ string, at time.Time, st string) bool {
		died := false
		if st == step && at.Equal(slot) {
			once.Do(func() { died = true })
		}
		return died
	})
}

// holderAndBackup are two stores on one server, each on its own connection, on
// a new bucket, and a spy counting their requests.
func holderAndBackup(t *testing.T, name string) (holder, backup *kvlease.Store, sp *requestSpy, conns []*nats.Conn) {
	t.Helper()
	srv := singleServer(t)
	js, bjs := natstest.JetStream(t, natstest.Conn(t, srv)), natstest.JetStream(t, natstest.Conn(t, srv))
	b := initBucket(name)
	holder = newStore(t, js, kvlease.WithBucket(b))
	backup = newStore(t, bjs, kvlease.WithBucket(b))
	return holder, backup, newSpy(t, srv.Connect, b), []*nats.Conn{js.Conn(), bjs.Conn()}
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
