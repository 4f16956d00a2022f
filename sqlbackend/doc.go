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
// so the scheduler gets backups, overlap protection, catch-up and hand-over; it
// also stores pauses (backend.Pauser), stores a failed attempt's retry for any
// replica to claim (backend.Retrier), stores a later slot's request that an
// earlier run end (OverlapCancelOther, backend.OverlapCanceller), stores the
// slots due while another runs to run them after it (OverlapBufferOne and
// OverlapBufferAll, backend.OverlapBufferer), and reads the last runs of many
// jobs in one query (backend.LastRunsReader). Held to the same contract as the JetStream
// backend, it passes the same conformance suite (backend/backendtest).
//
//   - A claim is one INSERT that does nothing on a conflict (the slot's first token
//     is stored, the primary key de-duplicates), and when it stored nothing, a read
//     of the stored token: a repeated claim of the winner wins again. Claims are
//     kept forever (DedupeWindow is backend.Forever) unless WithClaimRetention
//     says otherwise.
//   - A lease claim is one transaction that first locks the job (a row lock on
//     PostgreSQL, the write lock on SQLite), then reads the slot's run and decides
//     won, running, done, overlap, late, retry, buffered or none; every lease time
//     comes from the database server's clock (Dialect.NowMs), never a replica's.
//   - A run's row is unfinished (holding a lease or not, or with its retry
//     pending), buffered, or finished with its status (skipped or late when that
//     was the stored decision). A later slot's cancel request is stored on an
//     unfinished row and stays once it is finished; a claim that would take over
//     such a run finishes it cancelled.
//   - Under a buffer policy a slot claimed while another slot of the job holds
//     it (a live lease or one ended less than a lease ago, or a pending retry),
//     or while an earlier one is buffered, is stored buffered: a row with no
//     lease, attempt 0, that no sweep deletes, whatever its keep. The claim
//     counts the job's buffered slots and finds what the slot waits for in one
//     statement under the job's lock, so two replicas never buffer past the cap
//     nor run two buffered slots at once; the oldest runs first, as attempt 1,
//     once nothing holds the job. A claim without a buffer policy reads nothing
//     more for it.
//   - A backup learns that a lease ended by LISTEN/NOTIFY on PostgreSQL and by
//     polling on SQLite (WatchRun).
//   - History is the claims, records and results of a job, bounded by size and
//     TTL, read back in one query.
//   - Schedule entries (backend.EntryStore) are rows of one entries table keyed by
//     (job, id), their spec as JSON. Every entry write takes the next revision of
//     one counter row first, so writes commit in revision order and a revision is
//     an entry's compare-and-set base. A removal leaves a tombstone row, pruned
//     past WithEntryTombstones. WatchEntries reads the rows after the last
//     revision it read, woken by LISTEN/NOTIFY on PostgreSQL and polling at most
//     EntryPollInterval apart; a watcher behind the pruning lists every entry
//     again. An entry's runs are stored under backend.EntryRunName(job, id), a
//     run name like a job's, in the same tables.
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
// Buffered slots need no new column: a buffered row has status 'buffered'. A replica
// of a version without buffer policies (schema version 4) reads that as a finished
// status it does not know: a claim of the slot is answered done (never run), Active
// does not list it, Heartbeat, Release, Retry and Finish leave it alone, and it
// never forgets it (its changed and forget_at are far in the future), so the slot
// stays buffered for the new replicas. Only a Backfill with rerun asked on such a
// replica may run it at once, as it would any finished slot: once, the row then
// holding its lease. Such a replica does not count buffered slots either, so a job
// that it declares without a buffer policy may run a later slot before them: give a
// job a buffer policy once every replica is upgraded. Going back to the old version
// means restoring the tables of before.
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
// Bound the pool you give it (SetMaxOpenConns): a scheduler claims every job due at
// a slot at once, and an unbounded pool opens a connection per concurrent claim,
// past the server's max_connections when many jobs share a schedule, and the claims
// that cannot connect fail. A few connections per replica serve a slot's claims in
// turn (go run -C sqlbackend ./internal/bench runs such a load).
//
// With SQLite, open the file with OpenSQLite (write-ahead log, a busy timeout,
// transactions that take the write lock at once) and use the SQLite dialect;
// processes on one machine may share the file:
//
//	db, err := sqlbackend.OpenSQLite("/var/lib/app/schedule.db")
//	backend, err := sqlbackend.New(db, sqlbackend.SQLite)
package sqlbackend
