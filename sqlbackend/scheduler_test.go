package sqlbackend_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
)

// opener opens one replica's pool and backend on the test's database.
type opener func(t *testing.T) (*sql.DB, *sqlbackend.Backend)

func pgOpener(prefix string) opener {
	return func(t *testing.T) (*sql.DB, *sqlbackend.Backend) {
		db := openPG(t)
		b, err := sqlbackend.New(db, sqlbackend.Postgres, sqlbackend.WithTablePrefix(prefix))
		require.NoError(t, err)
		return db, closeAtEnd(t, b)
	}
}

func sqliteOpener(path string) opener {
	return func(t *testing.T) (*sql.DB, *sqlbackend.Backend) {
		db, err := sqlbackend.OpenSQLite(path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		b, err := sqlbackend.New(db, sqlbackend.SQLite)
		require.NoError(t, err)
		return db, closeAtEnd(t, b)
	}
}

// onBoth runs fn in parallel on PostgreSQL (tables prefixed after name) and on
// SQLite (a file of its own).
func onBoth(t *testing.T, name string, fn func(t *testing.T, open opener)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, pgOpener(prefix(name)))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, sqliteOpener(sqliteFile(t)))
	})
}

// start is one handler start: which attempt of which slot, where, and when it
// started and returned (by this process's clock, which every replica shares here).
type start struct {
	slot      int64
	instance  string
	attempt   int
	fence     uint64
	from, end time.Time
}

// TestSchedulersTakeOverAKilledReplica runs three schedulers, each on its own pool,
// on one job with leases. The first replica to start a run is killed mid-run: its
// pool is closed (no Stop, no release, no more heartbeats). A backup takes the run
// over once the lease expired, as attempt 2; every other slot runs exactly once;
// History shows the slot's two attempts.
func TestSchedulersTakeOverAKilledReplica(t *testing.T) {
	t.Parallel()
	onBoth(t, "takeover", testTakeover)
}

func testTakeover(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("takeover")
	var (
		mu      sync.Mutex
		starts  []start
		victim  string
		victimS int64
		dbs     = map[string]*sql.DB{}
		scheds  []*scheduler.Scheduler
		killed  = make(chan struct{})
		// killedAt is when the victim's pool was closed.
		killedAt time.Time
	)
	for _, inst := range []string{"a", "b", "c"} {
		db, b := open(t)
		dbs[inst] = db
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, time.Second, func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			i := len(starts)
			starts = append(starts, start{slot: r.Slot.UnixMilli(), instance: r.Instance, attempt: r.Attempt, fence: r.Fence, from: time.Now()})
			first := victim == ""
			if first {
				victim, victimS = r.Instance, r.Slot.UnixMilli()
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				starts[i].end = time.Now()
				mu.Unlock()
			}()
			if first {
				// The replica dies: its pool is closed under it. Its handler
				// holds on until the scheduler cancels it (its lease ran out).
				go func() {
					_ = dbs[r.Instance].Close()
					mu.Lock()
					killedAt = time.Now()
					mu.Unlock()
					close(killed)
				}()
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, scheduler.WithLease(backend.MinLease), scheduler.WithMaxLate(900*time.Millisecond)))
		scheds = append(scheds, sc)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	// Wait for the takeover of the victim's slot and a few more slots.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		takenOver, after := false, 0
		for _, s := range starts {
			if s.slot == victimS && s.attempt == 2 && !s.end.IsZero() {
				takenOver = true
			}
			if victim != "" && s.slot > victimS+2000 {
				after++
			}
		}
		return takenOver && after >= 2
	}, 30*time.Second, 20*time.Millisecond, "no takeover of the killed replica's run")
	<-killed
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, sc := range scheds {
		_ = sc.Stop(stopCtx) // the victim's Stop fails to release: its pool is closed
	}

	mu.Lock()
	defer mu.Unlock()
	bySlot := map[int64][]start{}
	for _, s := range starts {
		bySlot[s.slot] = append(bySlot[s.slot], s)
	}
	for slot, ss := range bySlot {
		if slot == victimS {
			require.Len(t, ss, 2, "the killed replica's slot: its attempt and the takeover: %+v", ss)
			assert.Equal(t, victim, ss[0].instance)
			assert.Equal(t, 1, ss[0].attempt)
			assert.NotEqual(t, victim, ss[1].instance, "a backup took over")
			assert.Equal(t, 2, ss[1].attempt)
			assert.Greater(t, ss[1].fence, ss[0].fence, "the backup's fence is bigger")
			assert.False(t, ss[1].from.Before(ss[0].end), "the backup started only after the killed holder's handler returned")
			continue
		}
		if len(ss) == 2 && ss[0].instance == victim && ss[0].from.Before(killedAt) && ss[1].attempt == 2 {
			continue // the victim ran it as its pool closed, and could not store its end: taken over
		}
		assert.Len(t, ss, 1, "slot %d ran once: %+v", slot, ss)
	}
	// The survivors' view: both attempts of the slot, the takeover ok.
	_, reader := open(t)
	hist, err := reader.History(ctx, job, 100)
	require.NoError(t, err)
	var attempts []backend.RunRecord
	for _, r := range hist {
		if r.Slot.UnixMilli() == victimS {
			attempts = append(attempts, r)
		}
	}
	require.Len(t, attempts, 2, "History shows the slot's two attempts: %+v", attempts)
	assert.Equal(t, 2, attempts[0].Attempt)
	assert.Equal(t, backend.StatusOK, attempts[0].Status)
	assert.Equal(t, 1, attempts[1].Attempt)
	assert.Equal(t, victim, attempts[1].Instance)
	assert.Contains(t, []backend.Status{backend.StatusLost, backend.StatusRunning}, attempts[1].Status,
		"the killed attempt is recorded lost by the backup (or still running: the killed replica wrote nothing more)")
	t.Logf("%d slots, the killed replica %s's slot %s taken over by %s", len(bySlot), victim,
		time.UnixMilli(victimS).UTC().Format(time.RFC3339), fmt.Sprint(bySlot[victimS][1].instance))
}
