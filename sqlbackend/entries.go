package sqlbackend

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Schedule entries (backend.EntryStore) live in one table, a row per entry keyed
// by (job, id). Every write takes the next revision of the store-wide counter row
// (entry_seq) first, in its own transaction. The counter's lock makes entry
// writes commit one after the other in revision order. So a watcher that read
// the changes up to a revision never sees an earlier one commit later.

// entryPageSize is how many rows a watch reads at a time.
const entryPageSize = 1000

// CreateEntry stores e unless its job already has an entry with its ID
// (backend.ErrEntryExists), and returns its revision.
func (b *Backend) CreateEntry(ctx context.Context, e backend.Entry) (uint64, error) {
	if err := e.Check(); err != nil {
		return 0, err
	}
	spec, err := json.Marshal(specColumn{e.EntrySpec, e.Incarnation, e.User, e.Instance})
	if err != nil {
		return 0, fmt.Errorf("%w: %w", backend.ErrInvalidEntry, err)
	}
	rev, err := b.entryWrite(ctx, e.Job, e.ID, func(tx *sql.Tx, rev int64, cur *entryState) error {
		switch {
		case cur != nil && !cur.removed:
			return fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryExists, e.Job, e.ID)
		case cur != nil: // a tombstone: the entry comes back
			if err := b.addTombstones(ctx, tx, -1); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, b.q(0, `UPDATE {p}entries SET spec = ?, rev = ?, updated = COALESCE(?, {now}), by_whom = ?, removed = 0
				WHERE job = ? AND id = ?`), string(spec), rev, updatedMs(e.Updated), e.By, e.Job, e.ID)
			return err
		}
		_, err := tx.ExecContext(ctx, b.q(0, `INSERT INTO {p}entries (job, id, spec, rev, updated, by_whom, removed)
			VALUES (?, ?, ?, ?, COALESCE(?, {now}), ?, 0)`), e.Job, e.ID, string(spec), rev, updatedMs(e.Updated), e.By)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlbackend: create entry %q of job %q: %w", e.ID, e.Job, err)
	}
	return rev, nil
}

// UpdateEntry replaces the entry if its revision is rev, and returns the new one.
func (b *Backend) UpdateEntry(ctx context.Context, e backend.Entry, rev uint64) (uint64, error) {
	if err := e.Check(); err != nil {
		return 0, err
	}
	spec, err := json.Marshal(specColumn{e.EntrySpec, e.Incarnation, e.User, e.Instance})
	if err != nil {
		return 0, fmt.Errorf("%w: %w", backend.ErrInvalidEntry, err)
	}
	next, err := b.entryWrite(ctx, e.Job, e.ID, func(tx *sql.Tx, next int64, cur *entryState) error {
		if err := cur.expect(e.Job, e.ID, rev); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, b.q(0, `UPDATE {p}entries SET spec = ?, rev = ?, updated = COALESCE(?, {now}), by_whom = ?
			WHERE job = ? AND id = ?`), string(spec), next, updatedMs(e.Updated), e.By, e.Job, e.ID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlbackend: update entry %q of job %q: %w", e.ID, e.Job, err)
	}
	return next, nil
}

// DeleteEntry removes the entry if its revision is rev (whatever it is when rev
// is 0): its row becomes a tombstone, and the oldest tombstones past
// WithEntryTombstones are pruned.
func (b *Backend) DeleteEntry(ctx context.Context, job, id string, rev uint64) error {
	_, err := b.entryWrite(ctx, job, id, func(tx *sql.Tx, next int64, cur *entryState) error {
		if rev != 0 || cur == nil || cur.removed {
			if err := cur.expect(job, id, rev); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, b.q(0, `UPDATE {p}entries SET spec = '', rev = ?, updated = {now}, by_whom = '', removed = 1
			WHERE job = ? AND id = ?`), next, job, id); err != nil {
			return err
		}
		if err := b.addTombstones(ctx, tx, 1); err != nil {
			return err
		}
		return b.pruneTombstones(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("sqlbackend: delete entry %q of job %q: %w", id, job, err)
	}
	return nil
}

// entryState is the stored state of an entry a write read under the counter's lock.
type entryState struct {
	rev     int64
	removed bool
}

// expect answers whether a change based on revision rev may apply to cur.
func (cur *entryState) expect(job, id string, rev uint64) error {
	switch {
	case cur == nil || cur.removed:
		return fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryNotFound, job, id)
	case rev > math.MaxInt64 || cur.rev != int64(rev):
		return fmt.Errorf("%w: job %q, entry %q is at revision %d, not %d", backend.ErrEntryConflict, job, id, cur.rev, rev)
	}
	return nil
}

// entryWrite runs write in a transaction that first takes the store's next change
// revision, under the counter row's lock, and reads the entry's stored state (nil
// when no row is stored, tombstones included). It tells the watchers once the
// change committed, and returns the revision.
func (b *Backend) entryWrite(ctx context.Context, job, id string, write func(tx *sql.Tx, rev int64, cur *entryState) error) (uint64, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return 0, err
	}
	var rev int64
	err := b.inTx(ctx, func(tx *sql.Tx) error {
		// The first statement writes: SQLite takes its write lock at once.
		if _, err := tx.ExecContext(ctx, b.q(0, "UPDATE {p}entry_seq SET rev = rev + 1 WHERE id = 1")); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, b.q(0, "SELECT rev FROM {p}entry_seq WHERE id = 1")).Scan(&rev); err != nil {
			return err
		}
		var (
			cur     entryState
			removed int64
		)
		err := tx.QueryRowContext(ctx, b.q(0, "SELECT rev, removed FROM {p}entries WHERE job = ? AND id = ?"), job, id).Scan(&cur.rev, &removed)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			err = write(tx, rev, nil)
		case err == nil:
			cur.removed = removed != 0
			err = write(tx, rev, &cur)
		}
		if err != nil {
			return err
		}
		if b.dialect.Notify != "" {
			// In the transaction: delivered only if the change commits.
			if _, err := tx.ExecContext(ctx, b.q(0, b.dialect.Notify), topicEntries); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	b.hub.deliver(topicEntries)
	return uint64(rev), nil
}

func (b *Backend) addTombstones(ctx context.Context, tx *sql.Tx, n int) error {
	_, err := tx.ExecContext(ctx, b.q(0, "UPDATE {p}entry_seq SET tombstones = tombstones + ? WHERE id = 1"), n)
	return err
}

// pruneTombstones keeps the newest three quarters of WithEntryTombstones once the
// store holds more (so that it prunes once every quarter of them), and records the
// newest revision pruned: a watcher that had not read it lists every entry again.
func (b *Backend) pruneTombstones(ctx context.Context, tx *sql.Tx) error {
	var count int64
	if err := tx.QueryRowContext(ctx, b.q(0, "SELECT tombstones FROM {p}entry_seq WHERE id = 1")).Scan(&count); err != nil {
		return err
	}
	limit := int64(b.opts.tombstones)
	if count <= limit {
		return nil
	}
	var cutoff int64
	err := tx.QueryRowContext(ctx, b.q(0, "SELECT rev FROM {p}entries WHERE removed = 1 ORDER BY rev DESC LIMIT 1 OFFSET ?"), limit*3/4).Scan(&cutoff)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // the count ran ahead of the rows: nothing older to prune
	}
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}entries WHERE removed = 1 AND rev <= ?"), cutoff)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, b.q(0, "UPDATE {p}entry_seq SET pruned = ?, tombstones = tombstones - ? WHERE id = 1"), cutoff, n)
	return err
}

// updatedMs is an entry's Updated as the parameter of "COALESCE(?, {now})": nil
// (the database's clock) when the writer gave none.
func updatedMs(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// GetEntry returns one entry, backend.ErrEntryNotFound if none is stored.
func (b *Backend) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return backend.Entry{}, err
	}
	rows, err := b.db.QueryContext(ctx, b.q(0, "SELECT "+entryColumns+" FROM {p}entries WHERE job = ? AND id = ? AND removed = 0"), job, id)
	if err != nil {
		return backend.Entry{}, fmt.Errorf("sqlbackend: get entry %q of job %q: %w", id, job, err)
	}
	es, err := scanEntries(rows)
	if err != nil {
		return backend.Entry{}, fmt.Errorf("sqlbackend: get entry %q of job %q: %w", id, job, err)
	}
	if len(es) == 0 {
		return backend.Entry{}, fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryNotFound, job, id)
	}
	return es[0].Entry, nil
}

// ListEntries returns at most limit entries of job (every job's when job is "")
// after (afterJob, afterID). They are ordered by job then ID as the database
// orders text (byte by byte on SQLite, and on PostgreSQL in a database of the C
// collation). The read is a range of the primary key's index.
func (b *Backend) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if limit <= 0 {
		return nil, nil
	}
	if err := b.Init(ctx); err != nil {
		return nil, err
	}
	es, err := b.listEntries(ctx, job, afterJob, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: list entries: %w", err)
	}
	out := make([]backend.Entry, len(es))
	for i, e := range es {
		out[i] = e.Entry
	}
	return out, nil
}

func (b *Backend) listEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]storedEntry, error) {
	// Written as ranges of the primary key, which the planners of SQLite and
	// PostgreSQL walk in order: LIMIT reads limit rows (and the tombstones among
	// them), however many entries are stored.
	var (
		where string
		args  []any
	)
	switch {
	case job == "":
		where, args = "(job, id) > (?, ?)", []any{afterJob, afterID}
	case job == afterJob:
		where, args = "job = ? AND id > ?", []any{job, afterID}
	default:
		// All the job's entries when the cursor is at an earlier job, none when
		// at a later one: the database compares.
		where, args = "job = ? AND job > ?", []any{job, afterJob}
	}
	rows, err := b.db.QueryContext(ctx, b.q(0, "SELECT "+entryColumns+" FROM {p}entries WHERE "+where+" AND removed = 0 ORDER BY job, id LIMIT ?"), append(args, limit)...)
	if err != nil {
		return nil, err
	}
	return scanEntries(rows)
}

// entryColumns are the columns scanEntries reads.
const entryColumns = "job, id, spec, rev, updated, by_whom, removed"

// specColumn is the spec column: the entry's spec and its incarnation, as JSON.
type specColumn struct {
	backend.EntrySpec
	Incarnation uint64 `json:"incarnation,omitempty"`
	// User and Instance are the entry's (the by_whom column holds By).
	User     string `json:"user,omitempty"`
	Instance string `json:"instance,omitempty"`
}

// storedEntry is an entries row: an entry, or a tombstone.
type storedEntry struct {
	backend.Entry
	removed bool
}

// scanEntries reads rows of entryColumns and closes them.
func scanEntries(rows *sql.Rows) ([]storedEntry, error) {
	defer rows.Close()
	var out []storedEntry
	for rows.Next() {
		var (
			e                     storedEntry
			spec                  string
			rev, updated, removed int64
		)
		if err := rows.Scan(&e.Job, &e.ID, &spec, &rev, &updated, &e.By, &removed); err != nil {
			return nil, err
		}
		e.Revision, e.Updated, e.removed = uint64(rev), timeOf(updated), removed != 0
		if !e.removed {
			var col specColumn
			if err := json.Unmarshal([]byte(spec), &col); err != nil {
				return nil, fmt.Errorf("entry %q of job %q: stored spec: %w", e.ID, e.Job, err)
			}
			e.EntrySpec, e.Incarnation, e.User, e.Instance = col.EntrySpec, col.Incarnation, col.User, col.Instance
		}
		if !e.removed {
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
