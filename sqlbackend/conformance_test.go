package sqlbackend_test

import (
	"testing"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
)

// Every backend value below has its own *sql.DB pool, as separate processes would:
// the race of backendtest.Run makes one per claimer.

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	p := prefix("conf")
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newPG(t, p) })
}

// The lease section, the Settle cases too: the store's records are the
// backend's History.
func TestLeasesPostgres(t *testing.T) {
	t.Parallel()
	p := prefix("lease")
	backendtest.RunLeasesWithHistory(t, func(t *testing.T) (backend.RunStore, backendtest.Historian) {
		b := closeAtEnd(t, newPG(t, p))
		return b.Runs(), b
	})
}

func TestPausesPostgres(t *testing.T) {
	t.Parallel()
	p := prefix("pause")
	backendtest.RunPauses(t, func(t *testing.T) backend.Backend { return newPG(t, p) })
}

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	path := sqliteFile(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newSQLite(t, path) })
}

func TestLeasesSQLite(t *testing.T) {
	t.Parallel()
	path := sqliteFile(t)
	backendtest.RunLeasesWithHistory(t, func(t *testing.T) (backend.RunStore, backendtest.Historian) {
		b := closeAtEnd(t, newSQLite(t, path))
		return b.Runs(), b
	})
}

func TestPausesSQLite(t *testing.T) {
	t.Parallel()
	path := sqliteFile(t)
	backendtest.RunPauses(t, func(t *testing.T) backend.Backend { return newSQLite(t, path) })
}

func TestEntriesPostgres(t *testing.T) {
	t.Parallel()
	p := prefix("entry")
	backendtest.RunEntries(t, func(t *testing.T) backend.Backend { return newPG(t, p) })
}

func TestEntriesSQLite(t *testing.T) {
	t.Parallel()
	path := sqliteFile(t)
	backendtest.RunEntries(t, func(t *testing.T) backend.Backend { return newSQLite(t, path) })
}

func TestDeadlinesPostgres(t *testing.T) {
	t.Parallel()
	p := prefix("deadline")
	backendtest.RunDeadlines(t, func(t *testing.T) backend.Backend { return newPG(t, p) })
}

func TestDeadlinesSQLite(t *testing.T) {
	t.Parallel()
	path := sqliteFile(t)
	backendtest.RunDeadlines(t, func(t *testing.T) backend.Backend { return newSQLite(t, path) })
}

func TestCalendarsPostgres(t *testing.T) {
	t.Parallel()
	p := prefix("cal")
	backendtest.RunCalendars(t, func(t *testing.T) backend.Backend { return newPG(t, p) })
}

func TestCalendarsSQLite(t *testing.T) {
	t.Parallel()
	path := sqliteFile(t)
	backendtest.RunCalendars(t, func(t *testing.T) backend.Backend { return newSQLite(t, path) })
}
