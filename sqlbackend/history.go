package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// SaveResult stores how a run ended and trims the job's results to keep: the newest
// keep.Size results, none older than keep.TTL (by the database's clock). Claims of
// slots older than the oldest result kept leave the history (the claims themselves
// are kept for de-duplication).
func (b *Backend) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := backend.ValidateRunName(job); err != nil {
		return err
	}
	if err := b.Init(ctx); err != nil {
		return err
	}
	if err := b.saveResult(ctx, job, r, keep); err != nil {
		return fmt.Errorf("sqlbackend: save result %s: %w", describe(job, r.Slot), err)
	}
	return nil
}

// RecordOnce stores rec as SaveResult does, unless job's results hold a result
// of its slot and token still shown (not expired); it reports whether it stored
// it (backend.OnceRecorder). The check and the insert are one transaction that
// holds the job's lock, the lock of the run store's calls (lockJob), so of
// concurrent writers from any replica the first stores the record and the
// others find it. A result trimmed by keep is forgotten. A record without a
// token is refused (backend.ErrInvalidClaim).
func (b *Backend) RecordOnce(ctx context.Context, job string, rec backend.StoredResult, keep backend.Retention) (bool, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := backendutil.CheckClaim("sqlbackend", job, rec.Token); err != nil {
		return false, err
	}
	if err := b.Init(ctx); err != nil {
		return false, err
	}
	stored := false
	err := b.inTx(ctx, func(tx *sql.Tx) error {
		stored = false
		if err := b.lockJob(ctx, tx, job); err != nil {
			return err
		}
		var by string
		switch err := tx.QueryRowContext(ctx, b.q(0, `SELECT instance FROM {p}results
			WHERE job = ? AND slot = ? AND token = ? AND (expires IS NULL OR expires > {now}) LIMIT 1`),
			job, rec.Slot.UnixMilli(), rec.Token).Scan(&by); {
		case err == nil:
			stored = rec.Instance != "" && by == rec.Instance // a retry of its own write, whose commit went unanswered
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		stored = true
		return b.storeResults(ctx, tx, job, []backend.StoredResult{rec}, keep)
	})
	if err != nil {
		return false, fmt.Errorf("sqlbackend: record once %s: %w", describe(job, rec.Slot), err)
	}
	return stored, nil
}

// lockJob serialises tx with the job's other locked calls (the run store's,
// RecordOnce): Dialect.Serialize, or a SELECT with Dialect.ForUpdate, on the
// job's row, stored first when there is none. A statement after it sees what
// the call before committed.
func (b *Backend) lockJob(ctx context.Context, tx *sql.Tx, job string) error {
	for attempt := 0; ; attempt++ {
		if _, err := tx.ExecContext(ctx, b.q(0, b.lockSQL()), job); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, b.q(0, "SELECT COUNT(*) FROM {p}jobs WHERE job = ?"), job).Scan(&n); err != nil {
			return err
		}
		switch {
		case n > 0:
			return nil
		case attempt > 0:
			return fmt.Errorf("the row of job %q in %sjobs is gone", job, b.opts.prefix)
		}
		if _, err := tx.ExecContext(ctx, b.q(ignore, "INSERT INTO {p}jobs (job, fence, hist_floor) VALUES (?, 0, 0)"), job); err != nil {
			return err
		}
	}
}

// lockSQL is the statement that locks a job's row (its one parameter):
// Dialect.Serialize, or a SELECT with Dialect.ForUpdate.
func (b *Backend) lockSQL() string {
	if b.dialect.Serialize != "" {
		return b.dialect.Serialize
	}
	return "SELECT fence FROM {p}jobs WHERE job = ?" + b.dialect.ForUpdate
}

func (b *Backend) saveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	return b.inTx(ctx, func(tx *sql.Tx) error { return b.storeResults(ctx, tx, job, []backend.StoredResult{r}, keep) })
}

// storeResults inserts recs, results of job, in tx and trims the job's history
// to keep.
func (b *Backend) storeResults(ctx context.Context, tx *sql.Tx, job string, recs []backend.StoredResult, keep backend.Retention) error {
	for _, r := range recs {
		if _, err := tx.ExecContext(ctx, b.q(0, `INSERT INTO {p}results (job, slot, token, instance, attempt, manual, status, started, finished, error, fence, expires, backfill, requested_by)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {now} + ?, ?, ?)`),
			job, r.Slot.UnixMilli(), r.Token, r.Instance, max(r.Attempt, 1), boolInt(r.Manual), string(r.Status),
			msOf(r.StartedAt), msOf(r.FinishedAt), r.Error, int64(r.Fence), ttlMs(keep.TTL), boolInt(r.Backfill), r.RequestedBy); err != nil {
			return err
		}
	}
	trimmed := false
	if keep.TTL > 0 {
		res, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}results WHERE job = ? AND expires <= {now}"), job)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		trimmed = n > 0
		if _, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}records WHERE job = ? AND expires <= {now}"), job); err != nil {
			return err
		}
	}
	if keep.Size > 0 {
		var cut int64
		err := tx.QueryRowContext(ctx, b.q(0, "SELECT id FROM {p}results WHERE job = ? ORDER BY id DESC LIMIT 1 OFFSET ?"), job, keep.Size).Scan(&cut)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			if _, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}results WHERE job = ? AND id <= ?"), job, cut); err != nil {
				return err
			}
			trimmed = true
		}
	}
	if trimmed {
		// History shows no claim or record of a slot older than the oldest result
		// kept: those runs ended long ago and their results are gone.
		var floor sql.NullInt64
		if err := tx.QueryRowContext(ctx, b.q(0, "SELECT MIN(slot) FROM {p}results WHERE job = ?"), job).Scan(&floor); err != nil {
			return err
		}
		if floor.Valid {
			if _, err := tx.ExecContext(ctx, b.q(0, "UPDATE {p}jobs SET hist_floor = ? WHERE job = ? AND hist_floor < ?"), floor.Int64, job, floor.Int64); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}records WHERE job = ? AND slot < ?"), job, floor.Int64); err != nil {
				return err
			}
		}
	}
	if b.opts.claimKeep > 0 {
		if _, err := tx.ExecContext(ctx, b.q(0, "DELETE FROM {p}claims WHERE job = ? AND created < {now} - ?"), job, b.opts.claimKeep.Milliseconds()); err != nil {
			return err
		}
	}
	return nil
}

// historySQL selects a job's history rows: claims (kind 0), records (1) and results
// (2) still shown, with every row of the newest limit runs (a run is a token in a
// slot). Its parameters are the job four times, then the offset of the limit.
const historyRows = `WITH h AS (
	SELECT 0 AS kind, 0 AS id, c.slot, c.token, c.instance, c.attempt, 0 AS manual, c.requested_by, c.at_ms,
		'' AS status, 0 AS started, 0 AS finished, '' AS error, 0 AS fence, c.backfill
	FROM {p}claims c
	WHERE c.job = ? AND (c.expires IS NULL OR c.expires > {now})
		AND c.slot >= COALESCE((SELECT j.hist_floor FROM {p}jobs j WHERE j.job = ?), c.slot)
	UNION ALL
	SELECT 1, r.id, r.slot, r.token, r.instance, r.attempt, r.manual, r.requested_by, r.at_ms,
		'', 0, 0, '', 0, r.backfill
	FROM {p}records r
	WHERE r.job = ? AND (r.expires IS NULL OR r.expires > {now})
	UNION ALL
	SELECT 2, s.id, s.slot, s.token, s.instance, s.attempt, s.manual, s.requested_by, 0,
		s.status, s.started, s.finished, s.error, s.fence, s.backfill
	FROM {p}results s
	WHERE s.job = ? AND (s.expires IS NULL OR s.expires > {now})
)`

// History merges the job's claims, records and results with backend.BuildHistory,
// newest first, in one query.
func (b *Backend) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := b.Init(ctx); err != nil {
		return nil, err
	}
	q := historyRows + ` SELECT kind, slot, token, instance, attempt, manual, requested_by, at_ms, status, started, finished, error, fence, backfill FROM h`
	args := []any{job, job, job, job}
	if limit > 0 {
		q += ` WHERE h.slot >= COALESCE((SELECT d.slot FROM (SELECT DISTINCT token, slot FROM h) d ORDER BY d.slot DESC LIMIT 1 OFFSET ?), h.slot)`
		args = append(args, limit-1)
	}
	q += ` ORDER BY kind, id`
	rows, err := b.db.QueryContext(ctx, b.q(0, q), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: history of %q: %w", job, err)
	}
	claims, results, err := scanHistory(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: history of %q: %w", job, err)
	}
	return backend.BuildHistory(job, claims, results, limit), nil
}

func scanHistory(rows *sql.Rows) ([]backend.ClaimRecord, []backend.StoredResult, error) {
	defer rows.Close()
	var (
		claims  []backend.ClaimRecord
		results []backend.StoredResult
	)
	for rows.Next() {
		var (
			kind, slot, attempt, manual, at, started, finished, fence, backfill int64
			token, instance, requestedBy, status, errText                       string
		)
		if err := rows.Scan(&kind, &slot, &token, &instance, &attempt, &manual, &requestedBy, &at, &status, &started, &finished, &errText, &fence, &backfill); err != nil {
			return nil, nil, err
		}
		if kind < 2 {
			claims = append(claims, backend.ClaimRecord{
				Slot: timeOf(slot), Token: token, Instance: instance, Attempt: int(attempt),
				Manual: manual != 0, At: timeOf(at), RequestedBy: requestedBy, Backfill: backfill != 0,
			})
			continue
		}
		results = append(results, backend.StoredResult{
			Slot: timeOf(slot), Token: token, Instance: instance, Attempt: int(attempt), Manual: manual != 0,
			RequestedBy: requestedBy, Status: backend.Status(status), StartedAt: timeOf(started), FinishedAt: timeOf(finished),
			Error: errText, Fence: uint64(fence), Backfill: backfill != 0,
		})
	}
	return claims, results, rows.Err()
}

// LastRuns returns the newest run, success and failure of each job in one query.
// It reads the newest result of each kind per job (a window function over the
// results still shown). The claim's time and requester come from the slot's claim
// or record.
func (b *Backend) LastRuns(ctx context.Context, jobs []string) (map[string]backend.LastRuns, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	out := make(map[string]backend.LastRuns, len(jobs))
	for _, j := range jobs {
		out[j] = backend.LastRuns{Job: j}
	}
	if len(jobs) == 0 {
		return out, nil
	}
	if err := b.Init(ctx); err != nil {
		return nil, err
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(jobs)), ", ")
	failed := "'" + strings.Join([]string{
		string(backend.StatusError), string(backend.StatusTimeout), string(backend.StatusCancelled),
		string(backend.StatusLost), string(backend.StatusSuperseded),
	}, "', '") + "'"
	q := `WITH s AS (
		SELECT s.*,
			ROW_NUMBER() OVER (PARTITION BY s.job, CASE WHEN s.started <> 0 THEN 1 ELSE 0 END ORDER BY s.slot DESC, s.attempt DESC, s.id DESC) AS n_run,
			ROW_NUMBER() OVER (PARTITION BY s.job, CASE WHEN s.status = 'ok' THEN 1 WHEN s.status IN (` + failed + `) THEN 2 ELSE 0 END
				ORDER BY s.slot DESC, s.attempt DESC, s.id DESC) AS n_kind
		FROM {p}results s
		WHERE s.job IN (` + in + `) AND (s.expires IS NULL OR s.expires > {now})
	)
	SELECT s.job, s.started <> 0 AND s.n_run = 1, s.status = 'ok' AND s.n_kind = 1, s.status IN (` + failed + `) AND s.n_kind = 1,
		s.slot, s.token, s.instance, s.attempt, s.manual, s.status, s.started, s.finished, s.error, s.fence, s.backfill,
		COALESCE(c.at_ms, r.at_ms, 0), COALESCE(NULLIF(s.requested_by, ''), c.requested_by, r.requested_by, '')
	FROM s
	LEFT JOIN {p}claims c ON c.job = s.job AND c.slot = s.slot AND c.token = s.token
	LEFT JOIN {p}records r ON r.job = s.job AND r.slot = s.slot AND r.token = s.token
	WHERE (s.started <> 0 AND s.n_run = 1) OR ((s.status = 'ok' OR s.status IN (` + failed + `)) AND s.n_kind = 1)`
	args := make([]any, len(jobs))
	for i, j := range jobs {
		args[i] = j
	}
	rows, err := b.db.QueryContext(ctx, b.q(0, q), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: last runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			job, token, instance, status, errText, requestedBy    string
			isRun, isOK, isFail                                   bool
			slot, attempt, manual, started, finished, fence, atMs int64
			backfill                                              int64
		)
		if err := rows.Scan(&job, &isRun, &isOK, &isFail, &slot, &token, &instance, &attempt, &manual, &status,
			&started, &finished, &errText, &fence, &backfill, &atMs, &requestedBy); err != nil {
			return nil, fmt.Errorf("sqlbackend: last runs: %w", err)
		}
		rec := &backend.RunRecord{
			Job: job, Slot: timeOf(slot), Instance: instance, Token: token, Attempt: max(int(attempt), 1),
			Manual: manual != 0, RequestedBy: requestedBy, Status: backend.Status(status),
			ClaimedAt: timeOf(atMs), StartedAt: timeOf(started), FinishedAt: timeOf(finished),
			Error: errText, Fence: uint64(fence), Backfill: backfill != 0,
		}
		if started != 0 && finished != 0 {
			rec.Duration = rec.FinishedAt.Sub(rec.StartedAt)
		}
		lr := out[job]
		if isRun {
			lr.Run = rec
		}
		if isOK {
			lr.Success = rec
		}
		if isFail {
			lr.Failure = rec
		}
		out[job] = lr
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlbackend: last runs: %w", err)
	}
	return out, nil
}
