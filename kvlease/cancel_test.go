package kvlease_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// cancelSlot is slot k (minutes) of the cancel tests' jobs.
func cancelSlot(k int) time.Time { return time.UnixMilli(1_900_000_000_000 + int64(k)*60_000).UTC() }

// cancelClaim is a claim of slot k of job under OverlapCancelOther.
func cancelClaim(job string, k int, tok string) backend.RunClaim {
	in := claimOf(job, cancelSlot(k), tok, time.Minute)
	in.Overlap = backend.OverlapCancelOther
	return in
}

// valueOf decodes a key's last message as JSON (nil when it holds none).
func valueOf(t *testing.T, js jetstream.JetStream, key string) map[string]any {
	t.Helper()
	m := lastMsg(t, js, key)
	if m == nil || len(m.Data) == 0 {
		return nil
	}
	var v map[string]any
	require.NoError(t, json.Unmarshal(m.Data, &v), "the value of %s", key)
	return v
}

// requireRequest checks that v carries the request of claim in.
func requireRequest(t *testing.T, v map[string]any, in backend.RunClaim, what string) {
	t.Helper()
	require.NotNil(t, v, what)
	assert.Equal(t, in.Token, v["cancel_token"], what)
	assert.Equal(t, in.Instance, v["cancel_instance"], what)
	assert.EqualValues(t, in.Slot.UnixMilli(), v["cancel_slot_ms"], what)
}

// requireCancelError checks that err is the holder's heartbeat answer for the
// request of claim in.
func requireCancelError(t *testing.T, err error, in backend.RunClaim) {
	t.Helper()
	require.ErrorIs(t, err, backend.ErrCancelRequested)
	require.NotErrorIs(t, err, backend.ErrLeaseLost)
	var ce *backend.CancelError
	require.True(t, errors.As(err, &ce), "a *CancelError: %v", err)
	assert.Equal(t, in.Token, ce.Request.Token)
	assert.Equal(t, in.Instance, ce.Request.Instance)
	assert.True(t, ce.Request.Slot.Equal(in.Slot), "the asking slot: %v", ce.Request.Slot)
}

// The request is stored in the run record and then in the holder's lease key,
// which keeps its holder and gets a full lease's TTL; the finished record keeps
// the request, and the holder's finish purges its lease key although the claimer
// rewrote it.
func TestCancelRequestRecords(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	holder := newStore(t, js, kvlease.WithBucket(bucket))
	asker := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	job := "cancel records " + token()
	first := cancelClaim(job, 1, token())
	mustClaim(t, holder, first, backend.OutcomeWon)
	later := cancelClaim(job, 2, token())
	res := mustClaim(t, asker, later, backend.OutcomeRunning)
	assert.True(t, res.WaitsFor.Equal(first.Slot), "waits for slot 1: %+v", res)
	assert.Equal(t, first.Instance, res.Holder)
	assert.Equal(t, 1, res.Attempt)
	assert.Nil(t, lastMsg(t, js, leaseKey(job, later.Slot)), "nothing is written for the waiting slot")
	assert.Nil(t, lastMsg(t, js, runKey(job, later.Slot)), "nothing is written for the waiting slot")

	requireRequest(t, valueOf(t, js, runKey(job, first.Slot)), later, "the run record")
	lease := valueOf(t, js, leaseKey(job, first.Slot))
	requireRequest(t, lease, later, "the lease key")
	assert.Equal(t, first.Token, lease["token"], "the lease key keeps its holder")
	assert.Equal(t, "60s", lastMsg(t, js, leaseKey(job, first.Slot)).Header.Get(jetstream.MsgTTLHeader), "a full lease")

	requireCancelError(t, holder.Heartbeat(t.Context(), first.Key(), time.Minute), later)
	requireCancelError(t, holder.Heartbeat(t.Context(), first.Key(), time.Minute), later)
	active, err := asker.Active(t.Context(), job)
	require.NoError(t, err)
	require.Len(t, active, 1)
	assert.True(t, active[0].Live)
	require.NotNil(t, active[0].Cancel)
	assert.Equal(t, later.Token, active[0].Cancel.Token)

	require.NoError(t, holder.Finish(t.Context(), first.Key(), backend.StatusCancelled))
	run := valueOf(t, js, runKey(job, first.Slot))
	assert.Equal(t, "finished", run["state"])
	assert.Equal(t, "cancelled", run["status"])
	requireRequest(t, run, later, "the finished run record")
	m := lastMsg(t, js, leaseKey(job, first.Slot))
	if m != nil {
		assert.Equal(t, "PURGE", m.Header.Get("KV-Operation"), "the holder's lease ended")
	}
	won := mustClaim(t, asker, later, backend.OutcomeWon)
	assert.Equal(t, 1, won.Attempt)
	require.NoError(t, asker.Heartbeat(t.Context(), later.Key(), time.Minute), "the new run has no request")
	require.NoError(t, asker.Finish(t.Context(), later.Key(), backend.StatusOK))

	// A rerun of the cancelled slot is a new attempt, without the request.
	rerun := cancelClaim(job, 1, token())
	rerun.Backfill, rerun.Rerun, rerun.RerunAttempt = true, true, 1
	reopened := mustClaim(t, holder, rerun, backend.OutcomeWon)
	assert.True(t, reopened.Reopened)
	assert.Nil(t, valueOf(t, js, runKey(job, rerun.Slot))["cancel_token"], "the new attempt's record")
	require.NoError(t, holder.Heartbeat(t.Context(), rerun.Key(), time.Minute))
	active, err = holder.Active(t.Context(), job)
	require.NoError(t, err)
	require.Len(t, active, 1)
	assert.Nil(t, active[0].Cancel)
}

// A claimer that dies between the request's two writes leaves it in the run
// record alone; the next claim of the later slot (another token, another store)
// writes the lease key's half, the first request standing, and the holder's
// heartbeat then reports it.
func TestCancelRequestHalfWrittenIsCompleted(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	holder := newStore(t, js, kvlease.WithBucket(bucket))
	dying := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	next := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	job := "cancel half " + token()
	first := cancelClaim(job, 1, token())
	mustClaim(t, holder, first, backend.OutcomeWon)

	ctx, die := context.WithCancel(t.Context())
	kvlease.OnCancelRequestForTest(dying, func(string, time.Time) { die() })
	asked := cancelClaim(job, 2, token())
	_, err := dying.Claim(ctx, asked)
	require.ErrorIs(t, err, context.Canceled, "the claimer died between its writes")
	requireRequest(t, valueOf(t, js, runKey(job, first.Slot)), asked, "the run record")
	lease := valueOf(t, js, leaseKey(job, first.Slot))
	assert.Nil(t, lease["cancel_token"], "the lease key's half is missing")
	assert.NotErrorIs(t, holder.Heartbeat(t.Context(), first.Key(), time.Minute), backend.ErrLeaseLost)

	again := cancelClaim(job, 2, token())
	res := mustClaim(t, next, again, backend.OutcomeRunning)
	assert.True(t, res.WaitsFor.Equal(first.Slot))
	requireRequest(t, valueOf(t, js, leaseKey(job, first.Slot)), asked, "the lease key, completed with the stored request")
	requireRequest(t, valueOf(t, js, runKey(job, first.Slot)), asked, "the first request stands")
	requireCancelError(t, holder.Heartbeat(t.Context(), first.Key(), time.Minute), asked)
}

// A heartbeat between the request's two writes moves the lease key: the
// claimer's lease-key write loses, reads, and writes it again for the same
// holder. Heartbeats racing claims that ask keep the lease, and keep the request.
func TestCancelRequestRacesHeartbeats(t *testing.T) {
	t.Parallel()
	t.Run("between the writes", func(t *testing.T) {
		t.Parallel()
		js := singleJS(t)
		holder := newStore(t, js, kvlease.WithBucket(bucket))
		asker := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
		job := "cancel beat " + token()
		first := cancelClaim(job, 1, token())
		mustClaim(t, holder, first, backend.OutcomeWon)
		var beats atomic.Int32
		kvlease.OnCancelRequestForTest(asker, func(string, time.Time) {
			if beats.Add(1) == 1 {
				assert.NotErrorIs(t, holder.Heartbeat(t.Context(), first.Key(), time.Minute), backend.ErrLeaseLost)
			}
		})
		later := cancelClaim(job, 2, token())
		mustClaim(t, asker, later, backend.OutcomeRunning)
		assert.GreaterOrEqual(t, beats.Load(), int32(2), "the lease-key write lost to the heartbeat and was made again")
		lease := valueOf(t, js, leaseKey(job, first.Slot))
		assert.Equal(t, first.Token, lease["token"])
		requireRequest(t, lease, later, "the lease key")
		requireCancelError(t, holder.Heartbeat(t.Context(), first.Key(), time.Minute), later)
	})
	t.Run("at once", func(t *testing.T) {
		t.Parallel()
		js := singleJS(t)
		holder := newStore(t, js, kvlease.WithBucket(bucket))
		job := "cancel beats " + token()
		first := cancelClaim(job, 1, token())
		mustClaim(t, holder, first, backend.OutcomeWon)
		var ins []backend.RunClaim
		var stores []*kvlease.Store
		for range 4 {
			ins = append(ins, cancelClaim(job, 2, token()))
			stores = append(stores, newStore(t, singleJS(t), kvlease.WithBucket(bucket)))
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		var asked atomic.Int32
		wg.Go(func() {
			for {
				err := holder.Heartbeat(t.Context(), first.Key(), time.Minute)
				if !assert.NotErrorIs(t, err, backend.ErrLeaseLost, "a heartbeat racing the requests") {
					return
				}
				if err != nil && assert.ErrorIs(t, err, backend.ErrCancelRequested) {
					asked.Add(1)
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
		for _, r := range raceOverlap(t, stores, ins) {
			assert.Equal(t, backend.OutcomeRunning, r.Outcome)
			assert.True(t, r.WaitsFor.Equal(first.Slot))
		}
		close(done)
		wg.Wait()
		t.Logf("%d heartbeats reported the request", asked.Load())
		// One request stands, the first stored, in both keys.
		run := valueOf(t, js, runKey(job, first.Slot))
		require.NotNil(t, run["cancel_token"])
		var standing backend.RunClaim
		for _, in := range ins {
			if in.Token == run["cancel_token"] {
				standing = in
			}
		}
		require.NotEmpty(t, standing.Token, "the request is one of the claims'")
		// A claim after the race completes the lease key's half if a lost write
		// left it out.
		mustClaim(t, stores[0], ins[0], backend.OutcomeRunning)
		lease := valueOf(t, js, leaseKey(job, first.Slot))
		assert.Equal(t, first.Token, lease["token"])
		requireRequest(t, lease, standing, "the lease key")
		requireCancelError(t, holder.Heartbeat(t.Context(), first.Key(), time.Minute), standing)
	})
}

// A run stored by a version that predates the request's fields (a rolling
// upgrade) decodes, is asked to end like any other, and keeps its fields; the
// older holder's heartbeat, which rewrites the lease key without the request, is
// repaired by the next claim that asks.
func TestCancelRequestOnAnOlderRecord(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job := "cancel older " + token()
	slot, old := cancelSlot(1), "t-old-"+token()
	oldLease := map[string]any{"v": 1, "token": old, "instance": "v0", "lease_ms": 60000}
	put(t, js, bucketKey{bucket, leaseKey(job, slot)}, oldLease, time.Minute)
	put(t, js, bucketKey{bucket, runKey(job, slot)}, map[string]any{
		"v": 1, "job": job, "slot_ms": slot.UnixMilli(), "token": old, "instance": "v0", "attempt": 1,
		"fence": 42, "state": "running", "lease_ms": 60000, "keep_ms": 3600000,
	}, time.Hour)
	active, err := s.Active(t.Context(), job)
	require.NoError(t, err)
	require.Len(t, active, 1)
	assert.Nil(t, active[0].Cancel, "no request in an older record")

	later := cancelClaim(job, 2, token())
	res := mustClaim(t, s, later, backend.OutcomeRunning)
	assert.True(t, res.WaitsFor.Equal(slot))
	assert.Equal(t, "v0", res.Holder)
	run := valueOf(t, js, runKey(job, slot))
	requireRequest(t, run, later, "the run record")
	assert.EqualValues(t, 42, run["fence"], "the older record's fields are kept")
	assert.Equal(t, "running", run["state"])
	requireRequest(t, valueOf(t, js, leaseKey(job, slot)), later, "the lease key")

	// The older holder's heartbeat: its lease key rewritten without the fields.
	m := lastMsg(t, js, leaseKey(job, slot))
	data, err := json.Marshal(oldLease)
	require.NoError(t, err)
	msg := nats.NewMsg("$KV." + bucket + "." + leaseKey(job, slot))
	msg.Data = data
	_, err = js.PublishMsg(t.Context(), msg, jetstream.WithExpectLastSequencePerSubject(m.Sequence), jetstream.WithMsgTTL(time.Minute))
	require.NoError(t, err)
	assert.Nil(t, valueOf(t, js, leaseKey(job, slot))["cancel_token"])

	mustClaim(t, s, cancelClaim(job, 2, token()), backend.OutcomeRunning)
	lease := valueOf(t, js, leaseKey(job, slot))
	requireRequest(t, lease, later, "the lease key, repaired")
	assert.Equal(t, old, lease["token"])
}

// Two slots claimed at once, held so that both pass the first look and see each
// other's lease key at the second: one runs; the other is skipped (the earlier
// slot, giving way to the later) or waits for the earlier one, whose run it asks
// to end once established.
func TestCancelOtherTie(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	stores := []*kvlease.Store{
		newStore(t, js, kvlease.WithBucket(bucket)),
		newStore(t, singleJS(t), kvlease.WithBucket(bucket)),
	}
	for round := range 6 {
		job := "cancel tie " + strconv.Itoa(round) + " " + token()
		ins := []backend.RunClaim{cancelClaim(job, 1, token()), cancelClaim(job, 2, token())}
		untie := tie(stores, 2)
		results := raceOverlap(t, stores, ins)
		untie()
		t.Logf("round %d: slot 1 %s, slot 2 %s", round, results[0].Outcome, results[1].Outcome)
		switch {
		case results[0].Outcome == backend.OutcomeWon:
			require.Equal(t, backend.OutcomeRunning, results[1].Outcome, "round %d: %+v", round, results)
			assert.True(t, results[1].WaitsFor.Equal(ins[0].Slot), "round %d: the later slot waits for the earlier", round)
			// Established by now: the repeated claim asks it to end.
			mustClaim(t, stores[1], ins[1], backend.OutcomeRunning)
			requireRequest(t, valueOf(t, js, runKey(job, ins[0].Slot)), ins[1], "the earlier run's record")
			requireCancelError(t, stores[0].Heartbeat(t.Context(), ins[0].Key(), time.Minute), ins[1])
		case results[1].Outcome == backend.OutcomeWon:
			require.Equal(t, backend.OutcomeOverlap, results[0].Outcome, "round %d: %+v", round, results)
			d := mustClaim(t, stores[1], cancelClaim(job, 1, token()), backend.OutcomeDone)
			assert.Equal(t, backend.StatusSkipped, d.Status)
		default:
			require.Failf(t, "no slot runs", "round %d: %+v", round, results)
		}
	}
}
