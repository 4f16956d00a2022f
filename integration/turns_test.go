package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// Six replicas taking turns on kvlease, on one server and on a cluster of three
// with R3: every slot runs once, a slot costs two or three claims rather than
// six, and a replica killed mid-way leaves no slot unrun.
func TestTurnsOnKV(t *testing.T) {
	onR1AndR3(t, func(t *testing.T, n node) {
		const replicas, jobs = 6, 4
		l := newLedger()
		var mu sync.Mutex
		claims := map[string]int{} // by job and slot
		n.turns = true
		n.onEvent = func(e scheduler.Event) {
			if e.Kind == scheduler.EventClaimed || e.Kind == scheduler.EventLost {
				mu.Lock()
				claims[fmt.Sprintf("%s@%d", e.Job, e.Slot.UnixMilli())]++
				mu.Unlock()
			}
		}
		var kills []func()
		var scheds []*scheduler.Scheduler
		for i := range replicas {
			s, kill := n.open(t, fmt.Sprintf("turns-%d", i))
			for k := range jobs {
				require.NoError(t, s.Every(fmt.Sprintf("turns-job-%d", k), time.Second, l.handler, scheduler.WithLease(3*time.Second)))
			}
			scheds, kills = append(scheds, s), append(kills, kill)
		}
		for _, s := range scheds {
			require.NoError(t, s.Start(ctxT(t, time.Minute)))
		}
		require.Eventually(t, func() bool {
			for _, s := range scheds {
				if len(s.Members()) != replicas {
					return false
				}
			}
			return true
		}, time.Minute, 50*time.Millisecond, "every replica sees the six")
		from := time.Now().Truncate(time.Second).Add(2 * time.Second)
		sleepCtx(t, 6*time.Second)
		kills[0]() // a replica dies: no Stop, no Leave
		sleepCtx(t, 8*time.Second)
		to := time.Now().Truncate(time.Second).Add(-2 * time.Second)
		stopAll(t, scheds[1:])

		slots, total := 0, 0
		for k := range jobs {
			job := fmt.Sprintf("turns-job-%d", k)
			c := l.count(job, time.Second, from, to)
			assert.Zero(t, c.dups, "%s: %v", job, c)
			assert.Zero(t, c.missed, "%s: %v", job, c)
			assert.Empty(t, l.duplicates(job))
			mu.Lock()
			for s := from; !s.After(to); s = s.Add(time.Second) {
				slots++
				total += claims[fmt.Sprintf("%s@%d", job, s.UnixMilli())]
			}
			mu.Unlock()
		}
		t.Logf("%d slots, %.2f claims a slot with %d replicas", slots, float64(total)/float64(slots), replicas)
		// Two claims a slot, a third when the second finds the run still going
		// (a loaded machine) and stands by; six and more without turns.
		assert.Less(t, float64(total)/float64(slots), 4.5, "claims a slot with six replicas")
	})
}
