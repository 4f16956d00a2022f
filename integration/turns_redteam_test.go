package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// Reproduces a bug, on kvlease: under Config.Turns a graceful Stop hands the
// holder's run over ("a backup takes over at once instead of waiting for
// expiry", docs/concepts.md "Stop and hand-over"), but the backup no longer
// follows the lease watch: it looks again only when the lease would have
// ended, here up to 15 s later. Without turns the takeover comes at once.
func TestTurnsRedTeamStopHandOverOnKV(t *testing.T) {
	for _, turns := range []bool{false, true} {
		t.Run(fmt.Sprintf("turns=%v", turns), func(t *testing.T) {
			n := singleNode(t)
			n.turns = turns
			var mu sync.Mutex
			started := map[int64][]time.Time{}
			holder := map[int64][]string{}
			h := func(ctx context.Context, r scheduler.Run) error {
				mu.Lock()
				k := r.Slot.UnixMilli()
				started[k] = append(started[k], time.Now())
				holder[k] = append(holder[k], r.Instance)
				mu.Unlock()
				<-ctx.Done()
				return context.Cause(ctx)
			}
			var scheds []*scheduler.Scheduler
			for i := range 3 {
				s, _ := n.open(t, fmt.Sprintf("handover-%d", i))
				require.NoError(t, s.Every("handover", 5*time.Second, h,
					scheduler.WithLease(15*time.Second), scheduler.WithOverlap(scheduler.OverlapSkip)))
				scheds = append(scheds, s)
			}
			for _, s := range scheds {
				require.NoError(t, s.Start(ctxT(t, time.Minute)))
			}
			t.Cleanup(func() { // before open's: the handlers end only when cancelled
				for _, s := range scheds {
					_ = s.Stop(ctxT(t, 200*time.Millisecond))
				}
			})
			if turns {
				require.Eventually(t, func() bool {
					for _, s := range scheds {
						if len(s.Members()) != 3 {
							return false
						}
					}
					return true
				}, time.Minute, 50*time.Millisecond)
			}
			var slot int64
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for k := range started {
					slot = k
					return true
				}
				return false
			}, 30*time.Second, 20*time.Millisecond, "a slot runs")
			sleepCtx(t, 3*time.Second) // the backup stands by
			mu.Lock()
			name := holder[slot][0]
			mu.Unlock()
			var stopping *scheduler.Scheduler
			for _, s := range scheds {
				if s.Instance() == name {
					stopping = s
				}
			}
			stopped := time.Now()
			_ = stopping.Stop(ctxT(t, 300*time.Millisecond))
			ok := assert.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(started[slot]) >= 2
			}, 5*time.Second, 20*time.Millisecond, "turns=%v: the handed-over run is taken over at once", turns)
			if !ok {
				require.Eventually(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(started[slot]) >= 2
				}, 30*time.Second, 50*time.Millisecond)
				mu.Lock()
				t.Logf("taken over %v after the Stop", started[slot][1].Sub(stopped))
				mu.Unlock()
			}
		})
	}
}
