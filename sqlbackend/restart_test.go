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
	"github.com/anarchon/anarchon/sqlbackend"
	"github.com/anarchon/anarchon/sqlbackend/internal/pgtest"
)

// TestPostgresRestartMidRun restarts PostgreSQL (pg_ctl stop -m fast, then start:
// every connection is cut, the LISTEN connections too) while a run holds its lease,
// under three schedulers. No slot runs twice at once or ends ok twice, runs go on
// after the restart, and the history written before it is intact.
func TestPostgresRestartMidRun(t *testing.T) {
	t.Parallel()
	srv, err := pgtest.Start(pgtest.Options{})
	require.NoError(t, err, "a second PostgreSQL server for the restart")
	t.Cleanup(func() { _ = srv.Stop() })
	ctx := backendtest.Context(t)
	job := backendtest.JobName("restart")
	const work = 700 * time.Millisecond
	var (
		mu     sync.Mutex
		starts []start
	)
	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b", "c"} {
		b, err := sqlbackend.New(openPGAt(t, srv.DSN("")), sqlbackend.Postgres)
		require.NoError(t, err)
		closeAtEnd(t, b)
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, time.Second, func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			i := len(starts)
			starts = append(starts, start{slot: r.Slot.UnixMilli(), instance: r.Instance, attempt: r.Attempt, fence: r.Fence, from: time.Now()})
			mu.Unlock()
			defer func() {
				mu.Lock()
				starts[i].end = time.Now()
				mu.Unlock()
			}()
			t := time.NewTimer(work) // the job's work, cut short if the lease is lost
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, scheduler.WithLease(3*time.Second), scheduler.WithMaxLate(900*time.Millisecond)))
		scheds = append(scheds, sc)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	count := func() (all, running int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range starts {
			if s.end.IsZero() {
				running++
			}
		}
		return len(starts), running
	}
	// Restart while a run holds its lease (a handler is mid-run).
	require.Eventually(t, func() bool { n, r := count(); return n >= 2 && r > 0 }, 20*time.Second, 5*time.Millisecond)
	before, _ := count()
	// A replica watching a lease through LISTEN (its poll is a minute: only a
	// notification can wake it in time), listening before the restart.
	watcher, err := sqlbackend.New(openPGAt(t, srv.DSN("")), sqlbackend.Postgres, sqlbackend.WithPollInterval(time.Minute))
	require.NoError(t, err)
	closeAtEnd(t, watcher)
	holder, err := sqlbackend.New(openPGAt(t, srv.DSN("")), sqlbackend.Postgres)
	require.NoError(t, err)
	closeAtEnd(t, holder)
	wjob := backendtest.JobName("watched")
	held := func(k int) (time.Time, string) {
		slot, token := time.UnixMilli(1_900_000_000_000+int64(k)*1000), backendtest.Token()
		res, err := holder.Runs().Claim(ctx, backend.RunClaim{Job: wjob, Slot: slot, Token: token, Instance: "holder", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeWon, res.Outcome)
		return slot, token
	}
	slot0, _ := held(0)
	_, err = watcher.Store().WatchRun(ctx, wjob, slot0)
	require.NoError(t, err)

	restarted := time.Now()
	require.NoError(t, srv.Restart())
	t.Logf("PostgreSQL restarted in %v with a run in progress (%d runs before)", time.Since(restarted).Round(time.Millisecond), before)
	require.Eventually(t, func() bool { n, _ := count(); return n >= before+4 }, 30*time.Second, 20*time.Millisecond,
		"runs go on after the restart")
	// The watcher listens again: another replica's release reaches it by NOTIFY.
	slot1, token1 := held(1)
	ch, err := watcher.Store().WatchRun(ctx, wjob, slot1)
	require.NoError(t, err)
	require.NoError(t, holder.Runs().Release(ctx, backend.RunKey{Job: wjob, Slot: slot1, Token: token1}))
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("after the restart, a watch did not see another replica's release: the listener did not come back")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(stopCtx))
	}

	mu.Lock()
	defer mu.Unlock()
	bySlot := map[int64][]start{}
	for _, s := range starts {
		bySlot[s.slot] = append(bySlot[s.slot], s)
	}
	for slot, ss := range bySlot {
		for i := 1; i < len(ss); i++ {
			assert.False(t, ss[i].from.Before(ss[i-1].end), "slot %d: attempt %d started before attempt %d's handler returned: %+v", slot, ss[i].attempt, ss[i-1].attempt, ss)
			assert.Greater(t, ss[i].attempt, ss[i-1].attempt, "slot %d", slot)
		}
		if len(ss) > 1 {
			t.Logf("slot %s ran %d attempts (the restart cut a lease): %+v", time.UnixMilli(slot).UTC().Format(time.RFC3339), len(ss), ss)
		}
	}
	b, err := sqlbackend.New(openPGAt(t, srv.DSN("")), sqlbackend.Postgres)
	require.NoError(t, err)
	hist, err := b.History(ctx, job, 0)
	require.NoError(t, err)
	ok := map[int64]int{}
	seen := map[int64]bool{}
	for _, r := range hist {
		seen[r.Slot.UnixMilli()] = true
		if r.Status == backend.StatusOK {
			ok[r.Slot.UnixMilli()]++
		}
	}
	for slot := range bySlot {
		assert.True(t, seen[slot], "slot %d ran and is in History", slot)
		assert.LessOrEqual(t, ok[slot], 1, "slot %d ended ok at most once", slot)
	}
	for _, r := range hist {
		if _, ran := bySlot[r.Slot.UnixMilli()]; ran {
			assert.NotEqual(t, backend.StatusRunning, r.Status, "every run that started has ended in History: %+v", r)
		}
	}
	t.Logf("%d slots ran, %d history records", len(bySlot), len(hist))
}
