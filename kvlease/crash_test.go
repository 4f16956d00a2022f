package kvlease_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	js "github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
)

// Tests of every pair of writes a call makes: the call is stopped between the
// two (OnStepForTest), as if its process died there, and another store (another
// replica) then finds the slot decided, completed or undone.

// leased is a store with a history (jetstream.NewLeased), on its own connection.
type leased struct {
	*kvlease.Store
	hist *js.LeasedBackend
}

// leasedPair is two replicas on one bucket of srv, each with the job's history.
func leasedPair(t *testing.T, connect func(testing.TB) jetstream.JetStream, job string, opts ...kvlease.Option) (a, b leased) {
	t.Helper()
	mk := func() leased {
		j := connect(t)
		s := newStore(t, j, opts...)
		h, err := js.NewLeased(j, s)
		require.NoError(t, err)
		require.NoError(t, h.Init(t.Context()))
		require.NoError(t, h.PrepareJob(t.Context(), backend.JobLimits{Job: job, Schedule: "every 1m", Interval: time.Minute,
			MaxLate: time.Minute, Retention: backend.Retention{Size: 50}}))
		return leased{s, h}
	}
	return mk(), mk()
}

// records returns the statuses of the job's history records of slot k, by token.
func (l leased) records(t *testing.T, job string, k int) map[string]backend.Status {
	t.Helper()
	hist, err := l.hist.History(t.Context(), job, 0)
	require.NoError(t, err)
	out := map[string]backend.Status{}
	for _, r := range hist {
		if r.Slot.Equal(slotAt(k)) {
			_, dup := out[r.Token]
			require.False(t, dup, "one record per attempt: %+v", hist)
			out[r.Token] = r.Status
		}
	}
	return out
}

// claimUntil claims in's slot with fresh tokens until the outcome is not
// running (a lease in flight, or live, ends by its TTL), and returns the answer.
func claimUntil(t *testing.T, s *kvlease.Store, in backend.RunClaim) (backend.RunClaim, backend.ClaimResult) {
	t.Helper()
	var res backend.ClaimResult
	require.Eventually(t, func() bool {
		in.Token = token()
		var err error
		res, err = s.Claim(t.Context(), in)
		require.NoError(t, err)
		return res.Outcome != backend.OutcomeRunning
	}, 10*time.Second, 50*time.Millisecond)
	return in, res
}

// Lease key, then job key: a claimer of an overlap-forbidding job that dies
// after its lease key holds the slot until the key expires (running to others);
// its own token completes the claim; after expiry the next claim runs the slot
// as attempt 1. Nothing was listed: the job's other slots are not held.
func TestCrashAfterLeaseKey(t *testing.T) {
	t.Parallel()
	job := "crash lease " + token()
	a, b := leasedPair(t, singleJS, job, kvlease.WithBucket(bucket))
	in := overlapClaim(job, 1, "i-a")
	in.Lease = time.Second
	dieAt(a.Store, in.Slot, kvlease.StepLease)
	_, err := a.Claim(t.Context(), in)
	require.ErrorIs(t, err, kvlease.ErrDiedForTest)
	mustClaim(t, b.Store, overlapClaim(job, 1, "i-b"), backend.OutcomeRunning)
	mustClaim(t, b.Store, overlapClaim(job, 2, "i-b"), backend.OutcomeWon) // not listed: not held
	res := mustClaim(t, a.Store, in, backend.OutcomeOverlap)
	assert.Equal(t, 1, res.Attempt, "its own token decides again (slot 2 runs now): skipped, never run")
	assert.Equal(t, map[string]backend.Status{in.Token: backend.StatusSkipped}, a.records(t, job, 1))
}

// Job key, then run record: a claimer that dies after listing its slot running
// holds the job while its lease key lives; once it expired, the slot is a
// first claim again and the job's other slots are free. The count errs high.
func TestCrashAfterJobKey(t *testing.T) {
	t.Parallel()
	for name, connect := range map[string]func(testing.TB) jetstream.JetStream{"R1": singleJS, "R3": clusterJS} {
		t.Run(name, func(t *testing.T) {
			job := "crash job " + token()
			opts := []kvlease.Option{kvlease.WithBucket(bucket)}
			if name == "R3" {
				opts = []kvlease.Option{kvlease.WithBucket("buffer_r3"), kvlease.WithReplicas(3)}
			}
			a, b := leasedPair(t, connect, job, opts...)
			in := limitClaim(job, 1, backend.OverlapSkip, 2)
			in.Lease = time.Second
			dieAt(a.Store, in.Slot, kvlease.StepJob)
			_, err := a.Claim(t.Context(), in)
			require.ErrorIs(t, err, kvlease.ErrDiedForTest)
			mustClaim(t, b.Store, limitClaim(job, 2, backend.OverlapSkip, 2), backend.OutcomeOverlap)
			_, res := claimUntil(t, b.Store, limitClaim(job, 1, backend.OverlapSkip, 2))
			assert.Equal(t, backend.OutcomeWon, res.Outcome)
			assert.Equal(t, 1, res.Attempt, "a first claim: the dead one never ran")
			assert.True(t, res.LimitReached, "the dead claim was counted: the count errs high")
			mustClaim(t, b.Store, limitClaim(job, 3, backend.OverlapAllow, 2), backend.OutcomeLimit)
		})
	}
}

// Job key, then run record, for a buffered slot: the job key is the decision.
// Active lists it buffered, the next claim of it writes its record and waits,
// and it runs once the slot before it ended.
func TestCrashBufferedAfterJobKey(t *testing.T) {
	t.Parallel()
	job := "crash buffer " + token()
	a, b := leasedPair(t, singleJS, job, kvlease.WithBucket(bucket))
	first := bufferClaim(job, 1, backend.OverlapBufferOne, 0)
	mustClaim(t, a.Store, first, backend.OutcomeWon)
	in := bufferClaim(job, 2, backend.OverlapBufferOne, 0)
	dieAt(a.Store, in.Slot, kvlease.StepJob)
	_, err := a.Claim(t.Context(), in)
	require.ErrorIs(t, err, kvlease.ErrDiedForTest)

	runs, err := b.Active(t.Context(), job)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	assert.True(t, runs[1].Buffered, "listed buffered, its record not written")
	assert.Equal(t, in.Token, runs[1].Token)
	mustClaim(t, b.Store, bufferClaim(job, 3, backend.OverlapBufferOne, 0), backend.OutcomeOverlap)
	mustClaim(t, b.Store, bufferClaim(job, 2, backend.OverlapBufferOne, 0), backend.OutcomeBuffered)
	finishAt(t, a.Store, first, backend.StatusOK)
	res := mustClaim(t, b.Store, bufferClaim(job, 2, backend.OverlapBufferOne, 0), backend.OutcomeWon)
	assert.Equal(t, 1, res.Attempt)
}

// Run record, then lease key, of a cancel request: the request stored in the
// run record alone is not in the holder's lease key, so its heartbeat does not
// see it; the next claim of the asking slot completes it, and the holder is told.
func TestCrashCancelRequestHalf(t *testing.T) {
	t.Parallel()
	job := "crash cancel " + token()
	a, b := leasedPair(t, singleJS, job, kvlease.WithBucket(bucket))
	held := bufferClaim(job, 1, backend.OverlapCancelOther, 0)
	mustClaim(t, a.Store, held, backend.OutcomeWon)
	later := bufferClaim(job, 2, backend.OverlapCancelOther, 0)
	dieAt(b.Store, held.Slot, kvlease.StepAsked)
	_, err := b.Claim(t.Context(), later)
	require.ErrorIs(t, err, kvlease.ErrDiedForTest)
	require.NoError(t, a.Heartbeat(t.Context(), held.Key(), time.Minute), "the lease key does not carry it")
	mustClaim(t, b.Store, later, backend.OutcomeRunning)
	var ce *backend.CancelError
	require.ErrorAs(t, a.Heartbeat(t.Context(), held.Key(), time.Minute), &ce)
	assert.Equal(t, later.Slot, ce.Request.Slot)
}

// Run record (with its record), then the history: a holder that dies after
// storing its settle leaves the record in the run record; the next claim of the
// slot writes it, and the history holds it once.
func TestCrashSettleBeforeItsRecord(t *testing.T) {
	t.Parallel()
	for _, step := range []string{kvlease.StepStored, kvlease.StepWritten} {
		t.Run(step, func(t *testing.T) {
			job := "crash settle " + token()
			a, b := leasedPair(t, singleJS, job, kvlease.WithBucket(bucket))
			in := bufferClaim(job, 1, backend.OverlapAllow, 0)
			in.Lease = time.Second
			mustClaim(t, a.Store, in, backend.OutcomeWon)
			dieAt(a.Store, in.Slot, step)
			err := a.Settle(t.Context(), backend.Settlement{Key: in.Key(), Status: backend.StatusOK, Retention: backend.Retention{Size: 50}})
			require.ErrorIs(t, err, kvlease.ErrDiedForTest)
			if step == kvlease.StepStored {
				assert.Empty(t, a.records(t, job, 1), "not written yet")
			}
			_, res := claimUntil(t, b.Store, bufferClaim(job, 1, backend.OverlapAllow, 0))
			assert.Equal(t, backend.OutcomeDone, res.Outcome)
			assert.Equal(t, backend.StatusOK, res.Status)
			assert.Equal(t, map[string]backend.Status{in.Token: backend.StatusOK}, b.records(t, job, 1))
			require.NoError(t, a.Settle(t.Context(), backend.Settlement{Key: in.Key(), Status: backend.StatusOK}), "a repeat")
			assert.Equal(t, map[string]backend.Status{in.Token: backend.StatusOK}, b.records(t, job, 1), "stored once")
		})
	}
}

// The records of a claim's decisions: a takeover records the attempt it took
// over lost, a late slot its decision, and Settle the holder's attempt; each
// once, whatever repeats.
func TestRecordsOfOneSlot(t *testing.T) {
	t.Parallel()
	job := "records " + token()
	a, b := leasedPair(t, singleJS, job, kvlease.WithBucket(bucket))
	in := bufferClaim(job, 1, backend.OverlapAllow, 0)
	in.Lease = time.Second
	mustClaim(t, a.Store, in, backend.OutcomeWon)
	taken, res := claimUntil(t, b.Store, bufferClaim(job, 1, backend.OverlapAllow, 0))
	require.Equal(t, backend.OutcomeWon, res.Outcome)
	require.Equal(t, 2, res.Attempt)
	mustClaim(t, b.Store, taken, backend.OutcomeWon) // a repeat
	require.NoError(t, b.Settle(t.Context(), backend.Settlement{Key: taken.Key(), Status: backend.StatusError, Error: "boom"}))
	assert.ErrorIs(t, a.Settle(t.Context(), backend.Settlement{Key: in.Key(), Status: backend.StatusOK}), backend.ErrStaleToken)
	assert.Equal(t, map[string]backend.Status{in.Token: backend.StatusLost, taken.Token: backend.StatusError}, a.records(t, job, 1))

	late := bufferClaim(job, 2, backend.OverlapAllow, 0)
	late.Deadline = time.Now().Add(-time.Hour)
	mustClaim(t, a.Store, late, backend.OutcomeLate)
	mustClaim(t, a.Store, late, backend.OutcomeLate)
	assert.Equal(t, map[string]backend.Status{late.Token: backend.StatusLate}, a.records(t, job, 2))
}
