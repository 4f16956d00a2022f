package sqlbackend

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
)

// Dialect is what differs from one SQL database to another. The backend's tables,
// claims, leases and history are written once, in SQL that PostgreSQL, SQLite and
// most other databases accept; a Dialect fills in the rest. Postgres and SQLite are
// the built-in ones; to run on another database (MySQL, SQL Server, CockroachDB…),
// copy the closest one and change what differs (docs/backends.md shows a MySQL
// sketch).
//
// Every field is required unless it says otherwise. The statements a Dialect gives
// (Serialize, Notify) are written with ? placeholders and may name the backend's
// tables as {p}jobs, {p}runs… ({p} is the table prefix) and the server's clock as
// {now}.
type Dialect struct {
	// Name is shown to users as part of the backend's name ("sql/postgres").
	Name string
	// BigInt is the column type of 64-bit integers: times in Unix milliseconds,
	// fences, counters. "BIGINT" on PostgreSQL, "INTEGER" on SQLite.
	BigInt string
	// Text is the column type of names, tokens and error texts, usable in a
	// primary key. "TEXT" on PostgreSQL and SQLite; MySQL needs a VARCHAR(n).
	Text string
	// AutoID is the column definition of an increasing primary key, the order in
	// which history rows were written: "BIGSERIAL PRIMARY KEY" on PostgreSQL,
	// "INTEGER PRIMARY KEY AUTOINCREMENT" on SQLite.
	AutoID string
	// NowMs is an SQL expression for the database server's clock in Unix
	// milliseconds, as a 64-bit integer. Every lease time (expiry, keep, history
	// TTL) is judged by it, so that instances whose clocks disagree agree on leases.
	// It must not be the replica's clock passed as a parameter.
	NowMs string
	// Placeholders rewrites a statement written with ? placeholders into the
	// driver's form: $1, $2… on PostgreSQL; SQLite takes ? as they are (nil
	// leaves statements unchanged).
	Placeholders func(query string) string
	// IgnoreConflict rewrites "INSERT INTO t (…) VALUES (…)" into an insert that
	// does nothing when the row's key is already stored: " ON CONFLICT DO NOTHING"
	// appended on PostgreSQL and SQLite, INSERT IGNORE on MySQL. A claim is one
	// such insert: the slot's first token is stored, every later one is not.
	IgnoreConflict func(insert string) string
	// ForUpdate is appended to the statement that locks a job's row at the start
	// of every lease claim's transaction,
	//
	//	SELECT fence FROM <prefix>jobs WHERE job = ?<ForUpdate>
	//
	// so that two claims of one job run one after the other while other jobs
	// claim in parallel. On PostgreSQL it is " FOR UPDATE", a row lock. The lock
	// is its own statement, and the run is read by the next one, which in READ
	// COMMITTED sees what the previous claim committed. Unused when Serialize is set.
	ForUpdate string
	// Serialize, when set, replaces that locking statement, with the job's name as
	// its one parameter: it must make a second claim of the same job wait until
	// this transaction ends. SQLite's is a write to the job's row: as the
	// transaction's first statement it takes the database's one write lock at
	// once (so busy_timeout applies), instead of a read lock that could not be
	// upgraded after another claim wrote. One of ForUpdate and Serialize is
	// required.
	Serialize string
	// InitLock, when set, is run first in the transaction that creates the tables,
	// so that replicas starting together do not race on CREATE TABLE IF NOT EXISTS
	// (PostgreSQL: an advisory transaction lock). SQLite needs none: its first
	// CREATE takes the write lock.
	InitLock string
	// Notify, when set, is a statement with one parameter (a payload) that tells
	// listeners a run or a pause changed; it is run inside the writing transaction,
	// so it is delivered only if the write commits (PostgreSQL: pg_notify). Empty:
	// watchers poll.
	Notify string
	// Listen, when set, delivers the payloads of Notify to fn until ctx ends or
	// the connection fails; ready is called once it is listening. It holds one
	// connection of db for as long as it runs. nil: watchers poll.
	Listen func(ctx context.Context, db *sql.DB, ready func(), fn func(payload string)) error
	// CheckServer, when set, is called by Init to check the server: reachable,
	// and a version this backend's SQL runs on.
	CheckServer func(ctx context.Context, db *sql.DB) error
}

// Postgres is the PostgreSQL dialect, for a *sql.DB opened with the pgx driver
// (github.com/jackc/pgx/v5/stdlib, driver name "pgx"). Claims of one job are
// serialised by the job row's lock, lease times are the server's
// clock_timestamp(), and watchers are woken by LISTEN/NOTIFY. PostgreSQL 12 or
// newer.
var Postgres = Dialect{
	Name:           "postgres",
	BigInt:         "BIGINT",
	Text:           "TEXT",
	AutoID:         "BIGSERIAL PRIMARY KEY",
	NowMs:          "(floor(extract(epoch from clock_timestamp()) * 1000))::bigint",
	Placeholders:   dollarPlaceholders,
	IgnoreConflict: onConflictDoNothing,
	ForUpdate:      " FOR UPDATE",
	InitLock:       "SELECT pg_advisory_xact_lock(726271637)",
	Notify:         "SELECT pg_notify('" + pgChannel + "', ?)",
	Listen:         pgListen,
	CheckServer:    pgCheckServer,
}

// SQLite is the SQLite dialect, for a *sql.DB opened with a pure-Go driver
// (modernc.org/sqlite, driver name "sqlite"); OpenSQLite opens a file the way
// several processes can share it. Claims are serialised by SQLite's one write
// lock, lease times are the machine's clock read by SQLite, and watchers poll.
var SQLite = Dialect{
	Name:           "sqlite",
	BigInt:         "INTEGER",
	Text:           "TEXT",
	AutoID:         "INTEGER PRIMARY KEY AUTOINCREMENT",
	NowMs:          "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
	IgnoreConflict: onConflictDoNothing,
	Serialize:      "UPDATE {p}jobs SET fence = fence WHERE job = ?",
	CheckServer:    sqliteCheck,
}

func onConflictDoNothing(insert string) string { return insert + " ON CONFLICT DO NOTHING" }

// dollarPlaceholders numbers the ? of q as $1, $2… (q holds no ? inside literals).
func dollarPlaceholders(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
