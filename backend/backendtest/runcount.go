package backendtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// A store that reads its run counts says what it counted: nothing for a job it
// never counted for, each first win under a limit, and not a takeover, a
// Backfill claim, a claim without a limit or a slot stored limit.
func testRunCount(t *testing.T, f *leaseFixture) {
	f.counter()
	r, ok := f.s.(backend.RunCountReader)
	if !ok {
		t.Skipf("%T does not read its run counts (backend.RunCountReader): nothing to check", f.s)
	}
	count := func() int {
		t.Helper()
		n, err := r.RunCount(f.ctx, f.job)
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, 0, count(), "a job never counted for")
	const n = 3
	_, t1 := f.wonAt(1, n, false)
	assert.Equal(t, 1, count(), "a first win")
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: t1}))
	f.outcome(f.limitClaim(1, "tk"+Token(), n), backend.OutcomeWon)
	assert.Equal(t, 1, count(), "a takeover is not counted")
	bf := f.limitClaim(2, "bf"+Token(), n)
	bf.Backfill = true
	f.outcome(bf, backend.OutcomeWon)
	f.wonAt(3, 0, false)
	assert.Equal(t, 1, count(), "neither a Backfill claim nor a claim without a limit")
	f.wonAt(4, n, false)
	f.wonAt(5, n, true)
	assert.Equal(t, n, count(), "the win that reached the limit")
	f.requireLimited(6, n, "three counted")
	assert.Equal(t, n, count(), "a slot stored limit is not counted")
	other, err := r.RunCount(f.ctx, f.job+" other")
	require.NoError(t, err)
	assert.Equal(t, 0, other, "counts are per job")
}
