package backendtest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// counter skips the case unless f's store counts runs for RunClaim.MaxRuns.
func (f *leaseFixture) counter() {
	f.t.Helper()
	if c, ok := f.s.(backend.RunCounter); !ok || !c.CountsRuns() {
		f.t.Skipf("%T does not count runs (backend.RunCounter): nothing to check", f.s)
	}
}

// limitClaim is a claim of the k-th slot by token with a run limit of n.
func (f *leaseFixture) limitClaim(k int, token string, n int) backend.RunClaim {
	in := f.rc(token, "i-"+token[:4], leaseLong)
	in.Slot, in.MaxRuns = leaseSlot(k), n
	return in
}

// requireLimited requires slot k to be stored limit: its decider is answered
// limit (on a repeat too), any other claimer done with StatusLimit.
func (f *leaseFixture) requireLimited(k int, n int, why string) {
	f.t.Helper()
	decider := "li" + Token()
	res := f.claim(f.limitClaim(k, decider, n))
	require.Equal(f.t, backend.OutcomeLimit, res.Outcome, "%s: slot %d: %+v", why, k, res)
	assert.Equal(f.t, backend.StatusLimit, res.Status, "%s: slot %d", why, k)
	assert.False(f.t, res.LimitReached, "%s: a limit answer is no counted win", why)
	assert.Equal(f.t, backend.OutcomeLimit, f.claim(f.limitClaim(k, decider, n)).Outcome, "%s: the decider's repeat", why)
	other := f.claim(f.limitClaim(k, "ot"+Token(), n))
	assert.Equal(f.t, backend.OutcomeDone, other.Outcome, "%s: another token", why)
	assert.Equal(f.t, backend.StatusLimit, other.Status, "%s: another token is told limit", why)
	if _, ok := f.activeAt(k); ok {
		f.t.Errorf("%s: a slot stored limit is not active", why)
	}
}

// wonAt requires a claim of slot k by a fresh token to win, and returns it and the
// token.
func (f *leaseFixture) wonAt(k int, n int, limitReached bool) (backend.ClaimResult, string) {
	f.t.Helper()
	token := "w" + Token()
	res := f.claim(f.limitClaim(k, token, n))
	require.Equal(f.t, backend.OutcomeWon, res.Outcome, "slot %d under a limit of %d: %+v", k, n, res)
	assert.Equal(f.t, limitReached, res.LimitReached, "slot %d under a limit of %d: LimitReached", k, n)
	return res, token
}

// After MaxRuns first wins every later slot is stored limit, answered so to any
// token; the n-th win and its repeats say LimitReached; a late slot is late, not
// counted; claims without a limit neither count nor are refused; a bigger limit
// lets slots run again; a negative one is an invalid claim.
func testLimitReached(t *testing.T, f *leaseFixture) {
	f.counter()
	neg := f.limitClaim(0, Token(), -1)
	_, err := f.s.Claim(f.ctx, neg)
	require.ErrorIs(t, err, backend.ErrInvalidClaim, "a negative MaxRuns")

	late := f.limitClaim(0, "la"+Token(), 3)
	late.Deadline = time.Now().Add(-time.Hour)
	f.outcome(late, backend.OutcomeLate)
	f.wonAt(1, 3, false)
	_, t2 := f.wonAt(2, 3, false)
	require.NoError(t, f.finishAt(2, t2, backend.StatusOK))
	third := f.limitClaim(3, "th"+Token(), 3)
	res := f.outcome(third, backend.OutcomeWon)
	assert.True(t, res.LimitReached, "the third counted win reaches the limit of 3: %+v", res)
	again := f.outcome(third, backend.OutcomeWon)
	assert.True(t, again.LimitReached, "a repeat of the third win")
	assert.Equal(t, backend.StatusOK, f.outcome(f.limitClaim(2, Token(), 3), backend.OutcomeDone).Status,
		"a slot that ran is answered as it ended, not limit")

	f.requireLimited(4, 3, "after three wins")
	f.requireLimited(5, 3, "again")
	late = f.limitClaim(6, "la"+Token(), 3)
	late.Deadline = time.Now().Add(-time.Hour)
	f.outcome(late, backend.OutcomeLate) // late is decided before the limit

	f.wonAt(7, 0, false) // no limit asked: not refused, not counted
	f.wonAt(8, 4, true)  // a bigger limit: one more (the claim of slot 7 did not count)
	f.requireLimited(9, 4, "after a fourth win under a limit of 4")
}

// Takeovers, retries, Backfill claims and a reopened paused slot do not count,
// and the limit never refuses a Backfill claim.
func testLimitUncounted(t *testing.T, f *leaseFixture) {
	f.counter()
	const n = 2
	_, t1 := f.wonAt(1, n, false)
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: t1}))
	taken := f.limitClaim(1, "tk"+Token(), n)
	res := f.outcome(taken, backend.OutcomeWon)
	assert.Equal(t, 2, res.Attempt, "a takeover")
	assert.False(t, res.LimitReached, "a takeover is not counted")
	if r, ok := f.s.(backend.Retrier); ok {
		require.NoError(t, r.Retry(f.ctx, taken.Key(), 0, retryLong))
		res = f.outcome(f.limitClaim(1, "rt"+Token(), n), backend.OutcomeWon)
		assert.True(t, res.Retried, "a retry: %+v", res)
		assert.False(t, res.LimitReached, "a retry is not counted")
	}
	bf := f.limitClaim(2, "bf"+Token(), n)
	bf.Backfill = true
	res = f.outcome(bf, backend.OutcomeWon)
	assert.False(t, res.LimitReached, "a Backfill claim is not counted")

	third := f.limitClaim(3, "th"+Token(), n)
	res = f.outcome(third, backend.OutcomeWon)
	assert.True(t, res.LimitReached, "the second counted win, after a takeover, a retry and a backfill: %+v", res)
	require.NoError(t, f.finishAt(3, third.Token, backend.StatusPaused))
	// The finished holder's lease may still be seen for a moment (a store that
	// ends it after the finish): claimed again until it is not.
	deadline := time.Now().Add(leaseExpiryBound)
	for {
		reopen := f.limitClaim(3, "ro"+Token(), n)
		reopen.ReopenPaused = true
		if res = f.claim(reopen); res.Outcome != backend.OutcomeRunning || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, backend.OutcomeWon, res.Outcome)
	assert.True(t, res.Reopened, "the paused slot is reopened past the limit: it was counted when won: %+v", res)
	f.requireLimited(4, n, "two counted")

	bf = f.limitClaim(5, "bf"+Token(), n)
	bf.Backfill = true
	f.outcome(bf, backend.OutcomeWon) // the limit refuses no Backfill claim
	f.requireLimited(6, n, "still two counted")
	bf = f.limitClaim(6, "bf"+Token(), n)
	bf.Backfill = true
	res = f.outcome(bf, backend.OutcomeWon)
	assert.True(t, res.Reopened, "a Backfill claim reopens a slot stored limit, which never ran")
}

// Several claimers of several slots at once, with room for two more runs: exactly
// two slots are won (one winner each, the other claimers running), the others
// are stored limit.
func testLimitRace(t *testing.T, f *leaseFixture) {
	f.counter()
	const n, slots, claimers = 4, 4, 3
	f.wonAt(1, n, false)
	f.wonAt(2, n, false)
	results := make([][]backend.ClaimResult, slots)
	errs := make([][]error, slots)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for s := range slots {
		results[s], errs[s] = make([]backend.ClaimResult, claimers), make([]error, claimers)
		for c := range claimers {
			in := f.limitClaim(3+s, Token(), n)
			in.Instance = fmt.Sprintf("racer-%d-%d", s, c)
			wg.Go(func() {
				<-gate
				results[s][c], errs[s][c] = f.s.Claim(f.ctx, in)
			})
		}
	}
	close(gate)
	wg.Wait()
	won, limited, reached := 0, 0, 0
	for s := range slots {
		outcomes := map[backend.ClaimOutcome]int{}
		for c := range claimers {
			require.NoError(t, errs[s][c], "slot %d claimer %d", 3+s, c)
			outcomes[results[s][c].Outcome]++
			if results[s][c].LimitReached {
				reached++
			}
		}
		switch {
		case outcomes[backend.OutcomeWon] == 1:
			won++
			assert.Equal(t, claimers-1, outcomes[backend.OutcomeRunning], "slot %d: the others stand by: %v", 3+s, outcomes)
		default:
			limited++
			assert.Equal(t, 1, outcomes[backend.OutcomeLimit], "slot %d: one decider: %v", 3+s, outcomes)
			assert.Equal(t, claimers-1, outcomes[backend.OutcomeDone], "slot %d: the others are told done: %v", 3+s, outcomes)
		}
	}
	assert.Equal(t, 2, won, "room for two more runs")
	assert.Equal(t, slots-2, limited)
	assert.Equal(t, 1, reached, "one win reached the limit")
	f.requireLimited(3+slots, n, "after the race")
}

// A buffered slot counts when it is buffered; a claim that finds the limit full
// is stored limit, not buffered; the buffered slot's win says LimitReached.
func testLimitBuffered(t *testing.T, f *leaseFixture) {
	f.counter()
	f.bufferer()
	if c, ok := f.s.(backend.BufferedRunCounter); !ok || !c.CountsBufferedRuns() {
		f.t.Skipf("%T does not count buffered slots as it stores them (backend.BufferedRunCounter): nothing to check", f.s)
	}
	const n = 2
	one := backend.OverlapBufferOne
	claim := func(k int, token string) backend.RunClaim {
		in := f.bufferClaim(k, token, one, 0)
		in.MaxRuns = n
		return in
	}
	t1 := "t1" + Token()
	res := f.outcome(claim(1, t1), backend.OutcomeWon)
	assert.False(t, res.LimitReached)
	res = f.claim(claim(2, "t2"+Token()))
	requireBuffered(t, res, 1, "slot 2 while slot 1 runs")
	assert.True(t, res.LimitReached, "the buffered slot is the second counted")
	lim := f.claim(claim(3, "t3"+Token()))
	assert.Equal(t, backend.OutcomeLimit, lim.Outcome, "the limit is decided before the overlap: %+v", lim)

	require.NoError(t, f.finishAt(1, t1, backend.StatusOK))
	res = f.outcome(claim(2, "t4"+Token()), backend.OutcomeWon)
	assert.True(t, res.LimitReached, "the win of the buffered slot that reached the limit")
	f.outcome(claim(4, "t5"+Token()), backend.OutcomeLimit)
}

// A slot skipped for overlap is not counted.
func testLimitSkipped(t *testing.T, f *leaseFixture) {
	f.counter()
	const n = 2
	claim := func(k int, token string) backend.RunClaim {
		in := f.limitClaim(k, token, n)
		in.Overlap = backend.OverlapSkip
		return in
	}
	t1 := "t1" + Token()
	f.outcome(claim(1, t1), backend.OutcomeWon)
	f.outcome(claim(2, "t2"+Token()), backend.OutcomeOverlap)
	require.NoError(t, f.finishAt(1, t1, backend.StatusOK))
	res := f.outcome(claim(3, "t3"+Token()), backend.OutcomeWon)
	assert.True(t, res.LimitReached, "the second counted: the skipped slot was not")
	f.outcome(claim(4, "t4"+Token()), backend.OutcomeLimit)
}
