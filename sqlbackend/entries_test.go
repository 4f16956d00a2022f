package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/sqlbackend"
)

func everyEntry(job, id, payload string) backend.Entry {
	return backend.Entry{Job: job, ID: id, EntrySpec: backend.EntrySpec{Every: time.Minute, Payload: []byte(payload)}, By: "test"}
}

// Writers on their own pools, as separate processes, race on one entry: of the
// creates exactly one stores it, of the updates (and a removal) based on one
// revision exactly one applies, and the winner's change is what is stored. Every
// revision given is new and above the ones before.
func TestEntryRaceAcrossPools(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		const writers, rounds = 6, 8
		ctx := backendtest.Context(t)
		bs := make([]*sqlbackend.Backend, writers)
		for i := range bs {
			bs[i] = open(t)
			require.NoError(t, bs[i].Init(ctx))
		}
		job := backendtest.JobName("entry race")
		var lastRev uint64
		newRev := func(rev uint64) {
			t.Helper()
			require.Greater(t, rev, lastRev, "a revision above every one before")
			lastRev = rev
		}
		for round := range rounds {
			id := fmt.Sprint("e", round)
			revs := make([]uint64, writers)
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for i := range bs {
				wg.Go(func() { revs[i], errs[i] = bs[i].CreateEntry(ctx, everyEntry(job, id, fmt.Sprint("create-", i))) })
			}
			wg.Wait()
			created := -1
			for i, err := range errs {
				if err == nil {
					require.Equal(t, -1, created, "writers %d and %d both created %q", created, i, id)
					created = i
					continue
				}
				require.ErrorIs(t, err, backend.ErrEntryExists, "writer %d", i)
			}
			require.NotEqual(t, -1, created, "one writer creates")
			rev := revs[created]
			newRev(rev)

			// Every writer changes the entry at rev; the last one removes it.
			for i := range bs {
				wg.Go(func() {
					if i == writers-1 {
						errs[i] = bs[i].DeleteEntry(ctx, job, id, rev)
						return
					}
					revs[i], errs[i] = bs[i].UpdateEntry(ctx, everyEntry(job, id, fmt.Sprint("update-", i)), rev)
				})
			}
			wg.Wait()
			won := -1
			for i, err := range errs {
				if err == nil {
					require.Equal(t, -1, won, "writers %d and %d both changed revision %d", won, i, rev)
					won = i
					continue
				}
				if !errors.Is(err, backend.ErrEntryNotFound) {
					require.ErrorIs(t, err, backend.ErrEntryConflict, "writer %d", i)
				}
			}
			require.NotEqual(t, -1, won, "one writer wins")
			got, err := bs[(round+1)%writers].GetEntry(ctx, job, id)
			if won == writers-1 {
				require.ErrorIs(t, err, backend.ErrEntryNotFound, "the removal won")
				continue
			}
			require.NoError(t, err)
			newRev(revs[won])
			assert.Equal(t, revs[won], got.Revision)
			assert.Equal(t, fmt.Sprint("update-", won), string(got.Payload), "the winner's change is stored")
		}
	})
}

// A watcher stuck in its callback while entries are removed and their
// tombstones pruned behind it still ends with the stored entries: it lists them
// again and reports the removals it missed. No entry is reported at a revision
// below one reported before.
func TestEntryWatchBehindPruning(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		const tombstones = 2
		writer, watcher := open(t, sqlbackend.WithEntryTombstones(tombstones)), open(t, sqlbackend.WithEntryTombstones(tombstones))
		job := backendtest.JobName("entry behind")
		for i := range 6 {
			_, err := writer.CreateEntry(ctx, everyEntry(job, fmt.Sprint("e", i), "before"))
			require.NoError(t, err)
		}

		var (
			mu      sync.Mutex
			view    = map[string]backend.Entry{}
			seen    = map[string]uint64{}
			want    map[string]backend.Entry // set once the writes are done
			synced  = make(chan struct{})
			stuck   = make(chan struct{})
			release = make(chan struct{})
			caught  = make(chan struct{})
		)
		matches := func() bool {
			return want != nil && maps.EqualFunc(view, want, func(x, y backend.Entry) bool {
				return x.Revision == y.Revision && string(x.Payload) == string(y.Payload)
			})
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- watcher.WatchEntries(wctx, func(c backend.EntryChange) {
				if c.Synced {
					close(synced)
					return
				}
				if c.Entry.Job != job {
					return
				}
				if c.Entry.ID == "stuck" && !c.Removed {
					close(stuck)
					<-release
				}
				mu.Lock()
				defer mu.Unlock()
				if c.Removed {
					delete(view, c.Entry.ID)
				} else {
					assert.GreaterOrEqual(t, c.Entry.Revision, seen[c.Entry.ID], "entry %q reported at an older revision", c.Entry.ID)
					seen[c.Entry.ID] = c.Entry.Revision
					view[c.Entry.ID] = c.Entry
				}
				if matches() {
					select {
					case <-caught:
					default:
						close(caught)
					}
				}
			})
		}()
		wait := func(ch <-chan struct{}, what string) {
			t.Helper()
			select {
			case <-ch:
			case err := <-done:
				t.Fatalf("the watch ended waiting for %s: %v", what, err)
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
		wait(synced, "the stored entries")
		_, err := writer.CreateEntry(ctx, everyEntry(job, "stuck", "x"))
		require.NoError(t, err)
		wait(stuck, "the watcher to be stuck")

		for i := range 5 {
			require.NoError(t, writer.DeleteEntry(ctx, job, fmt.Sprint("e", i), 0))
		}
		cur, err := writer.GetEntry(ctx, job, "e5")
		require.NoError(t, err)
		_, err = writer.UpdateEntry(ctx, everyEntry(job, "e5", "changed"), cur.Revision)
		require.NoError(t, err)
		_, err = writer.CreateEntry(ctx, everyEntry(job, "new", "new"))
		require.NoError(t, err)
		require.NoError(t, writer.DeleteEntry(ctx, job, "stuck", 0))
		stored, err := writer.ListEntries(ctx, job, "", "", 100)
		require.NoError(t, err)
		var removed int
		require.NoError(t, writer.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+writer.TablePrefix()+"entries WHERE removed = 1").Scan(&removed))
		assert.LessOrEqual(t, removed, tombstones, "the tombstones were pruned to the limit")

		mu.Lock()
		want = map[string]backend.Entry{}
		for _, e := range stored {
			want[e.ID] = e
		}
		mu.Unlock()
		assert.ElementsMatch(t, []string{"e5", "new"}, slices.Collect(maps.Keys(want)))
		close(release)
		wait(caught, "the watcher to catch up")
		mu.Lock()
		assert.Equal(t, "changed", string(view["e5"].Payload))
		mu.Unlock()
		cancel()
		require.NoError(t, <-done)
	})
}

// A change written on one backend reaches a watcher on another pool within
// EntryPollInterval, whether notified (PostgreSQL) or polling (SQLite).
func TestEntryWatchLatency(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		writer, watcher := open(t), open(t)
		job := backendtest.JobName("entry latency")
		got := make(chan backend.EntryChange, 16)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- watcher.WatchEntries(wctx, func(c backend.EntryChange) {
				if c.Synced || c.Entry.Job == job {
					got <- c
				}
			})
		}()
		next := func() backend.EntryChange {
			t.Helper()
			select {
			case c := <-got:
				return c
			case err := <-done:
				t.Fatalf("the watch ended: %v", err)
			case <-ctx.Done():
				t.Fatal("no change")
			}
			return backend.EntryChange{}
		}
		require.True(t, next().Synced)
		for i := range 3 {
			start := time.Now()
			rev, err := writer.CreateEntry(ctx, everyEntry(job, fmt.Sprint("e", i), ""))
			require.NoError(t, err)
			c := next()
			took := time.Since(start)
			assert.Equal(t, rev, c.Entry.Revision)
			assert.Less(t, took, sqlbackend.EntryPollInterval, "change %d seen after %v", i, took)
		}
		cancel()
		require.NoError(t, <-done)
	})
}

// A migrated database of schema version 5 keeps its rows (a declared job's
// history, its live lease, a pause); a replica that was running before the
// migration goes on claiming; and the migrated tables store and watch entries
// like created ones.
func TestSchemaMigratesVersion5(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		old := open(t)
		require.NoError(t, old.Init(ctx))
		job := backendtest.JobName("migrate5")
		require.NoError(t, old.PrepareJob(ctx, backend.JobLimits{Job: job, Interval: time.Second}))
		slot := time.UnixMilli(1_900_000_000_000)
		claimed := backendtest.Token()
		won, err := old.Claim(ctx, backend.ClaimInput{Job: job, Slot: slot, Token: claimed, Instance: "a", Attempt: 1, At: time.Now()})
		require.NoError(t, err)
		require.True(t, won)
		live := backendtest.Token()
		res, err := old.Store().Claim(ctx, backend.RunClaim{Job: job, Slot: slot.Add(time.Second), Token: live, Instance: "a", Lease: time.Hour, Deadline: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeWon, res.Outcome)
		require.NoError(t, old.SetPause(ctx, backend.Pause{Job: job, Reason: "kept", By: "test", At: time.Now()}))

		// Back to version 5: no entries tables, nor the runs columns of version 7.
		for _, table := range []string{"entries", "entry_seq"} {
			_, err := old.DB().ExecContext(ctx, "DROP TABLE "+old.TablePrefix()+table)
			require.NoError(t, err)
		}
		for _, col := range runsV7Columns {
			_, err := old.DB().ExecContext(ctx, "ALTER TABLE "+old.TablePrefix()+"runs DROP COLUMN "+col)
			require.NoError(t, err)
		}
		_, err = old.DB().ExecContext(ctx, "ALTER TABLE "+old.TablePrefix()+"results DROP COLUMN requested_by")
		require.NoError(t, err)
		_, err = old.DB().ExecContext(ctx, "UPDATE "+old.TablePrefix()+"schema SET version = 5 WHERE id = 1")
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
		for _, table := range []string{"entries", "entry_seq"} {
			assert.Equal(t, columnsOf(t, created, table), columnsOf(t, replicas[0], table), "a migrated %s table is alike to a created one", table)
		}

		hist, err := replicas[0].History(ctx, job, 10)
		require.NoError(t, err)
		require.Len(t, hist, 1, "the history of before")
		assert.Equal(t, claimed, hist[0].Token)
		res, err = replicas[1].Store().Claim(ctx, backend.RunClaim{Job: job, Slot: slot.Add(time.Second), Token: backendtest.Token(), Instance: "b", Lease: time.Hour, Deadline: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		assert.Equal(t, backend.OutcomeRunning, res.Outcome, "the lease of before is still held")
		assert.Equal(t, "a", res.Holder)
		pauses, err := replicas[2].Pauses(ctx)
		require.NoError(t, err)
		require.Len(t, pauses, 1)
		assert.Equal(t, "kept", pauses[0].Reason)
		won, err = old.Claim(ctx, backend.ClaimInput{Job: job, Slot: slot.Add(2 * time.Second), Token: backendtest.Token(), Instance: "a", Attempt: 1, At: time.Now()})
		require.NoError(t, err)
		assert.True(t, won, "a replica running before the migration claims the declared job")

		rev, err := replicas[0].CreateEntry(ctx, everyEntry(job, "x", "p"))
		require.NoError(t, err)
		assert.Equal(t, uint64(1), rev, "the migrated counter starts")
		got, err := replicas[1].GetEntry(ctx, job, "x")
		require.NoError(t, err)
		assert.Equal(t, "p", string(got.Payload))
		require.NoError(t, open(t).Init(ctx), "once migrated, a replica starting later changes nothing")
	})
}

// columnsOf returns the sorted columns of b's table.
func columnsOf(t *testing.T, b *sqlbackend.Backend, table string) []string {
	t.Helper()
	rows, err := b.DB().QueryContext(backendtest.Context(t), "SELECT * FROM "+b.TablePrefix()+table+" WHERE 1 = 0")
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	slices.Sort(cols)
	return cols
}

// The runs of a job and of its entries are counted and buffered apart: each
// run name has its own run limit and its own buffer.
func TestEntryRunsCountedAndBufferedApart(t *testing.T) {
	t.Parallel()
	dialects(t, func(t *testing.T, open func(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend) {
		ctx := backendtest.Context(t)
		runs := open(t).Store()
		job := backendtest.JobName("entry apart")
		slot := time.UnixMilli(1_900_000_000_000)
		names := []string{job, backend.EntryRunName(job, "a"), backend.EntryRunName(job, "b")}
		claim := func(name string, slot time.Time, overlap backend.OverlapPolicy, maxRuns int) backend.ClaimResult {
			t.Helper()
			res, err := runs.Claim(ctx, backend.RunClaim{Job: name, Slot: slot, Token: backendtest.Token(), Instance: "x", Lease: time.Hour,
				Deadline: time.Now().Add(time.Hour), Overlap: overlap, MaxRuns: maxRuns})
			require.NoError(t, err, "claim %q", name)
			return res
		}
		for _, name := range names {
			res := claim(name, slot, backend.OverlapBufferOne, 2)
			assert.Equal(t, backend.OutcomeWon, res.Outcome, "%q: its first run", name)
			assert.False(t, res.LimitReached, "%q: one of two counted", name)
		}
		for _, name := range names {
			res := claim(name, slot.Add(time.Second), backend.OverlapBufferOne, 2)
			assert.Equal(t, backend.OutcomeBuffered, res.Outcome, "%q: buffered behind its own run only", name)
			assert.True(t, res.LimitReached, "%q: its second counted", name)
		}
		for _, name := range names {
			active, err := runs.Active(ctx, name)
			require.NoError(t, err)
			assert.Len(t, active, 2, "%q: its live run and its buffered slot", name)
		}
	})
}
