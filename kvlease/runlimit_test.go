package kvlease_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// wonAfterExpiry claims in (a fresh token each time) until it is won, within
// 10s: a dead claimer's lease key expires.
func wonAfterExpiry(t *testing.T, s *kvlease.Store, in backend.RunClaim) (backend.ClaimResult, backend.RunClaim) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in.Token = token()
		res, err := s.Claim(t.Context(), in)
		require.NoError(t, err)
		if res.Outcome == backend.OutcomeWon {
			return res, in
		}
		require.Equal(t, backend.OutcomeRunning, res.Outcome, "the dead claimer's lease key, until it expires")
		require.True(t, time.Now().Before(deadline), "the dead claimer's lease key did not expire")
		time.Sleep(100 * time.Millisecond)
	}
}

// limitClaim is a claim of slot k of job under policy p with a run limit of n.
func limitClaim(job string, k int, p backend.OverlapPolicy, n int) backend.RunClaim {
	in := overlapClaim(job, k, "i"+token()[:4])
	in.Overlap, in.MaxRuns = p, n
	return in
}

// A claimer that dies after counting its slot, before its lease key (or, for a
// job that forbids overlap, before its run record: another claim takes the slot
// once its lease key expired): when another instance claims the slot, it runs it
// without counting it again; when nobody does, the count errs high (the slot
// counted, never run), never low.
func TestLimitCrashAfterCounted(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		for _, p := range []backend.OverlapPolicy{backend.OverlapAllow, backend.OverlapSkip} {
			t.Run(name+"/"+p.String(), func(t *testing.T) {
				a, b := st[0], st[1]
				retried := "counted-retried-" + token()
				dieAt(a, 1, "counted")
				dead := limitClaim(retried, 1, p, 2)
				dead.Lease = time.Second
				_, err := a.Claim(t.Context(), dead)
				require.Error(t, err, "the claimer dies after its count")
				res, won := wonAfterExpiry(t, b, limitClaim(retried, 1, p, 2))
				assert.False(t, res.LimitReached, "the slot was counted once: %+v", res)
				finishAt(t, b, won, backend.StatusOK)
				res = mustClaim(t, b, limitClaim(retried, 2, p, 2), backend.OutcomeWon)
				assert.True(t, res.LimitReached, "two counted, two run")
				mustClaim(t, b, limitClaim(retried, 3, p, 2), backend.OutcomeLimit)

				if p.Exclusive() {
					return // the dead claim's lease key holds the job: its slot is taken over, as above
				}
				high := "counted-high-" + token()
				dieAt(a, 1, "counted")
				_, err = a.Claim(t.Context(), limitClaim(high, 1, p, 2))
				require.Error(t, err)
				res = mustClaim(t, b, limitClaim(high, 2, p, 2), backend.OutcomeWon)
				assert.True(t, res.LimitReached, "the dead claim's slot is counted: the count errs high")
				mustClaim(t, b, limitClaim(high, 3, p, 2), backend.OutcomeLimit)
			})
		}
	}
}

// The count key holds how many slots were counted and the newest 64 of them.
func TestLimitCountKey(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job := "count-key-" + token()
	const n = 70
	for k := range n {
		mustClaim(t, s, limitClaim(job, k, backend.OverlapAllow, 100), backend.OutcomeWon)
	}
	kv, err := js.KeyValue(t.Context(), bucket)
	require.NoError(t, err)
	e, err := kv.Get(t.Context(), "count."+kvlease.JobTokenForTest(job))
	require.NoError(t, err)
	var rec struct {
		Runs  int     `json:"runs"`
		Slots []int64 `json:"slots"`
	}
	require.NoError(t, json.Unmarshal(e.Value(), &rec))
	assert.Equal(t, n, rec.Runs)
	require.Len(t, rec.Slots, 64, "the newest 64 counted slots")
	assert.Equal(t, limitClaim(job, n-1, 0, 0).Slot.UnixMilli(), rec.Slots[63], "newest last")
	assert.Equal(t, limitClaim(job, n-64, 0, 0).Slot.UnixMilli(), rec.Slots[0])
}

// The requests of a first claim with a run limit on one server, counted at the
// server (each a round trip): without a limit an overlap-allowing first claim is
// blind (its two chained writes); with one it reads both keys and the count key
// and writes the count first. Run with -v to read them.
//
//	go test ./kvlease/ -run TestLimitRoundTrips -v
func TestLimitRoundTrips(t *testing.T) {
	t.Parallel()
	a, _, sp, conns := holderAndBackup(t, "limit_trips")
	job := "trips-" + token()
	count := func(what string, f func()) int64 {
		n := sp.count(t, conns, f)
		t.Logf("%s: %d requests", what, n)
		return n
	}
	// The first claim of a store reads the server's clock.
	mustClaim(t, a, limitClaim(job, 0, backend.OverlapAllow, 0), backend.OutcomeWon)
	assert.EqualValues(t, 2, count("first claim, no limit", func() {
		mustClaim(t, a, limitClaim(job, 1, backend.OverlapAllow, 0), backend.OutcomeWon)
	}))
	limited := count("first claim with a limit", func() {
		mustClaim(t, a, limitClaim(job, 2, backend.OverlapAllow, 10), backend.OutcomeWon)
	})
	assert.LessOrEqual(t, limited, int64(5), "a read of the run's keys, of the count, the count's write, the two writes")
	count("first claim answered limit", func() {
		mustClaim(t, a, limitClaim(job+"-full", 1, backend.OverlapAllow, 1), backend.OutcomeWon)
		mustClaim(t, a, limitClaim(job+"-full", 2, backend.OverlapAllow, 1), backend.OutcomeLimit)
	})
	skip := count("first claim under OverlapSkip, no limit", func() {
		mustClaim(t, a, limitClaim(job+"-skip", 1, backend.OverlapSkip, 0), backend.OutcomeWon)
	})
	skipLimited := count("first claim under OverlapSkip with a limit", func() {
		mustClaim(t, a, limitClaim(job+"-skiplim", 1, backend.OverlapSkip, 10), backend.OutcomeWon)
	})
	assert.LessOrEqual(t, skipLimited, skip+2, "the count's read and write")
}
