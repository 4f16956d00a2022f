package scheduler_test

// The faulty view of the shared store that each model-check instance is given.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// mcBackend is one instance's view of the shared MemoryBackend: a Backend,
// ClaimRecorder and LeaseBackend whose calls go through the instance's faults.
type mcBackend struct {
	in *mcInst
	b  *scheduler.MemoryBackend
}

var (
	_ scheduler.Backend       = (*mcBackend)(nil)
	_ scheduler.ClaimRecorder = (*mcBackend)(nil)
	_ scheduler.LeaseBackend  = (*mcBackend)(nil)
	_ scheduler.RunStore      = (*mcRuns)(nil)
	_ scheduler.LeaseWatcher  = (*mcRuns)(nil)
)

func (m *mcBackend) Name() string                    { return m.b.Name() }
func (m *mcBackend) DedupeWindow() time.Duration     { return m.b.DedupeWindow() }
func (m *mcBackend) Init(ctx context.Context) error  { return m.b.Init(ctx) }
func (m *mcBackend) Close(ctx context.Context) error { return m.b.Close(ctx) }
func (m *mcBackend) Runs() scheduler.RunStore        { return &mcRuns{in: m.in, s: m.b.Runs()} }
func (m *mcBackend) PrepareJob(ctx context.Context, j scheduler.JobLimits) error {
	return m.b.PrepareJob(ctx, j)
}

func (m *mcBackend) History(ctx context.Context, job string, limit int) ([]scheduler.RunRecord, error) {
	return m.b.History(ctx, job, limit)
}

func (m *mcBackend) Claim(ctx context.Context, in scheduler.ClaimInput) (bool, error) {
	return mcDo(m.in, ctx, "history-claim", in.Job, in.Slot, func(ctx context.Context) (bool, error) {
		return m.b.Claim(ctx, in)
	}, func(won bool, err error, fault string) {
		m.in.h.rec.slotLog(m.in, in.Job, in.Slot, "history claim tok=%s (to record a slot that did not run) → won=%v %v%s", mcTok(in.Token), won, errText(err), fault)
	})
}

func (m *mcBackend) RecordClaim(ctx context.Context, in scheduler.ClaimInput) error {
	_, err := mcDo(m.in, ctx, "record-claim", in.Job, in.Slot, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.b.RecordClaim(ctx, in)
	}, func(_ struct{}, err error, fault string) {
		m.in.h.rec.slotLog(m.in, in.Job, in.Slot, "history record-claim tok=%s attempt=%d → %v%s", mcTok(in.Token), in.Attempt, errText(err), fault)
	})
	return err
}

func (m *mcBackend) RecordManualRun(ctx context.Context, in scheduler.ClaimInput) (time.Time, error) {
	return mcDo(m.in, ctx, "manual-run", in.Job, in.Slot, func(ctx context.Context) (time.Time, error) {
		return m.b.RecordManualRun(ctx, in)
	}, func(_ time.Time, err error, fault string) {
		m.in.h.rec.slotLog(m.in, in.Job, time.Time{}, "history manual run tok=%s → %v%s", mcTok(in.Token), errText(err), fault)
	})
}

func (m *mcBackend) SaveResult(ctx context.Context, job string, r scheduler.StoredResult, keep scheduler.Retention) error {
	_, err := mcDo(m.in, ctx, "save", job, r.Slot, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.b.SaveResult(ctx, job, r, keep)
	}, func(_ struct{}, err error, fault string) {
		m.in.h.rec.saveApplied(m.in, job, r, err, fault)
	})
	return err
}

// mcRuns is one instance's view of the shared MemoryRunStore.
type mcRuns struct {
	in *mcInst
	s  scheduler.RunStore
}

func (r *mcRuns) Claim(ctx context.Context, rc scheduler.RunClaim) (scheduler.ClaimResult, error) {
	return mcDo(r.in, ctx, "claim", rc.Job, rc.Slot, func(ctx context.Context) (scheduler.ClaimResult, error) {
		return r.s.Claim(ctx, rc)
	}, func(res scheduler.ClaimResult, err error, fault string) {
		r.in.h.rec.claimApplied(r.in, rc, res, err, fault)
	})
}

func (r *mcRuns) Heartbeat(ctx context.Context, job string, slot time.Time, token string, lease time.Duration) error {
	_, err := mcDo(r.in, ctx, "heartbeat", job, slot, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.s.Heartbeat(ctx, job, slot, token, lease)
	}, func(_ struct{}, err error, fault string) {
		r.in.h.rec.heartbeatApplied(r.in, job, slot, token, lease, err, fault)
	})
	return err
}

func (r *mcRuns) Finish(ctx context.Context, job string, slot time.Time, token string, status scheduler.Status) error {
	_, err := mcDo(r.in, ctx, "finish", job, slot, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.s.Finish(ctx, job, slot, token, status)
	}, func(_ struct{}, err error, fault string) {
		r.in.h.rec.finishApplied(r.in, job, slot, token, status, err, fault)
	})
	return err
}

func (r *mcRuns) Release(ctx context.Context, job string, slot time.Time, token string) error {
	_, err := mcDo(r.in, ctx, "release", job, slot, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, r.s.Release(ctx, job, slot, token)
	}, func(_ struct{}, err error, fault string) {
		r.in.h.rec.releaseApplied(r.in, job, slot, token, err, fault)
	})
	return err
}

func (r *mcRuns) Active(ctx context.Context, job string) ([]scheduler.ActiveRun, error) {
	return mcDo(r.in, ctx, "active", job, time.Time{}, func(ctx context.Context) ([]scheduler.ActiveRun, error) {
		return r.s.Active(ctx, job)
	}, func(runs []scheduler.ActiveRun, err error, fault string) {
		r.in.h.rec.slotLog(r.in, job, time.Time{}, "store active → %d runs %v%s", len(runs), errText(err), fault)
	})
}

// WatchRun fails while the instance is dead or, at random, while it is flaky; the
// scheduler then polls.
func (r *mcRuns) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	w, ok := r.s.(scheduler.LeaseWatcher)
	if !ok {
		return nil, errors.New("modelcheck: the store cannot watch")
	}
	if r.in.dead.Load() {
		return nil, fmt.Errorf("%w: %s watch", errMCCrashed, r.in.name)
	}
	if f, _ := r.in.decide("watch", job, slot); f != mcNoFault {
		return nil, errors.New("modelcheck: watch failed")
	}
	return w.WatchRun(ctx, job, slot)
}

// ---- faults ----

var errMCCrashed = errors.New("modelcheck: instance crashed")

type mcFault int

const (
	mcNoFault mcFault = iota
	// mcLostAnswer: the store applies the call; the caller waits, then gets an error.
	mcLostAnswer
	// mcLostRequest: the store never sees the call; the caller waits, then gets an error.
	mcLostRequest
	// mcSlow: the request reaches the store late (if the caller still waits).
	mcSlow
)

// decide draws the fault for one call from the seed, the instance, the call and how
// many such calls the instance made, so that the same run of a seed draws the same
// faults whatever the goroutines' order.
func (in *mcInst) decide(op, job string, slot time.Time) (mcFault, time.Duration) {
	now := in.h.now()
	var p float64
	if start := in.h.faultStart(); start >= 0 {
		for _, w := range in.h.plan.flaky[in.slot] {
			if now >= start+w.from && now < start+w.to {
				p = max(p, w.p)
			}
		}
	}
	if p == 0 {
		return mcNoFault, 0
	}
	k := op + "\x00" + job + "\x00" + slot.String()
	in.callMu.Lock()
	n := in.calls[k]
	in.calls[k] = n + 1
	in.callMu.Unlock()
	x := mcMix(in.h.plan.seed, mcStr(in.name), mcStr(k), n)
	u, u2 := mcUnit(x), mcUnit(mcMix(x))
	switch {
	case u < p*0.6:
		return mcLostAnswer, 50*time.Millisecond + time.Duration(u2*float64(1450*time.Millisecond)).Round(time.Millisecond)
	case u < p*0.8:
		return mcLostRequest, 50*time.Millisecond + time.Duration(u2*float64(1450*time.Millisecond)).Round(time.Millisecond)
	case u < p:
		return mcSlow, time.Duration(u2 * float64(400*time.Millisecond)).Round(time.Millisecond)
	}
	return mcNoFault, 0
}

// mcWait waits d or until ctx ends; true if the whole d passed.
func mcWait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// mcDo runs one store call of in through its faults. apply is the real call;
// observe records what the store applied, and is not called when the store never
// saw the call.
func mcDo[T any](in *mcInst, ctx context.Context, op, job string, slot time.Time, apply func(context.Context) (T, error), observe func(T, error, string)) (T, error) {
	var zero T
	if in.dead.Load() {
		// A dead process: the call hangs until the caller gives up.
		mcWait(ctx, 30*time.Second)
		return zero, fmt.Errorf("%w: %s %s", errMCCrashed, in.name, op)
	}
	if op == "heartbeat" {
		if until := in.paused(); until > in.h.now() {
			in.h.rec.slotLog(in, job, slot, "heartbeat held by a pause until +%v", until.Round(time.Millisecond))
			if !mcWait(ctx, until-in.h.now()) {
				return zero, fmt.Errorf("modelcheck: %s paused, heartbeat not sent: %w", in.name, ctx.Err())
			}
		}
	}
	fault, d := in.decide(op, job, slot)
	switch fault {
	case mcLostRequest:
		in.h.rec.slotLog(in, job, slot, "%s REQUEST LOST (the store never sees it; error after %v)", op, d)
		if !mcWait(ctx, d) {
			return zero, fmt.Errorf("modelcheck: %s request lost: %w", op, ctx.Err())
		}
		return zero, fmt.Errorf("modelcheck: %s request lost, no answer in %v", op, d)
	case mcSlow:
		if !mcWait(ctx, d) {
			in.h.rec.slotLog(in, job, slot, "%s slow request abandoned by the caller before it reached the store", op)
			return zero, fmt.Errorf("modelcheck: %s slow: %w", op, ctx.Err())
		}
	}
	v, err := apply(ctx)
	note := ""
	switch fault {
	case mcLostAnswer:
		note = fmt.Sprintf(" — ANSWER LOST (caller gets an error after %v)", d)
	case mcSlow:
		note = fmt.Sprintf(" (request delayed %v)", d)
	}
	observe(v, err, note)
	if fault == mcLostAnswer {
		if !mcWait(ctx, d) {
			return zero, fmt.Errorf("modelcheck: %s answer lost: %w", op, ctx.Err())
		}
		return zero, fmt.Errorf("modelcheck: %s answer lost, no answer in %v", op, d)
	}
	return v, err
}
