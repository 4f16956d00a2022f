package kvlease_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// A backup that stands by right after its claim answered running sends no request
// for its watch (the claim's reading is the baseline, the watch is shared); the
// watch still closes when the holder finishes, and at once when the holder ended
// between the claim and the watch.
func TestStandbyWatchCostsNoRead(t *testing.T) {
	holder, backup, sp, conns := holderAndBackup(t, "hint")
	job := "hint " + token()

	// The backup's shared watcher starts with its first watch.
	first, err := backup.WatchRun(t.Context(), job, time.UnixMilli(1))
	require.NoError(t, err)
	<-first // nothing live there

	slot, a := time.UnixMilli(2_000), token()
	mustClaim(t, holder, claimOf(job, slot, a, time.Minute), backend.OutcomeWon)
	var ch <-chan struct{}
	n := sp.count(t, conns, func() {
		res := mustClaim(t, backup, claimOf(job, slot, token(), time.Minute), backend.OutcomeRunning)
		assert.Equal(t, "i-"+a, res.Holder, "the holder, from the lease the shared watcher delivered")
		assert.False(t, res.Expires.IsZero())
		ch, err = backup.WatchRun(t.Context(), job, slot)
		require.NoError(t, err)
	})
	assert.EqualValues(t, 2, n, "the claim's two lost writes (a first claim, chained) and nothing else: the shared watcher delivered the lease it lost to, and the watch costs no request")
	select {
	case <-ch:
		t.Fatal("the watch closed while the holder runs")
	default:
	}
	require.NoError(t, holder.Finish(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, backend.StatusOK))
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not close when the holder finished")
	}
	// The finish's purge carried the finished record to the backup's watcher: its
	// claim again is answered done without a request.
	n = sp.count(t, conns, func() {
		res := mustClaim(t, backup, claimOf(job, slot, token(), time.Minute), backend.OutcomeDone)
		assert.Equal(t, backend.StatusOK, res.Status)
	})
	assert.EqualValues(t, 0, n, "a backup's claim after the holder's finish reaches it: no request")

	// The holder releases between the backup's claim and its watch, and the shared
	// watcher delivered the release before the watch was registered: the watch
	// closes at once. (The control's watch closing, on a write made after the
	// release, shows the watcher has delivered the release.)
	slot2, a2 := time.UnixMilli(3_000), token()
	mustClaim(t, holder, claimOf(job, slot2, a2, time.Minute), backend.OutcomeWon)
	mustClaim(t, backup, claimOf(job, slot2, token(), time.Minute), backend.OutcomeRunning)
	ctl, c := time.UnixMilli(4_000), token()
	mustClaim(t, holder, claimOf(job, ctl, c, time.Minute), backend.OutcomeWon)
	mustClaim(t, backup, claimOf(job, ctl, token(), time.Minute), backend.OutcomeRunning)
	cch, err := backup.WatchRun(t.Context(), job, ctl)
	require.NoError(t, err)
	require.NoError(t, holder.Release(t.Context(), backend.RunKey{Job: job, Slot: slot2, Token: a2}))
	require.NoError(t, holder.Finish(t.Context(), backend.RunKey{Job: job, Slot: ctl, Token: c}, backend.StatusOK))
	select {
	case <-cch:
	case <-time.After(10 * time.Second):
		t.Fatal("the control's watch did not close")
	}
	ch2, err := backup.WatchRun(t.Context(), job, slot2)
	require.NoError(t, err)
	select {
	case <-ch2:
	default:
		t.Fatal("a release the watcher delivered before the watch was registered must close it at once")
	}
}

// A blind claim that loses its write while the store has no shared watcher reads
// the lease key: one request more.
func TestLostBlindClaimWithoutWatcherReads(t *testing.T) {
	holder, backup, sp, conns := holderAndBackup(t, "nowatch")
	job := "nowatch " + token()

	slot, a := time.UnixMilli(2_000), token()
	mustClaim(t, holder, claimOf(job, slot, a, time.Minute), backend.OutcomeWon)
	n := sp.count(t, conns, func() {
		res := mustClaim(t, backup, claimOf(job, slot, token(), time.Minute), backend.OutcomeRunning)
		assert.Equal(t, "i-"+a, res.Holder)
	})
	assert.EqualValues(t, 3, n, "its two writes lost, then one read of the lease key")
}

// holderAndBackup makes two stores on their own connections to one server and a
// bucket named after name, and a spy counting the requests of both connections.
func holderAndBackup(t *testing.T, name string) (holder, backup *kvlease.Store, sp *requestSpy, conns []*nats.Conn) {
	t.Helper()
	srv := singleServer(t)
	js, bjs := natstest.JetStream(t, natstest.Conn(t, srv)), natstest.JetStream(t, natstest.Conn(t, srv))
	b := initBucket(name)
	holder = newStore(t, js, kvlease.WithBucket(b))
	backup = newStore(t, bjs, kvlease.WithBucket(b))
	return holder, backup, newSpy(t, srv.Connect, b), []*nats.Conn{js.Conn(), bjs.Conn()}
}
