package kvlease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// The shared lease watcher stops once nothing has waited on it for its idle
// time, forgets the finished runs it saw (nothing newer would reach it), and the
// next WatchRun starts it again.
func TestSharedWatcherStopsWhenIdle(t *testing.T) {
	job := "idlewatch-" + token()[:8]
	holder := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	backup := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	kvlease.SetWatcherIdleForTest(backup, 300*time.Millisecond)

	first := overlapClaim(job, 0, "holder")
	mustClaim(t, holder, first, backend.OutcomeWon)
	mustClaim(t, backup, overlapClaim(job, 0, "backup"), backend.OutcomeRunning)
	ch, err := backup.WatchRun(t.Context(), job, slotAt(0))
	require.NoError(t, err)
	require.True(t, kvlease.WatcherRunningForTest(backup))
	finishAt(t, holder, first, backend.StatusOK)
	waitFor(t, ch, "the watch fires on the finish")

	require.Eventually(t, func() bool { return !kvlease.WatcherRunningForTest(backup) }, 15*time.Second, 20*time.Millisecond,
		"the watcher stops once idle")
	res, err := backup.Claim(t.Context(), overlapClaim(job, 0, "late"))
	require.NoError(t, err)
	assert.Equal(t, backend.OutcomeDone, res.Outcome, "a claim after the stop reads the slot")

	second := overlapClaim(job, 1, "holder")
	mustClaim(t, holder, second, backend.OutcomeWon)
	mustClaim(t, backup, overlapClaim(job, 1, "backup"), backend.OutcomeRunning)
	ch, err = backup.WatchRun(t.Context(), job, slotAt(1))
	require.NoError(t, err)
	require.True(t, kvlease.WatcherRunningForTest(backup), "WatchRun starts it again")
	finishAt(t, holder, second, backend.StatusOK)
	waitFor(t, ch, "the new watcher fires on the finish")
}
