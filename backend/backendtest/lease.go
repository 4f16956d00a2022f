package backendtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Leases used by the lease section. A short lease is meant to expire during a test
// (scheduler.MinLease, so stores counting expiry in whole seconds run it as it is); a
// long one never does.
const (
	leaseShort = scheduler.MinLease
	leaseLong  = time.Minute
	// leaseExpiryBound bounds the wait for a short lease to be seen expired: the
	// store judges expiry, and a server may remove an expired key a little late.
	leaseExpiryBound = 10 * time.Second
	// leaseKeep is the RunClaim.Keep of the section's claims.
	leaseKeep = 10 * time.Minute
	// leaseKeepShort is the Keep of KeepForgets: short, and whole seconds, since a
	// store may count keeps in whole seconds (a key's TTL on a NATS server).
	leaseKeepShort = 2 * time.Second
	// leaseForgetBound bounds the wait, after Keep, for a finished run to be
	// forgotten: a server removes an expired key a little late.
	leaseForgetBound = 15 * time.Second
	// leaseWatchBound bounds the wait for a watch that must fire.
	leaseWatchBound = 5 * time.Second
	// leaseControlSlot is the slot of the positive control of requireWatchOpen, far
	// from the slots the cases claim.
	leaseControlSlot = 999
)

// RunLeases runs the lease section of the conformance suite against the RunStore
// newStore returns: the lease rules of a backend.RunStore (and of a
// backend.LeaseWatcher when the store is one), judged with real time. Each case
// runs in parallel with the others, on its own store and its own job names, and
// short leases really expire, so the section takes a few seconds.
//
// A store that is a backend.RecordsUser is given a history of the suite's own
// (UseRecords) before the first call, and the settle cases check the records a
// backend.Settler writes there. A Settler whose history is a backend of its own
// runs them with RunLeasesWithHistory.
//
// newStore is called once per case; resources it opens should be closed with
// t.Cleanup. RunLeases returns when every case has finished.
func RunLeases(t *testing.T, newStore func(t *testing.T) backend.RunStore) {
	t.Helper()
	runLeases(t, func(t *testing.T) (backend.RunStore, Historian) {
		s := newStore(t)
		if u, ok := s.(backend.RecordsUser); ok {
			w := newRecords()
			u.UseRecords(w)
			return s, w
		}
		return s, nil
	})
}

// RunLeasesWithHistory is RunLeases for a store whose records go to a history
// of its own: newStore returns the store and what reads that history (the
// backend the store belongs to). The store is given nothing.
func RunLeasesWithHistory(t *testing.T, newStore func(t *testing.T) (backend.RunStore, Historian)) {
	t.Helper()
	runLeases(t, newStore)
}

func runLeases(t *testing.T, newStore func(t *testing.T) (backend.RunStore, Historian)) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, f *leaseFixture)
	}{
		{"OneWinnerAmongRacers", testLeaseOneWinner},
		{"HeartbeatOnlyByHolder", testLeaseHeartbeat},
		{"StaleFinishChangesNothing", testLeaseStaleFinish},
		{"TakeoverAfterExpiry", testLeaseTakeoverAfterExpiry},
		{"ExpiredHolderMayFinishUntilTakenOver", testLeaseExpiredHolderFinishes},
		{"ReleaseHandsOver", testLeaseRelease},
		{"DoneAfterFinish", testLeaseDone},
		{"Overlap", testLeaseOverlap},
		{"OverlapRace", testLeaseOverlapRace},
		{"Late", testLeaseLate},
		{"Missed", testLeaseMissed},
		{"SkippedAndLateAreFinal", testLeaseDecisionsFinal},
		{"ReopenPaused", testLeaseReopenPaused},
		{"BackfillReopens", testLeaseBackfillReopens},
		{"TakeoverOnly", testLeaseTakeoverOnly},
		{"Active", testLeaseActive},
		{"ActiveJobs", testLeaseActiveJobs},
		{"InvalidClaims", testLeaseInvalid},
		{"WatchRelease", testLeaseWatchRelease},
		{"WatchFinish", testLeaseWatchFinish},
		{"WatchExpiry", testLeaseWatchExpiry},
		{"WatchEndsWithContext", testLeaseWatchCancel},
		{"KeepForgets", testLeaseKeepForgets},
		{"RetryHandsOver", testRetryHandsOver},
		{"RetryOneWinner", testRetryOneWinner},
		{"RetryMissed", testRetryMissed},
		{"RetryStale", testRetryStale},
		{"RetryRepeatAfterClaim", testRetryRepeatAfterClaim},
		{"RetryOutlivesKeep", testRetryOutlivesKeep},
		{"CancelOtherAsks", testCancelOtherAsks},
		{"CancelOtherNoTakeover", testCancelOtherNoTakeover},
		{"CancelOtherRace", testCancelOtherRace},
		{"CancelOtherWakesTheHolder", testCancelOtherWakesTheHolder},
		{"BufferOne", testBufferOne},
		{"BufferAllOrder", testBufferAllOrder},
		{"BufferAdoptAndWithdraw", testBufferAdoptAndWithdraw},
		{"BufferBehindRetry", testBufferBehindRetry},
		{"BufferRace", testBufferRace},
		{"BufferWatch", testBufferWatch},
		{"Concurrency", testConcurrency},
		{"LimitReached", testLimitReached},
		{"LimitUncounted", testLimitUncounted},
		{"LimitRace", testLimitRace},
		{"LimitBuffered", testLimitBuffered},
		{"LimitSkipped", testLimitSkipped},
		{"RunCount", testRunCount},
		{"SettleDecisionsRecorded", testSettleDecisions},
		{"SettleTakeoverRecordsLost", testSettleTakeover},
		{"SettleEndsRecorded", testSettleEnds},
		{"SettleWithdrawRecorded", testSettleWithdraw},
		{"SettleStaleAddsNone", testSettleStale},
		{"SettleCancelOtherHolderDied", testSettleCancelOtherDied},
		{"SettleBufferedUnderPause", testSettleBufferedPaused},
		{"SettleEntryIncarnation", testSettleIncarnation},
		{"SettleRecordWriteFails", testSettleWriteFails},
		{"SettleRepeatAfterPause", testSettleRepeatAfterPause},
	}
	t.Run("Leases", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				s, h := newStore(t)
				require.NotNil(t, s, "newStore")
				f := newLeaseFixture(t, s, c.name)
				f.hist = h
				f.raw, _ = h.(*records)
				c.fn(t, f)
			})
		}
	})
}

// leaseFixture is one case's store, job and slot.
type leaseFixture struct {
	t    *testing.T
	s    backend.RunStore
	ctx  context.Context
	job  string
	slot time.Time
	// hist reads the store's records, nil when the suite cannot (settle cases
	// are skipped); raw is hist when it is the suite's own.
	hist Historian
	raw  *records
}

func newLeaseFixture(t *testing.T, s backend.RunStore, name string) *leaseFixture {
	return &leaseFixture{
		t:   t,
		s:   s,
		ctx: Context(t),
		// Job names may hold any character: spaces, dots, slashes, unicode.
		job:  JobName("lease ✓ " + name + " a.b/c"),
		slot: leaseSlot(0),
	}
}

// leaseSlot returns the k-th slot of the section's jobs, at millisecond precision.
func leaseSlot(k int) time.Time {
	return time.UnixMilli(1_900_000_000_000 + int64(k)*60_000).UTC()
}

// rc is a claim of f.slot by token with a deadline an hour away.
func (f *leaseFixture) rc(token, instance string, lease time.Duration) backend.RunClaim {
	return backend.RunClaim{
		Job:      f.job,
		Slot:     f.slot,
		Token:    token,
		Instance: instance,
		Lease:    lease,
		Deadline: time.Now().Add(time.Hour),
		Keep:     leaseKeep,
	}
}

func (f *leaseFixture) claim(in backend.RunClaim) backend.ClaimResult {
	f.t.Helper()
	res, err := f.s.Claim(f.ctx, in)
	require.NoError(f.t, err, "Claim by %s", in.Instance)
	return res
}

// won claims f.slot for token and requires the claim to win.
func (f *leaseFixture) won(token, instance string, lease time.Duration) backend.ClaimResult {
	f.t.Helper()
	res := f.claim(f.rc(token, instance, lease))
	require.Equal(f.t, backend.OutcomeWon, res.Outcome, "claim by %s", instance)
	return res
}

func (f *leaseFixture) outcome(in backend.RunClaim, want backend.ClaimOutcome) backend.ClaimResult {
	f.t.Helper()
	res := f.claim(in)
	assert.Equal(f.t, want, res.Outcome, "claim by %s", in.Instance)
	return res
}

func (f *leaseFixture) heartbeat(token string) error {
	return f.s.Heartbeat(f.ctx, backend.RunKey{Job: f.job, Slot: f.slot, Token: token}, leaseLong)
}

func (f *leaseFixture) finish(token string, st backend.Status) error {
	return f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: f.slot, Token: token}, st)
}

func (f *leaseFixture) release(token string) {
	f.t.Helper()
	require.NoError(f.t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: f.slot, Token: token}), "Release")
}

// waitExpired polls Active until the run in slot is listed with an expired lease.
func (f *leaseFixture) waitExpired(slot time.Time) {
	f.t.Helper()
	deadline := time.Now().Add(leaseExpiryBound)
	for {
		runs, err := f.s.Active(f.ctx, f.job)
		require.NoError(f.t, err, "Active")
		for _, r := range runs {
			if r.Slot.Equal(slot) && !r.Live {
				return
			}
		}
		if time.Now().After(deadline) {
			require.FailNow(f.t, "lease did not expire", "slot %s still live after %v: %+v", slot, leaseExpiryBound, runs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// race has n claimers with fresh tokens claim in together; it returns their claims
// and results by claimer. Each claim is changed by each of change, if any.
func (f *leaseFixture) race(n int, lease time.Duration, change ...func(*backend.RunClaim)) ([]backend.RunClaim, []backend.ClaimResult) {
	f.t.Helper()
	claims := make([]backend.RunClaim, n)
	results := make([]backend.ClaimResult, n)
	errs := make([]error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		claims[i] = f.rc(Token(), fmt.Sprintf("racer-%d", i), lease)
		for _, c := range change {
			c(&claims[i])
		}
		wg.Go(func() {
			<-gate
			results[i], errs[i] = f.s.Claim(f.ctx, claims[i])
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		require.NoError(f.t, err, "Claim by racer %d", i)
	}
	return claims, results
}

// oneWinner requires exactly one won among results, every other one running with
// the winner as holder, and returns the winner's index.
func (f *leaseFixture) oneWinner(results []backend.ClaimResult) int {
	f.t.Helper()
	winner := -1
	for i, r := range results {
		if r.Outcome == backend.OutcomeWon {
			require.Equal(f.t, -1, winner, "two winners: racers %d and %d (%+v)", winner, i, results)
			winner = i
		}
	}
	require.NotEqual(f.t, -1, winner, "no winner among %+v", results)
	for i, r := range results {
		if i == winner {
			continue
		}
		assert.Equal(f.t, backend.OutcomeRunning, r.Outcome, "racer %d", i)
		assert.Equal(f.t, results[winner].Holder, r.Holder, "racer %d is told who holds the lease", i)
		assert.False(f.t, r.Expires.IsZero(), "racer %d is told when the lease expires", i)
	}
	return winner
}

func leaseAssertFenceGrew(t *testing.T, before, after backend.ClaimResult) {
	t.Helper()
	assert.Greater(t, after.Fence, before.Fence, "a new holder gets a bigger fence")
}

func testLeaseOneWinner(t *testing.T, f *leaseFixture) {
	claims, results := f.race(8, leaseLong)
	w := f.oneWinner(results)
	won := results[w]
	assert.Equal(t, claims[w].Instance, won.Holder)
	assert.Equal(t, 1, won.Attempt)
	assert.NotZero(t, won.Fence)
	assert.False(t, won.Expires.IsZero())
	assert.Empty(t, won.Previous, "a first claim took over from nobody")
	assert.Empty(t, won.PreviousToken)

	again := f.claim(claims[w])
	assert.Equal(t, backend.OutcomeWon, again.Outcome, "the winning token asking again wins again")
	assert.Equal(t, won.Attempt, again.Attempt)
	assert.Equal(t, won.Fence, again.Fence)
	assert.Equal(t, won.Holder, again.Holder)

	loser := (w + 1) % len(claims)
	f.outcome(claims[loser], backend.OutcomeRunning)
}

func testLeaseHeartbeat(t *testing.T, f *leaseFixture) {
	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	assert.ErrorIs(t, f.heartbeat("wrong-"+Token()), backend.ErrLeaseLost, "a token that never held the lease")
	assert.ErrorIs(t, f.s.Heartbeat(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: a}, leaseLong), backend.ErrLeaseLost,
		"a slot with nothing stored")
	assert.Error(t, f.s.Heartbeat(f.ctx, backend.RunKey{Job: f.job, Slot: f.slot, Token: a}, 0), "a zero lease is invalid")

	before := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeRunning)
	require.NoError(t, f.heartbeat(a), "the holder's heartbeat")
	after := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeRunning)
	assert.False(t, after.Expires.Before(before.Expires), "a heartbeat never shortens the lease")
	assert.Equal(t, "a", after.Holder)
	require.NoError(t, f.heartbeat(a), "heartbeats repeat")
}

func testLeaseStaleFinish(t *testing.T, f *leaseFixture) {
	a, b := "a-"+Token(), "b-"+Token()
	ra := f.won(a, "a", leaseLong)
	f.release(a)
	rb := f.won(b, "b", leaseLong)
	assert.Equal(t, 2, rb.Attempt)
	leaseAssertFenceGrew(t, ra, rb)

	assert.ErrorIs(t, f.finish(a, backend.StatusOK), backend.ErrStaleToken, "the holder that was taken over")
	assert.ErrorIs(t, f.finish("never-"+Token(), backend.StatusOK), backend.ErrStaleToken, "a token that never held it")
	assert.ErrorIs(t, f.heartbeat(a), backend.ErrLeaseLost)
	require.NoError(t, f.heartbeat(b), "the stale Finish left the real holder's lease alone")
	f.outcome(f.rc(Token(), "c", leaseLong), backend.OutcomeRunning)

	require.NoError(t, f.finish(b, backend.StatusError))
	done := f.outcome(f.rc(Token(), "c", leaseLong), backend.OutcomeDone)
	assert.Equal(t, "b", done.Holder, "the real holder's result stands")
	assert.Equal(t, 2, done.Attempt)
	assert.ErrorIs(t, f.finish(a, backend.StatusOK), backend.ErrStaleToken, "a stale Finish after the real one")
	assert.NoError(t, f.finish(b, backend.StatusError), "the holder repeating its Finish")
}

func testLeaseTakeoverAfterExpiry(t *testing.T, f *leaseFixture) {
	a := "a-" + Token()
	ra := f.won(a, "a", leaseShort)
	f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeRunning)
	f.waitExpired(f.slot)

	claims, results := f.race(6, leaseLong)
	w := f.oneWinner(results)
	won := results[w]
	assert.Equal(t, 2, won.Attempt, "a takeover is the second attempt")
	leaseAssertFenceGrew(t, ra, won)
	assert.Equal(t, "a", won.Previous, "the takeover names the instance it took over from")
	assert.Equal(t, a, won.PreviousToken)
	assert.Equal(t, 1, won.PreviousAttempt)
	assert.Equal(t, claims[w].Instance, won.Holder)

	assert.ErrorIs(t, f.heartbeat(a), backend.ErrLeaseLost, "the expired holder")
	again := f.claim(claims[w])
	assert.Equal(t, backend.OutcomeWon, again.Outcome, "the new holder asking again")
	assert.Equal(t, won.Fence, again.Fence)
	assert.Equal(t, won.Attempt, again.Attempt)
}

// An expired holder has lost its lease, but nobody took the run over: its result is
// still the run's result.
func testLeaseExpiredHolderFinishes(t *testing.T, f *leaseFixture) {
	a := "a-" + Token()
	f.won(a, "a", leaseShort)
	f.waitExpired(f.slot)
	assert.ErrorIs(t, f.heartbeat(a), backend.ErrLeaseLost, "the store judges expiry")
	require.NoError(t, f.finish(a, backend.StatusOK), "Finish by the expired holder nobody took over from")
	done := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeDone)
	assert.Equal(t, "a", done.Holder)
	assert.Equal(t, 1, done.Attempt)
}

func testLeaseRelease(t *testing.T, f *leaseFixture) {
	a, b := "a-"+Token(), "b-"+Token()
	ra := f.won(a, "a", leaseLong)
	f.outcome(f.rc(b, "b", leaseLong), backend.OutcomeRunning)

	f.release("stranger-" + Token())
	f.outcome(f.rc(b, "b", leaseLong), backend.OutcomeRunning)

	f.release(a)
	rb := f.outcome(f.rc(b, "b", leaseLong), backend.OutcomeWon)
	assert.Equal(t, 2, rb.Attempt, "a backup takes over a released lease at once")
	assert.Equal(t, "a", rb.Previous)
	assert.Equal(t, a, rb.PreviousToken)
	leaseAssertFenceGrew(t, ra, rb)

	f.release(a) // releasing a lease no longer held is not an error
	assert.ErrorIs(t, f.heartbeat(a), backend.ErrLeaseLost)
	back := f.outcome(f.rc(a, "a", leaseLong), backend.OutcomeRunning)
	assert.Equal(t, "b", back.Holder, "the released holder cannot come back")
}

func testLeaseDone(t *testing.T, f *leaseFixture) {
	a := "a-" + Token()
	ra := f.won(a, "a", leaseLong)
	require.NoError(t, f.finish(a, backend.StatusOK))

	done := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeDone)
	assert.Equal(t, "a", done.Holder)
	assert.Equal(t, 1, done.Attempt)
	assert.Equal(t, ra.Fence, done.Fence)
	f.outcome(f.rc(a, "a", leaseLong), backend.OutcomeDone)

	probe := f.rc(Token(), "c", leaseLong)
	probe.TakeoverOnly = true
	f.outcome(probe, backend.OutcomeDone)
	late := f.rc(Token(), "c", leaseLong)
	late.Deadline = time.Now().Add(-time.Hour)
	f.outcome(late, backend.OutcomeDone)

	assert.ErrorIs(t, f.heartbeat(a), backend.ErrLeaseLost, "a finished run holds no lease")
	f.release(a)
	assert.NoError(t, f.finish(a, backend.StatusOK), "the holder repeating its Finish")
	assert.Error(t, f.finish(a, backend.StatusRunning), "running is not a final status")

	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	assert.Empty(t, runs, "a finished run is not active")
}

func testLeaseOverlap(t *testing.T, f *leaseFixture) {
	at := func(k int, token string, p backend.OverlapPolicy) backend.RunClaim {
		in := f.rc(token, "i-"+token[:4], leaseLong)
		in.Slot, in.Overlap = leaseSlot(k), p
		return in
	}
	t1, t2, t3, t5, skip := "t1"+Token(), "t2"+Token(), "t3"+Token(), "t5"+Token(), "sk"+Token()
	f.outcome(at(1, t1, backend.OverlapSkip), backend.OutcomeWon)
	f.outcome(at(2, skip, backend.OverlapSkip), backend.OutcomeOverlap)
	// The skip is a stored decision: its token is told again, and no other claim
	// runs the slot afterwards, whatever it asks.
	f.outcome(at(2, skip, backend.OverlapSkip), backend.OutcomeOverlap)
	done := f.outcome(at(2, t2, backend.OverlapAllow), backend.OutcomeDone)
	assert.Equal(t, backend.StatusSkipped, done.Status, "a claim of a skipped slot is told it was skipped")
	// A later slot's live lease counts too (a catch-up slot claimed after it).
	f.outcome(at(0, Token(), backend.OverlapSkip), backend.OutcomeOverlap)
	f.outcome(at(3, t3, backend.OverlapAllow), backend.OutcomeWon) // allowed: runs beside slot 1

	other := at(4, Token(), backend.OverlapSkip)
	other.Job = f.job + "-other"
	f.outcome(other, backend.OutcomeWon) // another job's leases do not count

	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: t1}, backend.StatusOK))
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(3), Token: t3}, backend.StatusOK))
	// The others are finished: none is running. (A released run that a backup is
	// about to take over may still count, for up to a lease.)
	f.outcome(at(5, t5, backend.OverlapSkip), backend.OutcomeWon)
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	for _, r := range runs {
		assert.False(t, r.Slot.Equal(leaseSlot(2)) || r.Slot.Equal(leaseSlot(0)), "a skipped slot is not active: %+v", r)
	}
}

// A claim with Missed stores a slot nobody decided finished missed, with its
// LateWhy; it is a decision like late. A slot that ran, or runs, is told so and
// kept.
func testLeaseMissed(t *testing.T, f *leaseFixture) {
	missed := func(token string) backend.RunClaim {
		in := f.rc(token, "a", leaseLong)
		in.Missed, in.Deadline, in.LateWhy = true, time.Unix(1, 0), "due while no instance could claim it (test)"
		return in
	}
	decider := missed(Token())
	res := f.outcome(decider, backend.OutcomeLate)
	assert.Equal(t, backend.StatusMissed, res.Status)
	f.outcome(decider, backend.OutcomeLate) // repeat-safe: the same token is told again
	for _, in := range []backend.RunClaim{f.rc(Token(), "b", leaseLong), missed(Token())} {
		res := f.outcome(in, backend.OutcomeDone)
		assert.Equal(t, backend.StatusMissed, res.Status)
	}
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	assert.Empty(t, runs, "a missed slot is not active")

	f.slot = leaseSlot(2)
	holder := Token()
	f.won(holder, "a", leaseLong)
	res = f.outcome(missed(Token()), backend.OutcomeRunning)
	assert.Equal(t, "a", res.Holder, "a running slot is kept")
	require.NoError(t, f.finish(holder, backend.StatusOK))
	res = f.outcome(missed(Token()), backend.OutcomeDone)
	assert.Equal(t, backend.StatusOK, res.Status, "a slot that ran is kept")
}

func testLeaseLate(t *testing.T, f *leaseFixture) {
	past := time.Now().Add(-time.Hour)
	lateToken := Token()
	late := f.rc(lateToken, "a", leaseLong)
	late.Deadline = past
	f.outcome(late, backend.OutcomeLate)
	f.outcome(late, backend.OutcomeLate) // repeat-safe: the same token is told again
	// Late is a stored decision: nobody runs the slot afterwards.
	for _, in := range []backend.RunClaim{f.rc(Token(), "b", leaseLong), f.rc(Token(), "c", leaseShort)} {
		res := f.outcome(in, backend.OutcomeDone)
		assert.Equal(t, backend.StatusLate, res.Status)
	}
	probe := f.rc(Token(), "a", leaseLong)
	probe.TakeoverOnly = true
	f.outcome(probe, backend.OutcomeDone)
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	assert.Empty(t, runs, "a late slot is not active")

	f.slot = leaseSlot(2)
	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	f.release(a)
	takeover := f.rc(Token(), "b", leaseLong)
	takeover.Deadline = past
	res := f.outcome(takeover, backend.OutcomeWon) // someone started the run: no deadline
	assert.Equal(t, 2, res.Attempt)

	noDeadline := f.rc(Token(), "c", leaseLong)
	noDeadline.Slot, noDeadline.Deadline = leaseSlot(1), time.Time{}
	f.outcome(noDeadline, backend.OutcomeWon)
}

func testLeaseTakeoverOnly(t *testing.T, f *leaseFixture) {
	probe := func() backend.RunClaim {
		in := f.rc(Token(), "probe", leaseLong)
		in.TakeoverOnly = true
		return in
	}
	f.outcome(probe(), backend.OutcomeNone)
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	assert.Empty(t, runs, "a none claim stores nothing")

	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	f.outcome(probe(), backend.OutcomeRunning)
	f.release(a)
	res := f.outcome(probe(), backend.OutcomeWon)
	assert.Equal(t, 2, res.Attempt)
	assert.Equal(t, "a", res.Previous)
}

func testLeaseActive(t *testing.T, f *leaseFixture) {
	at := func(k int, token string, lease time.Duration) backend.ClaimResult {
		in := f.rc(token, "i"+fmt.Sprint(k), lease)
		in.Slot = leaseSlot(k)
		return f.outcome(in, backend.OutcomeWon)
	}
	t1, t2, t3, t4 := Token(), Token(), Token(), Token()
	r1 := at(1, t1, leaseLong)
	at(2, t2, leaseShort)
	at(3, t3, leaseLong)
	at(4, t4, leaseLong)
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(3), Token: t3}))
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(4), Token: t4}, backend.StatusOK))
	f.waitExpired(leaseSlot(2))

	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	require.Len(t, runs, 3, "unfinished runs only: %+v", runs)
	for i, want := range []struct {
		slot  time.Time
		token string
		live  bool
	}{{leaseSlot(1), t1, true}, {leaseSlot(2), t2, false}, {leaseSlot(3), t3, false}} {
		assert.True(t, want.slot.Equal(runs[i].Slot), "run %d slot %s, want %s (oldest first)", i, runs[i].Slot, want.slot)
		assert.Equal(t, want.token, runs[i].Token, "run %d", i)
		assert.Equal(t, want.live, runs[i].Live, "run %d live", i)
		assert.Equal(t, 1, runs[i].Attempt, "run %d", i)
		assert.NotZero(t, runs[i].Fence, "run %d", i)
	}
	assert.Equal(t, "i1", runs[0].Instance)
	assert.Equal(t, r1.Fence, runs[0].Fence)
	assert.False(t, runs[0].Expires.IsZero(), "a live run tells when it expires")

	none, err := f.s.Active(f.ctx, f.job+"-other")
	require.NoError(t, err)
	assert.Empty(t, none)
}

// testLeaseActiveJobs: an ActiveLister lists each job's unfinished runs as Active
// does, in one call, and nothing of a job it was not asked for.
func testLeaseActiveJobs(t *testing.T, f *leaseFixture) {
	l, ok := f.s.(backend.ActiveLister)
	if !ok {
		t.Logf("%T is not a backend.ActiveLister: nothing to check", f.s)
		return
	}
	other, idle, unasked := f.job+" other.job", f.job+" idle", f.job+" not asked"
	at := func(job string, k int) string {
		token := Token()
		in := f.rc(token, "i"+fmt.Sprint(k), leaseLong)
		in.Job, in.Slot = job, leaseSlot(k)
		f.outcome(in, backend.OutcomeWon)
		return token
	}
	t1 := at(f.job, 1)
	t2 := at(f.job, 2)
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(2), Token: t2}))
	t3 := at(f.job, 3)
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(3), Token: t3}, backend.StatusOK))
	t4 := at(other, 1)
	at(unasked, 1)

	got, err := l.ActiveJobs(f.ctx, []string{f.job, other, idle})
	require.NoError(t, err)
	_, listed := got[unasked]
	assert.False(t, listed, "a job not asked for is not listed")
	assert.Empty(t, got[idle])
	type run struct {
		Slot     time.Time
		Token    string
		Instance string
		Live     bool
		Attempt  int
		Fence    uint64
	}
	view := func(runs []backend.ActiveRun) []run {
		var out []run
		for _, r := range runs {
			out = append(out, run{r.Slot.UTC(), r.Token, r.Instance, r.Live, r.Attempt, r.Fence})
		}
		return out
	}
	for _, job := range []string{f.job, other, idle} {
		want, err := f.s.Active(f.ctx, job)
		require.NoError(t, err)
		assert.Equal(t, view(want), view(got[job]), "job %q: ActiveJobs lists what Active does", job)
	}
	require.Len(t, got[f.job], 2, "unfinished runs only: %+v", got[f.job])
	assert.Equal(t, t1, got[f.job][0].Token, "oldest first")
	assert.True(t, got[f.job][0].Live)
	assert.Equal(t, t2, got[f.job][1].Token)
	assert.False(t, got[f.job][1].Live, "a released lease")
	require.Len(t, got[other], 1)
	assert.Equal(t, t4, got[other][0].Token)

	none, err := l.ActiveJobs(f.ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, none)
}

func testLeaseInvalid(t *testing.T, f *leaseFixture) {
	for name, edit := range map[string]func(*backend.RunClaim){
		"zero lease":     func(in *backend.RunClaim) { in.Lease = 0 },
		"negative lease": func(in *backend.RunClaim) { in.Lease = -time.Second },
		"no token":       func(in *backend.RunClaim) { in.Token = "" },
		"no job":         func(in *backend.RunClaim) { in.Job = "" },
	} {
		in := f.rc(Token(), "a", leaseLong)
		edit(&in)
		_, err := f.s.Claim(f.ctx, in)
		assert.ErrorIs(t, err, backend.ErrInvalidClaim, name)
	}
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	assert.Empty(t, runs, "invalid claims store nothing")
}

// watcher returns f.s as a LeaseWatcher, or nil after logging that the store is none.
func (f *leaseFixture) watcher() backend.LeaseWatcher {
	w, ok := f.s.(backend.LeaseWatcher)
	if !ok {
		f.t.Logf("%T is not a backend.LeaseWatcher: nothing to check", f.s)
	}
	return w
}

func (f *leaseFixture) watch(w backend.LeaseWatcher) <-chan struct{} {
	f.t.Helper()
	ch, err := w.WatchRun(f.ctx, f.job, f.slot)
	require.NoError(f.t, err, "WatchRun")
	require.NotNil(f.t, ch)
	return ch
}

// requireWatchOpen requires ch, a watch of f.slot whose live lease holder holds, to
// be open after what must not close it, without waiting a fixed time for nothing
// to happen:
//
//  1. operations that leave the lease as it is, each one done (answered) before
//     the next: a claim by another token (running), a heartbeat by the holder (it
//     cannot change what a new claim decides), a Release and a Finish by a token
//     that does not hold the lease, and a claim of another slot of the job;
//  2. a positive control: a watch of that other slot, opened after ch and after
//     every operation of step 1, fired by releasing that slot's lease;
//  3. ch is still open.
//
// A store whose watch closes at once on a live lease, or on any write to the job or
// the store, has closed ch long before step 3: its writes of step 1 came before the
// control's release, and the control shows that the store's notifications of a
// write after them have arrived. A store that delivers the notifications of
// different watches in order (one watcher fanned out, as kvlease does) cannot pass
// by luck; one that delivers them on unordered paths could, only if its wrong
// notification of ch arrived after a later write's notification of the control.
func (f *leaseFixture) requireWatchOpen(w backend.LeaseWatcher, ch <-chan struct{}, holder, why string) {
	f.t.Helper()
	f.outcome(f.rc(Token(), "other", leaseLong), backend.OutcomeRunning)
	require.NoError(f.t, f.heartbeat(holder), "the holder's heartbeat")
	f.release("stranger-" + Token())
	require.ErrorIs(f.t, f.finish("stranger-"+Token(), backend.StatusOK), backend.ErrStaleToken)
	control := f.rc("control-"+Token(), "control", leaseLong)
	control.Slot = leaseSlot(leaseControlSlot)
	f.outcome(control, backend.OutcomeWon)

	cch, err := w.WatchRun(f.ctx, f.job, control.Slot)
	require.NoError(f.t, err, "WatchRun of the control slot")
	require.NoError(f.t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: control.Slot, Token: control.Token}), "Release of the control slot")
	leaseRequireFires(f.t, cch, leaseWatchBound, "the control: a watch of another slot, on release")
	select {
	case <-ch:
		require.FailNow(f.t, "watch fired too early",
			"%s: it closed although only operations that leave the lease as it is were done (and a write on another slot)", why)
	default:
	}
}

func leaseRequireFires(t *testing.T, ch <-chan struct{}, within time.Duration, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		require.FailNow(t, "watch did not fire", "%s, within %v", why, within)
	}
}

func testLeaseWatchRelease(t *testing.T, f *leaseFixture) {
	w := f.watcher()
	if w == nil {
		return
	}
	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	ch := f.watch(w)
	f.requireWatchOpen(w, ch, a, "the lease is live")
	f.release(a)
	leaseRequireFires(t, ch, leaseWatchBound, "on release")
	res := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeWon)
	assert.Equal(t, 2, res.Attempt)
}

func testLeaseWatchFinish(t *testing.T, f *leaseFixture) {
	w := f.watcher()
	if w == nil {
		return
	}
	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	ch := f.watch(w)
	f.requireWatchOpen(w, ch, a, "the lease is live")
	require.NoError(t, f.finish(a, backend.StatusOK))
	leaseRequireFires(t, ch, leaseWatchBound, "on finish")
	f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeDone)
}

func testLeaseWatchExpiry(t *testing.T, f *leaseFixture) {
	w := f.watcher()
	if w == nil {
		return
	}
	a := "a-" + Token()
	f.won(a, "a", leaseShort)
	ch := f.watch(w)
	leaseRequireFires(t, ch, leaseExpiryBound, "on expiry")
	res := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeWon)
	assert.Equal(t, 2, res.Attempt, "once the watch fired on expiry, a backup takes over")
}

// WatchRun's channel closes when the ctx given to WatchRun is done, while the lease
// is still live.
func testLeaseWatchCancel(t *testing.T, f *leaseFixture) {
	w := f.watcher()
	if w == nil {
		return
	}
	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	ch, err := w.WatchRun(ctx, f.job, f.slot)
	require.NoError(t, err, "WatchRun")
	require.NotNil(t, ch)
	f.requireWatchOpen(w, ch, a, "the lease is live and the watch's ctx not done")
	cancel()
	leaseRequireFires(t, ch, leaseWatchBound, "when the watch's ctx is cancelled")
	// The lease is still live: the watch ended because of its ctx.
	res := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeRunning)
	assert.Equal(t, "a", res.Holder)
	require.NoError(t, f.heartbeat(a))
}

// A stored skipped or late slot is final: nothing wins it afterwards, whatever it
// asks and whenever it asks, and Active never lists it.
func testLeaseDecisionsFinal(t *testing.T, f *leaseFixture) {
	at := func(k int, token string) backend.RunClaim {
		in := f.rc(token, "i-"+token[:4], leaseLong)
		in.Slot, in.Overlap = leaseSlot(k), backend.OverlapSkip
		return in
	}
	holder := "h-" + Token()
	require.Equal(t, backend.OutcomeWon, f.claim(at(1, holder)).Outcome, "the holder of slot 1")
	skipper := at(2, "sk"+Token())
	require.Equal(t, backend.OutcomeOverlap, f.claim(skipper).Outcome, "slot 2 while slot 1 is live")
	late := at(3, "la"+Token())
	late.Deadline = time.Now().Add(-time.Hour)
	require.Equal(t, backend.OutcomeLate, f.claim(late).Outcome, "slot 3 past its deadline")

	decided := []struct {
		k       int
		status  backend.Status
		decider backend.RunClaim
		told    backend.ClaimOutcome
	}{
		{2, backend.StatusSkipped, skipper, backend.OutcomeOverlap},
		{3, backend.StatusLate, late, backend.OutcomeLate},
	}
	check := func(when string) {
		t.Helper()
		for _, d := range decided {
			probe := at(d.k, "pr"+Token())
			probe.TakeoverOnly = true
			catchUp := at(d.k, "cu"+Token()) // a catch-up claim: deadline far away, overlap allowed
			catchUp.Overlap, catchUp.Deadline = backend.OverlapAllow, time.Now().Add(24*time.Hour)
			catchUp.ReopenPaused = true // reopens paused slots only
			again := at(d.k, "ag"+Token())
			again.Deadline = time.Now().Add(24 * time.Hour)
			for _, c := range []struct {
				name string
				in   backend.RunClaim
			}{{"a takeover-only probe", probe}, {"a catch-up claim", catchUp}, {"a claim skipping on overlap", again}} {
				res := f.claim(c.in)
				assert.Equal(t, backend.OutcomeDone, res.Outcome, "%s: %s of slot %d, stored %s", when, c.name, d.k, d.status)
				assert.Equal(t, d.status, res.Status, "%s: %s of slot %d is told how it ended", when, c.name, d.k)
			}
			assert.Equal(t, d.told, f.claim(d.decider).Outcome, "%s: the token that decided slot %d %s is told the same again", when, d.k, d.status)
		}
		runs, err := f.s.Active(f.ctx, f.job)
		require.NoError(t, err, "Active")
		for _, r := range runs {
			assert.False(t, r.Slot.Equal(leaseSlot(2)) || r.Slot.Equal(leaseSlot(3)), "%s: a skipped or late slot is not active: %+v", when, r)
		}
	}
	check("while slot 1 holds its lease")
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: holder}))
	check("after slot 1's lease was released")
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: holder}, backend.StatusOK))
	check("after slot 1 finished")
}

// A slot finished paused is final for every claim but one with ReopenPaused before
// its deadline: of racing reopening claims exactly one wins, as attempt 2 with a
// bigger fence and Reopened (again on its repeat); once that run finished, nothing
// reopens it.
func testLeaseReopenPaused(t *testing.T, f *leaseFixture) {
	a := "a-" + Token()
	first := f.won(a, "a", leaseLong)
	require.NoError(t, f.finish(a, backend.StatusPaused), "the slot fell while paused")

	plain := f.outcome(f.rc("pl"+Token(), "b", leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusPaused, plain.Status, "a claim without ReopenPaused is told paused")
	late := f.rc("la"+Token(), "c", leaseLong)
	late.ReopenPaused, late.Deadline = true, time.Now().Add(-time.Minute)
	assert.Equal(t, backend.StatusPaused, f.outcome(late, backend.OutcomeDone).Status, "past its deadline the slot stays paused")

	claims, results := f.race(5, leaseLong, func(in *backend.RunClaim) { in.ReopenPaused = true })
	w := f.oneWinner(results)
	won := results[w]
	assert.True(t, won.Reopened, "the winner is told it reopened a paused slot")
	assert.Equal(t, 2, won.Attempt)
	assert.Greater(t, won.Fence, first.Fence, "a bigger fence than the paused attempt's")
	again := f.outcome(claims[w], backend.OutcomeWon)
	assert.True(t, again.Reopened, "the winner's repeated claim is answered the same")
	assert.Equal(t, won.Fence, again.Fence)

	require.NoError(t, f.finish(claims[w].Token, backend.StatusOK))
	after := f.rc("af"+Token(), "d", leaseLong)
	after.ReopenPaused = true
	assert.Equal(t, backend.StatusOK, f.outcome(after, backend.OutcomeDone).Status, "a slot that ran is not reopened")
}

// A finished run is forgotten once its Keep has passed: a takeover-only probe is
// then answered none.
func testLeaseKeepForgets(t *testing.T, f *leaseFixture) {
	a := "a-" + Token()
	in := f.rc(a, "a", leaseLong)
	in.Keep = leaseKeepShort
	require.Equal(t, backend.OutcomeWon, f.claim(in).Outcome)
	require.NoError(t, f.finish(a, backend.StatusOK))
	finished := time.Now()
	probe := func() backend.RunClaim {
		p := f.rc("probe-"+Token(), "probe", leaseLong)
		p.TakeoverOnly, p.Keep = true, leaseKeepShort
		return p
	}
	// The control: within its Keep the run is remembered. Checked only while clearly
	// within it (a slow machine may take longer than the Keep to get here).
	res := f.claim(probe())
	if time.Since(finished) < leaseKeepShort/2 {
		require.Equal(t, backend.OutcomeDone, res.Outcome, "a finished run within its Keep")
	} else {
		t.Logf("the probe answered %v after Finish: too late to check that the run is remembered", time.Since(finished))
	}
	deadline := finished.Add(leaseKeepShort + leaseForgetBound)
	for {
		res = f.claim(probe())
		if res.Outcome == backend.OutcomeNone {
			break
		}
		require.Equal(t, backend.OutcomeDone, res.Outcome, "a finished run is done until forgotten")
		if time.Now().After(deadline) {
			require.FailNow(t, "a finished run is not forgotten",
				"Keep %v, still answered %s %v after Finish", leaseKeepShort, res.Outcome, time.Since(finished))
		}
		time.Sleep(100 * time.Millisecond)
	}
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	assert.Empty(t, runs, "a forgotten run is not active")
}
