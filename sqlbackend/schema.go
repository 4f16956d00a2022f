package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// schema is the DDL of SchemaVersion, in order. Times are Unix milliseconds by the
// database's clock (NowMs) unless a column says it is an instance's.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS {p}schema (id {int} PRIMARY KEY, version {int} NOT NULL)`,
	// One row per job: its lock (Dialect.LockJob), its fence counter, the
	// oldest slot whose history is still shown (retention by size), and its
	// counted runs (backend.RunCounter; the column migrations[4] adds).
	`CREATE TABLE IF NOT EXISTS {p}jobs (job {text} PRIMARY KEY, fence {int} NOT NULL, hist_floor {int} NOT NULL,
		runs {int} NOT NULL DEFAULT 0)`,
	// The slot's one claim (Backend.Claim): the primary key is the
	// de-duplication. at_ms is the claiming instance's clock; created and
	// expires (history TTL) the database's.
	`CREATE TABLE IF NOT EXISTS {p}claims (job {text} NOT NULL, slot {int} NOT NULL, token {text} NOT NULL,
		instance {text} NOT NULL, attempt {int} NOT NULL, requested_by {text} NOT NULL, at_ms {int} NOT NULL,
		created {int} NOT NULL, expires {int}, backfill {int} NOT NULL DEFAULT 0, PRIMARY KEY (job, slot))`,
	// Manual runs' history records (and lease takeovers' before version 7). The backfill
	// columns of claims, records and results (1: an attempt run by
	// Scheduler.Backfill) are those migrations[2] adds.
	`CREATE TABLE IF NOT EXISTS {p}records (id {autoid}, job {text} NOT NULL, slot {int} NOT NULL, token {text} NOT NULL,
		instance {text} NOT NULL, attempt {int} NOT NULL, manual {int} NOT NULL, requested_by {text} NOT NULL,
		at_ms {int} NOT NULL, expires {int}, backfill {int} NOT NULL DEFAULT 0, UNIQUE (job, slot, token))`,
	// How attempts ended (SaveResult, and the run store's records), bounded per
	// job by size and TTL.
	`CREATE TABLE IF NOT EXISTS {p}results (id {autoid}, job {text} NOT NULL, slot {int} NOT NULL, token {text} NOT NULL,
		instance {text} NOT NULL, attempt {int} NOT NULL, manual {int} NOT NULL, status {text} NOT NULL,
		started {int} NOT NULL, finished {int} NOT NULL, error {text} NOT NULL, fence {int} NOT NULL, expires {int},
		backfill {int} NOT NULL DEFAULT 0, requested_by {text} NOT NULL DEFAULT '')`,
	`CREATE INDEX IF NOT EXISTS {p}results_job ON {p}results (job, slot)`,
	// The lease store: a machine.Run per (job, slot), mapped in runrow.go. The
	// retry, cancel, counted_last and machine columns (manual to requested_by) are
	// those migrations[1], [3], [4] and [6] add, defaults included, so that
	// created and migrated tables are alike.
	`CREATE TABLE IF NOT EXISTS {p}runs (job {text} NOT NULL, slot {int} NOT NULL, token {text} NOT NULL,
		instance {text} NOT NULL, attempt {int} NOT NULL, prev_instance {text} NOT NULL, prev_token {text} NOT NULL,
		fence {int} NOT NULL, lease_ms {int} NOT NULL, expires {int} NOT NULL, status {text} NOT NULL,
		keep_ms {int} NOT NULL, changed {int} NOT NULL, forget_at {int} NOT NULL, reopened {int} NOT NULL,
		retried {int} NOT NULL DEFAULT 0, retry_at {int} NOT NULL DEFAULT 0, retry_by {int} NOT NULL DEFAULT 0,
		cancel_slot {int} NOT NULL DEFAULT 0, cancel_instance {text} NOT NULL DEFAULT '', cancel_token {text} NOT NULL DEFAULT '',
		counted_last {int} NOT NULL DEFAULT 0, manual {int} NOT NULL DEFAULT 0, backfill {int} NOT NULL DEFAULT 0,
		incarnation {int} NOT NULL DEFAULT 0, recorded {int} NOT NULL DEFAULT 0, claimed {int} NOT NULL DEFAULT 0,
		counted {int} NOT NULL DEFAULT 1, handed_over {int} NOT NULL DEFAULT 0, requested_by {text} NOT NULL DEFAULT '',
		PRIMARY KEY (job, slot))`,
	// forget_at is machine.Run.ForgetAt: the sweep deletes by it, by index.
	`CREATE INDEX IF NOT EXISTS {p}runs_forget ON {p}runs (forget_at)`,
	// WithClaimRetention deletes a job's claims by their age.
	`CREATE INDEX IF NOT EXISTS {p}claims_created ON {p}claims (job, created)`,
	// Stored pauses (backend.Pauser); job '' pauses every job.
	`CREATE TABLE IF NOT EXISTS {p}pauses (job {text} PRIMARY KEY, reason {text} NOT NULL, by_whom {text} NOT NULL,
		at_ms {int} NOT NULL, until_ms {int} NOT NULL)`,
}

// entriesSchema is the DDL of the schedule entries (backend.EntryStore), part of
// schema and migrations[5] alike; every statement may run again.
var entriesSchema = []string{
	// One row per entry: its spec as JSON (backend.EntrySpec), the change
	// revision that wrote it, when (updated, the writer's clock, or the
	// database's when the writer gave none) and by whom. A removed entry stays a
	// tombstone (removed 1, spec '') for watchers until it is pruned.
	`CREATE TABLE IF NOT EXISTS {p}entries (job {text} NOT NULL, id {text} NOT NULL, spec {text} NOT NULL,
		rev {int} NOT NULL, updated {int} NOT NULL, by_whom {text} NOT NULL, removed {int} NOT NULL,
		PRIMARY KEY (job, id))`,
	// Watchers read the changes after a revision; pruning finds the newest
	// tombstones by it. (No index on removed: lists would sort by it.)
	`CREATE INDEX IF NOT EXISTS {p}entries_rev ON {p}entries (rev)`,
	// The one row of the entries' change counter: rev is the last revision given
	// (every entry write takes the next under this row's lock, so changes commit
	// in revision order), pruned the newest tombstone pruned, tombstones how many
	// are stored.
	`CREATE TABLE IF NOT EXISTS {p}entry_seq (id {int} PRIMARY KEY, rev {int} NOT NULL, pruned {int} NOT NULL,
		tombstones {int} NOT NULL)`,
	`INSERT INTO {p}entry_seq (id, rev, pruned, tombstones) SELECT 1, 0, 0, 0
		WHERE NOT EXISTS (SELECT 1 FROM {p}entry_seq WHERE id = 1)`,
}

// calendarsSchema is the DDL of the calendars (backend.CalendarStore), part of
// schema and migrations[7] alike; every statement may run again.
var calendarsSchema = []string{
	// One row per calendar: the calendar as JSON (backend.Calendar without its
	// revision), and the revision that wrote it.
	`CREATE TABLE IF NOT EXISTS {p}calendars (name {text} PRIMARY KEY, cal {text} NOT NULL, rev {int} NOT NULL)`,
	// The one row of the calendars' revision counter: rev is the last given.
	`CREATE TABLE IF NOT EXISTS {p}calendar_seq (id {int} PRIMARY KEY, rev {int} NOT NULL)`,
	`INSERT INTO {p}calendar_seq (id, rev) SELECT 1, 0
		WHERE NOT EXISTS (SELECT 1 FROM {p}calendar_seq WHERE id = 1)`,
}

// migrations[v] is the DDL that turns tables of version v into version v+1, in
// order. Each only adds (columns with defaults, tables, indexes), so replicas of
// version v that are already running go on working on the migrated tables.
var migrations = map[int][]string{
	// Retries (backend.Retrier). Rows of version 1 have none pending.
	1: {
		`ALTER TABLE {p}runs ADD COLUMN retried {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN retry_at {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN retry_by {int} NOT NULL DEFAULT 0`,
	},
	// Backfill runs in history. Rows of version 2 are not backfills; replicas of
	// version 2 write rows without the column, which then says 0.
	2: {
		`ALTER TABLE {p}claims ADD COLUMN backfill {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}records ADD COLUMN backfill {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}results ADD COLUMN backfill {int} NOT NULL DEFAULT 0`,
	},
	// Cancel requests (backend.OverlapCanceller). Rows of version 3 have none;
	// replicas of version 3 neither store nor read them.
	3: {
		`ALTER TABLE {p}runs ADD COLUMN cancel_slot {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN cancel_instance {text} NOT NULL DEFAULT ''`,
		`ALTER TABLE {p}runs ADD COLUMN cancel_token {text} NOT NULL DEFAULT ''`,
	},
	// The run limit (backend.RunCounter). Jobs of version 4 have counted
	// nothing; replicas of version 4 neither count nor read the count (a fleet
	// that declares a limit runs this version on every replica).
	4: {
		`ALTER TABLE {p}jobs ADD COLUMN runs {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN counted_last {int} NOT NULL DEFAULT 0`,
	},
	// Schedule entries (backend.EntryStore): new tables only. Replicas of
	// version 5 neither read nor write them, and run their declared jobs as
	// before.
	5: entriesSchema,
	// The run's fields the machine keeps (backend/machine). Rows of version 6
	// hold no manual run, no backfill, no entry incarnation; their attempt is
	// unrecorded and its claim time unknown (0). They were counted by the run
	// limit if it counted them: every slot was won before it was paused.
	// Replicas of version 6 write rows without them, which then say so.
	6: {
		`ALTER TABLE {p}runs ADD COLUMN manual {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN backfill {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN incarnation {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN recorded {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN claimed {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN counted {int} NOT NULL DEFAULT 1`,
		`ALTER TABLE {p}runs ADD COLUMN handed_over {int} NOT NULL DEFAULT 0`,
		`ALTER TABLE {p}runs ADD COLUMN requested_by {text} NOT NULL DEFAULT ''`,
		`ALTER TABLE {p}results ADD COLUMN requested_by {text} NOT NULL DEFAULT ''`,
	},
	// Calendars (backend.CalendarStore): new tables only. Replicas of version 7
	// neither read nor write them; a fleet that names calendars runs this
	// version on every replica.
	7: calendarsSchema,
}

// Init checks the server (Dialect.CheckServer), creates the tables when they do
// not exist, migrates tables of an older version (migrations), records
// SchemaVersion, and refuses a database whose recorded version is newer
// (ErrSchemaTooNew). Replicas may call it together. It is called before
// every first use and is cheap once it succeeded.
func (b *Backend) Init(ctx context.Context) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	b.initMu.Lock()
	defer b.initMu.Unlock()
	if b.inited {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.dialect.CheckServer != nil {
		if err := b.dialect.CheckServer(ctx, b.db); err != nil {
			return fmt.Errorf("sqlbackend: %s: %w", b.dialect.Name, err)
		}
	}
	version, err := b.createTables(ctx)
	if err != nil {
		return fmt.Errorf("sqlbackend: creating the tables on %s: %w", b.dialect.Name, err)
	}
	if version > SchemaVersion {
		return fmt.Errorf("%w: the tables %sschema say version %d, this package knows %d: upgrade it", ErrSchemaTooNew, b.opts.prefix, version, SchemaVersion)
	}
	b.inited = true
	return nil
}

func (b *Backend) createTables(ctx context.Context) (version int, err error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if b.dialect.InitLock != "" {
		if _, err := tx.ExecContext(ctx, b.dialect.InitLock); err != nil {
			return 0, err
		}
	}
	// A reader whose tables exist changes nothing: the version is read first.
	err = tx.QueryRowContext(ctx, b.q(0, "SELECT version FROM {p}schema WHERE id = 1")).Scan(&version)
	if err == nil {
		if version < SchemaVersion {
			if version, err = b.migrate(ctx, tx, version); err != nil {
				return 0, err
			}
		}
		return version, tx.Commit()
	}
	// The table does not exist (PostgreSQL aborts the transaction on that error:
	// start again) or holds no row.
	_ = tx.Rollback()
	tx, err = b.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	if b.dialect.InitLock != "" {
		if _, err := tx.ExecContext(ctx, b.dialect.InitLock); err != nil {
			return 0, err
		}
	}
	for _, ddl := range slices.Concat(schema, entriesSchema, calendarsSchema) {
		if _, err := tx.ExecContext(ctx, b.q(0, ddl)); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, b.q(ignore, "INSERT INTO {p}schema (id, version) VALUES (1, ?)"), SchemaVersion); err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, b.q(0, "SELECT version FROM {p}schema WHERE id = 1")).Scan(&version); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, errors.New("no schema version recorded")
		}
		return 0, err
	}
	return version, tx.Commit()
}

// migrate runs the migrations from version to SchemaVersion in tx, which holds
// the init lock (Dialect.InitLock, or SQLite's write lock), and records the new
// version.
func (b *Backend) migrate(ctx context.Context, tx *sql.Tx, version int) (int, error) {
	if version < 1 {
		return 0, fmt.Errorf("the tables %sschema say version %d, which no version of this package wrote", b.opts.prefix, version)
	}
	for v := version; v < SchemaVersion; v++ {
		for _, ddl := range migrations[v] {
			if _, err := tx.ExecContext(ctx, b.q(0, ddl)); err != nil {
				return 0, fmt.Errorf("migrating the tables from version %d to %d: %w", v, v+1, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, b.q(0, "UPDATE {p}schema SET version = ? WHERE id = 1"), SchemaVersion); err != nil {
		return 0, err
	}
	return SchemaVersion, nil
}
