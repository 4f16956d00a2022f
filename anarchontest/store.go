package anarchontest

import (
	"context"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
)

// view is one process's view of the fleet's memory store: every call that
// reaches the store goes through the process's faults (proc.do). It has every
// capability of memory.Backend, and its run store every capability of
// memory.RunStore but RecordsUser: where a store writes its records is the
// fleet's, not one replica's.
type view struct {
	p   *proc
	mem *memory.Backend
}

var (
	_ backend.Backend       = (*view)(nil)
	_ backend.LeaseBackend  = (*view)(nil)
	_ backend.ClaimRecorder = (*view)(nil)
	_ backend.RecordWriter  = (*view)(nil)
	_ backend.OnceRecorder  = (*view)(nil)
	_ backend.Pauser        = (*view)(nil)
	_ backend.EntryStore    = (*view)(nil)
	_ backend.CalendarStore = (*view)(nil)
	_ backend.Membership    = (*view)(nil)

	_ backend.RunStore           = (*runsView)(nil)
	_ backend.Settler            = (*runsView)(nil)
	_ backend.Retrier            = (*runsView)(nil)
	_ backend.LeaseWatcher       = (*runsView)(nil)
	_ backend.ActiveLister       = (*runsView)(nil)
	_ backend.EntryRunLister     = (*runsView)(nil)
	_ backend.OverlapCanceller   = (*runsView)(nil)
	_ backend.OverlapBufferer    = (*runsView)(nil)
	_ backend.RunCounter         = (*runsView)(nil)
	_ backend.BufferedRunCounter = (*runsView)(nil)
)

// memRuns is what the memory backend's run store implements.
type memRuns interface {
	backend.RunStore
	backend.Settler
	backend.Retrier
	backend.LeaseWatcher
	backend.ActiveLister
	backend.EntryRunLister
	backend.OverlapCanceller
	backend.OverlapBufferer
	backend.RunCounter
	backend.BufferedRunCounter
	backend.RunCountReader
	backend.ConcurrencyCapper
}

func (v *view) Name() string                { return v.mem.Name() }
func (v *view) DedupeWindow() time.Duration { return v.mem.DedupeWindow() }

// Close releases nothing: the store is the fleet's.
func (v *view) Close(context.Context) error { return nil }

func (v *view) Init(ctx context.Context) error {
	return do0(v.p, ctx, OpInit, func(ctx context.Context) error { return v.mem.Init(ctx) })
}

func (v *view) PrepareJob(ctx context.Context, j backend.JobLimits) error {
	return do0(v.p, ctx, OpPrepareJob, func(ctx context.Context) error { return v.mem.PrepareJob(ctx, j) })
}

func (v *view) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	return do(v.p, ctx, OpClaim, func(ctx context.Context) (bool, error) { return v.mem.Claim(ctx, in) })
}

func (v *view) RecordManualRun(ctx context.Context, in backend.ClaimInput) (time.Time, error) {
	return do(v.p, ctx, OpRecordManualRun, func(ctx context.Context) (time.Time, error) { return v.mem.RecordManualRun(ctx, in) })
}

func (v *view) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	return do0(v.p, ctx, OpSaveResult, func(ctx context.Context) error { return v.mem.SaveResult(ctx, job, r, keep) })
}

func (v *view) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	return do(v.p, ctx, OpHistory, func(ctx context.Context) ([]backend.RunRecord, error) { return v.mem.History(ctx, job, limit) })
}

func (v *view) RecordClaim(ctx context.Context, in backend.ClaimInput) error {
	return do0(v.p, ctx, OpRecordClaim, func(ctx context.Context) error { return v.mem.RecordClaim(ctx, in) })
}

func (v *view) WriteRecords(ctx context.Context, job string, recs []backend.StoredResult, keep backend.Retention) error {
	return do0(v.p, ctx, OpWriteRecords, func(ctx context.Context) error { return v.mem.WriteRecords(ctx, job, recs, keep) })
}

func (v *view) RecordOnce(ctx context.Context, job string, rec backend.StoredResult, keep backend.Retention) (bool, error) {
	return do(v.p, ctx, OpRecordOnce, func(ctx context.Context) (bool, error) { return v.mem.RecordOnce(ctx, job, rec, keep) })
}

func (v *view) SetPause(ctx context.Context, p backend.Pause) error {
	return do0(v.p, ctx, OpSetPause, func(ctx context.Context) error { return v.mem.SetPause(ctx, p) })
}

func (v *view) ClearPause(ctx context.Context, job string) error {
	return do0(v.p, ctx, OpClearPause, func(ctx context.Context) error { return v.mem.ClearPause(ctx, job) })
}

func (v *view) Pauses(ctx context.Context) ([]backend.Pause, error) {
	return do(v.p, ctx, OpPauses, func(ctx context.Context) ([]backend.Pause, error) { return v.mem.Pauses(ctx) })
}

func (v *view) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	return v.p.watch(ctx, OpWatchPauses, func(ctx context.Context, deliver func(func())) error {
		return v.mem.WatchPauses(ctx, func(ps []backend.Pause) { deliver(func() { fn(ps) }) })
	})
}

func (v *view) CreateEntry(ctx context.Context, e backend.Entry) (uint64, error) {
	return do(v.p, ctx, OpCreateEntry, func(ctx context.Context) (uint64, error) { return v.mem.CreateEntry(ctx, e) })
}

func (v *view) UpdateEntry(ctx context.Context, e backend.Entry, rev uint64) (uint64, error) {
	return do(v.p, ctx, OpUpdateEntry, func(ctx context.Context) (uint64, error) { return v.mem.UpdateEntry(ctx, e, rev) })
}

func (v *view) DeleteEntry(ctx context.Context, job, id string, rev uint64) error {
	return do0(v.p, ctx, OpDeleteEntry, func(ctx context.Context) error { return v.mem.DeleteEntry(ctx, job, id, rev) })
}

func (v *view) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	return do(v.p, ctx, OpGetEntry, func(ctx context.Context) (backend.Entry, error) { return v.mem.GetEntry(ctx, job, id) })
}

func (v *view) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	return do(v.p, ctx, OpListEntries, func(ctx context.Context) ([]backend.Entry, error) {
		return v.mem.ListEntries(ctx, job, afterJob, afterID, limit)
	})
}

// WatchEntries is cut, like every watch of the process, when the process is
// killed or its replica partitioned: the scheduler then watches again and reads
// the entries anew.
func (v *view) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	return v.p.watch(ctx, OpWatchEntries, func(ctx context.Context, deliver func(func())) error {
		return v.mem.WatchEntries(ctx, func(c backend.EntryChange) { deliver(func() { fn(c) }) })
	})
}

func (v *view) PutCalendar(ctx context.Context, c backend.Calendar, rev uint64) (uint64, error) {
	return do(v.p, ctx, OpPutCalendar, func(ctx context.Context) (uint64, error) { return v.mem.PutCalendar(ctx, c, rev) })
}

func (v *view) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	return do0(v.p, ctx, OpDeleteCalendar, func(ctx context.Context) error { return v.mem.DeleteCalendar(ctx, name, rev) })
}

func (v *view) GetCalendar(ctx context.Context, name string) (backend.Calendar, error) {
	return do(v.p, ctx, OpGetCalendar, func(ctx context.Context) (backend.Calendar, error) { return v.mem.GetCalendar(ctx, name) })
}

func (v *view) Calendars(ctx context.Context) ([]backend.Calendar, error) {
	return do(v.p, ctx, OpCalendars, func(ctx context.Context) ([]backend.Calendar, error) { return v.mem.Calendars(ctx) })
}

// WatchCalendars is cut, like every watch of the process, when the process is
// killed or its replica partitioned: the scheduler then watches again.
func (v *view) WatchCalendars(ctx context.Context, fn func([]backend.Calendar)) error {
	return v.p.watch(ctx, OpWatchCalendars, func(ctx context.Context, deliver func(func())) error {
		return v.mem.WatchCalendars(ctx, func(all []backend.Calendar) { deliver(func() { fn(all) }) })
	})
}

func (v *view) Beat(ctx context.Context, m backend.Member, ttl time.Duration) error {
	return do0(v.p, ctx, OpBeat, func(ctx context.Context) error { return v.mem.Beat(ctx, m, ttl) })
}

func (v *view) Leave(ctx context.Context, instance string) error {
	return do0(v.p, ctx, OpLeave, func(ctx context.Context) error { return v.mem.Leave(ctx, instance) })
}

// WatchMembers is cut, like every watch of the process, when the process is
// killed or its replica partitioned: the scheduler then watches again.
func (v *view) WatchMembers(ctx context.Context, fn func([]backend.Member)) error {
	return v.p.watch(ctx, OpWatchMembers, func(ctx context.Context, deliver func(func())) error {
		return v.mem.WatchMembers(ctx, func(all []backend.Member) { deliver(func() { fn(all) }) })
	})
}

// Runs is the process's view of the shared run store.
func (v *view) Runs() backend.RunStore {
	return &runsView{p: v.p, rs: v.mem.Runs().(memRuns)}
}

// runsView is one process's view of the fleet's run store.
type runsView struct {
	p  *proc
	rs memRuns
}

func (r *runsView) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	return do(r.p, ctx, OpClaim, func(ctx context.Context) (backend.ClaimResult, error) { return r.rs.Claim(ctx, in) })
}

func (r *runsView) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	return do0(r.p, ctx, OpHeartbeat, func(ctx context.Context) error { return r.rs.Heartbeat(ctx, key, lease) })
}

func (r *runsView) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	return do0(r.p, ctx, OpFinish, func(ctx context.Context) error { return r.rs.Finish(ctx, key, status) })
}

func (r *runsView) Release(ctx context.Context, key backend.RunKey) error {
	return do0(r.p, ctx, OpRelease, func(ctx context.Context) error { return r.rs.Release(ctx, key) })
}

func (r *runsView) Settle(ctx context.Context, s backend.Settlement) error {
	return do0(r.p, ctx, OpSettle, func(ctx context.Context) error { return r.rs.Settle(ctx, s) })
}

func (r *runsView) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	return do0(r.p, ctx, OpRetry, func(ctx context.Context) error { return r.rs.Retry(ctx, key, delay, within) })
}

func (r *runsView) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	return do(r.p, ctx, OpActive, func(ctx context.Context) ([]backend.ActiveRun, error) { return r.rs.Active(ctx, job) })
}

func (r *runsView) ActiveJobs(ctx context.Context, jobs []string) (map[string][]backend.ActiveRun, error) {
	return do(r.p, ctx, OpActive, func(ctx context.Context) (map[string][]backend.ActiveRun, error) {
		return r.rs.ActiveJobs(ctx, jobs)
	})
}

func (r *runsView) EntryRunNames(ctx context.Context, jobs []string) ([]string, error) {
	return do(r.p, ctx, OpEntryRunNames, func(ctx context.Context) ([]string, error) { return r.rs.EntryRunNames(ctx, jobs) })
}

// WatchRun fails while the process is killed, frozen past its call or its
// replica partitioned; the scheduler then polls. A watch taken earlier is not
// cut: it tells of a change in the store, which a poll would find as well.
func (r *runsView) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	return do(r.p, ctx, OpWatchRun, func(ctx context.Context) (<-chan struct{}, error) {
		// The watch outlives the call: it ends with the caller's context,
		// not the call's.
		return r.rs.WatchRun(ctx, job, slot)
	})
}

func (r *runsView) CancelsOverlap() bool     { return r.rs.CancelsOverlap() }
func (r *runsView) BuffersOverlap() bool     { return r.rs.BuffersOverlap() }
func (r *runsView) CountsRuns() bool         { return r.rs.CountsRuns() }
func (r *runsView) CountsBufferedRuns() bool { return r.rs.CountsBufferedRuns() }
func (r *runsView) CapsConcurrency() bool    { return r.rs.CapsConcurrency() }

func (r *runsView) RunCount(ctx context.Context, job string) (int, error) {
	return do(r.p, ctx, OpRunCount, func(ctx context.Context) (int, error) { return r.rs.RunCount(ctx, job) })
}

// errorf wraps a fault's sentinel with the call it cut.
func errorf(sentinel error, p *proc, op Op) error {
	return fmt.Errorf("%w: %s %s", sentinel, p.r.name, op)
}
