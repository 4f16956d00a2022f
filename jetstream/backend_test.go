package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

func token() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func jobName(prefix string) string { return prefix + "-" + token()[:8] }

// slot returns a slot k seconds after a fixed base.
func slot(k int) time.Time { return time.UnixMilli(1_900_000_000_000 + int64(k)*1000) }

func TestDuplicateAckCarriesOriginalSequenceAndLosesInOneRequest(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b := newBackend(t, js)
	ctx := ctxFor(t)
	job := jobName("dup")
	require.NoError(t, b.PrepareJob(ctx, limits(job)))
	st := b.cached(job)
	require.NotNil(t, st)
	ms := slot(0).UnixMilli()

	winner := claimIn(job, slot(0), token(), "a")
	won, err := b.Claim(ctx, winner)
	require.NoError(t, err)
	require.True(t, won, "the first claim of a slot wins")

	stored, err := st.stream.GetLastMsgForSubject(ctx, st.claimSubject(ms))
	require.NoError(t, err)
	assert.Equal(t, st.msgID(ms), stored.Header.Get(natsjs.MsgIDHeader))
	assert.NotEmpty(t, stored.Header.Get(natsjs.MsgTTLHeader), "claims carry a TTL of at least the window")

	// The server fact the claim relies on: a duplicate is acknowledged with the
	// sequence of the stored original.
	ack, err := js.PublishMsg(ctx, &nats.Msg{
		Subject: st.claimSubject(ms),
		Header:  nats.Header{natsjs.MsgIDHeader: []string{st.msgID(ms)}},
		Data:    []byte(`{"v":1}`),
	})
	require.NoError(t, err)
	assert.True(t, ack.Duplicate)
	assert.Equal(t, stored.Sequence, ack.Sequence, "a duplicate ack carries the original's sequence")

	nc := js.Conn()
	requests := func(f func()) uint64 {
		before := nc.Stats().OutMsgs
		f()
		return nc.Stats().OutMsgs - before
	}
	// A lost first claim is one request: the backend stored the slot's claim itself,
	// so it knows the holder, and a token it never sent is not it.
	assert.EqualValues(t, 1, requests(func() {
		won, err = b.Claim(ctx, claimIn(job, slot(0), token(), "b"))
		require.NoError(t, err)
		assert.False(t, won, "another token loses")
	}))
	// A won first claim is one request too.
	assert.EqualValues(t, 1, requests(func() {
		won, err = b.Claim(ctx, claimIn(job, slot(1), token(), "b"))
		require.NoError(t, err)
		assert.True(t, won)
	}))
	// The winner repeating itself reads the stored claim back: two requests.
	assert.EqualValues(t, 2, requests(func() {
		won, err = b.Claim(ctx, winner)
		require.NoError(t, err)
		assert.True(t, won, "the winner's repeat wins")
	}))
	// With WithVerifyEveryDuplicate every duplicate is read back.
	bv := newBackend(t, js, WithVerifyEveryDuplicate())
	require.NoError(t, bv.PrepareJob(ctx, limits(job)))
	assert.EqualValues(t, 2, requests(func() {
		won, err = bv.Claim(ctx, claimIn(job, slot(0), token(), "c"))
		require.NoError(t, err)
		assert.False(t, won)
	}))
}

func TestClaimRetriedAfterLostAckWins(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b := newBackend(t, js)
	ctx := ctxFor(t)
	job := jobName("lost-ack")
	require.NoError(t, b.PrepareJob(ctx, limits(job)))
	st := b.cached(job)

	t.Run("same backend", func(t *testing.T) {
		in := claimIn(job, slot(0), token(), "a")
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		won, err = b.Claim(ctx, in) // as if the first answer never arrived
		require.NoError(t, err)
		assert.True(t, won, "the same claim sent twice with the same token wins twice")
		won, err = b.Claim(ctx, claimIn(job, slot(0), token(), "b"))
		require.NoError(t, err)
		assert.False(t, won)
	})
	nc := js.Conn()
	requests := func(f func()) uint64 {
		before := nc.Stats().OutMsgs
		f()
		return nc.Stats().OutMsgs - before
	}
	t.Run("another backend value, its first word on the slot", func(t *testing.T) {
		// What a Backend knows of its claims is its own: a token another value
		// published, repeated here before this one claimed the slot, looks like this
		// value's one fresh token for the slot, which loses without a read back.
		in := claimIn(job, slot(1), token(), "a")
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		b2 := newBackend(t, js)
		require.NoError(t, b2.PrepareJob(ctx, limits(job)))
		won, err = b2.Claim(ctx, in)
		require.NoError(t, err)
		assert.False(t, won, "not read back without WithVerifyEveryDuplicate")
		bv := newBackend(t, js, WithVerifyEveryDuplicate())
		require.NoError(t, bv.PrepareJob(ctx, limits(job)))
		won, err = bv.Claim(ctx, in)
		require.NoError(t, err)
		assert.True(t, won, "read back with WithVerifyEveryDuplicate")
	})
	t.Run("another backend value that lost the slot", func(t *testing.T) {
		// The conformance race: every value claims the slot with its own token, then
		// the winner's claim is repeated through a value that lost.
		in := claimIn(job, slot(3), token(), "a")
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		b3 := newBackend(t, js)
		require.NoError(t, b3.PrepareJob(ctx, limits(job)))
		assert.EqualValues(t, 1, requests(func() {
			won, err = b3.Claim(ctx, claimIn(job, slot(3), token(), "b"))
			require.NoError(t, err)
			assert.False(t, won)
		}), "its own lost claim: one round trip")
		assert.EqualValues(t, 2, requests(func() {
			won, err = b3.Claim(ctx, in)
			require.NoError(t, err)
			assert.True(t, won, "a second token for the slot is read back: the winner's repeat wins")
		}))
		assert.EqualValues(t, 1, requests(func() {
			won, err = b3.Claim(ctx, claimIn(job, slot(3), token(), "c"))
			require.NoError(t, err)
			assert.False(t, won)
		}), "the holder is known now: a loss is decided without a read back")
		assert.EqualValues(t, 2, requests(func() {
			won, err = b3.Claim(ctx, in)
			require.NoError(t, err)
			assert.True(t, won)
		}), "a known holder's repeat is still read back: the memo never wins a slot by itself")
		require.NoError(t, b3.Close(ctx))
		assert.Zero(t, b3.memo.len(), "Close forgets")
	})
	t.Run("first publish unacknowledged", func(t *testing.T) {
		// The first attempt reached the server, its ack was lost: publish the exact
		// claim message by hand, then claim with the same token.
		in := claimIn(job, slot(2), token(), "a")
		ms := in.Slot.UnixMilli()
		msg := &nats.Msg{Subject: st.claimSubject(ms), Header: nats.Header{}, Data: encodeClaim(in, false, time.Now())}
		msg.Header.Set(natsjs.MsgIDHeader, st.msgID(ms))
		_, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
		bv := newBackend(t, js, WithVerifyEveryDuplicate())
		won, err := bv.Claim(ctx, in)
		require.NoError(t, err)
		assert.True(t, won, "the stored claim has this token")
	})
}

func TestOddJobNamesWorkEndToEnd(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b := newBackend(t, js)
	ctx := ctxFor(t)
	suffix := token()[:6]
	long := strings.Repeat("x", 1024)
	names := []string{
		"dots.in.the.name", "with space", "*", ">", "a.*.>", "slash/and\\back", "ünïcødé 日本 ✓",
		"UPPER-lower", "_h", "a_2eb", "a.b", "..", long[:len(long)-6],
		strings.Repeat("é", 509), strings.Repeat("日本", 169) + "end", // 1 KiB with the suffix
	}
	streams := map[string]string{}
	for _, base := range names {
		job := base + suffix
		t.Run(fmt.Sprintf("%.20q", base), func(t *testing.T) {
			require.NoError(t, b.CheckJob(limits(job)))
			require.NoError(t, b.PrepareJob(ctx, limits(job)))
			st := b.cached(job)
			require.NotNil(t, st)
			assert.LessOrEqual(t, len(st.names.stream), maxStreamName)
			if other, dup := streams[st.names.stream]; dup {
				t.Fatalf("jobs %q and %q share stream %q", other, job, st.names.stream)
			}
			streams[st.names.stream] = job

			in := claimIn(job, slot(0), token(), "a")
			won, err := b.Claim(ctx, in)
			require.NoError(t, err)
			require.True(t, won)
			won, err = b.Claim(ctx, claimIn(job, slot(0), token(), "b"))
			require.NoError(t, err)
			require.False(t, won)
			require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
				Slot: in.Slot, Token: in.Token, Instance: "a", Attempt: 1, Status: backend.StatusOK,
				StartedAt: time.Now(), FinishedAt: time.Now(),
			}, backend.Retention{Size: 10}))
			hist, err := b.History(ctx, job, 10)
			require.NoError(t, err)
			require.Len(t, hist, 1)
			assert.Equal(t, job, hist[0].Job)
			assert.Equal(t, backend.StatusOK, hist[0].Status)
			assert.Equal(t, "a", hist[0].Instance)
			assert.False(t, hist[0].ClaimedAt.IsZero(), "the claim was found")

			info, err := st.stream.Info(ctx)
			require.NoError(t, err)
			assert.Equal(t, job, info.Config.Metadata[metaJob], "the real name is in the stream's metadata")
		})
	}
}

func TestWindowPerJob(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js, WithDedupeWindow(2*time.Minute))
	assert.Equal(t, 2*time.Minute, b.DedupeWindow())

	plain := limits(jobName("window-default"))
	assert.Equal(t, 2*time.Minute, b.WindowFor(plain))
	own := limits(jobName("window-own"))
	own.DedupeWindow = 3 * time.Second
	assert.Equal(t, 3*time.Second, b.WindowFor(own))

	for _, l := range []backend.JobLimits{plain, own} {
		require.NoError(t, b.PrepareJob(ctx, l))
		info, err := b.cached(l.Job).stream.Info(ctx)
		require.NoError(t, err)
		assert.Equal(t, b.WindowFor(l), info.Config.Duplicates, "the stream's duplicate window is the job's window")
		assert.Zero(t, info.Config.MaxAge, "no stream-wide age limit that would expire claims")
	}
	// A claim is stored at least as long as the window.
	in := claimIn(own.Job, slot(0), token(), "a")
	won, err := b.Claim(ctx, in)
	require.NoError(t, err)
	require.True(t, won)
	st := b.cached(own.Job)
	m, err := st.stream.GetLastMsgForSubject(ctx, st.claimSubject(in.Slot.UnixMilli()))
	require.NoError(t, err)
	ttl, err := time.ParseDuration(m.Header.Get(natsjs.MsgTTLHeader))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ttl, own.DedupeWindow)

	tooShort := limits(jobName("window-short"))
	tooShort.DedupeWindow = 50 * time.Millisecond
	err = b.CheckJob(tooShort)
	require.ErrorIs(t, err, ErrUnsupportedJob)
	assert.Contains(t, err.Error(), "100ms")
}

func TestOwnStreamIsUpdatedKeepingForeignSettings(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js)
	l := limits(jobName("update"))
	require.NoError(t, b.PrepareJob(ctx, l))
	name := b.cached(l.Job).names.stream

	// An operator adds metadata and a description.
	info, err := b.cached(l.Job).stream.Info(ctx)
	require.NoError(t, err)
	cfg := info.Config
	cfg.Description = "owned by team x"
	cfg.Metadata["team"] = "x"
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	l.DedupeWindow = 30 * time.Second
	l.Retention.Size = 7
	b2 := newBackend(t, js)
	require.NoError(t, b2.PrepareJob(ctx, l))
	st, err := js.Stream(ctx, name)
	require.NoError(t, err)
	got := st.CachedInfo().Config
	assert.Equal(t, 30*time.Second, got.Duplicates)
	assert.EqualValues(t, 7, got.MaxMsgsPerSubject)
	assert.Equal(t, "owned by team x", got.Description, "settings the backend does not manage are kept")
	assert.Equal(t, "x", got.Metadata["team"])

	// SaveResult follows a new history size.
	require.NoError(t, b2.SaveResult(ctx, l.Job, backend.StoredResult{Slot: slot(0), Token: token(), Status: backend.StatusOK},
		backend.Retention{Size: 9}))
	info, err = st.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 9, info.Config.MaxMsgsPerSubject)
}

func TestPrepareJobRefusesIncompatibleStreams(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js)

	base := func(job string) natsjs.StreamConfig {
		n := b.cfg.namesFor(job)
		return natsjs.StreamConfig{Name: n.stream, Subjects: []string{n.all}, Duplicates: time.Hour, AllowMsgTTL: true}
	}
	cases := []struct {
		name    string
		setting string
		mutate  func(job string, c *natsjs.StreamConfig)
	}{
		{"foreign without message TTLs", "allow_msg_ttl", func(_ string, c *natsjs.StreamConfig) { c.AllowMsgTTL = false }},
		{"foreign on other subjects", "subjects", func(_ string, c *natsjs.StreamConfig) { c.Subjects = []string{"elsewhere.>"} }},
		{"foreign with a short window", "duplicate_window", func(_ string, c *natsjs.StreamConfig) { c.Duplicates = time.Second }},
		{"foreign work queue", "retention", func(_ string, c *natsjs.StreamConfig) { c.Retention = natsjs.WorkQueuePolicy }},
		{"anarchon's, for another job", "metadata anarchon.job", func(_ string, c *natsjs.StreamConfig) {
			c.Metadata = map[string]string{metaJob: "someone else", metaLayout: layout}
		}},
		{"anarchon's, in memory", "storage", func(job string, c *natsjs.StreamConfig) {
			c.Storage = natsjs.MemoryStorage
			c.Metadata = map[string]string{metaJob: job, metaLayout: layout}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := jobName("conflict")
			cfg := base(job)
			tc.mutate(job, &cfg)
			_, err := js.CreateStream(ctx, cfg)
			require.NoError(t, err)

			err = b.PrepareJob(ctx, limits(job))
			require.ErrorIs(t, err, ErrIncompatibleStream)
			var conflict *StreamConflictError
			require.ErrorAs(t, err, &conflict)
			assert.Equal(t, tc.setting, conflict.Setting)
			assert.Contains(t, err.Error(), cfg.Name, "the error names the stream")

			st, err := js.Stream(ctx, cfg.Name)
			require.NoError(t, err)
			after := st.CachedInfo().Config
			assert.Equal(t, cfg.AllowMsgTTL, after.AllowMsgTTL, "the stream is not changed")
			assert.Equal(t, cfg.Subjects, after.Subjects, "the stream is not changed")
		})
	}
	t.Run("foreign but compatible is used unchanged", func(t *testing.T) {
		job := jobName("adopt")
		cfg := base(job)
		cfg.Description = "hand made"
		_, err := js.CreateStream(ctx, cfg)
		require.NoError(t, err)
		require.NoError(t, b.PrepareJob(ctx, limits(job)))
		won, err := b.Claim(ctx, claimIn(job, slot(0), token(), "a"))
		require.NoError(t, err)
		assert.True(t, won)
		st, err := js.Stream(ctx, cfg.Name)
		require.NoError(t, err)
		assert.Equal(t, time.Hour, st.CachedInfo().Config.Duplicates, "not changed")
		assert.Empty(t, st.CachedInfo().Config.Metadata[metaJob], "not marked as anarchon's")
	})
}

func TestHistoryIsBoundedBySize(t *testing.T) {
	_, b, l, ctx := retainedJob(t, "size", backend.Retention{Size: 3})
	for k := range 10 {
		in := claimIn(l.Job, slot(k), token(), "a")
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		require.NoError(t, b.SaveResult(ctx, l.Job, backend.StoredResult{
			Slot: in.Slot, Token: in.Token, Instance: "a", Attempt: 1, Status: backend.StatusOK,
			StartedAt: time.Now(), FinishedAt: time.Now(),
		}, l.Retention))
	}
	st := b.cached(l.Job)
	info, err := st.stream.Info(ctx, natsjs.WithSubjectFilter(st.results))
	require.NoError(t, err)
	assert.EqualValues(t, 3, info.State.Subjects[st.results], "the stream keeps history-size results")

	hist, err := b.History(ctx, l.Job, 100)
	require.NoError(t, err)
	require.Len(t, hist, 3, "History shows at most the history size")
	for i, r := range hist {
		assert.True(t, r.Slot.Equal(slot(9-i)), "record %d: slot %v", i, r.Slot)
		assert.Equal(t, backend.StatusOK, r.Status, "record %d", i)
	}
}

func TestHistoryTTLDropsOldRuns(t *testing.T) {
	_, b, l, ctx := retainedJob(t, "ttl", backend.Retention{Size: 50, TTL: time.Second})
	in := claimIn(l.Job, slot(0), token(), "a")
	in.HistoryTTL = l.Retention.TTL
	won, err := b.Claim(ctx, in)
	require.NoError(t, err)
	require.True(t, won)
	require.NoError(t, b.SaveResult(ctx, l.Job, backend.StoredResult{
		Slot: in.Slot, Token: in.Token, Instance: "a", Attempt: 1, Status: backend.StatusOK,
		StartedAt: time.Now(), FinishedAt: time.Now(),
	}, l.Retention))
	hist, err := b.History(ctx, l.Job, 10)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	require.Equal(t, backend.StatusOK, hist[0].Status)

	// The server expires the result by its TTL; the claim stays stored for the
	// duplicate window but leaves History with it.
	require.Eventually(t, func() bool {
		hist, err := b.History(ctx, l.Job, 10)
		return err == nil && len(hist) == 0
	}, 10*time.Second, 100*time.Millisecond, "the run leaves History after the history TTL")
	won, err = b.Claim(ctx, claimIn(l.Job, slot(0), token(), "b"))
	require.NoError(t, err)
	assert.False(t, won, "the slot is still claimed: the claim outlives its history")
}

func TestForeignAndCorruptMessagesAreSkipped(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	var logs logBuffer
	b := newBackend(t, js, WithLogger(logs.logger()))
	l := limits(jobName("foreign"))
	require.NoError(t, b.PrepareJob(ctx, l))
	in := claimIn(l.Job, slot(0), token(), "a")
	won, err := b.Claim(ctx, in)
	require.NoError(t, err)
	require.True(t, won)
	st := b.cached(l.Job)

	junk := map[string]string{
		st.results:          "not json at all",
		st.manual:           `{}`,
		st.claimSubject(42): `{"v":1,"job":"another job","slot_ms":42,"token":"t"}`,
		st.leases:           `{"v":1,"job":` + fmt.Sprintf("%q", l.Job) + `}`,
		st.claims + ".x":    `{"v":1}`,
		strings.TrimSuffix(st.all, ">") + "other": "hello",
	}
	for subj, data := range junk {
		_, err := js.Publish(ctx, subj, []byte(data))
		require.NoError(t, err, subj)
	}
	hist, err := b.History(ctx, l.Job, 10)
	require.NoError(t, err, "foreign messages never break History")
	require.Len(t, hist, 1)
	assert.Equal(t, in.Token, hist[0].Token)
	assert.EqualValues(t, len(junk), b.SkippedRecords())
	assert.Equal(t, len(junk), strings.Count(logs.String(), "level=WARN msg=\"jetstream: skipping a message"), logs.String())
}

func TestInitFailsFast(t *testing.T) {
	t.Run("server without JetStream", func(t *testing.T) {
		s := natstest.Server(t, embedded.Options{DisableJetStream: true})
		js := natstest.JetStream(t, natstest.Conn(t, s))
		b, err := New(js)
		require.NoError(t, err)
		start := time.Now()
		err = b.Init(context.Background())
		require.ErrorIs(t, err, ErrUnavailable)
		assert.ErrorIs(t, err, natsjs.ErrJetStreamNotEnabled, "the nats.go error stays reachable")
		assert.Contains(t, err.Error(), "no JetStream")
		assert.Less(t, time.Since(start), time.Second, "no JetStream is known at the first answer")
	})
	t.Run("closed connection", func(t *testing.T) {
		s := natstest.Server(t, embedded.Options{})
		nc := natstest.Conn(t, s)
		js := natstest.JetStream(t, nc)
		nc.Close()
		b, err := New(js)
		require.NoError(t, err)
		err = b.Init(context.Background())
		require.ErrorIs(t, err, ErrUnavailable)
		assert.ErrorIs(t, err, nats.ErrConnectionClosed)
	})
	t.Run("server gone", func(t *testing.T) {
		s := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
		nc := natstest.URL(t, s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
		js := natstest.JetStream(t, nc)
		s.Shutdown()
		require.Eventually(t, func() bool { return !nc.IsConnected() }, 5*time.Second, 10*time.Millisecond)
		b, err := New(js, WithCallTimeout(300*time.Millisecond))
		require.NoError(t, err)
		start := time.Now()
		err = b.Init(context.Background()) // no deadline: the backend's timeout applies
		require.ErrorIs(t, err, ErrUnavailable)
		assert.Contains(t, err.Error(), "before the deadline")
		assert.Less(t, time.Since(start), 3*time.Second, "Init never hangs")
	})
}

func TestClaimNeedsTheStream(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js)
	job := jobName("unprepared")
	_, err := b.Claim(ctx, claimIn(job, slot(0), token(), "a"))
	require.ErrorIs(t, err, natsjs.ErrStreamNotFound)
	assert.Contains(t, err.Error(), "PrepareJob")

	// A backend that did not prepare the job finds the stream another one made.
	require.NoError(t, newBackend(t, js).PrepareJob(ctx, limits(job)))
	won, err := b.Claim(ctx, claimIn(job, slot(0), token(), "a"))
	require.NoError(t, err)
	assert.True(t, won)

	_, err = b.Claim(ctx, claimIn(job, slot(0), "", "a"))
	require.ErrorIs(t, err, ErrInvalidClaim)

	require.NoError(t, b.Close(ctx))
	_, err = b.Claim(ctx, claimIn(job, slot(1), token(), "a"))
	require.ErrorIs(t, err, ErrClosed)
}

func TestOptionsAreValidated(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	for _, tc := range []struct {
		name, option string
		opt          Option
	}{
		{"empty stream prefix", "WithStreamPrefix", WithStreamPrefix("")},
		{"dotted stream prefix", "WithStreamPrefix", WithStreamPrefix("A.B")},
		{"long stream prefix", "WithStreamPrefix", WithStreamPrefix(strings.Repeat("A", MaxPrefixLen+1))},
		{"wildcard subject", "WithSubjectPrefix", WithSubjectPrefix("a.*")},
		{"empty subject token", "WithSubjectPrefix", WithSubjectPrefix("a..b")},
		{"zero replicas", "WithReplicas", WithReplicas(0)},
		{"six replicas", "WithReplicas", WithReplicas(6)},
		{"unknown storage", "WithStorage", WithStorage(natsjs.StorageType(7))},
		{"short window", "WithDedupeWindow", WithDedupeWindow(99 * time.Millisecond)},
		{"zero max bytes", "WithMaxBytes", WithMaxBytes(0)},
		{"zero call timeout", "WithCallTimeout", WithCallTimeout(0)},
		{"zero timeout (deprecated name)", "WithCallTimeout", WithTimeout(0)},
		{"zero attempt timeout", "WithAttemptTimeout", WithAttemptTimeout(0)},
		{"nil logger", "WithLogger", WithLogger(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(js, tc.opt)
			require.ErrorIs(t, err, ErrInvalidOption)
			assert.ErrorIs(t, err, backend.ErrInvalidOption, "one sentinel for every package's invalid options")
			assert.Contains(t, err.Error(), "jetstream: invalid option: "+tc.option)
			assert.Nil(t, b)
		})
	}
	b, err := New(js, nil, WithCallTimeout(time.Second), nil)
	require.NoError(t, err, "a nil option is skipped, as by kvlease.New and scheduler")
	require.NotNil(t, b)
	_, err = New(nil)
	require.ErrorIs(t, err, backend.ErrInvalidConfig, "a nil JetStream is a missing argument, as for kvlease.New")
	assert.NotErrorIs(t, err, backend.ErrInvalidOption)
	b, err = New(js, WithStreamPrefix("MY_APP-1"), WithSubjectPrefix("my.app"), WithStorage(natsjs.MemoryStorage),
		WithDedupeWindow(time.Minute), WithMaxBytes(1<<20))
	require.NoError(t, err)
	require.NoError(t, b.Init(ctxFor(t)))
	require.NoError(t, b.PrepareJob(ctxFor(t), limits("opts")))
	st, err := js.Stream(ctxFor(t), "MY_APP-1_opts")
	require.NoError(t, err)
	assert.Equal(t, []string{"my.app.opts.>"}, st.CachedInfo().Config.Subjects)
	assert.Equal(t, natsjs.MemoryStorage, st.CachedInfo().Config.Storage)
}

func TestLeasedBackend(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)

	_, err := NewLeased(js, nil)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)

	var plain backend.Backend = newBackend(t, js)
	_, ok := plain.(backend.LeaseBackend)
	assert.False(t, ok, "a backend without a run store has no Runs")
	_, ok = plain.(backend.ClaimRecorder)
	assert.False(t, ok, "its claims are history records already")

	runs := memory.NewRunStore(backend.SystemClock{})
	lb, err := NewLeased(js, runs)
	require.NoError(t, err)
	require.NoError(t, lb.Init(ctx))
	var leased backend.Backend = lb
	got, ok := leased.(backend.LeaseBackend)
	require.True(t, ok)
	assert.Equal(t, backend.RunStore(runs), got.Runs())
	_, ok = leased.(backend.ClaimRecorder)
	assert.True(t, ok)

	job := jobName("leased")
	require.NoError(t, lb.PrepareJob(ctx, limits(job)))
	require.NoError(t, lb.RecordClaim(ctx, claimIn(job, slot(0), token(), "holder")))
	in := claimIn(job, slot(0), token(), "backup")
	in.Attempt = 2
	require.NoError(t, lb.RecordClaim(ctx, in))
	require.NoError(t, lb.RecordClaim(ctx, in), "a retried record is stored once")
	hist, err := lb.History(ctx, job, 10)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	assert.Equal(t, 2, hist[0].Attempt)
	assert.Equal(t, "backup", hist[0].Instance)
	assert.Equal(t, backend.StatusRunning, hist[0].Status)
	st := lb.cached(job)
	info, err := st.stream.Info(ctx, natsjs.WithSubjectFilter(st.leases))
	require.NoError(t, err)
	assert.EqualValues(t, 1, info.State.Subjects[st.leases])
}

// TestClaimRaceAcrossNodes claims the same slots from connections to every node of
// a 3-node cluster (R3 streams), then survives the loss of the stream leader.
func TestClaimRaceAcrossNodes(t *testing.T) {
	c := natstest.Cluster(t, embedded.ClusterOptions{Nodes: 3})
	ctx := ctxFor(t)
	var logs logBuffer
	var backends []*Backend
	for _, url := range c.ClientURLs() {
		js := natstest.JetStream(t, natstest.URL(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)))
		backends = append(backends, newBackend(t, js, WithReplicas(3), WithLogger(logs.logger())))
	}
	job := jobName("r3")
	require.NoError(t, backends[0].PrepareJob(ctx, limits(job)))
	for _, b := range backends[1:] {
		require.NoError(t, b.PrepareJob(ctx, limits(job)), "every instance prepares the same stream")
	}

	const rounds, perNode = 20, 4
	winners := make([]backend.ClaimInput, rounds)
	for round := range rounds {
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, b := range backends {
			for k := range perNode {
				wg.Go(func() {
					<-start
					in := claimIn(job, slot(round), token(), fmt.Sprintf("n%d-%d", i, k))
					won, err := b.Claim(ctx, in)
					assert.NoError(t, err)
					if won {
						wins.Add(1)
						winners[round] = in
					}
				})
			}
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, wins.Load(), "round %d: exactly one winner across the cluster", round)
	}
	t.Logf("claims answered 10158 (duplicate in process) and sent again: %d", strings.Count(logs.String(), "10158"))

	// Lose the stream leader: the new leader still knows every claim.
	leader, err := c.StreamLeader("", backends[0].cached(job).names.stream)
	require.NoError(t, err)
	require.NoError(t, c.StopNode(leader))
	survivor := backends[(leader+1)%len(backends)]
	for round := range 3 {
		won, err := survivor.Claim(ctx, claimIn(job, slot(round), token(), "late"))
		require.NoError(t, err)
		assert.False(t, won, "a claimed slot stays claimed after the leader is lost")
		won, err = survivor.Claim(ctx, winners[round])
		require.NoError(t, err)
		assert.True(t, won, "the winner's repeat is read back from the new leader")
	}
	won, err := survivor.Claim(ctx, claimIn(job, slot(rounds), token(), "next"))
	require.NoError(t, err)
	assert.True(t, won)
	require.NoError(t, c.RestartNode(ctx, leader))
}

func TestErrorsMatch(t *testing.T) {
	err := &StreamConflictError{Stream: "S", Job: "j", Setting: "storage", Have: "memory", Want: "file", Hint: "h"}
	assert.True(t, errors.Is(err, ErrIncompatibleStream))
	assert.Equal(t, `jetstream: stream "S" for job "j": storage is memory, the backend needs file (h)`, err.Error())
}

func TestInitChecksAccountLimits(t *testing.T) {
	unlimited := natsjs.AccountLimits{MaxMemory: -1, MaxStore: -1, MaxStreams: -1, MaxConsumers: -1}
	tiered := func(tier string, l natsjs.AccountLimits) *natsjs.AccountInfo {
		return &natsjs.AccountInfo{Tiers: map[string]natsjs.Tier{tier: {Limits: l}}}
	}
	for _, tc := range []struct {
		name string
		info *natsjs.AccountInfo
		opts []Option
		want string // "" for no error
	}{
		{"unlimited", &natsjs.AccountInfo{Tier: natsjs.Tier{Limits: unlimited}}, nil, ""},
		{"no file storage", &natsjs.AccountInfo{Tier: natsjs.Tier{Limits: natsjs.AccountLimits{MaxMemory: -1}}}, nil, "no JetStream file storage"},
		{"no memory storage", &natsjs.AccountInfo{Tier: natsjs.Tier{Limits: natsjs.AccountLimits{MaxStore: -1}}},
			[]Option{WithStorage(natsjs.MemoryStorage)}, "no JetStream memory storage"},
		{"max bytes required", &natsjs.AccountInfo{Tier: natsjs.Tier{Limits: natsjs.AccountLimits{MaxMemory: -1, MaxStore: -1, MaxBytesRequired: true}}},
			nil, "WithMaxBytes"},
		{"max bytes given", &natsjs.AccountInfo{Tier: natsjs.Tier{Limits: natsjs.AccountLimits{MaxMemory: -1, MaxStore: -1, MaxBytesRequired: true}}},
			[]Option{WithMaxBytes(1 << 20)}, ""},
		{"per-stream cap exceeded", &natsjs.AccountInfo{Tier: natsjs.Tier{Limits: natsjs.AccountLimits{MaxMemory: -1, MaxStore: -1, StoreMaxStreamBytes: 1000}}},
			[]Option{WithMaxBytes(1 << 20)}, "at most 1000 bytes"},
		{"tiered R3", tiered("R3", unlimited), []Option{WithReplicas(3)}, ""},
		{"tiered R3 without storage", tiered("R3", natsjs.AccountLimits{MaxMemory: -1}), []Option{WithReplicas(3)}, "no JetStream file storage"},
		{"tiered without our tier", tiered("R1", unlimited), []Option{WithReplicas(3)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(stubJS{}, tc.opts...)
			require.NoError(t, err)
			err = b.checkLimits(tc.info)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrUnavailable)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// stubJS satisfies natsjs.JetStream for tests that never reach the server.
type stubJS struct{ natsjs.JetStream }

// TestClaimsSurviveServerRestart: the server rebuilds its duplicate table from the
// stored claims, so a slot claimed before a restart stays claimed after it.
func TestClaimsSurviveServerRestart(t *testing.T) {
	dir := t.TempDir()
	s := natstest.Server(t, embedded.Options{StoreDir: dir})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	b := newBackend(t, js)
	l := limits(jobName("restart"))
	require.NoError(t, b.PrepareJob(ctx, l))
	winner := claimIn(l.Job, slot(0), token(), "a")
	won, err := b.Claim(ctx, winner)
	require.NoError(t, err)
	require.True(t, won)
	s.Shutdown()

	s = natstest.Server(t, embedded.Options{StoreDir: dir})
	b = newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	won, err = b.Claim(ctx, claimIn(l.Job, slot(0), token(), "b"))
	require.NoError(t, err)
	assert.False(t, won, "the slot is still claimed after the restart")
	won, err = b.Claim(ctx, winner)
	require.NoError(t, err)
	assert.True(t, won, "and the winner is still the winner")
}

// A manual run records who asked for it, and History gives it back.
func TestManualRunRecordsWhoAsked(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	b := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	ctx := ctxFor(t)
	job := "asked-" + token()[:6]
	require.NoError(t, b.PrepareJob(ctx, limits(job)))
	in := backend.ClaimInput{Job: job, Slot: slot(3), Token: token(), Instance: "a", Attempt: 1, Manual: true, RequestedBy: "alice@example.com"}
	at, err := b.RecordManualRun(ctx, in)
	require.NoError(t, err)
	hist, err := b.History(ctx, job, 10)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	assert.True(t, hist[0].Slot.Equal(at))
	assert.True(t, hist[0].Manual)
	assert.Equal(t, "alice@example.com", hist[0].RequestedBy)
}

// TestWriteRecordsRaceAcrossNodes writes the same records from connections to
// every node of a 3-node cluster at once, as a settler and a replica completing
// its half-done write do: the same message id in flight (10158) is sent again
// and answered a duplicate, never an error, and each record is stored once.
func TestWriteRecordsRaceAcrossNodes(t *testing.T) {
	c := natstest.Cluster(t, embedded.ClusterOptions{Nodes: 3})
	ctx := ctxFor(t)
	var backends []*Backend
	for _, url := range c.ClientURLs() {
		js := natstest.JetStream(t, natstest.URL(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)))
		backends = append(backends, newBackend(t, js, WithReplicas(3)))
	}
	job := jobName("recs")
	for _, b := range backends {
		require.NoError(t, b.PrepareJob(ctx, limits(job)))
	}
	const rounds, perNode = 30, 3
	for round := range rounds {
		rec := backend.StoredResult{Slot: slot(round), Token: token(), Instance: "a", Attempt: 1,
			Status: backend.StatusOK, FinishedAt: time.Now()}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, b := range backends {
			for range perNode {
				wg.Go(func() {
					<-start
					assert.NoError(t, b.WriteRecords(ctx, job, []backend.StoredResult{rec}, backend.Retention{Size: 1000}))
				})
			}
		}
		close(start)
		wg.Wait()
	}
	hist, err := backends[0].History(ctx, job, 0)
	require.NoError(t, err)
	assert.Len(t, hist, rounds, "each record stored once")
}
