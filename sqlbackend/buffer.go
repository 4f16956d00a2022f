package sqlbackend

import (
	"context"
	"database/sql"

	"github.com/anarchon/anarchon/backend"
)

// The buffer overlap policies (backend.OverlapBufferer). A buffered slot is a row
// of status statusBuffered, written by the claim that buffered it under the job's
// lock, like every claim; so are the count of a job's buffered slots (the cap)
// and the choice of the one that runs next. Only Finish, which withdraws a
// buffered slot, takes no job lock: a claim's write that finds the row changed
// reads it again (errRunChanged).

// blocksSQL is true for a run that holds its job under a buffer policy: unfinished
// with a live lease or one that ended less than a lease ago, or with a pending
// retry (its window not closed). Its two parameters are the database's now.
const blocksSQL = `(status IN ('', '` + statusRetry + `') AND expires + lease_ms > ? OR status = '` + statusRetry + `' AND retry_by >= ?)`

// bufferState is what the job's other slots say to a claim of one slot under a
// buffer policy, read under the job's lock.
type bufferState struct {
	// buffered counts the job's other buffered slots.
	buffered int
	// blocker is the newest other slot that blocks, oldest the oldest buffered
	// slot before the claimed one; 0 when there is none.
	blocker, oldest int64
}

// held reports whether another slot blocks or is buffered.
func (b bufferState) held() bool { return b.blocker != 0 || b.buffered > 0 }

// waits reports whether the claimed slot waits: another slot blocks, or an
// earlier one is buffered.
func (b bufferState) waits() bool { return b.waitsFor() != 0 }

// waitsFor is the slot the claimed slot waits for: the newest that blocks, else
// the oldest earlier buffered one; 0 for none.
func (b bufferState) waitsFor() int64 {
	if b.blocker != 0 {
		return b.blocker
	}
	return b.oldest
}

// bufferState reads, in one statement, the job's other slots as a claim of slot
// under a buffer policy sees them at now.
func (s *RunStore) bufferState(ctx context.Context, tx *sql.Tx, job string, slot, now int64) (bufferState, error) {
	var (
		b              bufferState
		blocker, older sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, s.b.q(0, `SELECT COUNT(CASE WHEN status = '`+statusBuffered+`' THEN 1 END),
			MAX(CASE WHEN `+blocksSQL+` THEN slot END),
			MIN(CASE WHEN status = '`+statusBuffered+`' AND slot < ? THEN slot END)
		FROM {p}runs WHERE job = ? AND slot <> ?`), now, now, slot, job, slot).Scan(&b.buffered, &blocker, &older)
	b.blocker, b.oldest = blocker.Int64, older.Int64
	return b, err
}

// waiting answers a claim of a buffered slot that waits (b.waits()):
// OutcomeBuffered, with WaitsFor the slot it waits for and Holder and Expires
// that run's (no expiry for a buffered one).
func (s *RunStore) waiting(ctx context.Context, tx *sql.Tx, job string, b bufferState) (backend.ClaimResult, error) {
	waits := b.waitsFor()
	var (
		instance, status string
		expires          int64
	)
	err := tx.QueryRowContext(ctx, s.b.q(0, "SELECT instance, status, expires FROM {p}runs WHERE job = ? AND slot = ?"), job, waits).
		Scan(&instance, &status, &expires)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	res := backend.ClaimResult{Outcome: backend.OutcomeBuffered, Holder: instance, WaitsFor: timeOf(waits)}
	if status != statusBuffered {
		res.Expires = timeOf(expires)
	}
	return res, nil
}

// claimBuffered decides a claim of r, a slot stored buffered, whatever the
// claim's Deadline and TakeoverOnly: it waits while another slot blocks or an
// earlier one is buffered, unless the claim allows overlap (a paused job's);
// otherwise it is won as a first claim (attempt 1, a new fence), the write
// applying only to the row as read (a Finish withdrawing it takes no job lock).
func (s *RunStore) claimBuffered(ctx context.Context, tx *sql.Tx, in backend.RunClaim, r *run, fence, now int64) (backend.ClaimResult, bool, error) {
	if in.Overlap != backend.OverlapAllow {
		b, err := s.bufferState(ctx, tx, in.Job, in.Slot.UnixMilli(), now)
		if err != nil {
			return backend.ClaimResult{}, false, err
		}
		if b.waits() {
			res, err := s.waiting(ctx, tx, in.Job, b)
			res.LimitReached = r.last
			return res, false, err
		}
	}
	r.buffered, r.attempt = false, 0 // take makes it attempt 1
	r.prevInstance, r.prevToken, r.reopened, r.retried = "", "", false, false
	return s.take(ctx, tx, in, r, fence, now, statusBuffered)
}

// BuffersOverlap reports that the store implements OverlapBufferOne and
// OverlapBufferAll.
func (s *RunStore) BuffersOverlap() bool { return true }
