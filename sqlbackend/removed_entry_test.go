package sqlbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestAbandonedRunOfARemovedEntryIsEnded: an entry is removed while its one
// slot runs, and the holder dies (its pool is closed under it: no Stop, no
// heartbeat, no result). No replica follows the entry any more; one that starts
// once the lease has expired ends the run: the holder's attempt is finished
// cancelled as removed, with its record, never run again.
func TestAbandonedRunOfARemovedEntryIsEnded(t *testing.T) {
	t.Parallel()
	onBoth(t, "removed", testAbandonedRunOfARemovedEntry)
}

func testAbandonedRunOfARemovedEntry(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("removed")
	started := make(chan scheduler.Run, 4)
	h := func(ctx context.Context, r scheduler.Run) error {
		started <- r
		<-ctx.Done()
		return context.Cause(ctx)
	}
	start := func(instance string) (*scheduler.Scheduler, func()) {
		db, b := open(t)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: instance})
		require.NoError(t, err)
		require.NoError(t, s.Declare(job, h, scheduler.WithLease(backend.MinLease)))
		require.NoError(t, s.Start(ctx))
		require.NoError(t, s.EntriesLoaded(ctx))
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		return s, func() { _ = db.Close() }
	}
	holder, kill := start("holder")
	_, err := holder.AddEntry(ctx, job, "x", scheduler.EntrySpec{At: time.Now().Add(1500 * time.Millisecond)})
	require.NoError(t, err)
	var run scheduler.Run
	select {
	case run = <-started:
	case <-ctx.Done():
		t.Fatal("the entry's slot did not start")
	}
	require.NoError(t, holder.RemoveEntry(ctx, job, "x", 0))
	require.Eventually(t, func() bool { n, _ := holder.EntryCounts(); return n == 0 }, 5*time.Second, 10*time.Millisecond)
	kill()
	_, view := open(t)
	require.Eventually(t, func() bool {
		active, err := view.Runs().Active(ctx, backend.EntryRunName(job, "x"))
		return err == nil && len(active) == 1 && !active[0].Live
	}, 10*time.Second, 20*time.Millisecond, "the dead holder's lease expires, by the database's clock")
	taker, _ := start("taker")
	require.Eventually(t, func() bool {
		hist, err := taker.EntryHistory(ctx, job, "x", 10)
		return err == nil && len(hist) > 0 && hist[0].Status == scheduler.StatusCancelled
	}, 15*time.Second, 50*time.Millisecond, "the run is ended")
	active, err := taker.Backend().(backend.LeaseBackend).Runs().Active(ctx, backend.EntryRunName(job, "x"))
	require.NoError(t, err)
	assert.Empty(t, active, "finished in the run store")
	hist, err := taker.EntryHistory(ctx, job, "x", 10)
	require.NoError(t, err)
	require.Len(t, hist, 1, "the dead holder's attempt, ended: %+v", hist)
	assert.True(t, hist[0].Slot.Equal(run.Slot))
	assert.Equal(t, "holder", hist[0].Instance)
	assert.Equal(t, 1, hist[0].Attempt, "no attempt of a removed entry is granted")
	assert.Equal(t, run.Token, hist[0].Token)
	assert.Contains(t, hist[0].Error, "removed")
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_ = holder.Stop(stopCtx) // a dead process: reap it
	select {
	case again := <-started:
		t.Fatalf("the handler started again: %+v", again)
	default:
	}
}
