package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestOverlapTieAtStart: 30 jobs that forbid overlap and catch up their latest
// missed slot; three instances on kvlease start at the same instant just after a
// slot, so each job's catch-up claims the previous slot while its loop claims the
// one just due. The runs last until the test has looked, so neither slot's run can
// end before the other is decided. Every job must run exactly one of the two slots
// and store the other skipped: neither both, nor neither, which is what two claims
// backing off from each other's lease key would leave (the tie rules are in
// kvlease/overlap.go).
func TestOverlapTieAtStart(t *testing.T) {
	const (
		jobs = 30
		// Generous: under -race 180 claims at one instant take a while, and a
		// slot past its lateness would be stored late, a lease too old when won
		// handed over unrun; neither is the tie this test is about.
		interval = 3 * time.Second
		maxLate  = 2500 * time.Millisecond
		lease    = 10 * time.Second
	)
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	log := newLedger()
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)
	hold := func(ctx context.Context, r scheduler.Run) error {
		log.record(r)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	name := func(i int) string { return fmt.Sprintf("tie-%02d", i) }

	var scheds []*scheduler.Scheduler
	for i := range 3 {
		nc := dial(t, srv.ClientURL())
		s := newSched(t, leased(t, nc, 1), fmt.Sprintf("inst-%c", 'a'+i), nil)
		for j := range jobs {
			require.NoError(t, s.Every(name(j), interval, hold, scheduler.WithOverlap(scheduler.OverlapSkip),
				scheduler.WithCatchUp(scheduler.CatchUpLatest, time.Minute), scheduler.WithMaxLate(maxLate),
				scheduler.WithLease(lease)))
		}
		scheds = append(scheds, s)
	}
	waitSlotBoundary(t, interval)
	due := time.Now().Truncate(interval) // the slot just due; the catch-up slot is the one before
	caught := due.Add(-interval)
	var wg sync.WaitGroup
	for _, s := range scheds {
		wg.Go(func() { assert.NoError(t, s.Start(ctxT(t, 15*time.Second))) })
	}
	wg.Wait()

	// Wait until every job has a record of both slots, not both running: the one
	// that runs, and the one decided (skipped; before the fix, both skipped). A
	// slot's claim shows running in history until its decision is saved.
	ctx := ctxT(t, 30*time.Second)
	statuses := make([]map[int64]scheduler.Status, jobs)
	require.Eventually(t, func() bool {
		for j := range jobs {
			hist, err := scheds[0].History(ctx, name(j), 100)
			require.NoError(t, err)
			statuses[j] = map[int64]scheduler.Status{}
			for _, r := range hist {
				if r.Slot.Equal(due) || r.Slot.Equal(caught) {
					statuses[j][r.Slot.UnixMilli()] = r.Status
				}
			}
			running := 0
			for _, st := range statuses[j] {
				if st == scheduler.StatusRunning {
					running++
				}
			}
			if len(statuses[j]) < 2 || running > 1 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "both slots of every job are recorded: %v", statuses)

	neither, one, both := 0, 0, 0
	for j := range jobs {
		ran := log.count(name(j), interval, caught, due)
		require.Equal(t, 2, ran.slots)
		switch ran.ran {
		case 0:
			neither++
		case 1:
			one++
		default:
			both++
		}
		assert.Equal(t, 1, ran.ran, "job %s: exactly one of the two slots runs (%v; history %v)", name(j), ran, statuses[j])
		assert.Zero(t, ran.dups, "job %s", name(j))
		// The other slot is decided without running: skipped, or late when
		// its claim came past its lateness (a loaded machine).
		decided := 0
		for _, st := range statuses[j] {
			if st == scheduler.StatusSkipped || st == scheduler.StatusLate {
				decided++
			}
		}
		assert.Equal(t, 1, decided, "job %s: the other slot is stored skipped or late: %v", name(j), statuses[j])
	}
	t.Logf("%d jobs: %d ran one of the two slots, %d neither, %d both", jobs, one, neither, both)
	releaseAll()
	stopAll(t, scheds)
}
