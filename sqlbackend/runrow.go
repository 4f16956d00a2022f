package sqlbackend

import (
	"database/sql"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// The runs table's row of a machine.Run. Times are Unix milliseconds by the
// database's clock, 0 for none. The status column holds the phase: '' running,
// 'retry' retrying, 'buffered' buffered, a status finished; no row is pending.

// The status column of a retrying and of a buffered run. Older versions of
// this package read them as finished statuses and leave the slot alone.
const (
	statusRetry    = "retry"
	statusBuffered = "buffered"
)

// unfinishedSQL selects the rows of unfinished runs.
const unfinishedSQL = "status IN ('', '" + statusRetry + "', '" + statusBuffered + "')"

// neverMs is the changed and forget_at of a run never forgotten (buffered): no
// sweep nor keep of any version reaches it, and adding a keep cannot overflow.
const neverMs int64 = 1 << 62

// runColumns are the columns of a run's row but job and forget_at, in the
// order of row.dest and columnsOf.
const runColumns = `slot, token, instance, attempt, prev_instance, prev_token, fence, lease_ms, expires, status,
	keep_ms, changed, reopened, retried, retry_at, retry_by, cancel_slot, cancel_instance, cancel_token,
	counted_last, manual, backfill, incarnation, recorded, claimed, counted, handed_over, requested_by`

// runColumnsAs is runColumns, each named with prefix (a table alias and a dot).
func runColumnsAs(prefix string) string {
	cols := strings.Split(runColumns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// runAssignments sets every column of columnsOf but slot, from ? parameters.
var runAssignments = func() string {
	cols := strings.Split(runColumns+", forget_at", ",")[1:]
	for i, c := range cols {
		cols[i] = strings.TrimSpace(c) + " = ?"
	}
	return strings.Join(cols, ", ")
}()

// placeholders is ", ?" n times.
func placeholders(n int) string { return strings.Repeat(", ?", n) }

// row is a run's row as scanned, every column nullable: a LEFT JOIN may find none.
type row struct {
	slot, attempt, fence, leaseMs, expires, keepMs, changed                       sql.NullInt64
	reopened, retried, retryAt, retryBy, cancelSlot                               sql.NullInt64
	last, manual, backfill, incarnation, recorded, claimed, counted, handedOver   sql.NullInt64
	token, instance, prevInstance, prevToken, status, cancelInstance, cancelToken sql.NullString
	requestedBy                                                                   sql.NullString
}

// dest is where Scan puts runColumns.
func (r *row) dest() []any {
	return []any{&r.slot, &r.token, &r.instance, &r.attempt, &r.prevInstance, &r.prevToken, &r.fence, &r.leaseMs,
		&r.expires, &r.status, &r.keepMs, &r.changed, &r.reopened, &r.retried, &r.retryAt, &r.retryBy,
		&r.cancelSlot, &r.cancelInstance, &r.cancelToken, &r.last, &r.manual, &r.backfill, &r.incarnation,
		&r.recorded, &r.claimed, &r.counted, &r.handedOver, &r.requestedBy}
}

// run is the row's run; false when there is no row.
func (r *row) run() (machine.Run, bool) {
	if !r.slot.Valid {
		return machine.Run{}, false
	}
	run := machine.Run{
		Slot: timeOf(r.slot.Int64), Token: r.token.String, Instance: r.instance.String,
		Attempt: int(r.attempt.Int64), Fence: uint64(r.fence.Int64),
		Lease: ms(r.leaseMs.Int64), Expires: timeOf(r.expires.Int64),
		RetryAt: timeOf(r.retryAt.Int64), RetryBy: timeOf(r.retryBy.Int64),
		Previous: r.prevInstance.String, PreviousToken: r.prevToken.String,
		Reopened: r.reopened.Int64 != 0, Retried: r.retried.Int64 != 0, Last: r.last.Int64 != 0,
		Manual: r.manual.Int64 != 0, Backfill: r.backfill.Int64 != 0, Incarnation: uint64(r.incarnation.Int64),
		Recorded: r.recorded.Int64 != 0, Claimed: timeOf(r.claimed.Int64), Keep: ms(r.keepMs.Int64),
		Counted: r.counted.Int64 != 0, HandedOver: r.handedOver.Int64 != 0, RequestedBy: r.requestedBy.String,
	}
	if r.changed.Int64 != neverMs {
		run.Changed = timeOf(r.changed.Int64)
	}
	if r.cancelToken.String != "" {
		run.Cancel = &backend.CancelRequest{Slot: timeOf(r.cancelSlot.Int64), Instance: r.cancelInstance.String, Token: r.cancelToken.String}
	}
	switch r.status.String {
	case "":
		run.Phase = machine.Running
	case statusRetry:
		run.Phase = machine.Retrying
	case statusBuffered:
		run.Phase = machine.Buffered
	default:
		run.Phase, run.Status = machine.Finished, backend.Status(r.status.String)
	}
	return run, true
}

// columnsOf is r's row: the values of runColumns, then forget_at.
func columnsOf(r machine.Run) []any {
	status := string(r.Status)
	switch r.Phase {
	case machine.Running:
		status = ""
	case machine.Retrying:
		status = statusRetry
	case machine.Buffered:
		status = statusBuffered
	}
	changed, forget := msOf(r.Changed), msOf(r.ForgetAt())
	if forget == 0 {
		changed, forget = neverMs, neverMs
	}
	var c backend.CancelRequest
	if r.Cancel != nil {
		c = *r.Cancel
	}
	return []any{r.Slot.UnixMilli(), r.Token, r.Instance, r.Attempt, r.Previous, r.PreviousToken, int64(r.Fence),
		r.Lease.Milliseconds(), msOf(r.Expires), status, r.Keep.Milliseconds(), changed, boolInt(r.Reopened),
		boolInt(r.Retried), msOf(r.RetryAt), msOf(r.RetryBy), msOf(c.Slot), c.Instance, c.Token, boolInt(r.Last),
		boolInt(r.Manual), boolInt(r.Backfill), int64(r.Incarnation), boolInt(r.Recorded), msOf(r.Claimed), boolInt(r.Counted), boolInt(r.HandedOver), r.RequestedBy, forget}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
