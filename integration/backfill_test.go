package integration

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// Backfill over JetStream with kvlease: five past slots that never ran (one of
// them stored late in the run store and in history) are backfilled by two
// replicas at once: each runs once across the fleet, marked as a backfill, the
// late one as attempt 2; a second backfill runs nothing.
func TestBackfillOnJetStream(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	const job = "backfilled"
	l := newLedger()
	var scheds []*scheduler.Scheduler
	var backends []*jetstream.LeasedBackend
	// The range ends over a second (the job's max lateness) before the first
	// replica starts: no slot of it is due at Start, however long the starts take.
	to := time.Now().Truncate(time.Second).Add(-time.Second)
	from := to.Add(-5 * time.Second)
	for _, id := range []string{"a", "b"} {
		b := leased(t, natstest.Conn(t, srv), 1)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: id})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(ctxT(t, 10*time.Second)) })
		require.NoError(t, s.Every(job, time.Second, l.handler))
		require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
		scheds = append(scheds, s)
		backends = append(backends, b)
	}
	// Slot from was decided late (nobody started it in time).
	ctx := ctxT(t, 30*time.Second)
	res, err := backends[0].Runs().Claim(ctx, backend.RunClaim{Job: job, Slot: from, Token: backendtest.Token(), Instance: "old",
		Lease: time.Minute, Deadline: from.Add(time.Second), Keep: time.Hour})
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeLate, res.Outcome)
	require.NoError(t, backends[0].SaveResult(ctx, job, backend.StoredResult{Slot: from, Token: backendtest.Token(), Instance: "old",
		Attempt: 1, Status: backend.StatusLate, FinishedAt: time.Now()}, backend.Retention{Size: 100}))

	results := make([]scheduler.BackfillResult, len(scheds))
	var wg sync.WaitGroup
	for i, s := range scheds {
		wg.Go(func() {
			var err error
			results[i], err = s.Backfill(ctx, job, from, to)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	ran := map[int64]int{}
	for _, r := range results {
		require.Len(t, r.Slots, 5)
		for _, sl := range r.Slots {
			if sl.Outcome == scheduler.BackfillRan {
				ran[sl.Slot.UnixMilli()]++
				assert.Equal(t, scheduler.StatusOK, sl.Status)
			} else {
				assert.Contains(t, []scheduler.BackfillOutcome{scheduler.BackfillElsewhere, scheduler.BackfillAlreadyRan}, sl.Outcome, "slot %v", sl.Slot)
			}
		}
	}
	hist, err := scheds[1].History(ctx, job, 0)
	require.NoError(t, err)
	bySlot := map[int64][]scheduler.RunRecord{}
	for i := len(hist) - 1; i >= 0; i-- {
		bySlot[hist[i].Slot.UnixMilli()] = append(bySlot[hist[i].Slot.UnixMilli()], hist[i])
	}
	for slot := from; slot.Before(to); slot = slot.Add(time.Second) {
		ms := slot.UnixMilli()
		l.mu.Lock()
		runs := append([]scheduler.Run(nil), l.runs[job][ms]...)
		l.mu.Unlock()
		if assert.Len(t, runs, 1, "slot %s ran once", slot.Format(time.TimeOnly)) {
			assert.True(t, runs[0].Backfill)
		}
		assert.Equal(t, 1, ran[ms], "slot %s reported run by one replica", slot.Format(time.TimeOnly))
		recs := bySlot[ms]
		if !assert.NotEmpty(t, recs) {
			continue
		}
		last := recs[len(recs)-1]
		assert.Equal(t, scheduler.StatusOK, last.Status)
		assert.True(t, last.Backfill, "history marks slot %s a backfill", slot.Format(time.TimeOnly))
		if slot.Equal(from) {
			assert.Equal(t, 2, last.Attempt, "the late slot is reopened as attempt 2")
			assert.Equal(t, scheduler.StatusLate, recs[0].Status)
		}
	}

	again, err := scheds[0].Backfill(ctx, job, from, to)
	require.NoError(t, err)
	assert.Equal(t, 5, again.Count(scheduler.BackfillAlreadyRan), "%+v", again.Slots)
	stopAll(t, scheds)
}
