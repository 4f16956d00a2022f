package sqlbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
)

// TestRedTeamSchedulerFollowsRemovalsPastPruning: a watcher that fell behind the
// pruning of tombstones lists the entries again and reports those gone as removed,
// without a revision (the tombstone that had one is pruned). The scheduler must
// stop following them all the same: otherwise a removed entry runs for ever on
// that replica.
func TestRedTeamSchedulerFollowsRemovalsPastPruning(t *testing.T) {
	t.Parallel()
	ctx := backendtest.Context(t)
	path := sqliteFile(t)
	job := backendtest.JobName("redteam pruned")
	// With one tombstone kept, the second removal prunes both: a watcher that has
	// not read the first learns both from a listing.
	follower := closeAtEnd(t, newSQLite(t, path, sqlbackend.WithEntryTombstones(1)))
	writer := closeAtEnd(t, newSQLite(t, path, sqlbackend.WithEntryTombstones(1)))

	s, err := scheduler.New(scheduler.Config{Backend: follower, Instance: "follower"})
	require.NoError(t, err)
	require.NoError(t, s.Declare(job, func(context.Context, scheduler.Run) error { return nil }))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	require.NoError(t, s.EntriesLoaded(ctx))

	w, err := scheduler.New(scheduler.Config{Backend: writer, Instance: "writer"})
	require.NoError(t, err)
	require.NoError(t, w.Declare(job, func(context.Context, scheduler.Run) error { return nil }))
	for _, id := range []string{"a", "b", "c"} {
		_, err := w.AddEntry(ctx, job, id, scheduler.EntrySpec{Every: time.Hour})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { n, _ := s.EntryCounts(); return n == 3 }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, w.RemoveEntry(ctx, job, "a", 0))
	require.NoError(t, w.RemoveEntry(ctx, job, "b", 0))
	require.Eventually(t, func() bool { n, _ := s.EntryCounts(); return n == 1 }, 10*time.Second, 10*time.Millisecond,
		"the follower stops following the removed entries")
	v, err := s.EntryView(ctx, job, "c")
	require.NoError(t, err)
	require.True(t, v.Followed)
}
