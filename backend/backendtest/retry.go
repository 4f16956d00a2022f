package backendtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// Retry delays of the retry cases: a short one is meant to pass during a test (whole
// seconds, for stores that count in seconds); a long one never does.
const (
	retryShort = time.Second
	retryLong  = time.Hour
	// retryBound bounds the wait for a short retry delay or window to be seen
	// passed by the store's clock.
	retryBound = 10 * time.Second
)

// retrier returns f's store as a backend.Retrier, or skips the case.
func (f *leaseFixture) retrier() backend.Retrier {
	f.t.Helper()
	r, ok := f.s.(backend.Retrier)
	if !ok {
		f.t.Skipf("%T is not a backend.Retrier: nothing to check", f.s)
	}
	return r
}

func (f *leaseFixture) retry(r backend.Retrier, token string, delay, within time.Duration) error {
	return r.Retry(f.ctx, backend.RunKey{Job: f.job, Slot: f.slot, Token: token}, delay, within)
}

// claimUntil claims with fresh tokens until the answer is not a retry yet, and
// returns that answer.
func (f *leaseFixture) claimUntil(in func() backend.RunClaim) backend.ClaimResult {
	f.t.Helper()
	deadline := time.Now().Add(retryBound)
	for {
		res := f.claim(in())
		if res.Outcome != backend.OutcomeRetry {
			return res
		}
		if time.Now().After(deadline) {
			require.FailNow(f.t, "the retry never came due", "still %s after %v: %+v", res.Outcome, retryBound, res)
		}
		time.Sleep(min(res.RetryIn, 100*time.Millisecond) + 10*time.Millisecond)
	}
}

// A failed attempt's stored retry: its lease is gone at once, nobody may claim the
// slot before the delay, then exactly one claimer takes it as the next attempt.
func testRetryHandsOver(t *testing.T, f *leaseFixture) {
	r := f.retrier()
	a := "a-" + Token()
	ra := f.won(a, "a", leaseLong)
	var ch <-chan struct{}
	if w := f.watcher(); w != nil {
		ch = f.watch(w)
	}
	require.NoError(t, f.retry(r, a, retryShort, retryLong), "Retry by the holder")
	if ch != nil {
		leaseRequireFires(t, ch, leaseWatchBound, "a watch of the lease a Retry ended")
	}
	assert.ErrorIs(t, f.heartbeat(a), backend.ErrLeaseLost, "the failed attempt's lease ended")
	assert.ErrorIs(t, f.finish(a, backend.StatusOK), backend.ErrStaleToken, "a Finish after the attempt's Retry")
	assert.NoError(t, f.retry(r, a, retryShort, retryLong), "a repeated Retry")
	own := f.outcome(f.rc(a, "a", leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusError, own.Status, "a late repeat of the failed attempt's claim: its attempt is over")

	early := f.claim(f.rc(Token(), "b", leaseLong))
	if early.Outcome == backend.OutcomeRetry { // else the delay passed already on a slow machine
		assert.Greater(t, early.RetryIn, time.Duration(0), "how long until the retry")
		assert.LessOrEqual(t, early.RetryIn, retryShort)
		assert.Equal(t, 1, early.Attempt, "the attempt that failed")
		runs, err := f.s.Active(f.ctx, f.job)
		require.NoError(t, err)
		require.Len(t, runs, 1, "a slot waiting for its retry is unfinished")
		assert.False(t, runs[0].Live)
		assert.False(t, runs[0].RetryAt.IsZero(), "Active says when the retry comes")
	}
	f.claimUntil(func() backend.RunClaim { return f.rc(Token(), "probe", leaseLong) })
	// The probe that found it due may have won it; the others find it running.
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, 2, runs[0].Attempt, "the retry is the second attempt")
	assert.True(t, runs[0].Live)
	assert.True(t, runs[0].RetryAt.IsZero(), "a claimed retry is pending no more")
	assert.Greater(t, runs[0].Fence, ra.Fence, "the retry's holder has a bigger fence")
}

// Many claimers of a due retry: one wins, as the next attempt, marked a retry.
func testRetryOneWinner(t *testing.T, f *leaseFixture) {
	r := f.retrier()
	a := "a-" + Token()
	ra := f.won(a, "a", leaseLong)
	require.NoError(t, f.retry(r, a, 0, retryLong))
	own := f.outcome(f.rc(a, "a", leaseLong), backend.OutcomeDone)
	assert.Equal(t, 1, own.Attempt, "the failed attempt's token never takes its own retry")
	claims, results := f.race(6, leaseLong)
	w := f.oneWinner(results)
	won := results[w]
	assert.Equal(t, 2, won.Attempt)
	assert.True(t, won.Retried, "the winner is told the run is a retry, not a takeover of a lost attempt")
	assert.Equal(t, "a", won.Previous)
	assert.Equal(t, a, won.PreviousToken)
	leaseAssertFenceGrew(t, ra, won)
	again := f.claim(claims[w])
	assert.Equal(t, backend.OutcomeWon, again.Outcome, "the retry's holder asking again")
	assert.True(t, again.Retried)
	assert.Equal(t, won.Fence, again.Fence)

	// The retry fails too: a third attempt, fences still growing.
	b := claims[w].Token
	require.NoError(t, f.retry(r, b, 0, retryLong))
	third := f.outcome(f.rc(Token(), "c", leaseLong), backend.OutcomeWon)
	assert.Equal(t, 3, third.Attempt)
	assert.True(t, third.Retried)
	leaseAssertFenceGrew(t, won, third)
}

// A retry nobody claimed within its window is not run: the slot ends error. The
// claim is sent once the window has surely passed by the store's clock.
func testRetryMissed(t *testing.T, f *leaseFixture) {
	r := f.retrier()
	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	require.NoError(t, f.retry(r, a, 0, retryShort))
	time.Sleep(retryShort + time.Second) // stores may count the window in whole seconds
	res := f.outcome(f.rc(Token(), "late", leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusError, res.Status, "the last attempt's failure stands")
	again := f.outcome(f.rc(Token(), "later", leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusError, again.Status)
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(t, err)
	assert.Empty(t, runs, "a missed retry ends the slot")
}

// Only the holder may store a retry, and only of an unfinished run: its own
// Retry once it finished is taken for a repeat and changes nothing.
func testRetryStale(t *testing.T, f *leaseFixture) {
	r := f.retrier()
	a := "a-" + Token()
	f.won(a, "a", leaseLong)
	assert.ErrorIs(t, f.retry(r, "stranger-"+Token(), 0, retryLong), backend.ErrStaleToken, "a token that never held the run")
	assert.ErrorIs(t, f.retry(r, a, -time.Second, retryLong), backend.ErrInvalidClaim, "a negative delay")
	assert.ErrorIs(t, f.retry(r, a, 0, 0), backend.ErrInvalidClaim, "no window")
	require.NoError(t, f.finish(a, backend.StatusOK))
	assert.NoError(t, f.retry(r, a, 0, retryLong), "the holder's Retry of its finished run: a repeat")
	assert.ErrorIs(t, f.retry(r, "stranger-"+Token(), 0, retryLong), backend.ErrStaleToken, "a finished run, another token")
	done := f.outcome(f.rc(Token(), "b", leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusOK, done.Status, "no retry was stored")
}

// A retry is remembered past the run's Keep while it may still be claimed.
func testRetryOutlivesKeep(t *testing.T, f *leaseFixture) {
	r := f.retrier()
	a := "a-" + Token()
	in := f.rc(a, "a", leaseLong)
	in.Keep = leaseKeepShort
	require.Equal(t, backend.OutcomeWon, f.claim(in).Outcome)
	delay := leaseKeepShort + retryShort
	require.NoError(t, f.retry(r, a, delay, retryLong))
	time.Sleep(delay + leaseForgetBound/3) // past the Keep, and a forgetting store's sweep
	probe := f.rc(Token(), "probe", leaseLong)
	probe.TakeoverOnly, probe.Keep = true, leaseKeepShort
	res := f.claim(probe)
	assert.Equal(t, backend.OutcomeWon, res.Outcome, "the retry, past the run's Keep")
	assert.Equal(t, 2, res.Attempt)
}

// A Retry repeated after its retry was claimed (the first call was stored and its
// answer lost) is still its token's, applied: not an error, and it changes nothing.
func testRetryRepeatAfterClaim(t *testing.T, f *leaseFixture) {
	r := f.retrier()
	a, b := "a-"+Token(), "b-"+Token()
	f.won(a, "a", leaseLong)
	require.NoError(t, f.retry(r, a, 0, retryLong))
	rb := f.claimUntil(func() backend.RunClaim { return f.rc(b, "b", leaseLong) })
	require.Equal(t, backend.OutcomeWon, rb.Outcome)
	require.True(t, rb.Retried)
	assert.NoError(t, f.retry(r, a, 0, retryLong), "a repeat after the retry was claimed")
	assert.ErrorIs(t, f.finish(a, backend.StatusError), backend.ErrStaleToken, "the failed attempt cannot finish the run")
	f.outcome(f.rc(b, "b", leaseLong), backend.OutcomeWon) // b still holds it
	require.NoError(t, f.finish(b, backend.StatusOK))
	assert.NoError(t, f.retry(r, a, 0, retryLong), "a repeat after the retry finished")
	f.outcome(f.rc(Token(), "c", leaseLong), backend.OutcomeDone)
	assert.ErrorIs(t, f.retry(r, "stranger-"+Token(), 0, retryLong), backend.ErrStaleToken)
}
