package anarchontest

import (
	"context"
	"errors"
	"slices"
)

// Errors of the store calls a fault cut, matched with errors.Is.
var (
	// ErrKilled: the call's process was killed (Replica.Kill).
	ErrKilled = errors.New("anarchontest: replica killed")
	// ErrPartitioned: the call's replica is cut off from the store
	// (Replica.Partition).
	ErrPartitioned = errors.New("anarchontest: replica partitioned from the store")
	// ErrAnswerLost: the store applied the call, but its answer was lost
	// (Replica.LoseAnswers).
	ErrAnswerLost = errors.New("anarchontest: answer lost")
)

// Op names a store call, as the faults see it.
type Op string

// The store calls. OpClaim is a claim of the run store and of the backend
// alike. The writes are the calls that change the store: every one but Init,
// PrepareJob, History, Pauses, Active, EntryRunNames, GetEntry, ListEntries,
// GetCalendar, Calendars and the watches.
const (
	OpInit            Op = "Init"
	OpPrepareJob      Op = "PrepareJob"
	OpClaim           Op = "Claim"
	OpHeartbeat       Op = "Heartbeat"
	OpSettle          Op = "Settle"
	OpFinish          Op = "Finish"
	OpRelease         Op = "Release"
	OpRetry           Op = "Retry"
	OpRecordClaim     Op = "RecordClaim"
	OpRecordManualRun Op = "RecordManualRun"
	OpSaveResult      Op = "SaveResult"
	OpWriteRecords    Op = "WriteRecords"
	OpRecordOnce      Op = "RecordOnce"
	OpSetPause        Op = "SetPause"
	OpClearPause      Op = "ClearPause"
	OpCreateEntry     Op = "CreateEntry"
	OpUpdateEntry     Op = "UpdateEntry"
	OpDeleteEntry     Op = "DeleteEntry"
	OpHistory         Op = "History"
	OpPauses          Op = "Pauses"
	OpActive          Op = "Active"
	OpEntryRunNames   Op = "EntryRunNames"
	OpRunCount        Op = "RunCount"
	OpGetEntry        Op = "GetEntry"
	OpListEntries     Op = "ListEntries"
	OpWatchRun        Op = "WatchRun"
	OpWatchPauses     Op = "WatchPauses"
	OpWatchEntries    Op = "WatchEntries"
	OpPutCalendar     Op = "PutCalendar"
	OpDeleteCalendar  Op = "DeleteCalendar"
	OpGetCalendar     Op = "GetCalendar"
	OpCalendars       Op = "Calendars"
	OpWatchCalendars  Op = "WatchCalendars"
	OpBeat            Op = "Beat"
	OpLeave           Op = "Leave"
	OpWatchMembers    Op = "WatchMembers"
)

// Write reports whether op changes the store.
func (op Op) Write() bool {
	switch op {
	case OpInit, OpPrepareJob, OpHistory, OpPauses, OpActive, OpEntryRunNames, OpRunCount, OpGetEntry, OpListEntries,
		OpWatchRun, OpWatchPauses, OpWatchEntries, OpGetCalendar, OpCalendars, OpWatchCalendars, OpWatchMembers:
		return false
	}
	return true
}

// loss is a LoseAnswers order: the answers of the next n calls of ops (of
// writes when ops is empty) are lost.
type loss struct {
	n   int
	ops []Op
}

func (l loss) covers(op Op) bool {
	if len(l.ops) == 0 {
		return op.Write()
	}
	return slices.Contains(l.ops, op)
}

// takeLoss reports whether the answer of this call of op is to be lost, and
// counts it.
func (r *Replica) takeLoss(op Op) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.losses {
		if r.losses[i].covers(op) {
			r.losses[i].n--
			if r.losses[i].n == 0 {
				r.losses = slices.Delete(r.losses, i, i+1)
			}
			return true
		}
	}
	return false
}

// do makes one store call of p through its faults. apply is the call to the
// store.
func do[T any](p *proc, ctx context.Context, op Op, apply func(context.Context) (T, error)) (T, error) {
	var zero T
	p.waitThaw() // a frozen process sends nothing
	if p.dead() {
		p.hang(ctx)
		return zero, errorf(ErrKilled, p, op)
	}
	if p.r.isPartitioned() {
		return zero, errorf(ErrPartitioned, p, op)
	}
	lost := p.r.takeLoss(op)
	v, err := apply(ctx)
	p.waitThaw() // an answer that comes during a freeze is read after it
	switch {
	case p.dead():
		return zero, errorf(ErrKilled, p, op) // nobody reads it
	case lost:
		return zero, errorf(ErrAnswerLost, p, op)
	}
	return v, err
}

// do0 is do for a call that returns only an error.
func do0(p *proc, ctx context.Context, op Op, apply func(context.Context) error) error {
	_, err := do(p, ctx, op, func(ctx context.Context) (struct{}, error) { return struct{}{}, apply(ctx) })
	return err
}

// watch runs a watch of the store (run) through p's faults: it is refused
// like a call, and cut when p is killed or its replica partitioned. What the
// store delivers during a freeze is delivered after it.
func (p *proc) watch(ctx context.Context, op Op, run func(ctx context.Context, deliver func(func())) error) error {
	p.waitThaw()
	if p.dead() {
		p.hang(ctx)
		return errorf(ErrKilled, p, op)
	}
	cut, ok := p.r.cutCh()
	if !ok {
		return errorf(ErrPartitioned, p, op)
	}
	if p.r.takeLoss(op) {
		return errorf(ErrAnswerLost, p, op) // a watch changes nothing: only its answer counts
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-cut:
			cancel(errorf(ErrPartitioned, p, op))
		case <-p.killCtx.Done():
			cancel(errorf(ErrKilled, p, op))
		case <-wctx.Done():
		}
	}()
	err := run(wctx, func(deliver func()) {
		p.waitThaw()
		select {
		case <-cut:
		case <-p.killCtx.Done():
		case <-wctx.Done():
		default:
			deliver()
		}
	})
	if ctx.Err() == nil && wctx.Err() != nil {
		return context.Cause(wctx)
	}
	return err
}
