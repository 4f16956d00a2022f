package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// sweepEvery bounds how often a RunStore deletes runs past their keep.
const sweepEvery = time.Minute

// RunStore is the backend's backend.RunStore and backend.Settler, with every
// capability backend/machine decides. It keeps one row per (job, slot) in the
// runs table. Each call is a transaction that holds the job's lock: it reads
// the rows, asks the machine with the database's clock, and writes the
// decision and the records of the attempts it ended.
type RunStore struct {
	b *Backend

	mu      sync.Mutex
	sweepAt time.Time
}

var (
	_ backend.RunStore           = (*RunStore)(nil)
	_ backend.Settler            = (*RunStore)(nil)
	_ backend.LeaseWatcher       = (*RunStore)(nil)
	_ backend.Retrier            = (*RunStore)(nil)
	_ backend.OverlapCanceller   = (*RunStore)(nil)
	_ backend.OverlapBufferer    = (*RunStore)(nil)
	_ backend.RunCounter         = (*RunStore)(nil)
	_ backend.BufferedRunCounter = (*RunStore)(nil)
	_ backend.ActiveLister       = (*RunStore)(nil)
	_ backend.EntryRunLister     = (*RunStore)(nil)
)

// Claim decides in from the stored runs (machine.Claim), in one transaction
// that holds the job's lock; see backend.RunStore for the outcomes.
func (s *RunStore) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if err := backendutil.CheckRunClaim("sqlbackend", in); err != nil {
		return backend.ClaimResult{}, err
	}
	d, err := s.decide(ctx, in.Key(), in.Retention, func(st *slotState) (machine.Decision, error) {
		cur := st.cur
		if cur.Forgotten(st.now) {
			cur = machine.Run{Slot: in.Slot}
		}
		job := machine.Job{Count: int(st.count), Fence: uint64(st.fence) + 1}
		if in.Overlap.Exclusive() || cur.Phase == machine.Buffered {
			var err error
			if job.Others, err = s.others(ctx, st); err != nil {
				return machine.Decision{}, err
			}
		}
		return machine.Claim(cur, in, job, st.now), nil
	})
	if err != nil {
		return backend.ClaimResult{}, fmt.Errorf("sqlbackend: lease claim %s: %w", describe(in.Job, in.Slot), err)
	}
	s.notify(ctx, in.Job, d)
	s.sweep(ctx)
	return d.Result, nil
}

// Settle ends s's attempt and stores its record (machine.Settle).
func (s *RunStore) Settle(ctx context.Context, set backend.Settlement) error {
	return s.hold(ctx, "settle", set.Key, set.Retention, func(st *slotState) machine.Decision {
		return machine.Settle(st.cur, set, st.now)
	})
}

// Heartbeat extends key's lease to the database's now + lease
// (machine.Heartbeat). Watchers are not told: no claim's answer changes.
func (s *RunStore) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	return s.hold(ctx, "", key, backend.Retention{}, func(st *slotState) machine.Decision {
		return machine.Heartbeat(st.cur, key, lease, st.now)
	})
}

// Finish ends key's attempt with status and stores its record (machine.Finish).
func (s *RunStore) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	return s.hold(ctx, "finish", key, backend.Retention{}, func(st *slotState) machine.Decision {
		return machine.Finish(st.cur, key, status, st.now)
	})
}

// Retry ends key's attempt as failed, stores its retry and its record
// (machine.Retry).
func (s *RunStore) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	return s.hold(ctx, "retry", key, backend.Retention{}, func(st *slotState) machine.Decision {
		return machine.Retry(st.cur, key, delay, within, st.now)
	})
}

// Release ends key's live lease at once (machine.Release).
func (s *RunStore) Release(ctx context.Context, key backend.RunKey) error {
	return s.hold(ctx, "release", key, backend.Retention{}, func(st *slotState) machine.Decision {
		return machine.Release(st.cur, key, st.now)
	})
}

// hold applies a holder's call, named op in errors ("" for a heartbeat, which
// tells no watcher): ask's decision is written and its Err answered.
func (s *RunStore) hold(ctx context.Context, op string, key backend.RunKey, keep backend.Retention, ask func(st *slotState) machine.Decision) error {
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if err := backendutil.CheckClaim("sqlbackend", key.Job, key.Token); err != nil {
		return err
	}
	d, err := s.decide(ctx, key, keep, func(st *slotState) (machine.Decision, error) { return ask(st), nil })
	switch {
	case err != nil && op == "":
		return fmt.Errorf("sqlbackend: heartbeat %s: %w", describe(key.Job, key.Slot), err)
	case err != nil:
		return fmt.Errorf("sqlbackend: %s %s: %w", op, describe(key.Job, key.Slot), err)
	case op != "":
		s.notify(ctx, key.Job, d)
	}
	return d.Err
}

// errRunChanged: a run the call read was deleted (swept) before its write;
// the call reads again.
var errRunChanged = errors.New("the run changed while the call decided")

// maxRereads bounds how often a call reads a run that keeps changing.
const maxRereads = 5

// slotState is what a call read of a slot under its job's lock.
type slotState struct {
	tx   *sql.Tx
	job  string
	slot int64
	now  time.Time
	// fence is the job's fence counter, count its counted runs.
	fence, count int64
	// cur is the slot's run; stored says a row holds it.
	cur    machine.Run
	stored bool
}

// decide runs ask on key's slot in a transaction that holds the job's lock,
// and writes what it decided: the run, the other runs it changed, the job's
// fence and count, and the records, trimmed to keep.
func (s *RunStore) decide(ctx context.Context, key backend.RunKey, keep backend.Retention, ask func(st *slotState) (machine.Decision, error)) (machine.Decision, error) {
	var d machine.Decision
	if err := s.b.Init(ctx); err != nil {
		return d, err
	}
	var err error
	for range maxRereads {
		err = s.b.inTx(ctx, func(tx *sql.Tx) error {
			st, err := s.lockAndRead(ctx, tx, key.Job, key.Slot)
			if err != nil {
				return err
			}
			if d, err = ask(st); err != nil {
				return err
			}
			return s.write(ctx, st, d, keep)
		})
		if !errors.Is(err, errRunChanged) {
			break
		}
	}
	return d, err
}

// notify tells the watchers of job's runs that d changed.
func (s *RunStore) notify(ctx context.Context, job string, d machine.Decision) {
	if d.Write {
		s.b.hub.changed(ctx, job, d.Run.Slot.UnixMilli())
	}
	for _, o := range d.Others {
		s.b.hub.changed(ctx, job, o.Slot.UnixMilli())
	}
}

// write stores d, as decided from st, in st's transaction.
func (s *RunStore) write(ctx context.Context, st *slotState, d machine.Decision, keep backend.Retention) error {
	if d.Write {
		if err := s.writeRun(ctx, st.tx, st.job, d.Run, st.stored); err != nil {
			return err
		}
	}
	for _, o := range d.Others {
		if err := s.writeRun(ctx, st.tx, st.job, o, true); err != nil {
			return err
		}
	}
	fence := st.fence
	if d.Write {
		fence = max(fence, int64(d.Run.Fence))
	}
	if fence != st.fence || d.Counted {
		if _, err := st.tx.ExecContext(ctx, s.b.q(0, "UPDATE {p}jobs SET fence = ?, runs = ? WHERE job = ?"), fence, d.Count, st.job); err != nil {
			return err
		}
	}
	if len(d.Records) == 0 {
		return nil
	}
	return s.b.storeResults(ctx, st.tx, st.job, d.Records, keep)
}

// lockAndRead serialises the call with the job's other calls: Dialect.Serialize,
// or a SELECT with Dialect.ForUpdate. Then a statement of its own, which sees
// what the call before committed, reads the job's fence and count, the
// database's now and the slot's run. A job with no row yet gets one first.
func (s *RunStore) lockAndRead(ctx context.Context, tx *sql.Tx, job string, slot time.Time) (*slotState, error) {
	st := &slotState{tx: tx, job: job, slot: slot.UnixMilli()}
	for attempt := 0; ; attempt++ {
		if _, err := tx.ExecContext(ctx, s.b.q(0, s.b.lockSQL()), job); err != nil {
			return nil, err
		}
		var (
			r   row
			now int64
		)
		err := tx.QueryRowContext(ctx, s.b.q(0, `SELECT j.fence, j.runs, {now}, `+runColumnsAs("r.")+`
			FROM {p}jobs j LEFT JOIN {p}runs r ON r.job = j.job AND r.slot = ? WHERE j.job = ?`), st.slot, job).
			Scan(append([]any{&st.fence, &st.count, &now}, r.dest()...)...)
		if errors.Is(err, sql.ErrNoRows) && attempt == 0 {
			if _, err := tx.ExecContext(ctx, s.b.q(ignore, "INSERT INTO {p}jobs (job, fence, hist_floor) VALUES (?, 0, 0)"), job); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		st.now = timeOf(now)
		st.cur, st.stored = r.run()
		st.cur.Slot = slot
		return st, nil
	}
}

// others reads the job's other unfinished runs, for a claim that the machine
// decides from them.
func (s *RunStore) others(ctx context.Context, st *slotState) ([]machine.Run, error) {
	rows, err := st.tx.QueryContext(ctx, s.b.q(0, "SELECT "+runColumnsAs("")+" FROM {p}runs WHERE job = ? AND slot <> ? AND "+unfinishedSQL), st.job, st.slot)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []machine.Run
	for rows.Next() {
		var r row
		if err := rows.Scan(r.dest()...); err != nil {
			return nil, err
		}
		run, _ := r.run()
		out = append(out, run)
	}
	return out, rows.Err()
}

// writeRun stores r, a run of job, updating its row when one is stored
// (errRunChanged when it is gone) or inserting it.
func (s *RunStore) writeRun(ctx context.Context, tx *sql.Tx, job string, r machine.Run, stored bool) error {
	values := columnsOf(r)
	if !stored {
		_, err := tx.ExecContext(ctx, s.b.q(0, "INSERT INTO {p}runs (job, "+runColumns+", forget_at) VALUES (?"+placeholders(len(values))+")"),
			append([]any{job}, values...)...)
		return err
	}
	res, err := tx.ExecContext(ctx, s.b.q(0, "UPDATE {p}runs SET "+runAssignments+" WHERE job = ? AND slot = ?"),
		append(values[1:], job, values[0])...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return errRunChanged
	}
	return nil
}

// CancelsOverlap reports that the store implements OverlapCancelOther.
func (s *RunStore) CancelsOverlap() bool { return true }

// BuffersOverlap reports that the store implements the buffer policies.
func (s *RunStore) BuffersOverlap() bool { return true }

// CapsConcurrency reports that the store applies RunClaim.Concurrency.
func (s *RunStore) CapsConcurrency() bool { return true }

// CountsRuns reports that the store counts runs for RunClaim.MaxRuns: in the
// job's row, under the job's lock.
func (s *RunStore) CountsRuns() bool { return true }

// CountsBufferedRuns reports that a buffered slot is counted in the
// transaction that stores it.
func (s *RunStore) CountsBufferedRuns() bool { return true }

// Active lists job's unfinished runs, oldest slot first (machine.Run.Active).
func (s *RunStore) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	out, err := s.active(ctx, "job = ? AND ", []any{job}, fmt.Sprintf("%q", job))
	return out[job], err
}

// ActiveJobs returns Active of each of jobs in one query: every unfinished run of the
// store, kept for the jobs asked for.
func (s *RunStore) ActiveJobs(ctx context.Context, jobs []string) (map[string][]backend.ActiveRun, error) {
	all, err := s.active(ctx, "", nil, fmt.Sprintf("of %d jobs", len(jobs)))
	if err != nil {
		return nil, err
	}
	out := make(map[string][]backend.ActiveRun, len(jobs))
	for _, job := range jobs {
		out[job] = all[job]
	}
	return out, nil
}

// EntryRunNames lists the entries of jobs that hold an unfinished run
// (backend.EntryRunLister), removed entries included: one query, as ActiveJobs.
func (s *RunStore) EntryRunNames(ctx context.Context, jobs []string) ([]string, error) {
	asked := make(map[string]bool, len(jobs))
	for _, job := range jobs {
		asked[job] = true
	}
	all, err := s.active(ctx, "", nil, fmt.Sprintf("of the entries of %d jobs", len(jobs)))
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range all {
		if job, _, ok := backend.SplitEntryRunName(name); ok && asked[job] {
			out = append(out, name)
		}
	}
	return out, nil
}

// active reads the unfinished runs that match where (a condition ending in AND, or
// nothing) by job, oldest slot first; which names them in errors.
func (s *RunStore) active(ctx context.Context, where string, args []any, which string) (map[string][]backend.ActiveRun, error) {
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if err := s.b.Init(ctx); err != nil {
		return nil, err
	}
	rows, err := s.b.db.QueryContext(ctx, s.b.q(0, `SELECT job, {now}, `+runColumns+`
		FROM {p}runs WHERE `+where+unfinishedSQL+` ORDER BY job, slot`), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: active runs %s: %w", which, err)
	}
	defer rows.Close()
	out := map[string][]backend.ActiveRun{}
	for rows.Next() {
		var (
			r   row
			job string
			now int64
		)
		if err := rows.Scan(append([]any{&job, &now}, r.dest()...)...); err != nil {
			return nil, fmt.Errorf("sqlbackend: active runs %s: %w", which, err)
		}
		run, _ := r.run()
		if run.Forgotten(timeOf(now)) {
			continue
		}
		if a, ok := run.Active(timeOf(now)); ok {
			out[job] = append(out[job], a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlbackend: active runs %s: %w", which, err)
	}
	return out, nil
}

// sweep deletes, at most once a sweepEvery per store value, the runs past their
// machine.Run.ForgetAt (the indexed forget_at). Best effort: a failed sweep is
// tried again at the next.
func (s *RunStore) sweep(ctx context.Context) {
	s.mu.Lock()
	due := time.Now().After(s.sweepAt)
	if due {
		s.sweepAt = time.Now().Add(sweepEvery)
	}
	s.mu.Unlock()
	if !due {
		return
	}
	_, _ = s.b.db.ExecContext(ctx, s.b.q(0, `DELETE FROM {p}runs WHERE forget_at <= {now}`))
}

// inTx runs fn in a transaction, committed when fn returns nil.
func (b *Backend) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
