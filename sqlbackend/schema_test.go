package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/sqlbackend"
)

// runsV1 is the runs table as schema version 1 created it.
const runsV1 = `CREATE TABLE {p}runs (job TEXT NOT NULL, slot {int} NOT NULL, token TEXT NOT NULL,
	instance TEXT NOT NULL, attempt {int} NOT NULL, prev_instance TEXT NOT NULL, prev_token TEXT NOT NULL,
	fence {int} NOT NULL, lease_ms {int} NOT NULL, expires {int} NOT NULL, status TEXT NOT NULL,
	keep_ms {int} NOT NULL, changed {int} NOT NULL, forget_at {int} NOT NULL, reopened {int} NOT NULL,
	PRIMARY KEY (job, slot))`

// The history tables as schema versions 1 and 2 created them (before the
// backfill columns), with their indexes.
var historyV2 = []string{
	`CREATE TABLE {p}claims (job TEXT NOT NULL, slot {int} NOT NULL, token TEXT NOT NULL,
		instance TEXT NOT NULL, attempt {int} NOT NULL, requested_by TEXT NOT NULL, at_ms {int} NOT NULL,
		created {int} NOT NULL, expires {int}, PRIMARY KEY (job, slot))`,
	`CREATE TABLE {p}records (id {autoid}, job TEXT NOT NULL, slot {int} NOT NULL, token TEXT NOT NULL,
		instance TEXT NOT NULL, attempt {int} NOT NULL, manual {int} NOT NULL, requested_by TEXT NOT NULL,
		at_ms {int} NOT NULL, expires {int}, UNIQUE (job, slot, token))`,
	`CREATE TABLE {p}results (id {autoid}, job TEXT NOT NULL, slot {int} NOT NULL, token TEXT NOT NULL,
		instance TEXT NOT NULL, attempt {int} NOT NULL, manual {int} NOT NULL, status TEXT NOT NULL,
		started {int} NOT NULL, finished {int} NOT NULL, error TEXT NOT NULL, fence {int} NOT NULL, expires {int})`,
	`CREATE INDEX {p}results_job ON {p}results (job, slot)`,
	`CREATE INDEX {p}claims_created ON {p}claims (job, created)`,
}

// A database of schema version 1 is migrated by replicas starting together: its
// rows stay, a live lease stays held, a finished slot stays done, and the migrated
// runs table takes retries.
func TestSchemaMigratesVersion1(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		old := open(t)
		require.NoError(t, old.Init(ctx))
		bigint, autoid, ph := "INTEGER", "INTEGER PRIMARY KEY AUTOINCREMENT", func(int) string { return "?" }
		if old.Name() == "sql/postgres" {
			bigint, autoid, ph = "BIGINT", "BIGSERIAL PRIMARY KEY", func(n int) string { return fmt.Sprintf("$%d", n) }
		}
		sqlText := strings.NewReplacer("{p}", old.TablePrefix(), "{int}", bigint, "{autoid}", autoid)
		exec := func(q string, args ...any) {
			t.Helper()
			_, err := old.DB().ExecContext(ctx, sqlText.Replace(q), args...)
			require.NoError(t, err, q)
		}
		// The tables of version 1: every other table is unchanged since.
		exec("DROP TABLE {p}runs")
		exec("DROP TABLE {p}jobs")
		exec(jobsV4)
		exec(runsV1)
		for _, table := range []string{"claims", "records", "results"} {
			exec("DROP TABLE {p}" + table)
		}
		for _, ddl := range historyV2 {
			exec(ddl)
		}
		exec("CREATE INDEX {p}runs_forget ON {p}runs (forget_at)")
		exec("UPDATE {p}schema SET version = 1 WHERE id = 1")
		job := backendtest.JobName("migrate")
		liveSlot, doneSlot := time.UnixMilli(1_900_000_000_000), time.UnixMilli(1_900_000_001_000)
		liveToken := backendtest.Token()
		now := time.Now().UnixMilli()
		keep := backend.DefaultRunKeep.Milliseconds()
		exec("INSERT INTO {p}jobs (job, fence, hist_floor) VALUES ("+ph(1)+", 2, 0)", job)
		insert := "INSERT INTO {p}runs (job, slot, token, instance, attempt, prev_instance, prev_token, fence, lease_ms, expires, status, keep_ms, changed, forget_at, reopened) VALUES (" +
			ph(1) + ", " + ph(2) + ", " + ph(3) + ", 'a', 1, '', '', " + ph(4) + ", 3600000, " + ph(5) + ", " + ph(6) + ", " + ph(7) + ", " + ph(8) + ", " + ph(9) + ", 0)"
		exec(insert, job, liveSlot.UnixMilli(), liveToken, 1, now+time.Hour.Milliseconds(), "", keep, now, now+keep)
		exec(insert, job, doneSlot.UnixMilli(), backendtest.Token(), 2, now, string(backend.StatusOK), keep, now, now+keep)

		replicas := make([]*sqlbackend.Backend, 4)
		errs := make([]error, len(replicas))
		var wg sync.WaitGroup
		for i := range replicas {
			replicas[i] = open(t)
			wg.Go(func() { errs[i] = replicas[i].Init(ctx) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "replicas migrating together")
		var version int
		require.NoError(t, old.DB().QueryRowContext(ctx, sqlText.Replace("SELECT version FROM {p}schema WHERE id = 1")).Scan(&version))
		assert.Equal(t, sqlbackend.SchemaVersion, version, "the migration records the new version")
		assertRunsColumnsAsCreated(t, open, old)

		runs := replicas[0].Store()
		claim := func(slot time.Time, token string) backend.ClaimResult {
			t.Helper()
			res, err := runs.Claim(ctx, backend.RunClaim{Job: job, Slot: slot, Token: token, Instance: "b", Lease: time.Minute})
			require.NoError(t, err)
			return res
		}
		res := claim(liveSlot, liveToken)
		assert.Equal(t, backend.OutcomeWon, res.Outcome, "the holder of a lease stored before the migration")
		assert.Equal(t, uint64(1), res.Fence)
		assert.False(t, res.Retried)
		assert.Equal(t, backend.OutcomeRunning, claim(liveSlot, backendtest.Token()).Outcome)
		done := claim(doneSlot, backendtest.Token())
		assert.Equal(t, backend.OutcomeDone, done.Outcome, "a slot finished before the migration")
		assert.Equal(t, backend.StatusOK, done.Status)

		require.NoError(t, runs.Retry(ctx, backend.RunKey{Job: job, Slot: liveSlot, Token: liveToken}, time.Hour, time.Hour))
		active, err := replicas[1].Runs().Active(ctx, job)
		require.NoError(t, err)
		require.Len(t, active, 1)
		assert.False(t, active[0].Live)
		assert.False(t, active[0].RetryAt.IsZero(), "the migrated table stores the retry")
		assert.Equal(t, backend.OutcomeRetry, claim(liveSlot, backendtest.Token()).Outcome)

		// The migrated history tables keep whether an attempt was a backfill.
		bfSlot := time.UnixMilli(1_900_000_002_000)
		bf := backend.ClaimInput{Job: job, Slot: bfSlot, Token: backendtest.Token(), Instance: "b", Attempt: 1, Backfill: true, At: time.Now()}
		won, err := replicas[2].Claim(ctx, bf)
		require.NoError(t, err)
		require.True(t, won)
		require.NoError(t, replicas[2].SaveResult(ctx, job, backend.StoredResult{Slot: bfSlot, Token: bf.Token, Instance: "b", Attempt: 1,
			Backfill: true, Status: backend.StatusOK, StartedAt: time.Now(), FinishedAt: time.Now()}, backend.Retention{Size: 10}))
		hist, err := replicas[3].History(ctx, job, 0)
		require.NoError(t, err)
		require.Len(t, hist, 2, "the backfill, and the attempt that stored its retry: %+v", hist)
		for _, h := range hist {
			switch h.Token {
			case bf.Token:
				assert.True(t, h.Backfill)
				assert.Equal(t, backend.StatusOK, h.Status)
			case liveToken:
				assert.Equal(t, backend.StatusError, h.Status)
			default:
				t.Errorf("a record of another attempt: %+v", h)
			}
		}

		// Once migrated, a replica starting later changes nothing.
		require.NoError(t, open(t).Init(ctx))
	})
}

// jobsV4 is the jobs table as schema versions 1 to 4 created it (before the
// count of runs).
const jobsV4 = `CREATE TABLE {p}jobs (job TEXT PRIMARY KEY, fence {int} NOT NULL, hist_floor {int} NOT NULL)`

// runsV4 is the runs table as schema version 4 created it (before counted_last).
const runsV4 = `CREATE TABLE {p}runs (job TEXT NOT NULL, slot {int} NOT NULL, token TEXT NOT NULL,
	instance TEXT NOT NULL, attempt {int} NOT NULL, prev_instance TEXT NOT NULL, prev_token TEXT NOT NULL,
	fence {int} NOT NULL, lease_ms {int} NOT NULL, expires {int} NOT NULL, status TEXT NOT NULL,
	keep_ms {int} NOT NULL, changed {int} NOT NULL, forget_at {int} NOT NULL, reopened {int} NOT NULL,
	retried {int} NOT NULL DEFAULT 0, retry_at {int} NOT NULL DEFAULT 0, retry_by {int} NOT NULL DEFAULT 0,
	cancel_slot {int} NOT NULL DEFAULT 0, cancel_instance TEXT NOT NULL DEFAULT '', cancel_token TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (job, slot))`

// A database of schema version 4 is migrated by replicas starting together: a
// live lease stored before stays its holder's, and the migrated tables count
// runs: a job with a row from before, and a job whose first claim makes its row.
func TestSchemaMigratesVersion4(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		old := open(t)
		exec, text, ph := atSchema(t, ctx, old, 4, runsV4)
		job := backendtest.JobName("migrate4")
		liveSlot := time.UnixMilli(1_900_000_000_000)
		liveToken := backendtest.Token()
		now := time.Now().UnixMilli()
		keep := backend.DefaultRunKeep.Milliseconds()
		exec("INSERT INTO {p}jobs (job, fence, hist_floor) VALUES ("+ph(1)+", 1, 0)", job)
		exec("INSERT INTO {p}runs (job, slot, token, instance, attempt, prev_instance, prev_token, fence, lease_ms, expires, status, keep_ms, changed, forget_at, reopened) VALUES ("+
			ph(1)+", "+ph(2)+", "+ph(3)+", 'a', 1, '', '', 1, 3600000, "+ph(4)+", '', "+ph(5)+", "+ph(6)+", "+ph(7)+", 0)",
			job, liveSlot.UnixMilli(), liveToken, now+time.Hour.Milliseconds(), keep, now, now+keep)

		replicas := make([]*sqlbackend.Backend, 3)
		errs := make([]error, len(replicas))
		var wg sync.WaitGroup
		for i := range replicas {
			replicas[i] = open(t)
			wg.Go(func() { errs[i] = replicas[i].Init(ctx) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "replicas migrating together")
		var version int
		require.NoError(t, old.DB().QueryRowContext(ctx, text("SELECT version FROM {p}schema WHERE id = 1")).Scan(&version))
		assert.Equal(t, sqlbackend.SchemaVersion, version, "the migration records the new version")
		assertRunsColumnsAsCreated(t, open, old)

		claim := func(i int, job string, slot time.Time, token string, n int) backend.ClaimResult {
			t.Helper()
			res, err := replicas[i%len(replicas)].Runs().Claim(ctx, backend.RunClaim{Job: job, Slot: slot, Token: token, Instance: "b",
				Lease: time.Minute, Deadline: time.Now().Add(time.Hour), MaxRuns: n})
			require.NoError(t, err)
			return res
		}
		res := claim(0, job, liveSlot, liveToken, 2)
		assert.Equal(t, backend.OutcomeWon, res.Outcome, "the holder of a lease stored before the migration")
		assert.False(t, res.LimitReached)
		assert.False(t, claim(1, job, liveSlot.Add(time.Second), backendtest.Token(), 2).LimitReached, "the first counted")
		assert.True(t, claim(2, job, liveSlot.Add(2*time.Second), backendtest.Token(), 2).LimitReached, "the second counted")
		assert.Equal(t, backend.OutcomeLimit, claim(0, job, liveSlot.Add(3*time.Second), backendtest.Token(), 2).Outcome)

		fresh := backendtest.JobName("migrate4-new") // no jobs row: the claim makes it
		res = claim(1, fresh, liveSlot, backendtest.Token(), 1)
		assert.Equal(t, backend.OutcomeWon, res.Outcome)
		assert.True(t, res.LimitReached, "a new job's first claim counts")
		assert.Equal(t, backend.OutcomeLimit, claim(2, fresh, liveSlot.Add(time.Second), backendtest.Token(), 1).Outcome)

		// Once migrated, a replica starting later changes nothing.
		require.NoError(t, open(t).Init(ctx))
	})
}

// runsV3 is the runs table as schema version 3 created it (before the cancel
// request columns).
const runsV3 = `CREATE TABLE {p}runs (job TEXT NOT NULL, slot {int} NOT NULL, token TEXT NOT NULL,
	instance TEXT NOT NULL, attempt {int} NOT NULL, prev_instance TEXT NOT NULL, prev_token TEXT NOT NULL,
	fence {int} NOT NULL, lease_ms {int} NOT NULL, expires {int} NOT NULL, status TEXT NOT NULL,
	keep_ms {int} NOT NULL, changed {int} NOT NULL, forget_at {int} NOT NULL, reopened {int} NOT NULL,
	retried {int} NOT NULL DEFAULT 0, retry_at {int} NOT NULL DEFAULT 0, retry_by {int} NOT NULL DEFAULT 0,
	PRIMARY KEY (job, slot))`

// A database of schema version 3 is migrated by replicas starting together: its
// rows stay (a live lease, a finished slot, a pending retry), and the migrated
// runs table, alike to a created one, stores cancel requests.
func TestSchemaMigratesVersion3(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		old := open(t)
		exec, text, ph := atSchema(t, ctx, old, 3, runsV3)
		job := backendtest.JobName("migrate3")
		liveSlot, doneSlot, retrySlot := time.UnixMilli(1_900_000_000_000), time.UnixMilli(1_900_000_001_000), time.UnixMilli(1_900_000_002_000)
		liveToken := backendtest.Token()
		now := time.Now().UnixMilli()
		keep := backend.DefaultRunKeep.Milliseconds()
		exec("INSERT INTO {p}jobs (job, fence, hist_floor) VALUES ("+ph(1)+", 3, 0)", job)
		insert := "INSERT INTO {p}runs (job, slot, token, instance, attempt, prev_instance, prev_token, fence, lease_ms, expires, status, keep_ms, changed, forget_at, reopened, retried, retry_at, retry_by) VALUES (" +
			ph(1) + ", " + ph(2) + ", " + ph(3) + ", 'a', 1, '', '', " + ph(4) + ", 3600000, " + ph(5) + ", " + ph(6) + ", " + ph(7) + ", " + ph(8) + ", " + ph(9) + ", 0, 0, " + ph(10) + ", " + ph(11) + ")"
		hour := time.Hour.Milliseconds()
		exec(insert, job, liveSlot.UnixMilli(), liveToken, 1, now+hour, "", keep, now, now+keep, 0, 0)
		exec(insert, job, doneSlot.UnixMilli(), backendtest.Token(), 2, now, string(backend.StatusOK), keep, now, now+keep, 0, 0)
		exec(insert, job, retrySlot.UnixMilli(), backendtest.Token(), 3, now, "retry", keep, now, now+3*hour+keep, now+hour, now+2*hour)

		replicas := make([]*sqlbackend.Backend, 4)
		errs := make([]error, len(replicas))
		var wg sync.WaitGroup
		for i := range replicas {
			replicas[i] = open(t)
			wg.Go(func() { errs[i] = replicas[i].Init(ctx) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "replicas migrating together")
		var version int
		require.NoError(t, old.DB().QueryRowContext(ctx, text("SELECT version FROM {p}schema WHERE id = 1")).Scan(&version))
		assert.Equal(t, sqlbackend.SchemaVersion, version, "the migration records the new version")
		assertRunsColumnsAsCreated(t, open, old)

		runs := replicas[0].Store()
		claim := func(slot time.Time, token string) backend.ClaimResult {
			t.Helper()
			res, err := runs.Claim(ctx, backend.RunClaim{Job: job, Slot: slot, Token: token, Instance: "b", Lease: time.Minute,
				Overlap: backend.OverlapCancelOther, Deadline: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			return res
		}
		res := claim(liveSlot, liveToken)
		assert.Equal(t, backend.OutcomeWon, res.Outcome, "the holder of a lease stored before the migration")
		assert.Equal(t, uint64(1), res.Fence)
		done := claim(doneSlot, backendtest.Token())
		assert.Equal(t, backend.OutcomeDone, done.Outcome, "a slot finished before the migration")
		assert.Equal(t, backend.StatusOK, done.Status)
		assert.Equal(t, backend.OutcomeRetry, claim(retrySlot, backendtest.Token()).Outcome, "a retry stored before the migration")
		require.NoError(t, replicas[1].Runs().Heartbeat(ctx, backend.RunKey{Job: job, Slot: liveSlot, Token: liveToken}, time.Minute),
			"a migrated row has no cancel request")

		// A later slot asks the migrated runs to end: the live lease, and the
		// pending retry (busy: its attempt ended less than a lease ago), the newest.
		asker := backendtest.Token()
		later := time.UnixMilli(1_900_000_003_000)
		w := claim(later, asker)
		assert.Equal(t, backend.OutcomeRunning, w.Outcome)
		assert.True(t, w.WaitsFor.Equal(retrySlot), "it waits for the newest earlier run: %+v", w)
		err := replicas[2].Runs().Heartbeat(ctx, backend.RunKey{Job: job, Slot: liveSlot, Token: liveToken}, time.Minute)
		var ce *backend.CancelError
		require.True(t, errors.As(err, &ce), "the migrated row stores the request: %v", err)
		assert.Equal(t, asker, ce.Request.Token)
		assert.True(t, ce.Request.Slot.Equal(later))
		active, err := replicas[3].Runs().Active(ctx, job)
		require.NoError(t, err)
		require.Len(t, active, 2)
		for _, a := range active {
			require.NotNil(t, a.Cancel, "Active shows it: %+v", a)
			assert.Equal(t, "b", a.Cancel.Instance)
		}
		ended := claim(retrySlot, backendtest.Token())
		assert.Equal(t, backend.OutcomeDone, ended.Outcome, "the retry of a run asked to end")
		assert.Equal(t, backend.StatusCancelled, ended.Status)

		// Once migrated, a replica starting later changes nothing.
		require.NoError(t, open(t).Init(ctx))
	})
}

// assertRunsColumnsAsCreated checks that migrated's runs table has the columns of
// one created by this version.
func assertRunsColumnsAsCreated(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend, migrated *sqlbackend.Backend) {
	t.Helper()
	ctx := backendtest.Context(t)
	created := open(t, sqlbackend.WithTablePrefix(prefix("created")))
	require.NoError(t, created.Init(ctx))
	columns := func(b *sqlbackend.Backend) []string {
		rows, err := b.DB().QueryContext(ctx, "SELECT * FROM "+b.TablePrefix()+"runs WHERE 1 = 0")
		require.NoError(t, err)
		defer rows.Close()
		cols, err := rows.Columns()
		require.NoError(t, err)
		slices.Sort(cols)
		return cols
	}
	assert.Equal(t, columns(created), columns(migrated), "a migrated runs table is alike to a created one")
}

// atSchema rebuilds b's runs table as an older schema version created it
// (runs), and its jobs table as versions 1 to 4 did, and records that version. text replaces a statement's {p} by b's table prefix and {int} by the
// dialect's integer type, and exec runs it; ph is the dialect's n-th placeholder.
func atSchema(t *testing.T, ctx context.Context, b *sqlbackend.Backend, version int, runs string) (exec func(q string, args ...any), text func(string) string, ph func(n int) string) {
	t.Helper()
	require.NoError(t, b.Init(ctx))
	bigint, ph := "INTEGER", func(int) string { return "?" }
	if b.Name() == "sql/postgres" {
		bigint, ph = "BIGINT", func(n int) string { return fmt.Sprintf("$%d", n) }
	}
	sqlText := strings.NewReplacer("{p}", b.TablePrefix(), "{int}", bigint)
	exec = func(q string, args ...any) {
		t.Helper()
		_, err := b.DB().ExecContext(ctx, sqlText.Replace(q), args...)
		require.NoError(t, err, q)
	}
	exec("DROP TABLE {p}runs")
	if version <= 6 {
		exec("ALTER TABLE {p}results DROP COLUMN requested_by")
	}
	if version <= 4 {
		exec("DROP TABLE {p}jobs")
		exec(jobsV4)
	}
	exec(runs)
	exec("CREATE INDEX {p}runs_forget ON {p}runs (forget_at)")
	exec("UPDATE {p}schema SET version = " + strconv.Itoa(version) + " WHERE id = 1")
	return exec, sqlText.Replace, ph
}

// runsV7Columns are the runs table's columns migrations[6] adds.
var runsV7Columns = []string{"manual", "backfill", "incarnation", "recorded", "claimed", "counted", "handed_over", "requested_by"}

// runsV6 is the runs table as schema versions 5 and 6 created it (before the
// machine's columns).
const runsV6 = `CREATE TABLE {p}runs (job TEXT NOT NULL, slot {int} NOT NULL, token TEXT NOT NULL,
	instance TEXT NOT NULL, attempt {int} NOT NULL, prev_instance TEXT NOT NULL, prev_token TEXT NOT NULL,
	fence {int} NOT NULL, lease_ms {int} NOT NULL, expires {int} NOT NULL, status TEXT NOT NULL,
	keep_ms {int} NOT NULL, changed {int} NOT NULL, forget_at {int} NOT NULL, reopened {int} NOT NULL,
	retried {int} NOT NULL DEFAULT 0, retry_at {int} NOT NULL DEFAULT 0, retry_by {int} NOT NULL DEFAULT 0,
	cancel_slot {int} NOT NULL DEFAULT 0, cancel_instance TEXT NOT NULL DEFAULT '', cancel_token TEXT NOT NULL DEFAULT '',
	counted_last {int} NOT NULL DEFAULT 0, PRIMARY KEY (job, slot))`

// A database of schema version 6 is migrated by replicas starting together.
// Its rows are read as the machine's runs: a live lease stays its holder's and
// is settled with its record; a slot paused after it was won is reopened
// uncounted; a buffered slot stays buffered. A row a replica of version 6
// writes after the migration is taken over, its attempt recorded lost.
func TestSchemaMigratesVersion6(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		old := open(t)
		exec, text, ph := atSchema(t, ctx, old, 6, runsV6)
		job := backendtest.JobName("migrate6")
		at := func(k int) time.Time { return time.UnixMilli(1_900_000_000_000 + int64(k)*1000).UTC() }
		live, paused, buffered := backendtest.Token(), backendtest.Token(), backendtest.Token()
		now := time.Now().UnixMilli()
		keep, hour, never := backend.DefaultRunKeep.Milliseconds(), time.Hour.Milliseconds(), int64(1)<<62
		exec("INSERT INTO {p}jobs (job, fence, hist_floor, runs) VALUES ("+ph(1)+", 2, 0, 2)", job)
		// A row as version 6 writes it: its columns, and no others.
		insertV6 := func(slot int, token string, attempt int, fence, lease, expires int64, status string, changed, forget int64) {
			t.Helper()
			exec("INSERT INTO {p}runs (job, slot, token, instance, attempt, prev_instance, prev_token, fence, lease_ms, expires, status, keep_ms, changed, forget_at, reopened, retried, retry_at, retry_by, counted_last) VALUES ("+
				ph(1)+", "+ph(2)+", "+ph(3)+", 'a', "+ph(4)+", '', '', "+ph(5)+", "+ph(6)+", "+ph(7)+", "+ph(8)+", "+ph(9)+", "+ph(10)+", "+ph(11)+", 0, 0, 0, 0, 0)",
				job, at(slot).UnixMilli(), token, attempt, fence, lease, expires, status, keep, changed, forget)
		}
		insertV6(1, live, 1, 1, hour, now+hour, "", now, now+hour)
		insertV6(2, paused, 1, 2, hour, now, string(backend.StatusPaused), now, now+keep)
		insertV6(4, buffered, 0, 0, 0, 0, "buffered", never, never)

		replicas := make([]*sqlbackend.Backend, 3)
		errs := make([]error, len(replicas))
		var wg sync.WaitGroup
		for i := range replicas {
			replicas[i] = open(t)
			wg.Go(func() { errs[i] = replicas[i].Init(ctx) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "replicas migrating together")
		var version int
		require.NoError(t, old.DB().QueryRowContext(ctx, text("SELECT version FROM {p}schema WHERE id = 1")).Scan(&version))
		assert.Equal(t, sqlbackend.SchemaVersion, version, "the migration records the new version")
		assertRunsColumnsAsCreated(t, open, old)

		claim := func(i, slot int, token string, change ...func(*backend.RunClaim)) backend.ClaimResult {
			t.Helper()
			in := backend.RunClaim{Job: job, Slot: at(slot), Token: token, Instance: "b", Lease: time.Minute,
				Deadline: time.Now().Add(time.Hour), MaxRuns: 2, Retention: backend.Retention{Size: 10}}
			for _, c := range change {
				c(&in)
			}
			res, err := replicas[i%len(replicas)].Runs().Claim(ctx, in)
			require.NoError(t, err)
			return res
		}
		res := claim(0, 1, live)
		assert.Equal(t, backend.OutcomeWon, res.Outcome, "the holder of a lease stored before the migration")
		assert.Equal(t, uint64(1), res.Fence)
		assert.Equal(t, backend.OutcomeRunning, claim(1, 1, backendtest.Token()).Outcome)
		active, err := replicas[2].Runs().Active(ctx, job)
		require.NoError(t, err)
		require.Len(t, active, 2, "the live lease and the buffered slot: %+v", active)
		assert.Equal(t, live, active[0].Token)
		assert.True(t, active[0].Live)
		assert.False(t, active[0].Manual)
		assert.Equal(t, buffered, active[1].Token)
		assert.True(t, active[1].Buffered)

		reopen := claim(0, 2, backendtest.Token(), func(in *backend.RunClaim) { in.ReopenPaused = true })
		assert.Equal(t, backend.OutcomeWon, reopen.Outcome, "a slot paused after it was won, past the limit: %+v", reopen)
		assert.True(t, reopen.Reopened)
		limited := backendtest.Token()
		assert.Equal(t, backend.OutcomeLimit, claim(1, 3, limited).Outcome, "the reopened slot was not counted again")

		settled := replicas[1].Store()
		require.NoError(t, settled.Settle(ctx, backend.Settlement{Key: backend.RunKey{Job: job, Slot: at(1), Token: live},
			Status: backend.StatusOK, StartedAt: time.Now(), FinishedAt: time.Now(), Retention: backend.Retention{Size: 10}}))
		done := claim(2, 1, backendtest.Token())
		assert.Equal(t, backend.OutcomeDone, done.Outcome)
		assert.Equal(t, backend.StatusOK, done.Status)

		// A replica of version 6, running on: its row, with a lease that ended.
		dead := backendtest.Token()
		insertV6(5, dead, 1, 3, 1000, now-1000, "", now-2000, now+keep)
		taken := claim(0, 5, backendtest.Token())
		assert.Equal(t, backend.OutcomeWon, taken.Outcome)
		assert.Equal(t, 2, taken.Attempt, "a takeover")

		hist, err := replicas[2].History(ctx, job, 0)
		require.NoError(t, err)
		got := map[string]backend.Status{}
		for _, h := range hist {
			if h.Status != backend.StatusRunning {
				got[h.Token] = h.Status
			}
		}
		assert.Equal(t, map[string]backend.Status{live: backend.StatusOK, dead: backend.StatusLost, limited: backend.StatusLimit}, got,
			"the records the migrated tables store with the state: %+v", hist)

		// Once migrated, a replica starting later changes nothing.
		require.NoError(t, open(t).Init(ctx))
	})
}
