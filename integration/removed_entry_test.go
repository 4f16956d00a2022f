package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// An entry is removed while its one slot runs, and the holder dies (its lease
// store and connection close under it; it never calls Stop). No instance follows
// the entry any more; an instance that starts afterwards, while the dead
// holder's lease still lives or once it has expired, ends the run on kvlease:
// the holder's attempt is finished cancelled as removed, never run again.
func TestAbandonedRunOfARemovedEntryIsEnded(t *testing.T) {
	for _, when := range []string{"lease live", "lease expired"} {
		t.Run(when, func(t *testing.T) {
			srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
			const lease = 2 * time.Second
			const job = "removed"
			started := make(chan scheduler.Run, 4)
			h := func(ctx context.Context, r scheduler.Run) error {
				started <- r
				<-ctx.Done()
				return context.Cause(ctx)
			}
			// start returns the instance and its crash: its lease store and its
			// connection close under it. The store goes first, so that its
			// watchers stop while the connection lives: a connection closed
			// under kvlease's run watcher left the watcher's drain goroutine
			// (stopWatcher) behind in 2 of 40 runs under -race.
			start := func(instance string) (*scheduler.Scheduler, func()) {
				nc := dial(t, srv.ClientURL())
				j := natstest.JetStream(t, nc)
				store, err := kvlease.New(j)
				require.NoError(t, err)
				t.Cleanup(store.Close)
				b, err := jetstream.NewLeased(j, store)
				require.NoError(t, err)
				s := newSched(t, b, instance, nil)
				require.NoError(t, s.Declare(job, h, scheduler.WithLease(lease)))
				require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
				require.NoError(t, s.EntriesLoaded(ctxT(t, 15*time.Second)))
				return s, func() { store.Close(); nc.Close() }
			}
			holder, crash := start("holder")
			_, err := holder.AddEntry(ctxT(t, 5*time.Second), job, "x", scheduler.EntrySpec{At: time.Now().Add(1500 * time.Millisecond)})
			require.NoError(t, err)
			var run scheduler.Run
			select {
			case run = <-started:
			case <-time.After(15 * time.Second):
				t.Fatal("the entry's slot did not start")
			}
			t.Logf("the slot started on the holder: %v", run.Slot)
			require.NoError(t, holder.RemoveEntry(ctxT(t, 5*time.Second), job, "x", 0))
			require.Eventually(t, func() bool { n, _ := holder.EntryCounts(); return n == 0 }, 5*time.Second, 10*time.Millisecond)
			crash() // no heartbeat, no result
			name := backend.EntryRunName(job, "x")
			if when == "lease expired" {
				view := leased(t, dial(t, srv.ClientURL()), 1).Runs()
				require.Eventually(t, func() bool {
					active, err := view.Active(ctxT(t, 5*time.Second), name)
					return err == nil && len(active) == 1 && !active[0].Live
				}, 10*time.Second, 20*time.Millisecond, "the dead holder's lease expires, by the server's clock")
			}
			taker, _ := start("taker")
			t.Log("the taker started")
			runs := taker.Backend().(backend.LeaseBackend).Runs()
			require.Eventually(t, func() bool {
				hist, err := taker.EntryHistory(ctxT(t, 5*time.Second), job, "x", 10)
				return err == nil && len(hist) > 0 && hist[0].Status == scheduler.StatusCancelled
			}, 15*time.Second, 50*time.Millisecond, "the run is ended")
			t.Log("the run was ended")
			active, err := runs.Active(ctxT(t, 5*time.Second), name)
			require.NoError(t, err)
			assert.Empty(t, active, "finished in the run store")
			hist, err := taker.EntryHistory(ctxT(t, 5*time.Second), job, "x", 10)
			require.NoError(t, err)
			require.Len(t, hist, 1, "the dead holder's attempt, ended: %+v", hist)
			assert.True(t, hist[0].Slot.Equal(run.Slot))
			assert.Equal(t, 1, hist[0].Attempt, "no attempt of a removed entry is granted")
			assert.Equal(t, run.Token, hist[0].Token)
			assert.Contains(t, hist[0].Error, "removed")
			require.NoError(t, taker.Stop(ctxT(t, 10*time.Second)))
			_ = holder.Stop(ctxT(t, 100*time.Millisecond)) // a dead process: reap it
			select {
			case again := <-started:
				t.Fatalf("the handler started again: %+v", again)
			default:
			}
		})
	}
}
