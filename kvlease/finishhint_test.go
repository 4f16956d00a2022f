package kvlease_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// A finish the shared watcher saw answers a later claim only while it is the
// slot's newest state. Here slot 0 ends cancelled, a rerun wins attempt 2 and
// stores a retry due at once; the next takeover-only claim wins that retry,
// whether the watcher is held right after the finish (the store's own writes
// are newer) or has delivered the writes of another store.
func TestFinishSeenIsNotOlderThanWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  bool // the watching store writes; its watcher is held after the finish
	}{
		{"own writes, watcher held", true},
		{"another store's writes, delivered", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := "finishhint-" + token()[:8]
			leaseKey := "lease." + kvlease.JobTokenForTest(job) + "." + kvlease.SlotTokenForTest(slotAt(0))
			watching := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
			writing := watching
			if !tc.own {
				writing = newStore(t, singleJS(t), kvlease.WithBucket(bucket))
			}
			finished, caughtUp, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var once sync.Once
			purges := 0
			kvlease.OnDeliverForTest(watching, func(key string, purge bool) {
				if key != leaseKey || !purge {
					return
				}
				purges++
				switch {
				case purges == 1 && tc.own:
					close(finished)
					<-release // the watcher delivers nothing newer
				case purges == 1:
					close(finished)
				case purges == 2:
					close(caughtUp) // the purge that ends the retried attempt's lease
				}
			})
			t.Cleanup(func() { once.Do(func() { close(release) }) })

			first := overlapClaim(job, 0, "first")
			mustClaim(t, writing, first, backend.OutcomeWon)
			if !tc.own {
				mustClaim(t, watching, overlapClaim(job, 0, "backup"), backend.OutcomeRunning)
			}
			_, err := watching.WatchRun(t.Context(), job, slotAt(0))
			require.NoError(t, err)
			finishAt(t, writing, first, backend.StatusCancelled)
			waitFor(t, finished, "the watcher delivers the finish")

			rerun := overlapClaim(job, 0, "rerun")
			rerun.Backfill, rerun.Rerun, rerun.RerunAttempt = true, true, 1
			won := mustClaim(t, writing, rerun, backend.OutcomeWon)
			require.Equal(t, 2, won.Attempt, "the rerun")
			require.NoError(t, writing.Retry(t.Context(), rerun.Key(), 0, time.Hour))
			if !tc.own {
				waitFor(t, caughtUp, "the watcher delivers the retried attempt's end")
			}

			next := overlapClaim(job, 0, "next")
			next.TakeoverOnly = true
			res, err := watching.Claim(t.Context(), next)
			require.NoError(t, err)
			assert.Equal(t, backend.OutcomeWon, res.Outcome, "the stored retry, not the finish before it: %+v", res)
			assert.Equal(t, 3, res.Attempt)
			assert.True(t, res.Retried)
		})
	}
}

// waitFor fails t unless ch closes within 10s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}
