package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// ErrCrashed is the error of every store call of a crashed instance.
var ErrCrashed = errors.New("modelcheck: instance crashed")

// errCutMidCall marks the error of a store call during which its process
// died: the store may have applied part of it, which it completes itself.
var errCutMidCall = errors.New("modelcheck: the process died during the call")

// faulty is in's view of its store: a Backend and LeaseBackend whose store
// calls go through in's faults. It has the store's JobWindower, JobChecker,
// ClaimRecorder and RecordDecider, or does what the scheduler does without
// them. It is an EntryStore when the store is one.
func faulty(in *inst, s Store) backend.Backend {
	b := &faultyBackend{in: in, b: s}
	if es, ok := s.(backend.EntryStore); ok {
		return &faultyEntries{faultyBackend: b, es: es}
	}
	return b
}

type faultyBackend struct {
	in *inst
	b  Store
}

var (
	_ backend.Pauser             = (*faultyBackend)(nil)
	_ backend.CalendarStore      = (*faultyBackend)(nil)
	_ backend.Membership         = (*faultyBackend)(nil)
	_ backend.Backend            = (*faultyBackend)(nil)
	_ backend.ClaimRecorder      = (*faultyBackend)(nil)
	_ backend.RecordDecider      = (*faultyBackend)(nil)
	_ backend.LeaseBackend       = (*faultyBackend)(nil)
	_ backend.RunStore           = (*faultyRuns)(nil)
	_ backend.LeaseWatcher       = (*faultyRuns)(nil)
	_ backend.ActiveLister       = (*faultyRuns)(nil)
	_ backend.EntryRunLister     = (*faultyRuns)(nil)
	_ backend.OverlapCanceller   = (*faultyRuns)(nil)
	_ backend.OverlapBufferer    = (*faultyRuns)(nil)
	_ backend.ConcurrencyCapper  = (*faultyRuns)(nil)
	_ backend.RunCounter         = (*faultyRuns)(nil)
	_ backend.BufferedRunCounter = (*faultyRuns)(nil)
	_ backend.Retrier            = (*faultyRetrier)(nil)
	_ backend.Settler            = (*faultySettler)(nil)
	_ backend.Retrier            = (*faultySettlerRetrier)(nil)
	_ backend.Settler            = (*faultySettlerRetrier)(nil)
	_ backend.JobWindower        = (*faultyBackend)(nil)
	_ backend.JobChecker         = (*faultyBackend)(nil)
)

func (m *faultyBackend) Name() string                    { return m.b.Name() }
func (m *faultyBackend) DedupeWindow() time.Duration     { return m.b.DedupeWindow() }
func (m *faultyBackend) Init(ctx context.Context) error  { return m.b.Init(ctx) }
func (m *faultyBackend) Close(ctx context.Context) error { return m.b.Close(ctx) }

// Runs is in's faulty view of the run store: a backend.Retrier and a
// backend.Settler when the store is (the scheduler refuses retry policies
// without the one, and drives the store through Finish, Release and Retry
// without the other).
func (m *faultyBackend) Runs() backend.RunStore {
	r := &faultyRuns{in: m.in, s: m.b.Runs()}
	rt, retrier := r.s.(backend.Retrier)
	st, settler := r.s.(backend.Settler)
	switch {
	case retrier && settler:
		return &faultySettlerRetrier{faultySettler: &faultySettler{faultyRuns: r, st: st}, rt: rt}
	case settler:
		return &faultySettler{faultyRuns: r, st: st}
	case retrier:
		return &faultyRetrier{faultyRuns: r, rt: rt}
	}
	return r
}

// WindowFor is the store's (backend.JobWindower), else its DedupeWindow: what
// the scheduler uses without it.
func (m *faultyBackend) WindowFor(j backend.JobLimits) time.Duration {
	if w, ok := m.b.(backend.JobWindower); ok {
		return w.WindowFor(j)
	}
	return m.b.DedupeWindow()
}

// CheckJob is the store's (backend.JobChecker), else accepts every job.
func (m *faultyBackend) CheckJob(j backend.JobLimits) error {
	if c, ok := m.b.(backend.JobChecker); ok {
		return c.CheckJob(j)
	}
	return nil
}

func (m *faultyBackend) PrepareJob(ctx context.Context, j backend.JobLimits) error {
	return m.b.PrepareJob(ctx, j)
}

// The pauses are stored and watched through the store as they are; a failed
// Finish of a paused slot is a fault of the run store's calls like any other.
func (m *faultyBackend) SetPause(ctx context.Context, p backend.Pause) error {
	return m.b.SetPause(ctx, p)
}
func (m *faultyBackend) ClearPause(ctx context.Context, job string) error {
	return m.b.ClearPause(ctx, job)
}
func (m *faultyBackend) Pauses(ctx context.Context) ([]backend.Pause, error) {
	return m.b.Pauses(ctx)
}
func (m *faultyBackend) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	return m.b.WatchPauses(ctx, fn)
}

// The calendars are stored and watched through the store as they are.
func (m *faultyBackend) calendars() (backend.CalendarStore, error) {
	cs, ok := m.b.(backend.CalendarStore)
	if !ok {
		return nil, backend.ErrCalendarsNotSupported
	}
	return cs, nil
}
func (m *faultyBackend) PutCalendar(ctx context.Context, c backend.Calendar, rev uint64) (uint64, error) {
	cs, err := m.calendars()
	if err != nil {
		return 0, err
	}
	return cs.PutCalendar(ctx, c, rev)
}
func (m *faultyBackend) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	cs, err := m.calendars()
	if err != nil {
		return err
	}
	return cs.DeleteCalendar(ctx, name, rev)
}
func (m *faultyBackend) GetCalendar(ctx context.Context, name string) (backend.Calendar, error) {
	cs, err := m.calendars()
	if err != nil {
		return backend.Calendar{}, err
	}
	return cs.GetCalendar(ctx, name)
}
func (m *faultyBackend) Calendars(ctx context.Context) ([]backend.Calendar, error) {
	cs, err := m.calendars()
	if err != nil {
		return nil, err
	}
	return cs.Calendars(ctx)
}
func (m *faultyBackend) WatchCalendars(ctx context.Context, fn func([]backend.Calendar)) error {
	cs, err := m.calendars()
	if err != nil {
		return err
	}
	return cs.WatchCalendars(ctx, fn)
}

// A beat is a store call like any other: a dead or frozen process sends none,
// and one may be lost or answered late. Leave and the watch go to the store as
// they are.
func (m *faultyBackend) members() (backend.Membership, error) {
	ms, ok := m.b.(backend.Membership)
	if !ok {
		return nil, backend.ErrMembershipNotSupported
	}
	return ms, nil
}
func (m *faultyBackend) Beat(ctx context.Context, mem backend.Member, ttl time.Duration) error {
	ms, err := m.members()
	if err != nil {
		return err
	}
	_, err = do(m.in, ctx, storeCall{op: "beat"}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, ms.Beat(ctx, mem, ttl)
	}, func(time.Duration, struct{}, error, string) {})
	return err
}
func (m *faultyBackend) Leave(ctx context.Context, instance string) error {
	ms, err := m.members()
	if err != nil {
		return err
	}
	return ms.Leave(ctx, instance)
}
func (m *faultyBackend) WatchMembers(ctx context.Context, fn func([]backend.Member)) error {
	ms, err := m.members()
	if err != nil {
		return err
	}
	return ms.WatchMembers(ctx, fn)
}

func (m *faultyBackend) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	return m.b.History(ctx, job, limit)
}

func (m *faultyBackend) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	won, err := do(m.in, ctx, storeCall{"history-claim", in.Job, in.Slot}, func(ctx context.Context) (bool, error) {
		return m.b.Claim(ctx, in)
	}, func(_ time.Duration, won bool, err error, fault string) {
		m.in.h.rec.slotLog(m.in, in.Job, in.Slot, "history claim tok=%s (to record a slot that did not run) → won=%v %v%s", tok(in.Token), won, errText(err), fault)
	})
	m.in.h.rec.writeCalled(m.in, "history-claim", backend.RunKey{Job: in.Job, Slot: in.Slot, Token: in.Token}, "", err)
	return won, err
}

// RecordClaim is the store's (backend.ClaimRecorder) through the faults; a
// store that records no claim is told nothing (RecordDecides is false for it).
func (m *faultyBackend) RecordClaim(ctx context.Context, in backend.ClaimInput) error {
	rec, ok := m.b.(backend.ClaimRecorder)
	if !ok {
		return nil
	}
	_, err := do(m.in, ctx, storeCall{"record-claim", in.Job, in.Slot}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, rec.RecordClaim(ctx, in)
	}, func(_ time.Duration, _ struct{}, err error, fault string) {
		m.in.h.rec.slotLog(m.in, in.Job, in.Slot, "history record-claim tok=%s attempt=%d → %v%s", tok(in.Token), in.Attempt, errText(err), fault)
	})
	return err
}

// RecordDecides is the store's (backend.RecordDecider); a ClaimRecorder without
// it decides, and a store that records no claim does not.
func (m *faultyBackend) RecordDecides(job string) bool {
	if _, ok := m.b.(backend.ClaimRecorder); !ok {
		return false
	}
	d, ok := m.b.(backend.RecordDecider)
	return !ok || d.RecordDecides(job)
}

func (m *faultyBackend) RecordManualRun(ctx context.Context, in backend.ClaimInput) (time.Time, error) {
	return do(m.in, ctx, storeCall{"manual-run", in.Job, in.Slot}, func(ctx context.Context) (time.Time, error) {
		return m.b.RecordManualRun(ctx, in)
	}, func(_ time.Duration, _ time.Time, err error, fault string) {
		m.in.h.rec.slotLog(m.in, in.Job, time.Time{}, "history manual run tok=%s → %v%s", tok(in.Token), errText(err), fault)
	})
}

// RecordOnce is the store's (backend.OnceRecorder) through the faults; a store
// without it is asked as the scheduler asks one: SaveResult, told it stored.
func (m *faultyBackend) RecordOnce(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) (bool, error) {
	once, ok := m.b.(backend.OnceRecorder)
	first, err := do(m.in, ctx, storeCall{"record-once", job, r.Slot}, func(ctx context.Context) (bool, error) {
		if !ok {
			return true, m.b.SaveResult(ctx, job, r, keep)
		}
		return once.RecordOnce(ctx, job, r, keep)
	}, func(_ time.Duration, first bool, err error, fault string) {
		m.in.h.rec.slotLog(m.in, job, r.Slot, "history record-once %s tok=%s → first=%v %v%s", r.Status, tok(r.Token), first, errText(err), fault)
	})
	return first, err
}

func (m *faultyBackend) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	_, err := do(m.in, ctx, storeCall{"save", job, r.Slot}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.b.SaveResult(ctx, job, r, keep)
	}, func(_ time.Duration, _ struct{}, err error, fault string) {
		m.in.h.rec.saveApplied(m.in, job, r, err, fault)
	})
	m.in.h.rec.writeCalled(m.in, "save", backend.RunKey{Job: job, Slot: r.Slot, Token: r.Token}, r.Status, err)
	return err
}

// faultyRuns is in's view of the shared RunStore.
type faultyRuns struct {
	in *inst
	s  backend.RunStore
}

func (r *faultyRuns) Claim(ctx context.Context, rc backend.RunClaim) (backend.ClaimResult, error) {
	return do(r.in, ctx, storeCall{"claim", rc.Job, rc.Slot}, func(ctx context.Context) (backend.ClaimResult, error) {
		return r.s.Claim(ctx, rc)
	}, func(sent time.Duration, res backend.ClaimResult, err error, fault string) {
		r.in.h.rec.claimApplied(r.in, rc, res, answer{err, sent, fault})
	})
}

func (r *faultyRuns) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	_, err := do(r.in, ctx, storeCall{"heartbeat", key.Job, key.Slot}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.s.Heartbeat(ctx, key, lease)
	}, func(sent time.Duration, _ struct{}, err error, fault string) {
		r.in.h.rec.heartbeatApplied(r.in, key, lease, answer{err, sent, fault})
	})
	return err
}

func (r *faultyRuns) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	_, err := do(r.in, ctx, storeCall{"finish", key.Job, key.Slot}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.s.Finish(ctx, key, status)
	}, func(sent time.Duration, _ struct{}, err error, fault string) {
		r.in.h.rec.endApplied(r.in, "finish", key, status, answer{err, sent, fault})
	})
	return err
}

func (r *faultyRuns) Release(ctx context.Context, key backend.RunKey) error {
	_, err := do(r.in, ctx, storeCall{"release", key.Job, key.Slot}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.s.Release(ctx, key)
	}, func(sent time.Duration, _ struct{}, err error, fault string) {
		r.in.h.rec.endApplied(r.in, "release", key, "", answer{err, sent, fault})
	})
	return err
}

// faultyRetrier is in's view of a RunStore that is a backend.Retrier.
type faultyRetrier struct {
	*faultyRuns
	rt backend.Retrier
}

// Retry goes through in's faults like Finish and Release.
func (r *faultyRetrier) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	return r.retry(ctx, r.rt, key, delay, within)
}

func (r *faultyRuns) retry(ctx context.Context, rt backend.Retrier, key backend.RunKey, delay, within time.Duration) error {
	call := r.in.h.now()
	_, err := do(r.in, ctx, storeCall{"retry", key.Job, key.Slot}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, rt.Retry(ctx, key, delay, within)
	}, func(sent time.Duration, _ struct{}, err error, fault string) {
		stored := err == nil && r.retryStored(ctx, key)
		r.in.h.rec.retryApplied(r.in, key, backend.RetryWindow{Delay: delay, Within: within}, settleSeen{err: err, call: call, sent: sent, retryStored: stored}, fault)
	})
	return err
}

// faultySettler is in's view of a RunStore that is a backend.Settler.
type faultySettler struct {
	*faultyRuns
	st backend.Settler
}

// Settle goes through in's faults like the calls it replaces (Finish, Release,
// Retry). A retry the store answered is looked up at once (Active, without
// faults): the machine finishes a run instead of storing its retry when a
// later slot asked it to end or its entry is gone.
func (r *faultySettler) Settle(ctx context.Context, s backend.Settlement) error {
	call := r.in.h.now()
	_, err := do(r.in, ctx, storeCall{"settle", s.Key.Job, s.Key.Slot}, func(ctx context.Context) (struct{}, error) {
		err := r.st.Settle(ctx, s)
		return struct{}{}, err
	}, func(sent time.Duration, _ struct{}, err error, fault string) {
		stored := false
		if err == nil && s.Retry != nil {
			stored = r.retryStored(ctx, s.Key)
		}
		r.in.h.rec.settleApplied(r.in, s, settleSeen{err: err, call: call, sent: sent, retryStored: stored}, fault)
	})
	r.in.h.rec.writeCalled(r.in, "settle", s.Key, s.Status, settledFor(err))
	return err
}

// retryStored reports whether the store keeps key's slot unfinished after a
// retry was asked for it: the retry is stored (or already taken).
func (r *faultyRuns) retryStored(ctx context.Context, key backend.RunKey) bool {
	active, err := r.s.Active(context.WithoutCancel(ctx), key.Job)
	if err != nil {
		return true // cannot say: the next grant tells (Check)
	}
	for _, a := range active {
		if a.Slot.Equal(key.Slot) {
			return !a.RetryAt.IsZero() || a.Token != key.Token
		}
	}
	return false
}

// settledFor is err as the writer of a settle sees it: a stale token is an
// attempt another took over, which recorded it; nothing to write again.
func settledFor(err error) error {
	if errors.Is(err, backend.ErrStaleToken) || errors.Is(err, backend.ErrLeaseLost) {
		return nil
	}
	return err
}

// faultySettlerRetrier is in's view of a RunStore that is a backend.Settler
// and a backend.Retrier.
type faultySettlerRetrier struct {
	*faultySettler
	rt backend.Retrier
}

// Retry goes through in's faults like Finish and Release.
func (r *faultySettlerRetrier) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	return r.retry(ctx, r.rt, key, delay, within)
}

func (r *faultyRuns) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	return do(r.in, ctx, storeCall{op: "active", job: job}, func(ctx context.Context) ([]backend.ActiveRun, error) {
		return r.s.Active(ctx, job)
	}, func(_ time.Duration, runs []backend.ActiveRun, err error, fault string) {
		r.in.h.rec.slotLog(r.in, job, time.Time{}, "store active → %d runs %v%s", len(runs), errText(err), fault)
	})
}

// ActiveJobs goes through in's faults as one call: the store's own ActiveJobs when
// it is a backend.ActiveLister, else its Active job by job.
func (r *faultyRuns) ActiveJobs(ctx context.Context, jobs []string) (map[string][]backend.ActiveRun, error) {
	return do(r.in, ctx, storeCall{op: "active"}, func(ctx context.Context) (map[string][]backend.ActiveRun, error) {
		if l, ok := r.s.(backend.ActiveLister); ok {
			return l.ActiveJobs(ctx, jobs)
		}
		out := make(map[string][]backend.ActiveRun, len(jobs))
		for _, job := range jobs {
			runs, err := r.s.Active(ctx, job)
			if err != nil {
				return out, err
			}
			out[job] = runs
		}
		return out, nil
	}, func(_ time.Duration, active map[string][]backend.ActiveRun, err error, fault string) {
		for _, job := range jobs {
			r.in.h.rec.slotLog(r.in, job, time.Time{}, "store active of %d jobs → %d runs %v%s", len(jobs), len(active[job]), errText(err), fault)
		}
	})
}

// EntryRunNames goes through in's faults as one call: the store's own when it is
// a backend.EntryRunLister; a store that is not one lists nothing, and the
// scheduler finds what it would without the capability.
func (r *faultyRuns) EntryRunNames(ctx context.Context, jobs []string) ([]string, error) {
	return do(r.in, ctx, storeCall{op: "entry-run-names"}, func(ctx context.Context) ([]string, error) {
		if l, ok := r.s.(backend.EntryRunLister); ok {
			return l.EntryRunNames(ctx, jobs)
		}
		return nil, nil
	}, func(_ time.Duration, names []string, err error, fault string) {
		r.in.h.rec.instLog(r.in, "store entry run names of %d jobs → %q %v%s", len(jobs), names, errText(err), fault)
	})
}

// WatchRun fails while the instance is dead or, at random, while it is flaky; the
// scheduler then polls.
func (r *faultyRuns) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	w, ok := r.s.(backend.LeaseWatcher)
	if !ok {
		return nil, errors.New("modelcheck: the store cannot watch")
	}
	if r.in.dead.Load() {
		return nil, fmt.Errorf("%w: %s watch", ErrCrashed, r.in.name)
	}
	if f, _ := r.in.decide("watch", job, slot); f != noFault {
		return nil, errors.New("modelcheck: watch failed")
	}
	return w.WatchRun(ctx, job, slot)
}

// ---- faults ----

type fault int

const (
	noFault fault = iota
	// lostAnswer: the store applies the call; the caller waits, then gets an error.
	lostAnswer
	// lostRequest: the store never sees the call; the caller waits, then gets an error.
	lostRequest
	// slow: the request reaches the store late (if the caller still waits).
	slow
)

// decide draws the fault for one call from the seed, the instance, the call and how
// many such calls the instance made, so that the same run of a seed draws the same
// faults whatever the goroutines' order.
func (in *inst) decide(op, job string, slot time.Time) (fault, time.Duration) {
	now := in.h.now()
	var p float64
	down := in.h.storeDown(now)
	if start := in.h.faultStart(); start >= 0 {
		for _, w := range in.h.plan.Flaky[in.slot] {
			if now >= start+w.From && now < start+w.To {
				p = max(p, w.P)
			}
		}
	}
	if p == 0 && !down {
		return noFault, 0
	}
	k := op + "\x00" + job + "\x00" + slot.String()
	in.callMu.Lock()
	n := in.calls[k]
	in.calls[k] = n + 1
	in.callMu.Unlock()
	x := Mix(in.h.plan.Seed, Str(in.name), Str(k), n)
	u, u2 := Unit(x), Unit(Mix(x))
	f := in.h.w.Faults
	switch {
	case down && u < 0.3:
		// Applied as the server went down: its answer never comes.
		return lostAnswer, f.LostMin + time.Duration(u2*float64(f.LostSpread)).Round(time.Millisecond)
	case down:
		return lostRequest, f.LostMin + time.Duration(u2*float64(f.LostSpread)).Round(time.Millisecond)
	case u < p*0.6:
		return lostAnswer, f.LostMin + time.Duration(u2*float64(f.LostSpread)).Round(time.Millisecond)
	case u < p*0.8:
		return lostRequest, f.LostMin + time.Duration(u2*float64(f.LostSpread)).Round(time.Millisecond)
	case u < p:
		return slow, time.Duration(u2 * float64(f.SlowMax)).Round(time.Millisecond)
	}
	return noFault, 0
}

// storeDown reports whether the store is down at now (since t0): in one of
// the plan's outages.
func (h *Harness) storeDown(now time.Duration) bool {
	start := h.faultStart()
	if start < 0 {
		return false
	}
	for _, w := range h.plan.Outages {
		if now >= start+w.From && now < start+w.To {
			return true
		}
	}
	return false
}

// wait waits d or until ctx ends; true if the whole d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// A storeCall is one call of an instance's store as its faults see it: the
// operation, and the job and slot it is about (zero when none).
type storeCall struct {
	op   string
	job  string
	slot time.Time
}

// do runs one store call c of in through its faults. apply is the real call;
// observe records what the store answered, with when the call was sent, and is not
// called when the store never saw the call.
func do[T any](in *inst, ctx context.Context, c storeCall, apply func(context.Context) (T, error), observe func(sent time.Duration, v T, err error, fault string)) (T, error) {
	var zero T
	rec := in.h.rec
	defer in.waitThaw() // a frozen process reads no answer, not even an error
	if in.dead.Load() {
		// A dead process: the call hangs until the caller gives up.
		wait(ctx, in.h.w.Faults.CrashHang)
		return zero, fmt.Errorf("%w: %s %s", ErrCrashed, in.name, c.op)
	}
	in.waitThaw() // a frozen process sends nothing
	if in.dead.Load() {
		return zero, fmt.Errorf("%w: %s %s", ErrCrashed, in.name, c.op)
	}
	if c.op == "heartbeat" {
		if until := in.paused(); until > in.h.now() {
			rec.slotLog(in, c.job, c.slot, "heartbeat held by a pause until +%v", until.Round(time.Millisecond))
			if !wait(ctx, until-in.h.now()) {
				return zero, fmt.Errorf("modelcheck: %s paused, heartbeat not sent: %w", in.name, ctx.Err())
			}
		}
	}
	f, d := in.decide(c.op, c.job, c.slot)
	if f != noFault {
		rec.faultHit(c.job, f.name())
	}
	switch f {
	case lostRequest:
		rec.slotLog(in, c.job, c.slot, "%s REQUEST LOST (the store never sees it; error after %v)", c.op, d)
		if !wait(ctx, d) {
			return zero, fmt.Errorf("modelcheck: %s request lost: %w", c.op, ctx.Err())
		}
		return zero, fmt.Errorf("modelcheck: %s request lost, no answer in %v", c.op, d)
	case slow:
		if !wait(ctx, d) {
			rec.slotLog(in, c.job, c.slot, "%s slow request abandoned by the caller before it reached the store", c.op)
			return zero, fmt.Errorf("modelcheck: %s slow: %w", c.op, ctx.Err())
		}
	}
	sent := in.h.now()
	v, err := apply(ctx)
	if err != nil && (in.dead.Load() || in.cut.Load()) {
		// The process died during the call, maybe between two of the
		// store's writes (World.CrashBetweenWrites): some may be applied.
		err = fmt.Errorf("%w: %w", errCutMidCall, err)
	}
	note := ""
	switch f {
	case lostAnswer:
		note = fmt.Sprintf(" — ANSWER LOST (caller gets an error after %v)", d)
	case slow:
		note = fmt.Sprintf(" (request delayed %v)", d)
	}
	observe(sent, v, err, note)
	if f == lostAnswer {
		if !wait(ctx, d) {
			return zero, fmt.Errorf("modelcheck: %s answer lost: %w", c.op, ctx.Err())
		}
		return zero, fmt.Errorf("modelcheck: %s answer lost, no answer in %v", c.op, d)
	}
	return v, err
}

// BuffersOverlap is the store's (backend.OverlapBufferer): the view adds no
// capability.
func (r *faultyRuns) BuffersOverlap() bool {
	b, ok := r.s.(backend.OverlapBufferer)
	return ok && b.BuffersOverlap()
}

// CapsConcurrency is the store's (backend.ConcurrencyCapper): the view adds
// no capability.
func (r *faultyRuns) CapsConcurrency() bool {
	c, ok := r.s.(backend.ConcurrencyCapper)
	return ok && c.CapsConcurrency()
}

// CancelsOverlap is the store's (backend.OverlapCanceller): the view adds no
// capability.
func (r *faultyRuns) CancelsOverlap() bool {
	c, ok := r.s.(backend.OverlapCanceller)
	return ok && c.CancelsOverlap()
}

// CountsRuns is the store's (backend.RunCounter): the view adds no behaviour of
// its own, only faults.
func (r *faultyRuns) CountsRuns() bool {
	c, ok := r.s.(backend.RunCounter)
	return ok && c.CountsRuns()
}

// CountsBufferedRuns is the store's (backend.BufferedRunCounter).
func (r *faultyRuns) CountsBufferedRuns() bool {
	c, ok := r.s.(backend.BufferedRunCounter)
	return ok && c.CountsBufferedRuns()
}
