package sqlbackend_test

// A randomised model check of the lease path on the SQL backends, in real time: the
// real-time variant of the scheduler's TestModelCheck (internal/modelcheck, the same
// harness, faults, record and invariants as integration's TestModelCheckKV). Each
// seed runs 3 instances, each with its own *sql.DB pool and backend, seen through a
// faulty wrapper (lost answers, lost and slow requests, crashes, paused heartbeats),
// with clock offsets, stops, restarts and RunNow calls during a fault phase, then a
// quiet phase, then a final Stop.
//
// ANARCHON_SQL_MODEL_SEEDS=N runs seeds 1..N on each database (default 4, 2 at a
// time); ANARCHON_SQL_MODEL_SEED=K runs seed K alone and prints its whole trace on
// failure (ANARCHON_MODEL_TRACE=1 prints it always).

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anarchon/anarchon/internal/modelcheck"
	"github.com/anarchon/anarchon/sqlbackend"
)

const (
	smcDefaultSeeds = 4
	smcConcurrent   = 2
)

func smcWorld(db string) *modelcheck.World {
	return &modelcheck.World{
		Name:        "sql model check (" + db + ")",
		Replay:      "ANARCHON_SQL_MODEL_SEED=%d go test -race -run TestModelCheckSQL/" + db + " ./sqlbackend/",
		Timing:      modelcheck.Bounded,
		HistoryKeep: 1000,
		FinalStop:   15 * time.Second,
		StopSlack:   2 * time.Second,
		CancelSlack: 500 * time.Millisecond,
		// Lease times are the database's clock in milliseconds: no rounding.
		StoreSlack: 50 * time.Millisecond,
		Faults: modelcheck.Faults{
			LostMin: 30 * time.Millisecond, LostSpread: 900 * time.Millisecond,
			SlowMax:   300 * time.Millisecond,
			CrashHang: 10 * time.Second,
		},
		ManualMin: 3 * time.Second, ManualSpread: 3 * time.Second,
		// A pause reaches the others through NOTIFY (PostgreSQL) or a poll (SQLite).
		PauseSlack: 500 * time.Millisecond,
	}
}

func TestModelCheckSQL(t *testing.T) {
	t.Parallel()
	seeds, err := modelcheck.SeedsFromEnv("ANARCHON_SQL_MODEL_", smcDefaultSeeds)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		smcRun(t, "postgres", seeds, func(seed uint64) (func() (*sql.DB, error), sqlbackend.Dialect, []sqlbackend.Option) {
			return func() (*sql.DB, error) { return sql.Open("pgx", pg.DSN("")) }, sqlbackend.Postgres,
				[]sqlbackend.Option{sqlbackend.WithTablePrefix(prefix(fmt.Sprint("smc", seed)))}
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		smcRun(t, "sqlite", seeds, func(seed uint64) (func() (*sql.DB, error), sqlbackend.Dialect, []sqlbackend.Option) {
			path := filepath.Join(dir, fmt.Sprintf("seed-%d.db", seed))
			return func() (*sql.DB, error) { return sqlbackend.OpenSQLite(path) }, sqlbackend.SQLite, nil
		})
	})
}

// smcRun runs the seeds on one database, a few at a time, each on tables (or a
// file) of its own, and reports them one by one after.
func smcRun(t *testing.T, db string, seeds modelcheck.Seeds, where func(seed uint64) (func() (*sql.DB, error), sqlbackend.Dialect, []sqlbackend.Option)) {
	w := smcWorld(db)
	modelcheck.RunSeeds(t, w, seeds, smcConcurrent, func(seed uint64) (*modelcheck.Harness, []modelcheck.Violation, error) {
		open, dialect, opts := where(seed)
		return smcRunSeed(w, seed, open, dialect, opts)
	})
}

// smcRunSeed runs one seed. Every instance, and the observer that reads History and
// Active for the check, has its own pool and backend.
func smcRunSeed(w *modelcheck.World, seed uint64, open func() (*sql.DB, error), dialect sqlbackend.Dialect, opts []sqlbackend.Option) (*modelcheck.Harness, []modelcheck.Violation, error) {
	var (
		mu    sync.Mutex
		clean []func()
	)
	defer func() {
		for i := len(clean) - 1; i >= 0; i-- {
			clean[i]()
		}
	}()
	newBackend := func() (*sqlbackend.Backend, error) {
		db, err := open()
		if err != nil {
			return nil, err
		}
		b, err := sqlbackend.New(db, dialect, opts...)
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		mu.Lock()
		clean = append(clean, func() {
			_ = b.Close(context.Background())
			_ = db.Close()
		})
		mu.Unlock()
		return b, nil
	}
	plan := modelcheck.RealTimePlan(seed, modelcheck.RealTime{
		Instances: 3, FaultPhase: 5 * time.Second, QuietPhase: 5 * time.Second,
		CallTimeout: time.Second, JobPrefix: "smc",
	})
	plan.AddEdges(2 * time.Second)
	plan.AddRetries()
	plan.AddEntries()
	plan.AddHolderCrashes()
	plan.AddReadds()
	plan.AddOutages()
	plan.AddSkew(time.Second)
	plan.AddBackfills()
	plan.AddRedeploys()
	plan.AddFreezes()
	h := modelcheck.New(w, plan, func(string) (modelcheck.Store, error) {
		return newBackend()
	})
	if err := h.Run(); err != nil {
		return h, nil, err
	}
	b, err := newBackend()
	if err != nil {
		return h, nil, fmt.Errorf("observer: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return h, h.Check(ctx, b, b.Runs()), nil
}
