package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// sweepEvery bounds how often a RunStore deletes runs past their keep.
const sweepEvery = time.Minute

// RunStore is the backend's backend.RunStore, backend.LeaseWatcher,
// backend.Retrier, backend.OverlapCanceller and backend.OverlapBufferer: one row
// per (job, slot) in the
// runs table, changed only in transactions that hold the job's lock, with every
// lease time taken from the database's clock.
type RunStore struct {
	b *Backend

	mu      sync.Mutex
	sweepAt time.Time
}

// statusRetry is the status column of an unfinished run whose last attempt
// stored a retry. Older versions of this package read it as a finished status and
// leave the slot alone.
const statusRetry = "retry"

// statusBuffered is the status column of a slot stored buffered (a buffer
// overlap policy): no lease (expires 0), attempt 0, fence 0, changed and
// forget_at neverMs. Older versions of this package read it as a finished
// status: they answer done and never forget the row (see doc.go).
const statusBuffered = "buffered"

// neverMs is the changed and forget_at of a buffered row: a time no sweep nor
// keep reaches (older versions forget a row once changed + keep_ms has passed),
// far enough from the int64 limit that adding a keep cannot overflow.
const neverMs int64 = 1 << 62

// run is the stored state of one (job, slot) in the runs table.
type run struct {
	token, instance, prevInstance, prevToken string
	attempt                                  int
	fence, leaseMs, expires, keepMs, changed int64
	// status is "" while unfinished, a retry pending and a buffered slot
	// included.
	status backend.Status
	// buffered: the slot is stored buffered, not started (statusBuffered).
	buffered bool
	// reopened: a slot stored paused, taken by a ReopenPaused claim.
	reopened bool
	// retrying: the last attempt failed and stored a retry, claimable from
	// retryAt to retryBy. retried: the run was taken for such a retry.
	retrying, retried bool
	retryAt, retryBy  int64
	// cancelToken, when not "", is with cancelSlot and cancelInstance a later
	// slot's request that the run end (OverlapCancelOther).
	cancelToken, cancelInstance string
	cancelSlot                  int64
	// last: the slot's count reached the job's run limit (backend.RunCounter).
	last bool
}

// request is the run's stored cancel request, nil without one.
func (r *run) request() *backend.CancelRequest {
	if r.cancelToken == "" {
		return nil
	}
	return &backend.CancelRequest{Slot: timeOf(r.cancelSlot), Instance: r.cancelInstance, Token: r.cancelToken}
}

func (r *run) finished() bool { return r.status.Finished() }
func (r *run) live(now int64) bool {
	return !r.finished() && !r.retrying && !r.buffered && now < r.expires
}
func (r *run) forgotten(now int64) bool {
	return !r.buffered && !r.live(now) && now >= r.changed+r.keepMs && (!r.retrying || now >= r.retryBy+r.keepMs)
}

// forgetAt is when the sweep may delete the run: not before its keep has passed
// since its last write (or since its retry's window closed), nor while its lease
// may be live; never while it is buffered.
func (r *run) forgetAt() int64 {
	if r.buffered {
		return neverMs
	}
	at := max(r.changed+r.keepMs, r.expires)
	if r.retrying {
		at = max(at, r.retryBy+r.keepMs)
	}
	return at
}

// storedStatus is the run's status column.
func (r *run) storedStatus() string {
	switch {
	case r.retrying:
		return statusRetry
	case r.buffered:
		return statusBuffered
	}
	return string(r.status)
}

// setStatus reads the status column into r.
func (r *run) setStatus(col string) {
	r.status, r.retrying, r.buffered = backend.Status(col), col == statusRetry, col == statusBuffered
	if r.retrying || r.buffered {
		r.status = ""
	}
}

// decided answers a claim of a finished slot: the token that stored a skipped or
// late decision is told that decision again, everyone else done.
func (r *run) decided(token string) backend.ClaimResult {
	return backend.ClaimResult{Outcome: backend.DecidedOutcome(r.status, token == r.token && r.fence == 0),
		Attempt: r.attempt, Fence: uint64(r.fence), Holder: r.instance, Status: r.status}
}

// result answers a claim from the run's holder; a won takeover names the holder it
// took over from.
func (r *run) result(o backend.ClaimOutcome) backend.ClaimResult {
	res := backend.ClaimResult{Outcome: o, Attempt: r.attempt, Fence: uint64(r.fence), Holder: r.instance, Expires: timeOf(r.expires)}
	res.Reopened = o == backend.OutcomeWon && r.reopened
	res.Retried = o == backend.OutcomeWon && r.retried
	res.LimitReached = o == backend.OutcomeWon && r.last
	if o == backend.OutcomeWon && r.prevToken != "" {
		res.Previous, res.PreviousToken, res.PreviousAttempt = r.prevInstance, r.prevToken, r.attempt-1
	}
	return res
}

// Claim decides the claim from the stored run in one transaction that first takes
// the job's lock (Dialect.LockJob), so two claims of one job run one after the
// other; every time in it is the database's clock. See backend.RunStore for the
// outcomes. A claim repeated by its token (its answer lost after the COMMIT) is
// answered the same: won again, or the same stored decision.
func (s *RunStore) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if err := backendutil.CheckRunClaim("sqlbackend", in); err != nil {
		return backend.ClaimResult{}, err
	}
	if err := s.b.Init(ctx); err != nil {
		return backend.ClaimResult{}, err
	}
	var (
		res     backend.ClaimResult
		changed bool
	)
	var err error
	for range maxClaimRereads {
		err = s.b.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			res, changed, err = s.claim(ctx, tx, in)
			return err
		})
		if !errors.Is(err, errRunChanged) {
			break
		}
	}
	if err != nil {
		return backend.ClaimResult{}, fmt.Errorf("sqlbackend: lease claim %s: %w", describe(in.Job, in.Slot), err)
	}
	switch {
	case changed && !res.WaitsFor.IsZero():
		// A cancel request was stored on that run (its holder watches it); the
		// claim's own slot is not stored.
		s.b.hub.changed(ctx, in.Job, res.WaitsFor.UnixMilli())
	case changed:
		s.b.hub.changed(ctx, in.Job, in.Slot.UnixMilli())
	}
	s.sweep(ctx)
	return res, nil
}

// errRunChanged: a run a claim read was changed before the claim's write (a
// holder's Finish, which takes no job lock): the claim reads it again.
var errRunChanged = errors.New("the run changed while the claim decided")

// maxClaimRereads bounds how often a claim reads a run that keeps changing.
const maxClaimRereads = 5

func (s *RunStore) claim(ctx context.Context, tx *sql.Tx, in backend.RunClaim) (res backend.ClaimResult, changed bool, err error) {
	keep := in.Keep
	if keep == 0 {
		keep = backend.DefaultRunKeep
	}
	slot := in.Slot.UnixMilli()
	fence, now, r, err := s.lockAndRead(ctx, tx, in.Job, slot)
	if err != nil {
		return res, false, err
	}
	if r != nil && r.forgotten(now) {
		if _, err := tx.ExecContext(ctx, s.b.q(0, "DELETE FROM {p}runs WHERE job = ? AND slot = ?"), in.Job, slot); err != nil {
			return res, false, err
		}
		r = nil
	}
	if r != nil && r.buffered {
		return s.claimBuffered(ctx, tx, in, r, fence, now)
	}
	lease := in.Lease.Milliseconds()
	if r != nil {
		switch {
		case r.finished() && in.MayReopen(r.status, r.token, r.attempt) && (in.Deadline.IsZero() || now <= in.Deadline.UnixMilli()):
			// A paused slot that catch-up asks for once the pause ended: taken like
			// an expired lease, unless another slot of an overlap-forbidden job runs.
			if in.Overlap.Exclusive() {
				busy, err := s.otherBusy(ctx, tx, in.Job, slot, now, true)
				if err != nil {
					return res, false, err
				}
				if busy {
					return backend.ClaimResult{Outcome: backend.OutcomeRunning, Attempt: r.attempt, Fence: uint64(r.fence), Holder: r.instance}, false, nil
				}
			}
			was := r.storedStatus()
			r.status, r.reopened, r.retried, r.prevInstance, r.prevToken = "", true, false, "", ""
			return s.take(ctx, tx, in, r, fence, now, was)
		case r.finished():
			return r.decided(in.Token), false, nil
		case r.live(now) && r.token == in.Token:
			return r.result(backend.OutcomeWon), false, nil
		case r.live(now):
			return r.result(backend.OutcomeRunning), false, nil
		case r.cancelToken != "":
			// A later slot asked the run to end: it is not taken over, nor
			// retried, but ended.
			return s.endCancelled(ctx, tx, in, r, now)
		case r.retrying && r.token == in.Token:
			// The failed attempt's own token: its attempt is over, it never
			// takes the retry.
			return backend.ClaimResult{Outcome: backend.OutcomeDone, Attempt: r.attempt, Fence: uint64(r.fence), Holder: r.instance, Status: backend.StatusError}, false, nil
		case r.retrying && now < r.retryAt:
			return backend.ClaimResult{Outcome: backend.OutcomeRetry, Attempt: r.attempt, Fence: uint64(r.fence), Holder: r.instance,
				RetryIn: time.Duration(r.retryAt-now) * time.Millisecond}, false, nil
		case r.retrying && now > r.retryBy:
			// Nobody claimed the retry in time: the failure stands.
			r.retrying, r.status, r.changed = false, backend.StatusError, now
			if _, err := tx.ExecContext(ctx, s.b.q(0, `UPDATE {p}runs SET status = ?, changed = ?, forget_at = ? WHERE job = ? AND slot = ?`),
				string(r.status), r.changed, r.forgetAt(), in.Job, slot); err != nil {
				return res, false, err
			}
			return r.decided(in.Token), true, nil
		}
		// Unfinished and its lease expired or was released, or its retry is due: a
		// takeover. The deadline does not apply (someone started the run); a job
		// that forbids overlap waits while another of its slots holds a live lease.
		if in.Overlap.Exclusive() {
			busy, err := s.otherBusy(ctx, tx, in.Job, slot, now, true)
			if err != nil {
				return res, false, err
			}
			if busy {
				return backend.ClaimResult{Outcome: backend.OutcomeRunning, Attempt: r.attempt, Fence: uint64(r.fence), Holder: r.instance, Expires: timeOf(r.expires)}, false, nil
			}
		}
		was := r.storedStatus()
		r.prevInstance, r.prevToken, r.reopened = r.instance, r.token, false
		r.retried, r.retrying = r.retrying, false
		return s.take(ctx, tx, in, r, fence, now, was)
	}

	r = &run{token: in.Token, instance: in.Instance, attempt: 1, keepMs: keep.Milliseconds(), changed: now, expires: now}
	var buffer bufferState // under a buffer policy, what the job's other slots say
	var counted int64      // the job's counted runs, when the claim counts
	if in.Counts() && !in.TakeoverOnly {
		if err := tx.QueryRowContext(ctx, s.b.q(0, "SELECT runs FROM {p}jobs WHERE job = ?"), in.Job).Scan(&counted); err != nil {
			return res, false, err
		}
	}
	switch {
	case in.TakeoverOnly:
		return backend.ClaimResult{Outcome: backend.OutcomeNone}, false, nil
	case !in.Deadline.IsZero() && now > in.Deadline.UnixMilli():
		r.status = backend.StatusLate // stored: nobody runs the slot afterwards
	case in.Counts() && counted >= int64(in.MaxRuns):
		r.status = backend.StatusLimit
	default:
		busy := false
		switch in.Overlap {
		case backend.OverlapSkip:
			busy, err = s.otherBusy(ctx, tx, in.Job, slot, now, false)
		case backend.OverlapCancelOther:
			// A later slot's busy run skips the slot; only earlier ones busy, it
			// asks them to end and waits, storing nothing of its own.
			if busy, err = s.laterBusy(ctx, tx, in.Job, slot, now); err == nil && !busy {
				var waits, stored bool
				if res, waits, stored, err = s.cancelEarlier(ctx, tx, in, now); err == nil && waits {
					return res, stored, nil
				}
			}
		case backend.OverlapBufferOne, backend.OverlapBufferAll:
			// Behind a slot that blocks or an earlier buffered one the slot is
			// buffered, or skipped with the cap reached. Held only by later
			// buffered slots (a catch-up slot), it is won under the cap: a
			// buffered slot with nothing to wait for would be won by its next
			// claim, and the later ones now wait for it.
			if buffer, err = s.bufferState(ctx, tx, in.Job, slot, now); err == nil && buffer.held() {
				busy = buffer.buffered >= in.Buffers()
				r.buffered = !busy && buffer.waits()
			}
		}
		if err != nil {
			return res, false, err
		}
		switch {
		case busy:
			r.status = backend.StatusSkipped
		case r.buffered:
			r.attempt, r.expires, r.changed = 0, 0, neverMs
		default:
			r.fence, r.leaseMs, r.expires = fence+1, lease, now+lease
			if err := s.setFence(ctx, tx, in.Job, r.fence); err != nil {
				return res, false, err
			}
		}
		if !r.finished() && in.Counts() { // won or buffered: a decision to run it
			counted++
			r.last = counted == int64(in.MaxRuns)
			if _, err := tx.ExecContext(ctx, s.b.q(0, "UPDATE {p}jobs SET runs = ? WHERE job = ?"), counted, in.Job); err != nil {
				return res, false, err
			}
		}
	}
	_, err = tx.ExecContext(ctx, s.b.q(0, `INSERT INTO {p}runs (job, slot, token, instance, attempt, prev_instance, prev_token,
			fence, lease_ms, expires, status, keep_ms, changed, forget_at, reopened, retried, retry_at, retry_by, counted_last)
		VALUES (?, ?, ?, ?, ?, '', '', ?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 0, ?)`),
		in.Job, slot, r.token, r.instance, r.attempt, r.fence, r.leaseMs, r.expires, r.storedStatus(), r.keepMs, r.changed, r.forgetAt(), boolInt(r.last))
	if err != nil {
		return res, false, err
	}
	if r.finished() {
		return r.decided(in.Token), false, nil
	}
	if r.buffered {
		res, err := s.waiting(ctx, tx, in.Job, buffer)
		res.LimitReached = r.last
		return res, false, err
	}
	return r.result(backend.OutcomeWon), false, nil
}

// take gives the stored run r to in's token with a new lease: a takeover, a due
// retry, or a paused slot reopened (r's previous holder, status and retried
// already set for it), without a cancel request. The write applies only to the row
// as it was read (its token, status and expiry were: neither a Finish nor a
// heartbeat of the holder came between): else errRunChanged.
func (s *RunStore) take(ctx context.Context, tx *sql.Tx, in backend.RunClaim, r *run, fence, now int64, wasStatus string) (backend.ClaimResult, bool, error) {
	wasToken, wasExpires := r.token, r.expires
	keep := in.Keep
	if keep == 0 {
		keep = backend.DefaultRunKeep
	}
	lease := in.Lease.Milliseconds()
	r.token, r.instance = in.Token, in.Instance
	r.attempt++
	r.fence, r.leaseMs, r.expires, r.keepMs, r.changed = fence+1, lease, now+lease, keep.Milliseconds(), now
	if err := s.setFence(ctx, tx, in.Job, r.fence); err != nil {
		return backend.ClaimResult{}, false, err
	}
	err := updateRead(ctx, tx, s.b.q(0, `UPDATE {p}runs SET token = ?, instance = ?, attempt = ?, prev_instance = ?, prev_token = ?,
			fence = ?, lease_ms = ?, expires = ?, status = ?, keep_ms = ?, changed = ?, forget_at = ?, reopened = ?,
			retried = ?, retry_at = 0, retry_by = 0, cancel_slot = 0, cancel_instance = '', cancel_token = ''
		WHERE job = ? AND slot = ? AND token = ? AND status = ? AND expires = ?`),
		r.token, r.instance, r.attempt, r.prevInstance, r.prevToken, r.fence, r.leaseMs, r.expires, r.storedStatus(),
		r.keepMs, r.changed, r.forgetAt(), boolInt(r.reopened), boolInt(r.retried), in.Job, in.Slot.UnixMilli(), wasToken, wasStatus, wasExpires)
	if err != nil {
		return backend.ClaimResult{}, false, err
	}
	return r.result(backend.OutcomeWon), true, nil
}

// updateRead runs an UPDATE of one row as it was read; errRunChanged when it
// matched none (the row changed since).
func updateRead(ctx context.Context, tx *sql.Tx, query string, args ...any) error {
	up, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	if n, err := up.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return errRunChanged
	}
	return nil
}

// endCancelled finishes r, a run a later slot asked to end whose lease ended
// unfinished or whose retry is stored, as cancelled, in place of in's takeover.
// The write applies only to the row as it was read, as take's: else
// errRunChanged.
func (s *RunStore) endCancelled(ctx context.Context, tx *sql.Tx, in backend.RunClaim, r *run, now int64) (backend.ClaimResult, bool, error) {
	was := r.storedStatus()
	r.status, r.retrying, r.changed = backend.StatusCancelled, false, now
	err := updateRead(ctx, tx, s.b.q(0, `UPDATE {p}runs SET status = ?, changed = ?, forget_at = ?
		WHERE job = ? AND slot = ? AND token = ? AND status = ? AND expires = ?`),
		string(r.status), r.changed, r.forgetAt(), in.Job, in.Slot.UnixMilli(), r.token, was, r.expires)
	if err != nil {
		return backend.ClaimResult{}, false, err
	}
	return r.decided(in.Token), true, nil
}

// lockAndRead serialises the claim with the job's other claims (Dialect.Serialize,
// or a SELECT with Dialect.ForUpdate) and then, in a statement of its own that sees
// what the claim before it committed, reads the job's fence counter, the database's now and the
// slot's run (nil when none is stored). A job with no row yet (claimed before
// PrepareJob) gets one first.
func (s *RunStore) lockAndRead(ctx context.Context, tx *sql.Tx, job string, slot int64) (fence, now int64, r *run, err error) {
	for attempt := 0; ; attempt++ {
		lock := s.b.dialect.Serialize
		if lock == "" {
			lock = "SELECT fence FROM {p}jobs WHERE job = ?" + s.b.dialect.ForUpdate
		}
		if _, err := tx.ExecContext(ctx, s.b.q(0, lock), job); err != nil {
			return 0, 0, nil, err
		}
		var (
			token, instance, prevInstance, prevToken, status            sql.NullString
			attempt2, rfence, leaseMs, expires, keepMs, chang, reopened sql.NullInt64
			retried, retryAt, retryBy, cancelSlot, countedLast          sql.NullInt64
			cancelInstance, cancelToken                                 sql.NullString
		)
		err := tx.QueryRowContext(ctx, s.b.q(0, `SELECT j.fence, {now}, r.token, r.instance, r.attempt, r.prev_instance, r.prev_token,
				r.fence, r.lease_ms, r.expires, r.status, r.keep_ms, r.changed, r.reopened, r.retried, r.retry_at, r.retry_by,
				r.cancel_slot, r.cancel_instance, r.cancel_token, r.counted_last
			FROM {p}jobs j LEFT JOIN {p}runs r ON r.job = j.job AND r.slot = ? WHERE j.job = ?`), slot, job).
			Scan(&fence, &now, &token, &instance, &attempt2, &prevInstance, &prevToken, &rfence, &leaseMs, &expires, &status, &keepMs, &chang,
				&reopened, &retried, &retryAt, &retryBy, &cancelSlot, &cancelInstance, &cancelToken, &countedLast)
		if errors.Is(err, sql.ErrNoRows) && attempt == 0 {
			if _, err := tx.ExecContext(ctx, s.b.q(ignore, "INSERT INTO {p}jobs (job, fence, hist_floor) VALUES (?, 0, 0)"), job); err != nil {
				return 0, 0, nil, err
			}
			continue
		}
		if err != nil {
			return 0, 0, nil, err
		}
		if token.Valid {
			r = &run{token: token.String, instance: instance.String, attempt: int(attempt2.Int64),
				prevInstance: prevInstance.String, prevToken: prevToken.String, fence: rfence.Int64,
				leaseMs: leaseMs.Int64, expires: expires.Int64, keepMs: keepMs.Int64, changed: chang.Int64,
				reopened: reopened.Int64 != 0, retried: retried.Int64 != 0, retryAt: retryAt.Int64, retryBy: retryBy.Int64,
				cancelSlot: cancelSlot.Int64, cancelInstance: cancelInstance.String, cancelToken: cancelToken.String,
				last: countedLast.Int64 != 0}
			r.setStatus(status.String)
		}
		return fence, now, r, nil
	}
}

// setFence stores the job's fence counter, read under the job's lock: every new
// holder of any of the job's runs gets the next number.
func (s *RunStore) setFence(ctx context.Context, tx *sql.Tx, job string, fence int64) error {
	_, err := tx.ExecContext(ctx, s.b.q(0, "UPDATE {p}jobs SET fence = ? WHERE job = ?"), fence, job)
	return err
}

// otherBusy reports whether a slot of job other than slot is busy at now: it holds a
// live lease, or (unless liveOnly) its unfinished run lost its lease less than a
// lease ago (released, expired or ended by a retry: a backup is about to take it
// over). A run whose retry is pending holds no live lease: its expiry is past.
func (s *RunStore) otherBusy(ctx context.Context, tx *sql.Tx, job string, slot, now int64, liveOnly bool) (bool, error) {
	q := "SELECT COUNT(*) FROM {p}runs WHERE job = ? AND slot <> ? AND status IN ('', '" + statusRetry + "') AND expires + lease_ms > ?"
	if liveOnly {
		q = "SELECT COUNT(*) FROM {p}runs WHERE job = ? AND slot <> ? AND status = '' AND expires > ?"
	}
	var n int64
	if err := tx.QueryRowContext(ctx, s.b.q(0, q), job, slot, now).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// laterBusy reports whether a slot of job after slot is busy, as otherBusy (not
// liveOnly) counts.
func (s *RunStore) laterBusy(ctx context.Context, tx *sql.Tx, job string, slot, now int64) (bool, error) {
	var n int64
	err := tx.QueryRowContext(ctx, s.b.q(0, "SELECT COUNT(*) FROM {p}runs WHERE job = ? AND slot > ? AND status IN ('', '"+statusRetry+
		"') AND expires + lease_ms > ?"), job, slot, now).Scan(&n)
	return n > 0, err
}

// cancelEarlier stores in's request that it end on each busy run (as otherBusy,
// not liveOnly, counts) of an earlier slot of in's job that has none, and answers
// in running, waiting for the newest of them; waits is false when none is busy,
// stored says a request was written.
// The busy runs are read locked (Dialect.ForUpdate) so that no Finish changes
// them before the claim commits; a write that finds its run changed all the same
// is errRunChanged.
func (s *RunStore) cancelEarlier(ctx context.Context, tx *sql.Tx, in backend.RunClaim, now int64) (res backend.ClaimResult, waits, stored bool, err error) {
	slot := in.Slot.UnixMilli()
	rows, err := tx.QueryContext(ctx, s.b.q(0, `SELECT slot, token, instance, attempt, fence, expires, status, cancel_token FROM {p}runs
		WHERE job = ? AND slot < ? AND status IN ('', '`+statusRetry+`') AND expires + lease_ms > ? ORDER BY slot`+s.b.dialect.ForUpdate),
		in.Job, slot, now)
	if err != nil {
		return res, false, false, err
	}
	type busyRun struct {
		slot          int64
		token, status string
		asked         bool
	}
	var busy []busyRun
	for rows.Next() {
		var (
			b     busyRun
			r     run
			asked string
		)
		if err := rows.Scan(&b.slot, &b.token, &r.instance, &r.attempt, &r.fence, &r.expires, &b.status, &asked); err != nil {
			_ = rows.Close()
			return res, false, false, err
		}
		b.asked = asked != ""
		busy = append(busy, b)
		res = r.result(backend.OutcomeRunning) // the newest is last
		res.WaitsFor = timeOf(b.slot)
	}
	if err := rows.Close(); err != nil {
		return res, false, false, err
	}
	if err := rows.Err(); err != nil {
		return res, false, false, err
	}
	for _, b := range busy {
		if b.asked {
			continue // the first request stands
		}
		err := updateRead(ctx, tx, s.b.q(0, `UPDATE {p}runs SET cancel_slot = ?, cancel_instance = ?, cancel_token = ?
			WHERE job = ? AND slot = ? AND token = ? AND status = ? AND cancel_token = ''`),
			slot, in.Instance, in.Token, in.Job, b.slot, b.token, b.status)
		if err != nil {
			return res, false, false, err
		}
		stored = true
	}
	return res, len(busy) > 0, stored, nil
}

// CancelsOverlap reports that the store implements OverlapCancelOther.
func (s *RunStore) CancelsOverlap() bool { return true }

// CountsRuns reports that the store counts runs for RunClaim.MaxRuns: in the
// job's row, under the job's lock, with the claim that counts.
func (s *RunStore) CountsRuns() bool { return true }

// CountsBufferedRuns reports that a buffered slot is counted in the transaction
// that stores it.
func (s *RunStore) CountsBufferedRuns() bool { return true }

// Heartbeat extends token's lease to the database's now + lease, in one statement
// that changes the row only while token holds a live lease and no cancel request
// is stored. With one, a second statement extends the lease and a third reads the
// request for the *backend.CancelError.
func (s *RunStore) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	job, slot, token := key.Job, key.Slot, key.Token
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if lease <= 0 {
		return fmt.Errorf("%w: heartbeat lease must be positive, got %v", backend.ErrInvalidClaim, lease)
	}
	if err := s.b.Init(ctx); err != nil {
		return err
	}
	extend := func(asked string) (bool, error) {
		res, err := s.b.db.ExecContext(ctx, s.b.q(0, `UPDATE {p}runs SET lease_ms = ?, expires = {now} + ?, changed = {now},
				forget_at = {now} + CASE WHEN keep_ms > ? THEN keep_ms ELSE ? END
			WHERE job = ? AND slot = ? AND token = ? AND status = '' AND expires > {now} AND cancel_token `+asked),
			lease.Milliseconds(), lease.Milliseconds(), lease.Milliseconds(), lease.Milliseconds(), job, slot.UnixMilli(), token)
		if err != nil {
			return false, fmt.Errorf("sqlbackend: heartbeat %s: %w", describe(job, slot), err)
		}
		n, err := res.RowsAffected()
		return err == nil && n == 1, nil
	}
	if ok, err := extend("= ''"); ok || err != nil {
		return err
	}
	if ok, err := extend("<> ''"); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %s", backend.ErrLeaseLost, describe(job, slot))
	}
	// The lease is extended; the request stays until the run is taken anew.
	var r run
	err := s.b.db.QueryRowContext(ctx, s.b.q(0, `SELECT cancel_slot, cancel_instance, cancel_token FROM {p}runs
		WHERE job = ? AND slot = ? AND token = ? AND cancel_token <> ''`), job, slot.UnixMilli(), token).
		Scan(&r.cancelSlot, &r.cancelInstance, &r.cancelToken)
	switch {
	case errors.Is(err, sql.ErrNoRows): // finished and taken anew since
		return fmt.Errorf("%w: %s", backend.ErrLeaseLost, describe(job, slot))
	case err != nil:
		return fmt.Errorf("sqlbackend: heartbeat %s: %w", describe(job, slot), err)
	}
	return &backend.CancelError{Job: job, Slot: slot, Request: *r.request()}
}

// Finish marks the run finished with status, from the token stored as its holder
// while it is unfinished (even with its lease expired or released, as long as
// nobody took it over, and unless it stored a retry), or from the token that
// stored the slot buffered while it is (withdrawn); repeating it is not an
// error. Anything else is backend.ErrStaleToken and changes nothing.
func (s *RunStore) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	job, slot, token := key.Job, key.Slot, key.Token
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if !status.Finished() {
		return fmt.Errorf("%w: finish needs a final status, got %q", backend.ErrInvalidClaim, status)
	}
	if err := s.b.Init(ctx); err != nil {
		return err
	}
	res, err := s.b.db.ExecContext(ctx, s.b.q(0, `UPDATE {p}runs SET status = ?, changed = {now}, forget_at = {now} + keep_ms
		WHERE job = ? AND slot = ? AND token = ? AND status IN ('', '`+statusBuffered+`')`), string(status), job, slot.UnixMilli(), token)
	if err != nil {
		return fmt.Errorf("sqlbackend: finish %s: %w", describe(job, slot), err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		s.b.hub.changed(ctx, job, slot.UnixMilli())
		return nil
	}
	var stored, st string
	err = s.b.db.QueryRowContext(ctx, s.b.q(0, "SELECT token, status FROM {p}runs WHERE job = ? AND slot = ?"), job, slot.UnixMilli()).Scan(&stored, &st)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("sqlbackend: finish %s: %w", describe(job, slot), err)
	case stored == token && st != statusRetry && backend.Status(st).Finished():
		return nil // a repeated Finish
	}
	return fmt.Errorf("%w: %s", backend.ErrStaleToken, describe(job, slot))
}

// Retry ends key's attempt as failed and stores its retry (see backend.Retrier), in
// a transaction that holds the job's lock like a claim: the lease ends at the
// database's now, and the slot may be claimed from now + delay to now + delay +
// within. A repeat by the same token while the retry is pending, or once its
// retry was claimed (the run is retried, taken from that token), is not an error
// and changes nothing.
func (s *RunStore) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if delay < 0 || within <= 0 {
		return fmt.Errorf("%w: retry needs a delay of zero or more and a positive window, got %v and %v", backend.ErrInvalidClaim, delay, within)
	}
	if err := s.b.Init(ctx); err != nil {
		return err
	}
	slot := key.Slot.UnixMilli()
	var stale, changed bool
	err := s.b.inTx(ctx, func(tx *sql.Tx) error {
		_, now, r, err := s.lockAndRead(ctx, tx, key.Job, slot)
		switch {
		case err != nil:
			return err
		case r != nil && r.retried && r.prevToken == key.Token:
			return nil // a repeat, after the retry it stored was claimed
		case r == nil || r.token != key.Token || r.finished() || r.buffered:
			stale = true
			return nil
		case r.retrying:
			return nil // a repeat
		}
		r.retrying, r.retryAt, r.retryBy = true, now+delay.Milliseconds(), now+(delay+within).Milliseconds()
		r.expires, r.changed = now, now
		// Conditional too: a Finish of the same token does not take the job's lock.
		res, err := tx.ExecContext(ctx, s.b.q(0, `UPDATE {p}runs SET status = ?, retry_at = ?, retry_by = ?, expires = ?, changed = ?, forget_at = ?
			WHERE job = ? AND slot = ? AND token = ? AND status = ''`),
			r.storedStatus(), r.retryAt, r.retryBy, r.expires, r.changed, r.forgetAt(), key.Job, slot, key.Token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		changed, stale = n == 1, n == 0
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlbackend: retry %s: %w", describe(key.Job, key.Slot), err)
	}
	if stale {
		return fmt.Errorf("%w: %s", backend.ErrStaleToken, describe(key.Job, key.Slot))
	}
	if changed {
		s.b.hub.changed(ctx, key.Job, slot)
	}
	return nil
}

// Release ends token's live lease at once (its expiry becomes the database's now).
// The run stays unfinished, so the next claim by another token takes it over.
func (s *RunStore) Release(ctx context.Context, key backend.RunKey) error {
	job, slot, token := key.Job, key.Slot, key.Token
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if err := s.b.Init(ctx); err != nil {
		return err
	}
	res, err := s.b.db.ExecContext(ctx, s.b.q(0, `UPDATE {p}runs SET expires = {now}, changed = {now}, forget_at = {now} + keep_ms
		WHERE job = ? AND slot = ? AND token = ? AND status = '' AND expires > {now}`), job, slot.UnixMilli(), token)
	if err != nil {
		return fmt.Errorf("sqlbackend: release %s: %w", describe(job, slot), err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		s.b.hub.changed(ctx, job, slot.UnixMilli())
	}
	return nil
}

// Active lists job's unfinished runs, oldest slot first, buffered slots with
// Buffered set.
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

var _ backend.EntryRunLister = (*RunStore)(nil)

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
	rows, err := s.b.db.QueryContext(ctx, s.b.q(0, `SELECT job, slot, token, instance, attempt, fence, expires, keep_ms, changed, status, retry_at, retry_by,
			cancel_slot, cancel_instance, cancel_token, {now}
		FROM {p}runs WHERE `+where+`status IN ('', '`+statusRetry+`', '`+statusBuffered+`') ORDER BY job, slot`), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlbackend: active runs %s: %w", which, err)
	}
	defer rows.Close()
	out := map[string][]backend.ActiveRun{}
	for rows.Next() {
		var (
			r        run
			job      string
			slot     int64
			now      int64
			attempt  int64
			instance string
			status   string
		)
		if err := rows.Scan(&job, &slot, &r.token, &instance, &attempt, &r.fence, &r.expires, &r.keepMs, &r.changed, &status, &r.retryAt, &r.retryBy,
			&r.cancelSlot, &r.cancelInstance, &r.cancelToken, &now); err != nil {
			return nil, fmt.Errorf("sqlbackend: active runs %s: %w", which, err)
		}
		r.setStatus(status)
		if r.forgotten(now) {
			continue
		}
		a := backend.ActiveRun{
			Slot: timeOf(slot), Token: r.token, Instance: instance, Attempt: int(attempt),
			Fence: uint64(r.fence), Expires: timeOf(r.expires), Live: r.live(now), Cancel: r.request(),
			Buffered: r.buffered,
		}
		if r.retrying {
			a.RetryAt = timeOf(r.retryAt)
		}
		out[job] = append(out[job], a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlbackend: active runs %s: %w", which, err)
	}
	return out, nil
}

// sweep deletes, at most once a sweepEvery per store value, the runs that were
// neither live nor written for their keep (by the indexed forget_at). Best effort: a failed sweep is tried
// again at the next.
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
