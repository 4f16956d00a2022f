package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLiteMaxOpenConns bounds the pool OpenSQLite returns.
const SQLiteMaxOpenConns = 8

// SQLiteBusyTimeout is how long OpenSQLite's connections wait for another
// process's write lock before a statement fails with SQLITE_BUSY.
const SQLiteBusyTimeout = 10 * time.Second

// OpenSQLite opens the SQLite database file at path (created if missing) with the
// pure-Go driver modernc.org/sqlite, set up so that several processes can share
// it. It sets write-ahead logging and a busy timeout of SQLiteBusyTimeout on every
// connection. Its transactions take the write lock when they begin (BEGIN
// IMMEDIATE). It opens at most SQLiteMaxOpenConns connections.
// It switches the file to write-ahead logging before it returns (a setting the
// file keeps), waiting up to SQLiteBusyTimeout while other processes open it at
// the same moment. Close the *sql.DB when done.
func OpenSQLite(path string) (*sql.DB, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlbackend: OpenSQLite(%q): a file path without ? or #", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.Itoa(int(SQLiteBusyTimeout.Milliseconds()))+")")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: OpenSQLite(%q): %w", path, err)
	}
	// Writers take turns anyway; more connections would only hold more files open.
	db.SetMaxOpenConns(SQLiteMaxOpenConns)
	// Switching to WAL takes an exclusive lock and may answer SQLITE_BUSY at once,
	// without the busy handler, while other processes open the file: ask again.
	deadline := time.Now().Add(SQLiteBusyTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		var mode string
		err = db.QueryRow("PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil && !strings.EqualFold(mode, "wal") {
			err = fmt.Errorf("journal mode is %q, not wal", mode)
		}
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlbackend: OpenSQLite(%q): write-ahead logging: %w", path, err)
	}
	return db, nil
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (or one of its extended codes).
func isBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

// sqliteMinVersion is the oldest SQLite the dialect runs on: window functions
// (LastRuns) came with 3.25.
const sqliteMinVersion = 3_025_000

func sqliteCheck(ctx context.Context, db *sql.DB) error {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err != nil {
		return fmt.Errorf("checking the database: %w", err)
	}
	parts := strings.SplitN(v, ".", 3)
	num := 0
	for i, p := range parts {
		n, _ := strconv.Atoi(p)
		num += n * []int{1_000_000, 1_000, 1}[i]
	}
	if num < sqliteMinVersion {
		return fmt.Errorf("SQLite %s is too old: 3.25 or newer is needed", v)
	}
	// Without a busy timeout, a claim that meets another process's write fails at
	// once with SQLITE_BUSY instead of waiting its turn.
	var busy int
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return fmt.Errorf("checking the database: %w", err)
	}
	if busy <= 0 {
		return errors.New("the database's connections have no busy timeout: open it with sqlbackend.OpenSQLite, or set PRAGMA busy_timeout on every connection (modernc: _pragma=busy_timeout(10000) in the DSN)")
	}
	return nil
}
