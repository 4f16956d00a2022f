package jetstream

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// runs claims and saves n runs of job by instance "a", slot k ending with status(k).
func runs(t *testing.T, b *Backend, l backend.JobLimits, n int, status func(k int) backend.Status) {
	t.Helper()
	runsOf(t, b, l, "a", 0, n, status)
}

// runsOf claims and saves the runs of slots from to to-1 of job by instance.
func runsOf(t *testing.T, b *Backend, l backend.JobLimits, instance string, from, to int, status func(k int) backend.Status) {
	t.Helper()
	ctx := ctxFor(t)
	for k := from; k < to; k++ {
		in := claimIn(l.Job, slot(k), token(), instance)
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		require.NoError(t, b.SaveResult(ctx, l.Job, backend.StoredResult{
			Slot: in.Slot, Token: in.Token, Instance: instance, Attempt: 1, Status: status(k),
			StartedAt: time.Now(), FinishedAt: time.Now(),
		}, l.Retention))
	}
}

// History of 100 runs is three requests (stream state, then batched direct gets),
// and the same records as the leader-only reading of a stream without direct gets.
func TestHistoryReadsInBatches(t *testing.T) {
	js, b, l, ctx := retainedJob(t, "batched", backend.Retention{Size: 500})
	runs(t, b, l, 130, func(int) backend.Status { return backend.StatusOK })

	before := js.Conn().Stats()
	hist, err := b.History(ctx, l.Job, 100)
	require.NoError(t, err)
	after := js.Conn().Stats()
	require.Len(t, hist, 100)
	for i, r := range hist {
		require.True(t, r.Slot.Equal(slot(129-i)), "record %d: slot %v", i, r.Slot)
		require.Equal(t, backend.StatusOK, r.Status)
		require.NotEmpty(t, r.Instance)
	}
	assert.LessOrEqual(t, after.OutMsgs-before.OutMsgs, uint64(3), "History(job, 100) sends at most 3 requests")

	// The same stream without direct gets (an older release turned them off): the
	// cached setting is stale, the direct read finds no responder, and History reads
	// from the leader one message at a time, with the same answer.
	st := b.cached(l.Job)
	info, err := st.stream.Info(ctx)
	require.NoError(t, err)
	cfg := info.Config
	cfg.AllowDirect = false
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	require.True(t, st.direct.Load(), "the backend still believes the stream answers direct gets")
	slow, err := b.History(ctx, l.Job, 100)
	require.NoError(t, err)
	assert.Equal(t, hist, slow)
	assert.False(t, st.direct.Load(), "a direct read nobody answered turns batched reads off for the stream")
}

// A claim decided by a duplicate is read back from the stream leader, never by a
// direct get, now that the stream answers direct gets.
func TestDuplicateReadBackIsALeaderRead(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js, WithVerifyEveryDuplicate())
	l := limits(jobName("readback"))
	require.NoError(t, b.PrepareJob(ctx, l))
	info, err := b.cached(l.Job).stream.Info(ctx)
	require.NoError(t, err)
	require.True(t, info.Config.AllowDirect, "job streams answer direct gets")

	var direct, leader atomic.Int32
	spyConn := natstest.JetStream(t, natstest.Conn(t, s)).Conn()
	spy, err := spyConn.Subscribe("$JS.API.>", func(m *nats.Msg) {
		switch {
		case strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET."):
			direct.Add(1)
		case strings.HasPrefix(m.Subject, "$JS.API.STREAM.MSG.GET."):
			leader.Add(1)
		}
	})
	require.NoError(t, err)
	require.NoError(t, spyConn.Flush())
	in := claimIn(l.Job, slot(1), token(), "a")
	won, err := b.Claim(ctx, in)
	require.NoError(t, err)
	require.True(t, won)
	won, err = b.Claim(ctx, claimIn(l.Job, slot(1), token(), "b"))
	require.NoError(t, err)
	assert.False(t, won)
	won, err = b.Claim(ctx, in)
	require.NoError(t, err)
	assert.True(t, won, "a repeated claim reads its own token back")
	require.NoError(t, spyConn.Flush())
	require.NoError(t, js.Conn().Flush())
	require.Eventually(t, func() bool { return leader.Load() == 2 }, 5*time.Second, 10*time.Millisecond,
		"both duplicates are read back from the leader")
	assert.Zero(t, direct.Load(), "no direct get decides a claim")
	require.NoError(t, spy.Unsubscribe())
}

func TestLastRuns(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js)
	mixed, good, none := limits(jobName("mixed")), limits(jobName("good")), limits(jobName("none"))
	for _, l := range []backend.JobLimits{mixed, good} {
		require.NoError(t, b.PrepareJob(ctx, l))
	}
	runs(t, b, mixed, 6, func(k int) backend.Status {
		return map[int]backend.Status{0: backend.StatusOK, 1: backend.StatusOK, 2: backend.StatusError,
			3: backend.StatusSkipped, 4: backend.StatusOK, 5: backend.StatusTimeout}[k]
	})
	runs(t, b, good, 3, func(int) backend.Status { return backend.StatusOK })

	got, err := b.LastRuns(ctx, []string{mixed.Job, good.Job, none.Job})
	require.NoError(t, err)
	require.Len(t, got, 3)
	m := got[mixed.Job]
	require.NotNil(t, m.Run)
	require.NotNil(t, m.Success)
	require.NotNil(t, m.Failure)
	assert.True(t, m.Run.Slot.Equal(slot(5)), "newest run")
	assert.True(t, m.Success.Slot.Equal(slot(4)), "newest success")
	assert.True(t, m.Failure.Slot.Equal(slot(5)), "newest failure")
	assert.Equal(t, backend.StatusTimeout, m.Failure.Status)
	g := got[good.Job]
	require.NotNil(t, g.Success)
	assert.True(t, g.Success.Slot.Equal(slot(2)))
	assert.Nil(t, g.Failure)
	assert.Equal(t, backend.LastRuns{Job: none.Job}, got[none.Job], "a job that never ran has an empty entry")

	_, err = b.LastRuns(ctx, []string{""})
	require.Error(t, err, "an invalid job name is refused")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.LastRuns(cctx, []string{mixed.Job})
	require.Error(t, err, "a cancelled context ends LastRuns")
}

// History reads its first window while it asks for the stream's state, from the
// last sequence the backend has seen: the answer is the same as a backend's that
// has seen nothing, whether what it saw is the stream's end, far behind it (other
// instances stored more since), or past it; and the read ahead costs no request
// when it was right.
func TestHistoryReadAhead(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js)
	l := limits(jobName("ahead"))
	l.Retention = backend.Retention{Size: 500}
	require.NoError(t, b.PrepareJob(ctx, l))
	runs(t, b, l, 60, func(k int) backend.Status {
		if k%3 == 0 {
			return backend.StatusError
		}
		return backend.StatusOK
	})
	fresh := func() []backend.RunRecord {
		t.Helper()
		hist, err := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s))).History(ctx, l.Job, 20)
		require.NoError(t, err)
		require.Len(t, hist, 20)
		return hist
	}
	history := func(name string, maxRequests uint64) {
		t.Helper()
		before := js.Conn().Stats()
		hist, err := b.History(ctx, l.Job, 20)
		require.NoError(t, err)
		after := js.Conn().Stats()
		assert.Equal(t, fresh(), hist, name)
		assert.LessOrEqual(t, after.OutMsgs-before.OutMsgs, maxRequests, name)
	}
	st := b.cached(l.Job)
	require.NotZero(t, st.lastSeq.Load(), "the backend saw its own publishes")
	history("seen up to the end", 2)

	other := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	require.NoError(t, other.PrepareJob(ctx, l))
	runsOf(t, other, l, "o", 60, 110, func(int) backend.Status { return backend.StatusOK }) // slots after b's
	history("seen far behind the end", 3)

	st.lastSeq.Store(st.lastSeq.Load() + 1000)
	history("seen past the end", 3)
}
