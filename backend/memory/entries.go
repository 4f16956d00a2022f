package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.EntryStore = (*Backend)(nil)

// memEntries holds the memory backend's schedule entries and the changes its
// watchers have not read yet.
type memEntries struct {
	byKey map[entryKey]backend.Entry
	rev   uint64
	// log holds the changes from log sequence base on; each watcher reads it
	// from its own position, and what every watcher has read is dropped.
	log      []backend.EntryChange
	base     uint64
	watchers map[*entryWatcher]struct{}
	notify   chan struct{} // closed and replaced on every change
}

type entryKey struct{ job, id string }

type entryWatcher struct{ pos uint64 }

func (b *Backend) entriesLocked() *memEntries {
	if b.entries == nil {
		b.entries = &memEntries{byKey: map[entryKey]backend.Entry{}, watchers: map[*entryWatcher]struct{}{}, notify: make(chan struct{})}
	}
	return b.entries
}

// changedLocked logs c for the watchers and wakes them.
func (m *memEntries) changedLocked(c backend.EntryChange) {
	if len(m.watchers) > 0 {
		m.log = append(m.log, c)
	} else {
		m.base += uint64(len(m.log)) + 1
		m.log = m.log[:0]
	}
	close(m.notify)
	m.notify = make(chan struct{})
}

// trimLocked drops the changes every watcher has read.
func (m *memEntries) trimLocked() {
	low := m.base + uint64(len(m.log))
	for w := range m.watchers {
		low = min(low, w.pos)
	}
	if n := low - m.base; n > 0 {
		m.log = slices.Delete(m.log, 0, int(n))
		m.base = low
	}
}

// CreateEntry stores e unless its job already has an entry with its ID.
func (b *Backend) CreateEntry(ctx context.Context, e backend.Entry) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := e.Check(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.entriesLocked()
	k := entryKey{e.Job, e.ID}
	if _, ok := m.byKey[k]; ok {
		return 0, fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryExists, e.Job, e.ID)
	}
	return m.putLocked(k, e), nil
}

func (m *memEntries) putLocked(k entryKey, e backend.Entry) uint64 {
	m.rev++
	e.Revision = m.rev
	e.Payload = slices.Clone(e.Payload)
	m.byKey[k] = e
	m.changedLocked(backend.EntryChange{Entry: e})
	return e.Revision
}

// UpdateEntry replaces the entry if its revision is rev, keeping its Incarnation.
func (b *Backend) UpdateEntry(ctx context.Context, e backend.Entry, rev uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := e.Check(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.entriesLocked()
	k := entryKey{e.Job, e.ID}
	old, ok := m.byKey[k]
	if !ok {
		return 0, fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryNotFound, e.Job, e.ID)
	}
	if old.Revision != rev {
		return 0, fmt.Errorf("%w: job %q, entry %q is at revision %d, not %d", backend.ErrEntryConflict, e.Job, e.ID, old.Revision, rev)
	}
	e.Incarnation = old.Incarnation // an entry keeps its incarnation through its changes
	return m.putLocked(k, e), nil
}

// DeleteEntry removes the entry if its revision is rev (any when rev is 0).
func (b *Backend) DeleteEntry(ctx context.Context, job, id string, rev uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.entriesLocked()
	k := entryKey{job, id}
	old, ok := m.byKey[k]
	if !ok {
		return fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryNotFound, job, id)
	}
	if rev != 0 && old.Revision != rev {
		return fmt.Errorf("%w: job %q, entry %q is at revision %d, not %d", backend.ErrEntryConflict, job, id, old.Revision, rev)
	}
	delete(m.byKey, k)
	m.rev++
	m.changedLocked(backend.EntryChange{Entry: backend.Entry{Job: job, ID: id, Revision: m.rev}, Removed: true})
	return nil
}

// GetEntry returns one entry.
func (b *Backend) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	if err := ctx.Err(); err != nil {
		return backend.Entry{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entriesLocked().byKey[entryKey{job, id}]
	if !ok {
		return backend.Entry{}, fmt.Errorf("%w: job %q, entry %q", backend.ErrEntryNotFound, job, id)
	}
	e.Payload = slices.Clone(e.Payload)
	return e, nil
}

// ListEntries returns a page of entries ordered by job then ID.
func (b *Backend) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	b.mu.Lock()
	var out []backend.Entry
	for k, e := range b.entriesLocked().byKey {
		if (job == "" || k.job == job) && compareEntry(k.job, k.id, afterJob, afterID) > 0 {
			out = append(out, e)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(x, y backend.Entry) int { return compareEntry(x.Job, x.ID, y.Job, y.ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	for i := range out {
		out[i].Payload = slices.Clone(out[i].Payload)
	}
	return out, nil
}

func compareEntry(job, id, job2, id2 string) int {
	return cmp.Or(cmp.Compare(job, job2), cmp.Compare(id, id2))
}

// WatchEntries calls fn with every entry, then Synced, then every change, until
// ctx ends.
func (b *Backend) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	b.mu.Lock()
	m := b.entriesLocked()
	all := make([]backend.Entry, 0, len(m.byKey))
	for _, e := range m.byKey {
		all = append(all, e)
	}
	w := &entryWatcher{pos: m.base + uint64(len(m.log))}
	m.watchers[w] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(m.watchers, w)
		m.trimLocked()
		b.mu.Unlock()
	}()
	slices.SortFunc(all, func(x, y backend.Entry) int { return compareEntry(x.Job, x.ID, y.Job, y.ID) })
	for _, e := range all {
		e.Payload = slices.Clone(e.Payload)
		fn(backend.EntryChange{Entry: e})
	}
	fn(backend.EntryChange{Synced: true})
	for ctx.Err() == nil {
		b.mu.Lock()
		changes := slices.Clone(m.log[w.pos-m.base:])
		w.pos += uint64(len(changes))
		m.trimLocked()
		changed := m.notify
		b.mu.Unlock()
		for _, c := range changes {
			c.Entry.Payload = slices.Clone(c.Entry.Payload)
			fn(c)
		}
		if len(changes) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
	return nil
}
