package backendtest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// canceller skips the case unless f's store implements OverlapCancelOther.
func (f *leaseFixture) canceller() {
	f.t.Helper()
	if c, ok := f.s.(backend.OverlapCanceller); !ok || !c.CancelsOverlap() {
		f.t.Skipf("%T does not implement OverlapCancelOther: nothing to check", f.s)
	}
}

// cancelClaim is a claim of the k-th slot by token under OverlapCancelOther.
func (f *leaseFixture) cancelClaim(k int, token string, lease time.Duration) backend.RunClaim {
	in := f.rc(token, "i-"+token[:4], lease)
	in.Slot, in.Overlap = leaseSlot(k), backend.OverlapCancelOther
	return in
}

func (f *leaseFixture) heartbeatAt(k int, token string) error {
	return f.s.Heartbeat(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(k), Token: token}, leaseLong)
}

func (f *leaseFixture) activeAt(k int) (backend.ActiveRun, bool) {
	f.t.Helper()
	runs, err := f.s.Active(f.ctx, f.job)
	require.NoError(f.t, err, "Active")
	for _, r := range runs {
		if r.Slot.Equal(leaseSlot(k)) {
			return r, true
		}
	}
	return backend.ActiveRun{}, false
}

// A later slot's claim asks the earlier run to end and waits for it: the holder's
// heartbeat says so (and still extends the lease), Active shows who asked, an
// earlier slot is skipped, and once the holder finishes the later slot is won.
func testCancelOtherAsks(t *testing.T, f *leaseFixture) {
	f.canceller()
	t1, t2, t3 := "t1"+Token(), "t2"+Token(), "t3"+Token()
	f.outcome(f.cancelClaim(1, t1, leaseLong), backend.OutcomeWon)
	require.NoError(t, f.heartbeatAt(1, t1), "no request yet")

	w := f.outcome(f.cancelClaim(2, t2, leaseLong), backend.OutcomeRunning)
	assert.True(t, w.WaitsFor.Equal(leaseSlot(1)), "the claim waits for slot 1: %+v", w)
	assert.Equal(t, "i-"+t1[:4], w.Holder, "the holder it waits for")
	for range 2 { // the lease is extended, and the request stays
		err := f.heartbeatAt(1, t1)
		require.ErrorIs(t, err, backend.ErrCancelRequested, "the holder's heartbeat")
		assert.NotErrorIs(t, err, backend.ErrLeaseLost, "the holder still holds the run")
		var ce *backend.CancelError
		require.True(t, errors.As(err, &ce), "a *CancelError: %v", err)
		assert.True(t, ce.Request.Slot.Equal(leaseSlot(2)), "the slot that asked: %+v", ce.Request)
		assert.Equal(t, t2, ce.Request.Token)
		assert.Equal(t, "i-"+t2[:4], ce.Request.Instance)
	}
	// Another claim of slot 2 waits too; the request it finds stored is kept.
	f.outcome(f.cancelClaim(2, t3, leaseLong), backend.OutcomeRunning)
	r, ok := f.activeAt(1)
	require.True(t, ok, "slot 1 is active")
	require.NotNil(t, r.Cancel, "Active shows the request: %+v", r)
	assert.Equal(t, t2, r.Cancel.Token, "the first request stands")
	_, ok = f.activeAt(2)
	assert.False(t, ok, "the waiting slot is not stored")

	// An earlier slot never cancels a later one: it is skipped.
	f.outcome(f.cancelClaim(0, "t0"+Token(), leaseLong), backend.OutcomeOverlap)
	d := f.outcome(f.cancelClaim(0, Token(), leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusSkipped, d.Status)

	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: t1}, backend.StatusCancelled))
	d = f.outcome(f.cancelClaim(1, Token(), leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusCancelled, d.Status, "slot 1 ended as its holder finished it")
	won := f.outcome(f.cancelClaim(2, t2, leaseLong), backend.OutcomeWon)
	assert.Equal(t, 1, won.Attempt)
	require.NoError(t, f.heartbeatAt(2, t2), "the new run has no request")
}

// A run asked to end whose lease ends unfinished (its holder died) is not taken
// over: the claim that would take it over finishes it cancelled. So is a retry
// stored before the request; a retry asked after it finishes the run with the
// attempt's failure, not retried.
func testCancelOtherNoTakeover(t *testing.T, f *leaseFixture) {
	f.canceller()
	t1, t2 := "t1"+Token(), "t2"+Token()
	f.outcome(f.cancelClaim(1, t1, leaseShort), backend.OutcomeWon)
	f.outcome(f.cancelClaim(2, t2, leaseLong), backend.OutcomeRunning)
	f.waitExpired(leaseSlot(1))
	d := f.outcome(f.cancelClaim(1, "b"+Token(), leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusCancelled, d.Status, "a takeover of a run asked to end")
	_, ok := f.activeAt(1)
	assert.False(t, ok, "slot 1 is finished")
	f.outcome(f.cancelClaim(2, t2, leaseLong), backend.OutcomeWon)

	r, isRetrier := f.s.(backend.Retrier)
	if !isRetrier {
		return
	}
	t3, t4 := "t3"+Token(), "t4"+Token()
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(2), Token: t2}, backend.StatusOK))
	f.outcome(f.cancelClaim(3, t3, leaseLong), backend.OutcomeWon)
	require.NoError(t, r.Retry(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(3), Token: t3}, retryShort, retryLong))
	f.outcome(f.cancelClaim(4, t4, leaseLong), backend.OutcomeRunning) // asks the pending retry to end
	d = f.claimUntil(func() backend.RunClaim { return f.cancelClaim(3, Token(), leaseLong) })
	assert.Equal(t, backend.OutcomeDone, d.Outcome, "the retry of a run asked to end: %+v", d)
	assert.Equal(t, backend.StatusCancelled, d.Status)
	f.outcome(f.cancelClaim(4, t4, leaseLong), backend.OutcomeWon)

	t5, t6 := "t5"+Token(), "t6"+Token()
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(4), Token: t4}, backend.StatusOK))
	f.outcome(f.cancelClaim(5, t5, leaseLong), backend.OutcomeWon)
	f.outcome(f.cancelClaim(6, t6, leaseLong), backend.OutcomeRunning)
	require.NoError(t, r.Retry(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(5), Token: t5}, 0, retryLong))
	d = f.outcome(f.cancelClaim(5, Token(), leaseLong), backend.OutcomeDone)
	assert.Equal(t, backend.StatusError, d.Status, "a run asked to end is not retried: its failure stands")
	f.outcome(f.cancelClaim(6, t6, leaseLong), backend.OutcomeWon)
}

// Claims of several slots at once with nothing running: exactly one runs; each
// other one is skipped or waits.
func testCancelOtherRace(t *testing.T, f *leaseFixture) {
	f.canceller()
	const slots = 3
	for round := range overlapRaceRounds {
		results := make([]backend.ClaimResult, slots)
		tokens := make([]string, slots)
		errs := make([]error, slots)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range slots {
			wg.Go(func() {
				tokens[i] = "r" + Token()
				in := f.cancelClaim(round*slots+i, tokens[i], leaseLong)
				<-start
				results[i], errs[i] = f.s.Claim(f.ctx, in)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, r := range results {
			require.NoError(t, errs[i])
			switch r.Outcome {
			case backend.OutcomeWon:
				won++
			case backend.OutcomeOverlap, backend.OutcomeRunning:
			default:
				require.Failf(t, "a claim is neither won, overlap nor running", "round %d, slot %d: %+v", round, i, r)
			}
		}
		require.Equal(t, 1, won, "round %d: exactly one slot runs: %+v", round, results)
		for i, r := range results {
			if r.Outcome == backend.OutcomeWon {
				require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(round*slots + i), Token: tokens[i]}, backend.StatusOK))
			}
		}
	}
}

// A watch of a run (its holder's) fires when a later slot's claim stores a
// cancel request on it, so the holder learns it before its next heartbeat; a
// watch taken once the request is stored does not fire for it.
func testCancelOtherWakesTheHolder(t *testing.T, f *leaseFixture) {
	f.canceller()
	w := f.watcher()
	if w == nil {
		t.Skipf("%T is not a backend.LeaseWatcher: nothing to check", f.s)
	}
	t1 := "t1" + Token()
	f.outcome(f.cancelClaim(1, t1, leaseLong), backend.OutcomeWon)
	ch, err := w.WatchRun(f.ctx, f.job, leaseSlot(1))
	require.NoError(t, err)
	require.NoError(t, f.heartbeatAt(1, t1), "a heartbeat")
	f.outcome(f.cancelClaim(2, "t2"+Token(), leaseLong), backend.OutcomeRunning)
	leaseRequireFires(t, ch, leaseWatchBound, "the holder's watch once a later slot asked")

	again, err := w.WatchRun(f.ctx, f.job, leaseSlot(1))
	require.NoError(t, err)
	f.outcome(f.cancelClaim(2, "t3"+Token(), leaseLong), backend.OutcomeRunning)
	require.ErrorIs(t, f.heartbeatAt(1, t1), backend.ErrCancelRequested)
	select {
	case <-again:
		require.Fail(t, "a watch taken after the request fired without a change")
	case <-time.After(200 * time.Millisecond): // a watch that would fire, fires sooner than that
	}
}
