// Package sqlbackend is an anarchon backend on a SQL database: PostgreSQL for
// teams that already run one, SQLite for single-binary tools that want a file
// instead of a server, and any other SQL database through a Dialect.
//
// It lives in a Go module of its own (github.com/anarchon/anarchon/sqlbackend), so
// that users of the NATS backends never download SQL drivers.
//
// # What it gives
//
// New returns a *Backend: a backend.Backend with leases (backend.LeaseBackend),
// so the scheduler gets backups, overlap protection, catch-up and hand-over. It
// also:
//   - stores pauses (backend.Pauser).
//   - stores a failed attempt's retry for any replica to claim (backend.Retrier).
//   - stores a later slot's request that an earlier run end (OverlapCancelOther,
//     backend.OverlapCanceller).
//   - stores the slots due while another runs, to run them after it
//     (OverlapBufferOne and OverlapBufferAll, backend.OverlapBufferer).
//   - reads the last runs of many jobs in one query (backend.LastRunsReader).
//   - stores a record once and tells its one writer (backend.OnceRecorder): a
//     check and an insert in one transaction that holds the job's lock.
//
// Held to the same contract as the JetStream backend, it passes the same
// conformance suite (backend/backendtest).
//
//   - A claim is one INSERT that does nothing on a conflict (the slot's first token
//     is stored, the primary key de-duplicates). When it stored nothing, a read
//     of the stored token follows: a repeated claim of the winner wins again.
//     Claims are kept forever (DedupeWindow is backend.Forever) unless
//     WithClaimRetention says otherwise.
//   - The run store (Backend.Runs) applies backend/machine, which decides every
//     slot's fate. Each call is one transaction. It first locks the job (a row
//     lock on PostgreSQL, the write lock on SQLite). It reads the slot's row (and,
//     for a policy that runs one slot at a time, the job's unfinished rows). It asks
//     the machine with the database server's clock (Dialect.NowMs). It then writes
//     what it decided: the run, the cancel requests on other runs, the job's
//     fence and run count, and the records of the attempts it ended.
//   - It is a backend.Settler: a record goes into the results table in the
//     transaction that stores the state it records, so each attempt ends with
//     exactly one record, and History shows it. runrow.go maps a row to a
//     machine.Run; the sweep deletes rows past machine.Run.ForgetAt.
//   - A backup learns that a lease ended by LISTEN/NOTIFY on PostgreSQL and by
//     polling on SQLite (WatchRun).
//   - History is the claims (Backend.Claim), manual runs' records and results
//     of a job, bounded by size and TTL, read back in one query.
//   - Schedule entries (backend.EntryStore) are rows of one entries table keyed by
//     (job, id), their spec as JSON. Every entry write takes the next revision of
//     one counter row first, so writes commit in revision order and a revision is
//     an entry's compare-and-set base. A removal leaves a tombstone row, pruned
//     past WithEntryTombstones. WatchEntries reads the rows after the last
//     revision it read, woken by LISTEN/NOTIFY on PostgreSQL and polling at most
//     EntryPollInterval apart; a watcher behind the pruning lists every entry
//     again. An entry's runs are stored under backend.EntryRunName(job, id), a
//     run name like a job's, in the same tables.
//   - Calendars (backend.CalendarStore) are rows of one calendars table keyed by
//     name, the calendar as JSON. Every write takes the next revision of one
//     counter row first, as entries do; MaxCalendars is counted under its lock.
//     WatchCalendars reads the counter when LISTEN/NOTIFY wakes it and at least
//     every CalendarPollInterval (a second), and the calendars when it moved.
//
// Init creates the tables (prefix "anarchon_") when they do not exist and records
// SchemaVersion; a database whose schema is newer than this package knows is
// refused with ErrSchemaTooNew.
//
// A rolling upgrade: the first replica of the new version migrates the tables in
// place at Init (migrations only add columns with defaults; replicas starting
// together migrate once). From then on a replica of the old version that starts is
// refused with ErrSchemaTooNew; one that was already running goes on working, and
// reads a slot whose retry is pending as done, leaving it to the new replicas. A
// replica of schema version 3 or older neither stores nor heeds (nor clears) cancel
// requests: give a job OverlapCancelOther once every replica is upgraded. A
// replica of schema version 5 or older neither stores nor follows schedule
// entries, and runs its declared jobs as before: add entries once every replica
// is upgraded.
//
// Schema version 7 adds the machine's columns to the runs table. A replica of
// version 6 that runs on writes its rows without them: no manual run, no
// backfill, no incarnation, its attempt unrecorded. It records its attempts
// beside (SaveResult), so an attempt both versions end may be recorded twice.
// Upgrade every replica before relying on one record per attempt. Going back
// to an old version means restoring the tables of before.
//
// # A minimal program
//
//	db, err := sql.Open("pgx", "postgres://app@db.internal/app") // github.com/jackc/pgx/v5/stdlib
//	if err != nil { return err }
//	db.SetMaxOpenConns(10) // bound the pool: see below
//	backend, err := sqlbackend.New(db, sqlbackend.Postgres)
//	if err != nil { return err }
//	s, err := scheduler.New(scheduler.Config{Backend: backend, Instance: "replica-1"})
//	if err != nil { return err }
//	err = s.Every("reconcile", time.Minute, reconcile)
//	// s.Start(ctx) … s.Stop(ctx); backend.Close(ctx); db.Close()
//
// Bound the pool you give it (SetMaxOpenConns). A scheduler claims every job due at
// a slot at once. An unbounded pool opens a connection per concurrent claim, past
// the server's max_connections when many jobs share a schedule. The claims that
// cannot connect then fail. A few connections per replica serve a slot's claims in
// turn (go run -C sqlbackend ./internal/bench runs such a load).
//
// With SQLite, open the file with OpenSQLite (write-ahead log, a busy timeout,
// transactions that take the write lock at once) and use the SQLite dialect;
// processes on one machine may share the file:
//
//	db, err := sqlbackend.OpenSQLite("/var/lib/app/schedule.db")
//	backend, err := sqlbackend.New(db, sqlbackend.SQLite)
package sqlbackend
