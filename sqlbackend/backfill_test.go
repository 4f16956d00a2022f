package sqlbackend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// Backfill on the SQL backend: five past slots that never ran (one stored
// skipped in the runs table and in history) are backfilled by two replicas at
// once: each runs once, marked as a backfill, the skipped one as attempt 2; a
// rerun by both at once (each having read history before either claims) then
// runs each once more, as the next attempt.
func TestBackfillOnSQL(t *testing.T) {
	t.Parallel()
	onBoth(t, "backfill", testBackfill)
}

func testBackfill(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("backfill")
	var (
		mu  sync.Mutex
		ran = map[int64][]scheduler.Run{}
	)
	handler := func(_ context.Context, r scheduler.Run) error {
		mu.Lock()
		ran[r.Slot.UnixMilli()] = append(ran[r.Slot.UnixMilli()], r)
		mu.Unlock()
		return nil
	}
	_, first := open(t)
	to := time.Now().Truncate(time.Second).Add(-time.Second)
	from := to.Add(-5 * time.Second)
	// Slot from was stored skipped, as another slot held the job (overlap
	// forbidden): before the replicas start, whose loops' slots would hold it too.
	runs := first.Runs()
	holder := backendtest.Token()
	busy := from.Add(-time.Hour)
	claim := func(slot time.Time, token string) backend.ClaimResult {
		res, err := runs.Claim(ctx, backend.RunClaim{Job: job, Slot: slot, Token: token, Instance: "old", Lease: time.Minute,
			Deadline: time.Now().Add(time.Minute), Overlap: backend.OverlapSkip, Keep: time.Hour})
		require.NoError(t, err)
		return res
	}
	require.Equal(t, backend.OutcomeWon, claim(busy, holder).Outcome)
	require.Equal(t, backend.OutcomeOverlap, claim(from, backendtest.Token()).Outcome)
	require.NoError(t, runs.Finish(ctx, backend.RunKey{Job: job, Slot: busy, Token: holder}, backend.StatusOK))
	require.NoError(t, first.SaveResult(ctx, job, backend.StoredResult{Slot: from, Token: backendtest.Token(), Instance: "old",
		Attempt: 1, Status: backend.StatusSkipped, FinishedAt: time.Now()}, backend.Retention{Size: 100}))

	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b"} {
		b := first
		if inst != "a" {
			_, b = open(t)
		}
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		// A short lease: a backup whose watch started after the holder finished
		// claims again within lease/2.
		require.NoError(t, sc.Every(job, time.Second, handler, scheduler.WithLease(2*time.Second)))
		require.NoError(t, sc.Start(ctx))
		t.Cleanup(func() { _ = sc.Stop(context.Background()) })
		scheds = append(scheds, sc)
	}
	// The job has a history (from's record): the slots after from fell while no
	// replica was up, and Start records them missed.
	require.Eventually(t, func() bool {
		hist, err := scheds[0].History(ctx, job, 0)
		if err != nil {
			return false
		}
		missed := 0
		for _, r := range hist {
			if r.Status == scheduler.StatusMissed && r.Slot.After(from) && r.Slot.Before(to) {
				missed++
			}
		}
		return missed == 4
	}, 10*time.Second, 10*time.Millisecond, "Start records the 4 slots after from missed")
	backfillBoth := func(opts ...scheduler.BackfillOption) map[int64]int {
		t.Helper()
		results := make([]scheduler.BackfillResult, len(scheds))
		var wg sync.WaitGroup
		for i, sc := range scheds {
			wg.Go(func() {
				var err error
				results[i], err = sc.Backfill(ctx, job, from, to, opts...)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		reported := map[int64]int{}
		for _, r := range results {
			require.Len(t, r.Slots, 5)
			for _, sl := range r.Slots {
				if sl.Outcome == scheduler.BackfillRan {
					reported[sl.Slot.UnixMilli()]++
				}
			}
		}
		return reported
	}
	runsOf := func(ms int64) []scheduler.Run {
		mu.Lock()
		defer mu.Unlock()
		return append([]scheduler.Run(nil), ran[ms]...)
	}
	reported := backfillBoth()
	hist, err := scheds[1].History(ctx, job, 0)
	require.NoError(t, err)
	last := map[int64]scheduler.RunRecord{}
	for _, r := range hist {
		if _, ok := last[r.Slot.UnixMilli()]; !ok {
			last[r.Slot.UnixMilli()] = r // newest first
		}
	}
	for slot := from; slot.Before(to); slot = slot.Add(time.Second) {
		ms := slot.UnixMilli()
		if rs := runsOf(ms); assert.Len(t, rs, 1, "slot %s ran once", slot.Format(time.TimeOnly)) {
			assert.True(t, rs[0].Backfill)
		}
		assert.Equal(t, 1, reported[ms])
		assert.Equal(t, scheduler.StatusOK, last[ms].Status)
		assert.True(t, last[ms].Backfill, "history marks slot %s a backfill", slot.Format(time.TimeOnly))
		// Attempt 2: after the skipped decision, or the missed record.
		assert.Equal(t, 2, last[ms].Attempt, "slot %s", slot.Format(time.TimeOnly))
	}

	// Two reruns asked at once run each slot once more. A rerun takes the attempt
	// after the one its Backfill read in history: one that read it only after the
	// other's rerun of a slot ended is asked on the strength of that newer
	// attempt and rightly runs the slot again. So each waits, once it has read
	// history and before it claims (BackfillOnStart), until the other has read
	// it too: both ask on the strength of the same attempts.
	var read sync.WaitGroup
	read.Add(len(scheds))
	bothRead := make(chan struct{})
	go func() { read.Wait(); close(bothRead) }()
	reported = backfillBoth(scheduler.BackfillRerun(), scheduler.BackfillOnStart(func(scheduler.BackfillResult) {
		read.Done()
		select {
		case <-bothRead:
		case <-ctx.Done():
		}
	}))
	for slot := from; slot.Before(to); slot = slot.Add(time.Second) {
		assert.Len(t, runsOf(slot.UnixMilli()), 2, "slot %s reran once", slot.Format(time.TimeOnly))
		assert.Equal(t, 1, reported[slot.UnixMilli()])
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(ctx))
	}
}
