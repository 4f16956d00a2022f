package kvlease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
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

const bucket = "kvlease_test"

func token() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func claimOf(job string, slot time.Time, tok string, lease time.Duration) backend.RunClaim {
	return backend.RunClaim{
		Job: job, Slot: slot, Token: tok, Instance: "i-" + tok, Lease: lease,
		Deadline: time.Now().Add(time.Hour), Keep: time.Hour,
	}
}

func mustClaim(t *testing.T, s *kvlease.Store, in backend.RunClaim, want backend.ClaimOutcome) backend.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, want, res.Outcome, "claim by %s", in.Instance)
	return res
}

// lastMsg reads a key's last message straight from the bucket's stream.
func lastMsg(t *testing.T, js jetstream.JetStream, key string) *jetstream.RawStreamMsg {
	t.Helper()
	st, err := js.Stream(t.Context(), "KV_"+bucket)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), "$KV."+bucket+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	require.NoError(t, err)
	return m
}

func leaseKey(job string, slot time.Time) string {
	return "lease." + kvlease.JobTokenForTest(job) + "." + kvlease.SlotTokenForTest(slot)
}

func runKey(job string, slot time.Time) string {
	return "run." + kvlease.JobTokenForTest(job) + "." + kvlease.SlotTokenForTest(slot)
}

// A lease ends by the server's TTL with no client action, and the stored messages
// carry the headers the layout relies on.
func TestLeaseExpiresByServerTTL(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job, slot := "ttl "+token(), time.UnixMilli(1_900_000_000_000)
	a := token()
	mustClaim(t, s, claimOf(job, slot, a, 1500*time.Millisecond), backend.OutcomeWon)

	m := lastMsg(t, js, leaseKey(job, slot))
	require.NotNil(t, m)
	assert.Equal(t, "2s", m.Header.Get(jetstream.MsgTTLHeader), "1.5s rounds up: the server truncates TTLs to whole seconds")
	assert.Equal(t, "0", m.Header.Get(jetstream.ExpectedLastSubjSeqHeader), "a first claim creates the key")
	run := lastMsg(t, js, runKey(job, slot))
	require.NotNil(t, run)
	ttl, err := time.ParseDuration(run.Header.Get(jetstream.MsgTTLHeader))
	require.NoError(t, err)
	assert.Equal(t, time.Hour, ttl, "the run record lives for Keep")

	require.NoError(t, s.Heartbeat(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, time.Second))
	hb := lastMsg(t, js, leaseKey(job, slot))
	require.NotNil(t, hb)
	assert.Equal(t, "1s", hb.Header.Get(jetstream.MsgTTLHeader), "a heartbeat carries the new TTL")
	assert.Equal(t, m.Sequence, parseUint(t, hb.Header.Get(jetstream.ExpectedLastSubjSeqHeader)),
		"a heartbeat is a compare-and-set on the lease's revision")
	written := hb.Time

	var marker *jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		marker = lastMsg(t, js, leaseKey(job, slot))
		return marker != nil && marker.Header.Get(jetstream.MarkerReasonHeader) != ""
	}, 5*time.Second, 10*time.Millisecond, "the server expires the lease key")
	assert.Equal(t, "MaxAge", marker.Header.Get(jetstream.MarkerReasonHeader))
	lived := marker.Time.Sub(written)
	assert.GreaterOrEqual(t, lived, time.Second, "not before its TTL")
	assert.Less(t, lived, 2*time.Second, "expired on time by the server's clock")
	t.Logf("lease key expired %v after its last write, by the server's timestamps", lived)

	assert.ErrorIs(t, s.Heartbeat(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, time.Second), backend.ErrLeaseLost)
	b := mustClaim(t, s, claimOf(job, slot, token(), time.Second), backend.OutcomeWon)
	assert.Equal(t, 2, b.Attempt)
	assert.Greater(t, b.Fence, m.Sequence)
}

func parseUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "parse %q", s)
	return n
}

func TestInitWithoutJetStream(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t, embedded.Options{DisableJetStream: true})
	s, err := kvlease.New(natstest.JetStream(t, natstest.Conn(t, srv)))
	require.NoError(t, err)
	t.Cleanup(s.Close)

	start := time.Now()
	err = s.Init(t.Context())
	assert.ErrorIs(t, err, kvlease.ErrNoJetStream)
	assert.Less(t, time.Since(start), time.Second, "fails fast, not at a timeout")
	t.Logf("Init without JetStream: %v (after %v)", err, time.Since(start))

	_, err = s.Claim(t.Context(), claimOf("job", time.UnixMilli(0), token(), time.Second))
	assert.ErrorIs(t, err, kvlease.ErrNoJetStream, "every call needing the bucket says why")
}

// Init is idempotent, and turns an existing bucket (for instance one made by
// "nats kv add", with direct gets) into the store's configuration.
func TestInitCreatesOrUpdatesBucket(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	pre, memBucket := "preexisting_"+token(), "memory_"+token()
	_, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: pre})
	require.NoError(t, err)

	s := newStore(t, js, kvlease.WithBucket(pre))
	assert.Equal(t, pre, s.Bucket())
	require.NoError(t, s.Init(t.Context()), "again")
	again := newStore(t, js, kvlease.WithBucket(pre))
	require.NoError(t, again.Init(t.Context()))

	st, err := js.Stream(t.Context(), "KV_"+pre)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	assert.True(t, cfg.AllowDirect, "an R1 bucket's only replica answers direct gets")
	assert.True(t, cfg.AllowMsgTTL)
	assert.Equal(t, time.Second, cfg.SubjectDeleteMarkerTTL)
	assert.Equal(t, int64(1), cfg.MaxMsgsPerSubject)
	assert.Equal(t, jetstream.FileStorage, cfg.Storage)

	kv, err := js.KeyValue(t.Context(), pre)
	require.NoError(t, err, "still a KV bucket to nats.go")
	_, err = kv.Status(t.Context())
	assert.NoError(t, err)

	mem := newStore(t, js, kvlease.WithBucket(memBucket), kvlease.WithStorage(jetstream.MemoryStorage))
	mustClaim(t, mem, claimOf("job", time.UnixMilli(0), token(), time.Second), backend.OutcomeWon)
	file, err := kvlease.New(js, kvlease.WithBucket(memBucket))
	require.NoError(t, err)
	err = file.Init(t.Context())
	assert.Error(t, err, "the storage of an existing bucket cannot change")
	t.Logf("Init with another storage: %v", err)
}

func TestOptions(t *testing.T) {
	js := singleJS(t)
	for _, tc := range []struct {
		name, option string
		opt          kvlease.Option
	}{
		{"bucket with a dot", "WithBucket", kvlease.WithBucket("a.b")},
		{"empty bucket", "WithBucket", kvlease.WithBucket("")},
		{"zero replicas", "WithReplicas", kvlease.WithReplicas(0)},
		{"six replicas", "WithReplicas", kvlease.WithReplicas(6)},
		{"unknown storage", "WithStorage", kvlease.WithStorage(jetstream.StorageType(7))},
		{"zero call timeout", "WithCallTimeout", kvlease.WithCallTimeout(0)},
		{"negative call timeout", "WithCallTimeout", kvlease.WithCallTimeout(-time.Second)},
		{"zero timeout (deprecated name)", "WithCallTimeout", kvlease.WithTimeout(0)},
		{"zero attempt timeout", "WithAttemptTimeout", kvlease.WithAttemptTimeout(0)},
	} {
		_, err := kvlease.New(js, tc.opt)
		assert.ErrorIs(t, err, kvlease.ErrInvalidOption, tc.name)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, "%s: one sentinel for every package's invalid options", tc.name)
		if assert.Error(t, err, tc.name) {
			assert.Contains(t, err.Error(), "kvlease: invalid option: "+tc.option, tc.name)
		}
	}
	_, err := kvlease.New(nil)
	assert.ErrorIs(t, err, backend.ErrInvalidConfig, "a nil JetStream is a missing argument, as for jetstream.New")
	s, err := kvlease.New(js, nil, kvlease.WithCallTimeout(time.Second))
	require.NoError(t, err, "a nil option is skipped")
	assert.Equal(t, kvlease.DefaultBucket, s.Bucket())
}

func TestRejectsLeasesBelowOneSecond(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	_, err := s.Claim(t.Context(), claimOf("job", time.UnixMilli(0), token(), 500*time.Millisecond))
	assert.ErrorIs(t, err, backend.ErrInvalidClaim)
	assert.ErrorIs(t, s.Heartbeat(t.Context(), backend.RunKey{Job: "job", Slot: time.UnixMilli(0), Token: "t"}, 500*time.Millisecond), backend.ErrInvalidClaim)
	_, err = s.Claim(t.Context(), claimOf("", time.UnixMilli(0), token(), time.Second))
	assert.ErrorIs(t, err, backend.ErrInvalidJobName)
}

// Job names with any character get their own keys and read back.
func TestOddJobNames(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	slot := time.UnixMilli(1_900_000_000_000)
	jobs := []string{"a.b", "a", "a.*", "a.>", "a b", "ünïcødé ✓", "a.b.c", "$KV.x", "lease.a.1"}
	sfx := " " + token()
	for _, job := range jobs {
		mustClaim(t, s, claimOf(job+sfx, slot, token(), time.Minute), backend.OutcomeWon)
	}
	for _, job := range jobs {
		runs, err := s.Active(t.Context(), job+sfx)
		require.NoError(t, err)
		require.Len(t, runs, 1, "job %q sees its own run only", job)
		assert.True(t, runs[0].Slot.Equal(slot))
		assert.True(t, runs[0].Live)
	}
}

// A claimer that wrote the lease key but died before the run record blocks others
// until its lease expires; retried with the same token, the claim completes.
func TestHalfClaim(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job, slot, a := "half "+token(), time.UnixMilli(1_900_000_000_000), token()
	m := nats.NewMsg("$KV." + bucket + "." + leaseKey(job, slot))
	m.Data, _ = json.Marshal(map[string]any{"v": 1, "token": a, "instance": "i-" + a, "lease_ms": 60_000})
	_, err := js.PublishMsg(t.Context(), m, jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithMsgTTL(time.Minute))
	require.NoError(t, err)

	other := mustClaim(t, s, claimOf(job, slot, token(), time.Minute), backend.OutcomeRunning)
	assert.Equal(t, "i-"+a, other.Holder)
	won := mustClaim(t, s, claimOf(job, slot, a, time.Minute), backend.OutcomeWon)
	assert.Equal(t, 1, won.Attempt)
	assert.NotZero(t, won.Fence)
	require.NoError(t, s.Heartbeat(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, time.Minute))
	require.NoError(t, s.Finish(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, backend.StatusOK))
	mustClaim(t, s, claimOf(job, slot, token(), time.Minute), backend.OutcomeDone)
}

// A run longer than its Keep keeps its record: heartbeats refresh it.
func TestLongRunKeepsItsRecord(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job, slot, a := "long "+token(), time.UnixMilli(1_900_000_000_000), token()
	in := claimOf(job, slot, a, time.Second)
	in.Keep = time.Second // the record lives max(keep, 3 leases) = 3s unless refreshed
	mustClaim(t, s, in, backend.OutcomeWon)
	first := lastMsg(t, js, runKey(job, slot))
	require.NotNil(t, first)
	end := time.Now().Add(4 * time.Second)
	for time.Now().Before(end) {
		require.NoError(t, s.Heartbeat(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, time.Second))
		time.Sleep(300 * time.Millisecond)
	}
	rec := lastMsg(t, js, runKey(job, slot))
	require.NotNil(t, rec)
	assert.Empty(t, rec.Header.Get(jetstream.MarkerReasonHeader), "the run record is still there")
	assert.Greater(t, rec.Sequence, first.Sequence, "refreshed by the heartbeats")
	require.NoError(t, s.Finish(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, backend.StatusOK))
	mustClaim(t, s, claimOf(job, slot, token(), time.Second), backend.OutcomeDone)
}

func TestWatchIgnoresHeartbeats(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	job, slot, a := "hb "+token(), time.UnixMilli(1_900_000_000_000), token()
	mustClaim(t, s, claimOf(job, slot, a, time.Minute), backend.OutcomeWon)
	ch, err := s.WatchRun(t.Context(), job, slot)
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, s.Heartbeat(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}, time.Minute))
	}
	// A positive control instead of a fixed wait: the store's watches share one
	// ordered watcher, so once a watch opened after the heartbeats has fired on its
	// own release, the heartbeats' updates have been delivered too.
	control, c := slot.Add(time.Minute), token()
	mustClaim(t, s, claimOf(job, control, c, time.Minute), backend.OutcomeWon)
	cch, err := s.WatchRun(t.Context(), job, control)
	require.NoError(t, err)
	require.NoError(t, s.Release(t.Context(), backend.RunKey{Job: job, Slot: control, Token: c}))
	select {
	case <-cch:
	case <-time.After(5 * time.Second):
		t.Fatal("the control watch did not fire on its release")
	}
	select {
	case <-ch:
		t.Fatal("a heartbeat fired the watch")
	default:
	}
	require.NoError(t, s.Release(t.Context(), backend.RunKey{Job: job, Slot: slot, Token: a}))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("release did not fire the watch")
	}
}

func TestWatchEndsWithContextAndClose(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	job, slot := "watch "+token(), time.UnixMilli(1_900_000_000_000)
	mustClaim(t, s, claimOf(job, slot, token(), time.Minute), backend.OutcomeWon)

	ctx, cancel := context.WithCancel(t.Context())
	byCtx, err := s.WatchRun(ctx, job, slot)
	require.NoError(t, err)
	byClose, err := s.WatchRun(t.Context(), job, slot)
	require.NoError(t, err)
	cancel()
	select {
	case <-byCtx:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch outlived its context")
	}
	s.Close() // waits for its watchers
	select {
	case <-byClose:
	default:
		t.Fatal("Close returned with a watch still open")
	}
	_, err = s.WatchRun(t.Context(), job, slot)
	assert.ErrorIs(t, err, kvlease.ErrClosed)
	s.Close()

	nothing := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	ch, err := nothing.WatchRun(t.Context(), job, time.UnixMilli(0))
	require.NoError(t, err)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("with no live lease the watch fires at once")
	}
}

// A replicated bucket has no direct gets: followers could answer them stale.
func TestReplicatedBucketReadsFromLeader(t *testing.T) {
	t.Parallel()
	js := clusterJS(t)
	s := newStore(t, js, kvlease.WithBucket("conformance_r3"), kvlease.WithReplicas(3))
	require.NoError(t, s.Init(t.Context()))
	st, err := js.Stream(t.Context(), "KV_conformance_r3")
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	assert.False(t, cfg.AllowDirect)
	assert.Equal(t, 3, cfg.Replicas)
}
