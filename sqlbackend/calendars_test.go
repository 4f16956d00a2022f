package sqlbackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/sqlbackend"
)

// A change reaches a watcher on another pool within CalendarPollInterval:
// one written by a backend (notified on PostgreSQL), and one written with no
// notification at all (polled on both).
func TestCalendarWatchLatency(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		writer, watcher := open(t), open(t)
		require.NoError(t, writer.Init(ctx))
		sets := make(chan []backend.Calendar, 16)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- watcher.WatchCalendars(wctx, func(all []backend.Calendar) { sets <- all }) }()
		next := func() []backend.Calendar {
			t.Helper()
			select {
			case all := <-sets:
				return all
			case err := <-done:
				t.Fatalf("the watch ended: %v", err)
			case <-ctx.Done():
				t.Fatal("no change")
			}
			return nil
		}
		require.Empty(t, next(), "none stored")
		cal := backend.Calendar{Name: "latency", Weekdays: []time.Weekday{time.Sunday}}
		var rev uint64
		for i := range 3 {
			start := time.Now()
			var err error
			rev, err = writer.PutCalendar(ctx, cal, rev)
			require.NoError(t, err)
			all := next()
			took := time.Since(start)
			require.Len(t, all, 1)
			assert.Equal(t, rev, all[0].Revision)
			assert.Less(t, took, sqlbackend.CalendarPollInterval, "change %d seen after %v", i, took)
		}

		// Written around the backend: no notification, only the counter moves.
		start := time.Now()
		tx, err := writer.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		p := writer.TablePrefix()
		_, err = tx.ExecContext(ctx, "UPDATE "+p+"calendar_seq SET rev = rev + 1 WHERE id = 1")
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO "+p+`calendars (name, cal, rev) SELECT 'raw', '{"name":"raw","weekdays":[6]}', rev FROM `+p+"calendar_seq WHERE id = 1")
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		all := next()
		took := time.Since(start)
		require.Len(t, all, 2)
		assert.Equal(t, "raw", all[1].Name)
		assert.Equal(t, []time.Weekday{time.Saturday}, all[1].Weekdays)
		assert.Less(t, took, sqlbackend.CalendarPollInterval+500*time.Millisecond, "an unnotified change seen after %v", took)
		cancel()
		require.NoError(t, <-done)
	})
}

// A database of schema version 7 is migrated by replicas starting together:
// its calendar tables are alike to created ones, and store and watch calendars.
func TestSchemaMigratesVersion7(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		old := open(t)
		require.NoError(t, old.Init(ctx))
		for _, table := range []string{"calendars", "calendar_seq"} {
			_, err := old.DB().ExecContext(ctx, "DROP TABLE "+old.TablePrefix()+table)
			require.NoError(t, err)
		}
		_, err := old.DB().ExecContext(ctx, "UPDATE "+old.TablePrefix()+"schema SET version = 7 WHERE id = 1")
		require.NoError(t, err)

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
		require.NoError(t, old.DB().QueryRowContext(ctx, "SELECT version FROM "+old.TablePrefix()+"schema WHERE id = 1").Scan(&version))
		assert.Equal(t, sqlbackend.SchemaVersion, version)
		created := open(t, sqlbackend.WithTablePrefix(prefix("created")))
		require.NoError(t, created.Init(ctx))
		for _, table := range []string{"calendars", "calendar_seq"} {
			assert.Equal(t, columnsOf(t, created, table), columnsOf(t, replicas[0], table), "a migrated %s table is alike to a created one", table)
		}

		cal := backend.Calendar{Name: "migrated", Dates: []string{"2030-01-01"}}
		rev, err := replicas[0].PutCalendar(ctx, cal, 0)
		require.NoError(t, err)
		got, err := replicas[1].GetCalendar(ctx, "migrated")
		require.NoError(t, err)
		assert.Equal(t, rev, got.Revision)
		_, err = replicas[2].PutCalendar(ctx, cal, 0)
		require.ErrorIs(t, err, backend.ErrCalendarExists)
		// Once migrated, a replica starting later changes nothing.
		require.NoError(t, open(t).Init(ctx))
		all, err := open(t).Calendars(ctx)
		require.NoError(t, err)
		require.Len(t, all, 1)
	})
}
