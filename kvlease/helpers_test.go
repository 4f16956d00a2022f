package kvlease_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
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
