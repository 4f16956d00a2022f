package sqlbackend

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// SetPause stores p, replacing a pause stored for the same job.
func (b *Backend) SetPause(ctx context.Context, p backend.Pause) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return err
	}
	err := b.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}pauses WHERE job = ?"), p.Job); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, b.q(0, "INSERT INTO {p}pauses (job, reason, by_whom, at_ms, until_ms) VALUES (?, ?, ?, ?, ?)"),
			p.Job, p.Reason, p.By, msOf(p.At), msOf(p.Until))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlbackend: set pause of %q: %w", p.Job, err)
	}
	b.hub.pausesChanged(ctx)
	return nil
}

// ClearPause removes the pause stored for job ("": the all-jobs pause).
func (b *Backend) ClearPause(ctx context.Context, job string) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return err
	}
	res, err := b.db.ExecContext(ctx, b.q(0, "DELETE FROM {p}pauses WHERE job = ?"), job)
	if err != nil {
		return fmt.Errorf("sqlbackend: clear pause of %q: %w", job, err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		b.hub.pausesChanged(ctx)
	}
	return nil
}

// Pauses returns the stored pauses, by job name (the all-jobs pause first).
func (b *Backend) Pauses(ctx context.Context) ([]backend.Pause, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return nil, err
	}
	rows, err := b.db.QueryContext(ctx, b.q(0, "SELECT job, reason, by_whom, at_ms, until_ms FROM {p}pauses ORDER BY job"))
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: pauses: %w", err)
	}
	defer rows.Close()
	var out []backend.Pause
	for rows.Next() {
		var (
			p         backend.Pause
			at, until int64
		)
		if err := rows.Scan(&p.Job, &p.Reason, &p.By, &at, &until); err != nil {
			return nil, fmt.Errorf("sqlbackend: pauses: %w", err)
		}
		p.At, p.Until = timeOf(at), timeOf(until)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlbackend: pauses: %w", err)
	}
	return out, nil
}

// WatchPauses calls fn with the stored pauses at once and again after every change
// (seen by a notification or a poll), until ctx ends (nil) or a read fails.
func (b *Backend) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	if err := b.Init(ctx); err != nil {
		return err
	}
	sub, unsubscribe := b.hub.subscribe(ctx, topicPauses)
	defer unsubscribe()
	var last []backend.Pause
	for first := true; ; first = false {
		all, err := b.Pauses(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if first || !slices.EqualFunc(all, last, func(x, y backend.Pause) bool { return x == y }) {
			fn(all)
			last = all
		}
		t := time.NewTimer(b.opts.poll)
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
