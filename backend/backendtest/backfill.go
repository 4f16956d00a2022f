package backendtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// A Backfill claim reopens a slot stored skipped or late (and paused) before its
// deadline: of racing backfills exactly one wins, as attempt 2 with a bigger fence
// and Reopened (again on its repeat), and once that run finished nothing but a
// Rerun of that very attempt reopens it; of racing reruns one wins, attempt 3. A
// slot that ran is told done to a backfill without Rerun, and to a rerun of
// another attempt; past its deadline a backfill changes nothing.
func testLeaseBackfillReopens(t *testing.T, f *leaseFixture) {
	at := func(k int, token string) backend.RunClaim {
		in := f.rc(token, "i-"+token[:4], leaseLong)
		in.Slot, in.Overlap = leaseSlot(k), backend.OverlapSkip
		return in
	}
	holder := "h-" + Token()
	first := f.claim(at(1, holder))
	require.Equal(t, backend.OutcomeWon, first.Outcome, "the holder of slot 1")
	require.Equal(t, backend.OutcomeOverlap, f.claim(at(2, "sk"+Token())).Outcome, "slot 2 while slot 1 is live")
	late := at(3, "la"+Token())
	late.Deadline = time.Now().Add(-time.Hour)
	require.Equal(t, backend.OutcomeLate, f.claim(late).Outcome, "slot 3 past its deadline")
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: holder}, backend.StatusOK))

	backfill := func(k int, change ...func(*backend.RunClaim)) func(*backend.RunClaim) {
		return func(in *backend.RunClaim) {
			in.Slot, in.Overlap, in.Backfill = leaseSlot(k), backend.OverlapSkip, true
			for _, c := range change {
				c(in)
			}
		}
	}
	done := func(in backend.RunClaim, want backend.Status, why string) {
		t.Helper()
		res := f.claim(in)
		assert.Equal(t, backend.OutcomeDone, res.Outcome, why)
		assert.Equal(t, want, res.Status, why)
	}
	for _, d := range []struct {
		k      int
		status backend.Status
	}{{2, backend.StatusSkipped}, {3, backend.StatusLate}} {
		expired := at(d.k, "ex"+Token())
		backfill(d.k, func(in *backend.RunClaim) { in.Deadline = time.Now().Add(-time.Minute) })(&expired)
		done(expired, d.status, "past its deadline a backfill leaves the slot "+string(d.status))

		claims, results := f.race(5, leaseLong, backfill(d.k))
		w := f.oneWinner(results)
		won := results[w]
		assert.True(t, won.Reopened, "slot %d: the winner is told it reopened the slot", d.k)
		assert.Equal(t, 2, won.Attempt, "slot %d: attempt 2 after the stored decision", d.k)
		assert.Positive(t, won.Fence, "slot %d", d.k)
		again := f.outcome(claims[w], backend.OutcomeWon)
		assert.True(t, again.Reopened, "slot %d: the winner's repeated claim is answered the same", d.k)
		assert.Equal(t, won.Fence, again.Fence, "slot %d", d.k)
		require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(d.k), Token: claims[w].Token}, backend.StatusOK))

		plain := at(d.k, "bf"+Token())
		backfill(d.k)(&plain)
		done(plain, backend.StatusOK, "a backfilled slot that ran is not reopened by another backfill")
	}

	ran := at(1, "bf"+Token())
	backfill(1)(&ran)
	done(ran, backend.StatusOK, "a backfill without Rerun leaves a slot that ran")
	stale := at(1, "st"+Token())
	backfill(1, func(in *backend.RunClaim) { in.Rerun, in.RerunAttempt = true, 2 })(&stale)
	done(stale, backend.StatusOK, "a rerun of another attempt leaves the slot")

	claims, results := f.race(5, leaseLong, backfill(1, func(in *backend.RunClaim) { in.Rerun, in.RerunAttempt = true, 1 }))
	w := f.oneWinner(results)
	assert.True(t, results[w].Reopened, "a rerun is a reopened slot")
	assert.Equal(t, 2, results[w].Attempt)
	assert.Greater(t, results[w].Fence, first.Fence, "a bigger fence than the attempt that ran")
	require.NoError(t, f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: claims[w].Token}, backend.StatusError))
	again := at(1, "ag"+Token())
	backfill(1, func(in *backend.RunClaim) { in.Rerun, in.RerunAttempt = true, 1 })(&again)
	done(again, backend.StatusError, "a rerun asked on the strength of attempt 1 runs once")
}
