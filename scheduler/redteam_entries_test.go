package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// TestRedTeamNoRetryOfARemovedOrPausedEntry: a failed slot of an entry is retried
// later; when the entry was removed (or paused) meanwhile and every instance saw
// it, the retry must not start the handler: "no slot of a removed entry starts
// once the replicas have seen the removal", "Paused stops one entry's slots".
func TestRedTeamNoRetryOfARemovedOrPausedEntry(t *testing.T) {
	for _, change := range []string{"removed", "paused"} {
		t.Run(change, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				var mu sync.Mutex
				attempts := 0
				h := func(ctx context.Context, run scheduler.Run) error {
					mu.Lock()
					attempts++
					mu.Unlock()
					return errors.New("fails")
				}
				fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) {
					require.NoError(t, s.Declare("j", h, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: 10 * time.Second})))
				})
				e, err := fleet[0].AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
				require.NoError(t, err)
				time.Sleep(time.Minute + time.Second) // the first slot failed; its retry is due in 10 s
				synctest.Wait()
				mu.Lock()
				require.Equal(t, 1, attempts)
				mu.Unlock()
				if change == "removed" {
					require.NoError(t, fleet[1].RemoveEntry(t.Context(), "j", "x", 0))
				} else {
					_, err = fleet[1].UpdateEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute, Paused: true}, e.Revision)
					require.NoError(t, err)
				}
				synctest.Wait()
				time.Sleep(30 * time.Second)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				assert.Equal(t, 1, attempts, "no attempt of the %s entry started after every instance saw it", change)
			})
		})
	}
}

// watchFailsOnce is the memory backend whose first WatchEntries fails after it
// delivered the stored entries, before Synced: a watch cut mid-reading.
type watchFailsOnce struct {
	*memory.Backend
	failed bool
}

func (w *watchFailsOnce) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	if w.failed {
		return w.Backend.WatchEntries(ctx, fn)
	}
	w.failed = true
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_ = w.Backend.WatchEntries(wctx, func(c backend.EntryChange) {
		if c.Synced {
			cancel()
			return
		}
		fn(c)
	})
	return errors.New("the watch was cut")
}

// TestRedTeamAdoptionSurvivesAWatchCutMidReading: an instance started after
// another stopped with a retry of an entry's slot stored adopts that retry
// (nobody else will run it), also when its first reading of the entries was cut
// before it ended and read again.
func TestRedTeamAdoptionSurvivesAWatchCutMidReading(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprint("cut=", cut), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mb := memory.New()
				var mu sync.Mutex
				var attempts []string
				h := func(ctx context.Context, run scheduler.Run) error {
					mu.Lock()
					defer mu.Unlock()
					attempts = append(attempts, fmt.Sprint(run.Instance, "#", run.Attempt))
					if run.Attempt == 1 {
						return errors.New("first attempt fails")
					}
					return nil
				}
				declare := func(s *scheduler.Scheduler) {
					require.NoError(t, s.Declare("j", h, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: 20 * time.Second}), scheduler.WithCatchUp(scheduler.CatchUpNone, 0)))
				}
				a := startFleet(t, mb, 1, declare)[0]
				_, err := a.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
				require.NoError(t, err)
				time.Sleep(time.Minute + time.Second) // slot 60 fails; its retry is stored for 80
				require.NoError(t, a.Stop(t.Context()))
				var b backend.Backend = mb
				if cut {
					b = &watchFailsOnce{Backend: mb}
				}
				startFleet(t, b, 1, declare)
				time.Sleep(30 * time.Second)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				assert.Equal(t, []string{"i0#1", "i0#2"}, attempts, "the later instance runs the stored retry")
			})
		})
	}
}

// storedByAnother is the memory backend whose watch delivers each entry as
// another writer (an older or newer version, a hand edit) stored it: with a
// cron expression beside its interval, which no writer of this version stores.
type storedByAnother struct{ *memory.Backend }

func (s storedByAnother) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	return s.Backend.WatchEntries(ctx, func(c backend.EntryChange) {
		if !c.Synced && !c.Removed {
			c.Entry.Cron = "* * * * * *"
		}
		fn(c)
	})
}

// TestRedTeamEntryOfTwoSchedulesNotRun: an entry stored with two schedules (or
// anything else Entry.Check refuses) is logged and not run, never run on one of
// them.
func TestRedTeamEntryOfTwoSchedulesNotRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb := memory.New()
		runs := newEntryRuns()
		w := startFleet(t, mb, 1, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", runs.handler)) })[0]
		require.NoError(t, w.Stop(t.Context()))
		_, err := w.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		r := startFleet(t, storedByAnother{mb}, 1, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", runs.handler)) })[0]
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		assert.Empty(t, runs.slots("x"), "an entry of two schedules is not run")
		followed, _ := r.EntryCounts()
		assert.Zero(t, followed)
	})
}
