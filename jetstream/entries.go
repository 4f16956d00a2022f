package jetstream

import (
	"context"
	"fmt"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.EntryStore = (*LeasedBackend)(nil)

// entryStore is the run store's entry capability, or an error saying there is
// none.
func (b *LeasedBackend) entryStore() (backend.EntryStore, error) {
	s, ok := b.runs.(backend.EntryStore)
	if !ok {
		return nil, fmt.Errorf("%w: the run store %T stores no entries", backend.ErrEntriesNotSupported, b.runs)
	}
	return s, nil
}

// CreateEntry stores an entry in the run store (a kvlease store keeps it in its
// bucket). The entry's runs are claimed, leased and recorded under
// backend.EntryRunName: their leases in the run store, their records on the
// entry's subjects of the job's stream.
func (b *LeasedBackend) CreateEntry(ctx context.Context, e backend.Entry) (uint64, error) {
	s, err := b.entryStore()
	if err != nil {
		return 0, err
	}
	return s.CreateEntry(ctx, e)
}

// UpdateEntry changes an entry in the run store.
func (b *LeasedBackend) UpdateEntry(ctx context.Context, e backend.Entry, rev uint64) (uint64, error) {
	s, err := b.entryStore()
	if err != nil {
		return 0, err
	}
	return s.UpdateEntry(ctx, e, rev)
}

// DeleteEntry removes an entry from the run store. The records of its runs stay
// in the job's stream until its limits drop them.
func (b *LeasedBackend) DeleteEntry(ctx context.Context, job, id string, rev uint64) error {
	s, err := b.entryStore()
	if err != nil {
		return err
	}
	return s.DeleteEntry(ctx, job, id, rev)
}

// GetEntry reads an entry from the run store.
func (b *LeasedBackend) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	s, err := b.entryStore()
	if err != nil {
		return backend.Entry{}, err
	}
	return s.GetEntry(ctx, job, id)
}

// ListEntries lists the run store's entries.
func (b *LeasedBackend) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	s, err := b.entryStore()
	if err != nil {
		return nil, err
	}
	return s.ListEntries(ctx, job, afterJob, afterID, limit)
}

// WatchEntries watches the run store's entries.
func (b *LeasedBackend) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	s, err := b.entryStore()
	if err != nil {
		return err
	}
	return s.WatchEntries(ctx, fn)
}
