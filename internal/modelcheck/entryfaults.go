package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
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
	return do(m.in, ctx, storeCall{op: "create-entry", job: e.RunName()}, func(ctx context.Context) (uint64, error) {
		return m.es.CreateEntry(ctx, e)
	}, func(sent time.Duration, rev uint64, err error, fault string) {
		e.Revision = rev
		m.in.h.rec.entryWritten(entryWrite{inst: m.in.name, op: "create", e: e, err: err, sent: sent}, fault)
	})
}

func (m *faultyEntries) UpdateEntry(ctx context.Context, e backend.Entry, base uint64) (uint64, error) {
	return do(m.in, ctx, storeCall{op: "update-entry", job: e.RunName()}, func(ctx context.Context) (uint64, error) {
		return m.es.UpdateEntry(ctx, e, base)
	}, func(sent time.Duration, rev uint64, err error, fault string) {
		e.Revision = rev
		m.in.h.rec.entryWritten(entryWrite{inst: m.in.name, op: "update", e: e, base: base, err: err, sent: sent}, fault)
	})
}

func (m *faultyEntries) DeleteEntry(ctx context.Context, job, id string, base uint64) error {
	_, err := do(m.in, ctx, storeCall{op: "delete-entry", job: backend.EntryRunName(job, id)}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.es.DeleteEntry(ctx, job, id, base)
	}, func(sent time.Duration, _ struct{}, err error, fault string) {
		m.in.h.rec.entryWritten(entryWrite{inst: m.in.name, op: "delete", e: backend.Entry{Job: job, ID: id}, base: base, err: err, sent: sent}, fault)
	})
	return err
}

func (m *faultyEntries) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	return do(m.in, ctx, storeCall{op: "get-entry", job: backend.EntryRunName(job, id)}, func(ctx context.Context) (backend.Entry, error) {
		return m.es.GetEntry(ctx, job, id)
	}, func(time.Duration, backend.Entry, error, string) {})
}

func (m *faultyEntries) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	return do(m.in, ctx, storeCall{op: "list-entries", job: job}, func(ctx context.Context) ([]backend.Entry, error) {
		return m.es.ListEntries(ctx, job, afterJob, afterID, limit)
	}, func(time.Duration, []backend.Entry, error, string) {})
}

// errWatchCut is the error of an entry watch the faults cut.
var errWatchCut = errors.New("modelcheck: entry watch cut")

// WatchEntries is the store's watch, recording what it delivers once the
// scheduler applied it. It cannot begin while in is dead or (at random) flaky,
// ends when in crashes, and is broken once in some of in's flaky windows and
// at the store's outages (watchBreak): cut (it fails), or reconnected: the
// changes of a stretch are missed, then the watch says Resync, delivers what
// differs from what it delivered before (as a store that reads its entries
// again does), and Synced.
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
	w := &entryWatch{m: m, fn: fn, reading: map[string]bool{}, known: map[string]uint64{}}
	brk := in.watchBreak()
	go func() {
		var at <-chan time.Time
		if brk.at > 0 {
			t := time.NewTimer(brk.at - in.h.now())
			defer t.Stop()
			at = t.C
		}
		select {
		case <-at:
			if !brk.reconnect {
				cancel(errWatchCut)
				return
			}
			w.disconnect()
			if !wait(wctx, brk.gap) {
				return
			}
			w.resync(wctx)
			select {
			case <-in.crashed:
				cancel(ErrCrashed)
			case <-wctx.Done():
			}
		case <-in.crashed:
			cancel(ErrCrashed)
		case <-wctx.Done():
		}
	}()
	err := m.es.WatchEntries(wctx, w.live)
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

// entryWatch is one watch of an instance's faulty view: what it delivered to
// the scheduler, and whether it misses the store's changes (disconnected).
type entryWatch struct {
	m  *faultyEntries
	fn func(backend.EntryChange)

	mu      sync.Mutex // one delivery at a time
	reading map[string]bool
	// known is the revision of every entry delivered and not removed since.
	known  map[string]uint64
	missed bool
}

// live delivers a change of the store's watch, unless the watch is
// disconnected (the change is missed) or it is older than what was delivered.
func (w *entryWatch) live(c backend.EntryChange) {
	w.m.in.waitThaw()
	w.mu.Lock()
	defer w.mu.Unlock()
	name := c.Entry.RunName()
	switch {
	case w.missed:
		w.m.in.h.rec.slotLog(w.m.in, name, time.Time{}, "entry watch: change missed (disconnected): rev %d removed=%v", c.Entry.Revision, c.Removed)
		return
	case !c.Synced && !c.Removed && c.Entry.Revision <= w.known[name]:
		return // read again since
	}
	w.deliverLocked(c)
}

func (w *entryWatch) deliverLocked(c backend.EntryChange) {
	w.fn(c)
	w.m.in.h.rec.entrySeen(w.m.in, c, w.reading)
	name := c.Entry.RunName()
	switch {
	case c.Synced, c.Resync:
	case c.Removed:
		delete(w.known, name)
	default:
		w.known[name] = c.Entry.Revision
	}
}

// disconnect starts missing the store's changes.
func (w *entryWatch) disconnect() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.missed = true
	w.m.in.h.rec.watchDisconnected(w.m.in)
}

// resync ends a disconnection as a store that reads its entries again does:
// Resync, what differs from what was delivered, Synced.
func (w *entryWatch) resync(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.missed = false
	w.deliverLocked(backend.EntryChange{Resync: true})
	stored := map[string]backend.Entry{}
	var afterJob, afterID string
	for ctx.Err() == nil {
		page, err := w.m.es.ListEntries(ctx, "", afterJob, afterID, 100)
		if err != nil {
			return // the watch ends; the next one reads them all
		}
		for _, e := range page {
			stored[e.RunName()] = e
		}
		if len(page) < 100 {
			break
		}
		afterJob, afterID = page[len(page)-1].Job, page[len(page)-1].ID
	}
	for name := range w.known {
		if _, ok := stored[name]; !ok {
			job, id, _ := backend.SplitEntryRunName(name)
			w.deliverLocked(backend.EntryChange{Entry: backend.Entry{Job: job, ID: id}, Removed: true})
		}
	}
	names := slices.Sorted(maps.Keys(stored))
	for _, name := range names {
		if e := stored[name]; e.Revision > w.known[name] {
			w.deliverLocked(backend.EntryChange{Entry: e})
		}
	}
	// A reading after Resync delivers what changed: what it left out stands.
	for name := range w.known {
		w.reading[name] = true
	}
	w.deliverLocked(backend.EntryChange{Synced: true})
}

// watchBreak is how the entry watch in begins now breaks.
type watchBreak struct {
	at        time.Duration // since t0; 0: never
	reconnect bool          // else cut
	gap       time.Duration // a reconnect's: how long changes are missed
}

// watchBreak is when (since t0) and how the entry watch in begins now breaks.
// At the start of an outage of the store it is cut, or it reconnects when the
// outage ends. In one of in's flaky windows still to come, with the window's
// probability, it is cut or reconnects 0.1–1.5s later.
func (in *inst) watchBreak() watchBreak {
	start := in.h.faultStart()
	if start < 0 {
		return watchBreak{}
	}
	now := in.h.now()
	var first watchBreak
	earlier := func(b watchBreak) {
		if b.at > now && (first.at == 0 || b.at < first.at) {
			first = b
		}
	}
	for i, w := range in.h.plan.Outages {
		x := Mix(in.h.plan.Seed, Str(in.name), 0x6f75_74, uint64(i))
		earlier(watchBreak{at: start + w.From, reconnect: x%2 == 0, gap: w.To - w.From})
	}
	for i, w := range in.h.plan.Flaky[in.slot] {
		x := Mix(in.h.plan.Seed, Str(in.name), 0x6375_74, uint64(i))
		if Unit(x) >= w.P {
			continue
		}
		at := start + w.From + time.Duration(Unit(Mix(x))*float64(w.To-w.From)).Round(time.Millisecond)
		earlier(watchBreak{at: at, reconnect: Mix(x, 2)%2 == 0, gap: MS(100 + int(Mix(x, 3)%1400))})
	}
	return first
}
