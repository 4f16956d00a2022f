package sqlbackend

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// EntryPollInterval bounds how long a WatchEntries waits between two reads of the
// entries' change counter when no notification woke it: every replica follows a
// change within it even when notifications are lost (WithPollInterval may make it
// shorter).
const EntryPollInterval = time.Second

// WatchEntries calls fn with every stored entry, then a change marked Synced,
// then every change in revision order, removals included, until ctx ends or the
// backend is closed (nil) or a read fails. Changes are read after the last
// revision read; a watcher woken by a notification (PostgreSQL) reads at once,
// and one that is not polls the change counter, one indexed read, at most
// EntryPollInterval apart. A watcher that fell behind the pruning of tombstones
// lists every entry again and reports as removed those it knew that are gone.
func (b *Backend) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	if err := b.Init(ctx); err != nil {
		return err
	}
	sub, unsubscribe := b.hub.subscribe(ctx, topicEntries)
	defer unsubscribe()
	w := &entryWatch{b: b, fn: fn, known: map[entryKey]uint64{}}
	if err := w.resync(ctx); err != nil {
		return w.failed(ctx, err)
	}
	fn(backend.EntryChange{Synced: true})
	poll := min(b.opts.poll, EntryPollInterval)
	for {
		more, err := w.poll(ctx)
		if err != nil {
			return w.failed(ctx, err)
		}
		if more {
			continue
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-b.hub.closed:
			t.Stop()
			return nil
		case <-sub:
		case <-t.C:
		}
		t.Stop()
	}
}

type entryKey struct{ job, id string }

// entryWatch is one WatchEntries: the last change revision it read, and the
// revision of each entry it reported and has not reported removed.
type entryWatch struct {
	b     *Backend
	fn    func(backend.EntryChange)
	last  int64
	known map[entryKey]uint64
}

func (w *entryWatch) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("sqlbackend: watch entries: %w", err)
}

// seq reads the change counter: the last revision given and the newest pruned.
func (w *entryWatch) seq(ctx context.Context) (rev, pruned int64, err error) {
	ctx, cancel := w.b.callCtx(ctx)
	defer cancel()
	err = w.b.db.QueryRowContext(ctx, w.b.q(0, "SELECT rev, pruned FROM {p}entry_seq WHERE id = 1")).Scan(&rev, &pruned)
	return rev, pruned, err
}

// poll reports the changes after the last revision read, at most a page of them
// (more says there may be others). The rows are read before the pruned revision:
// pruning only moves it forward, so when it is still at most last no tombstone
// after last was gone when the rows were read.
func (w *entryWatch) poll(ctx context.Context) (more bool, err error) {
	rev, pruned, err := w.seq(ctx)
	if err != nil {
		return false, err
	}
	if pruned > w.last {
		return false, w.resync(ctx)
	}
	if rev == w.last {
		return false, nil
	}
	qctx, cancel := w.b.callCtx(ctx)
	rows, err := w.b.db.QueryContext(qctx, w.b.q(0, "SELECT "+entryColumns+" FROM {p}entries WHERE rev > ? ORDER BY rev LIMIT ?"), w.last, entryPageSize)
	if err != nil {
		cancel()
		return false, err
	}
	es, err := scanEntries(rows)
	cancel()
	if err != nil {
		return false, err
	}
	if _, pruned, err = w.seq(ctx); err != nil {
		return false, err
	}
	if pruned > w.last {
		return false, w.resync(ctx)
	}
	for _, e := range es {
		w.report(e)
		w.last = int64(e.Revision)
	}
	return len(es) == entryPageSize, nil
}

// report hands fn a row read, unless it is no news: a revision of the entry no
// newer than the one reported, or the removal of an entry never reported.
func (w *entryWatch) report(e storedEntry) {
	k := entryKey{e.Job, e.ID}
	had, ok := w.known[k]
	if e.removed {
		if ok {
			delete(w.known, k)
			w.fn(backend.EntryChange{Entry: backend.Entry{Job: e.Job, ID: e.ID, Revision: e.Revision}, Removed: true})
		}
		return
	}
	if ok && had >= e.Revision {
		return
	}
	w.known[k] = e.Revision
	w.fn(backend.EntryChange{Entry: e.Entry})
}

// resync lists every entry and reports those that are new or changed. It then
// reports, as removed, those known that were not listed. It goes on from the
// revision read before the list: a change made while it listed is read again
// after (and reported once).
func (w *entryWatch) resync(ctx context.Context) error {
	rev, _, err := w.seq(ctx)
	if err != nil {
		return err
	}
	listed := make(map[entryKey]struct{}, len(w.known))
	afterJob, afterID := "", ""
	for {
		qctx, cancel := w.b.callCtx(ctx)
		es, err := w.b.listEntries(qctx, "", afterJob, afterID, entryPageSize)
		cancel()
		if err != nil {
			return err
		}
		for _, e := range es {
			listed[entryKey{e.Job, e.ID}] = struct{}{}
			w.report(e)
		}
		if len(es) < entryPageSize {
			break
		}
		afterJob, afterID = es[len(es)-1].Job, es[len(es)-1].ID
	}
	var gone []entryKey
	for k := range w.known {
		if _, ok := listed[k]; !ok {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, func(x, y entryKey) int { return cmp.Or(cmp.Compare(x.job, y.job), cmp.Compare(x.id, y.id)) })
	for _, k := range gone {
		delete(w.known, k)
		w.fn(backend.EntryChange{Entry: backend.Entry{Job: k.job, ID: k.id}, Removed: true})
	}
	w.last = rev
	return nil
}
