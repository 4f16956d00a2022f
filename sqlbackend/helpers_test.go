package sqlbackend_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/sqlbackend"
)

// prefix returns a table prefix unique to this test run, so that tests sharing the
// server share no tables.
func prefix(name string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return name + "_" + hex.EncodeToString(b[:]) + "_"
}

// openPG opens a new pool on the shared server, as another process would, closed
// when t ends.
func openPG(t *testing.T) *sql.DB {
	t.Helper()
	return openPGAt(t, pg.DSN(""))
}

func openPGAt(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newPG returns a backend on its own pool of the shared server.
func newPG(t *testing.T, prefix string, opts ...sqlbackend.Option) *sqlbackend.Backend {
	t.Helper()
	b, err := sqlbackend.New(openPG(t), sqlbackend.Postgres, append([]sqlbackend.Option{sqlbackend.WithTablePrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	return b
}

// sqliteFile returns the path of a new SQLite file for one test.
func sqliteFile(t *testing.T) string {
	return filepath.Join(t.TempDir(), "anarchon.db")
}

// newSQLite returns a backend on its own pool of the file at path, as another
// process would open it.
func newSQLite(t *testing.T, path string, opts ...sqlbackend.Option) *sqlbackend.Backend {
	t.Helper()
	db, err := sqlbackend.OpenSQLite(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	b, err := sqlbackend.New(db, sqlbackend.SQLite, opts...)
	require.NoError(t, err)
	return b
}

// closeAtEnd closes b when t ends.
func closeAtEnd(t *testing.T, b *sqlbackend.Backend) *sqlbackend.Backend {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}
