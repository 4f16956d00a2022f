package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
