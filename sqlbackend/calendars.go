package sqlbackend

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.CalendarStore = (*Backend)(nil)

// Calendars (backend.CalendarStore) live in one table, a row per calendar keyed
// by name, the calendar as JSON. Every write takes the next revision of the
// counter row (calendar_seq) first, in its own transaction: writes of
// calendars commit one at a time, and a revision is never given twice, not
// even to a calendar deleted and created again.

// PutCalendar stores c by compare-and-set on its revision (0: create). The
// count of MaxCalendars is exact: it is read under the counter's lock.
func (b *Backend) PutCalendar(ctx context.Context, c backend.Calendar, rev uint64) (uint64, error) {
	if err := c.Check(); err != nil {
		return 0, err
	}
	c.Revision = 0
	data, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("%w: calendar %q: %w", backend.ErrInvalidCalendar, c.Name, err)
	}
	next, err := b.calendarWrite(ctx, c.Name, func(tx *sql.Tx, next int64, cur int64) error {
		switch {
		case rev == 0 && cur != 0:
			return fmt.Errorf("%w: %q", backend.ErrCalendarExists, c.Name)
		case rev == 0:
			var n int
			if err := tx.QueryRowContext(ctx, b.q(0, "SELECT COUNT(*) FROM {p}calendars")).Scan(&n); err != nil {
				return err
			}
			if n >= backend.MaxCalendars {
				return fmt.Errorf("%w: %d calendars stored, at most %d", backend.ErrInvalidCalendar, n, backend.MaxCalendars)
			}
			_, err := tx.ExecContext(ctx, b.q(0, "INSERT INTO {p}calendars (name, cal, rev) VALUES (?, ?, ?)"), c.Name, string(data), next)
			return err
		}
		if err := expectCalendar(c.Name, cur, rev); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, b.q(0, "UPDATE {p}calendars SET cal = ?, rev = ? WHERE name = ?"), string(data), next, c.Name)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlbackend: put calendar %q: %w", c.Name, err)
	}
	return next, nil
}

// DeleteCalendar removes the calendar if its revision is rev (whatever it is
// when rev is 0).
func (b *Backend) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	if err := backend.ValidateCalendarName(name); err != nil {
		return err
	}
	_, err := b.calendarWrite(ctx, name, func(tx *sql.Tx, _ int64, cur int64) error {
		if cur == 0 || rev != 0 {
			if err := expectCalendar(name, cur, rev); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}calendars WHERE name = ?"), name)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlbackend: delete calendar %q: %w", name, err)
	}
	return nil
}

// expectCalendar answers whether a change based on revision rev may apply to a
// calendar stored at cur (0: none).
func expectCalendar(name string, cur int64, rev uint64) error {
	switch {
	case cur == 0:
		return fmt.Errorf("%w: %q", backend.ErrCalendarNotFound, name)
	case rev > math.MaxInt64 || cur != int64(rev):
		return fmt.Errorf("%w: %q is at revision %d, not %d", backend.ErrCalendarConflict, name, cur, rev)
	}
	return nil
}

// calendarWrite runs write in a transaction that first takes the next
// calendar revision, under the counter row's lock, and reads the calendar's
// revision (0 when none is stored). It tells the watchers once the change
// committed, and returns the revision.
func (b *Backend) calendarWrite(ctx context.Context, name string, write func(tx *sql.Tx, next, cur int64) error) (uint64, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return 0, err
	}
	var next int64
	err := b.inTx(ctx, func(tx *sql.Tx) error {
		// The first statement writes: SQLite takes its write lock at once.
		if _, err := tx.ExecContext(ctx, b.q(0, "UPDATE {p}calendar_seq SET rev = rev + 1 WHERE id = 1")); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, b.q(0, "SELECT rev FROM {p}calendar_seq WHERE id = 1")).Scan(&next); err != nil {
			return err
		}
		var cur int64
		err := tx.QueryRowContext(ctx, b.q(0, "SELECT rev FROM {p}calendars WHERE name = ?"), name).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := write(tx, next, cur); err != nil {
			return err
		}
		if b.dialect.Notify != "" {
			// In the transaction: delivered only if the change commits.
			if _, err := tx.ExecContext(ctx, b.q(0, b.dialect.Notify), topicCalendars); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	b.hub.deliver(topicCalendars)
	return uint64(next), nil
}

// GetCalendar returns the calendar name.
func (b *Backend) GetCalendar(ctx context.Context, name string) (backend.Calendar, error) {
	if err := backend.ValidateCalendarName(name); err != nil {
		return backend.Calendar{}, err
	}
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return backend.Calendar{}, err
	}
	var (
		data string
		rev  int64
	)
	err := b.db.QueryRowContext(ctx, b.q(0, "SELECT cal, rev FROM {p}calendars WHERE name = ?"), name).Scan(&data, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.Calendar{}, fmt.Errorf("%w: %q", backend.ErrCalendarNotFound, name)
	}
	if err != nil {
		return backend.Calendar{}, fmt.Errorf("sqlbackend: get calendar %q: %w", name, err)
	}
	return decodeCalendar(name, data, rev)
}

// Calendars returns every calendar, ordered by name (as Go compares strings,
// not by the database's collation).
func (b *Backend) Calendars(ctx context.Context) ([]backend.Calendar, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return nil, err
	}
	rows, err := b.db.QueryContext(ctx, b.q(0, "SELECT name, cal, rev FROM {p}calendars"))
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: calendars: %w", err)
	}
	defer rows.Close()
	var out []backend.Calendar
	for rows.Next() {
		var (
			name, data string
			rev        int64
		)
		if err := rows.Scan(&name, &data, &rev); err != nil {
			return nil, fmt.Errorf("sqlbackend: calendars: %w", err)
		}
		c, err := decodeCalendar(name, data, rev)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlbackend: calendars: %w", err)
	}
	slices.SortFunc(out, func(x, y backend.Calendar) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

func decodeCalendar(name, data string, rev int64) (backend.Calendar, error) {
	var c backend.Calendar
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return backend.Calendar{}, fmt.Errorf("sqlbackend: calendar %q: %w", name, err)
	}
	c.Name, c.Revision = name, uint64(rev)
	return c, nil
}

// CalendarPollInterval bounds how long a WatchCalendars waits between two
// reads of the calendars' revision counter when no notification woke it: every
// replica follows a change within it even when notifications are lost
// (WithPollInterval may make it shorter).
const CalendarPollInterval = time.Second

// WatchCalendars calls fn with the calendars at once and again after every
// change, until ctx ends (nil) or a read fails. It reads the revision counter
// when a notification (PostgreSQL) wakes it and at least every
// CalendarPollInterval, and the calendars when the counter moved.
func (b *Backend) WatchCalendars(ctx context.Context, fn func([]backend.Calendar)) error {
	if err := b.Init(ctx); err != nil {
		return err
	}
	sub, unsubscribe := b.hub.subscribe(ctx, topicCalendars)
	defer unsubscribe()
	poll := min(b.opts.poll, CalendarPollInterval)
	var (
		last []backend.Calendar
		seen int64 = -1
	)
	for first := true; ; first = false {
		rev, err := b.calendarRev(ctx)
		if err == nil && rev != seen {
			// The counter first: a change committed after it is read again.
			var all []backend.Calendar
			if all, err = b.Calendars(ctx); err == nil {
				seen = rev
				if first || !slices.EqualFunc(all, last, func(x, y backend.Calendar) bool { return x.Name == y.Name && x.Revision == y.Revision }) {
					fn(all)
					last = all
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-b.hub.closed:
			t.Stop()
			return nil
		case <-sub:
		case <-t.C:
		}
		t.Stop()
	}
}

// calendarRev reads the last calendar revision given.
func (b *Backend) calendarRev(ctx context.Context) (int64, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	var rev int64
	if err := b.db.QueryRowContext(ctx, b.q(0, "SELECT rev FROM {p}calendar_seq WHERE id = 1")).Scan(&rev); err != nil {
		return 0, fmt.Errorf("sqlbackend: calendars: %w", err)
	}
	return rev, nil
}
