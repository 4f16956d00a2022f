package sqlbackend

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// SQLiteBusyTimeout is how long OpenSQLite's connections wait for another
// process's write lock before a statement fails with SQLITE_BUSY.
const SQLiteBusyTimeout = 10 * time.Second

// OpenSQLite opens the SQLite database file at path (created if missing) with the
// pure-Go driver modernc.org/sqlite, set up so that several processes can share
// it: write-ahead logging, a busy timeout of SQLiteBusyTimeout, and transactions
// that take the write lock when they begin (BEGIN IMMEDIATE). Close the *sql.DB
// when done.
func OpenSQLite(path string) (*sql.DB, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlbackend: OpenSQLite(%q): a file path without ? or #", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.Itoa(int(SQLiteBusyTimeout.Milliseconds()))+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: OpenSQLite(%q): %w", path, err)
	}
	return db, nil
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
	return nil
}
