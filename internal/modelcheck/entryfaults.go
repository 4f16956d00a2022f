package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// faultyEntries is in's view of a store that keeps schedule entries: its entry
// calls go through in's faults like the run store's, and its watch fails while in
// is dead and is cut now and then while it is flaky (the scheduler then reads the
// entries again).
type faultyEntries struct {
	*faultyBackend
	es backend.EntryStore
}

var _ backend.EntryStore = (*faultyEntries)(nil)

func (m *faultyEntries) CreateEntry(ctx context.Context, e backend.Entry) (uint64, error) {
	return do(m.in, ctx, "create-entry", e.RunName(), time.Time{}, func(ctx context.Context) (uint64, error) {
		return m.es.CreateEntry(ctx, e)
	}, func(sent time.Duration, rev uint64, err error, fault string) {
		e.Revision = rev
		m.in.h.rec.entryWritten(m.in.name, "create", e, 0, err, sent, fault)
	})
}

func (m *faultyEntries) UpdateEntry(ctx context.Context, e backend.Entry, base uint64) (uint64, error) {
	return do(m.in, ctx, "update-entry", e.RunName(), time.Time{}, func(ctx context.Context) (uint64, error) {
		return m.es.UpdateEntry(ctx, e, base)
	}, func(sent time.Duration, rev uint64, err error, fault string) {
		e.Revision = rev
		m.in.h.rec.entryWritten(m.in.name, "update", e, base, err, sent, fault)
	})
}

func (m *faultyEntries) DeleteEntry(ctx context.Context, job, id string, base uint64) error {
	_, err := do(m.in, ctx, "delete-entry", backend.EntryRunName(job, id), time.Time{}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.es.DeleteEntry(ctx, job, id, base)
	}, func(sent time.Duration, _ struct{}, err error, fault string) {
		m.in.h.rec.entryWritten(m.in.name, "delete", backend.Entry{Job: job, ID: id}, base, err, sent, fault)
	})
	return err
}

func (m *faultyEntries) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	return do(m.in, ctx, "get-entry", backend.EntryRunName(job, id), time.Time{}, func(ctx context.Context) (backend.Entry, error) {
		return m.es.GetEntry(ctx, job, id)
	}, func(time.Duration, backend.Entry, error, string) {})
}

func (m *faultyEntries) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	return do(m.in, ctx, "list-entries", job, time.Time{}, func(ctx context.Context) ([]backend.Entry, error) {
		return m.es.ListEntries(ctx, job, afterJob, afterID, limit)
	}, func(time.Duration, []backend.Entry, error, string) {})
}

// errWatchCut is the error of an entry watch the faults cut.
var errWatchCut = errors.New("modelcheck: entry watch cut")

// WatchEntries is the store's watch, recording what it delivers once the
// scheduler applied it. It cannot begin while in is dead or (at random) flaky,
// ends when in crashes, and is cut once in some of in's flaky windows.
func (m *faultyEntries) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	in := m.in
	rec := in.h.rec
	if in.dead.Load() {
		wait(ctx, in.h.w.Faults.CrashHang)
		rec.watchEnded(in, "crashed")
		return fmt.Errorf("%w: %s entry watch", ErrCrashed, in.name)
	}
	if f, d := in.decide("watch-entries", "", time.Time{}); f == lostAnswer || f == lostRequest {
		wait(ctx, d)
		rec.watchEnded(in, fmt.Sprintf("could not begin (failed after %v)", d))
		return fmt.Errorf("modelcheck: entry watch failed after %v", d)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		var cut <-chan time.Time
		if at := in.watchCut(); at > 0 {
			t := time.NewTimer(at - in.h.now())
			defer t.Stop()
			cut = t.C
		}
		select {
		case <-cut:
			cancel(errWatchCut)
		case <-in.crashed:
			cancel(ErrCrashed)
		case <-wctx.Done():
		}
	}()
	reading := map[string]bool{}
	err := m.es.WatchEntries(wctx, func(c backend.EntryChange) {
		fn(c)
		rec.entrySeen(in, c, reading)
	})
	switch cause := context.Cause(wctx); {
	case ctx.Err() != nil:
		rec.watchEnded(in, "stopped")
		return err
	case err == nil && cause != nil:
		err = fmt.Errorf("%w (%s)", cause, in.name)
	}
	rec.watchEnded(in, errText(err))
	return err
}

// watchCut is when (since t0) the entry watch in begins now is cut: at the
// start of an outage of the store, or at a time drawn from the seed in one of
// in's flaky windows still to come, with the window's probability; 0: never.
func (in *inst) watchCut() time.Duration {
	start := in.h.faultStart()
	if start < 0 {
		return 0
	}
	now := in.h.now()
	var first time.Duration
	for _, w := range in.h.plan.Outages {
		// The store restarts: every watch ends.
		if at := start + w.From; at > now && (first == 0 || at < first) {
			first = at
		}
	}
	for i, w := range in.h.plan.Flaky[in.slot] {
		x := Mix(in.h.plan.Seed, Str(in.name), 0x6375_74, uint64(i))
		if Unit(x) >= w.P {
			continue
		}
		at := start + w.From + time.Duration(Unit(Mix(x))*float64(w.To-w.From)).Round(time.Millisecond)
		if at > now && (first == 0 || at < first) {
			first = at
		}
	}
	return first
}
