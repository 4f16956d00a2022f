package memory

import (
	"context"
	"slices"
	"strings"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.Pauser = (*Backend)(nil)

// memPauses holds the memory backend's pauses and wakes its watchers.
type memPauses struct {
	byJob  map[string]backend.Pause
	notify chan struct{} // closed and replaced on every change
}

// pausesLocked returns the pause state, creating it on first use.
func (b *Backend) pausesLocked() *memPauses {
	if b.pause == nil {
		b.pause = &memPauses{byJob: map[string]backend.Pause{}, notify: make(chan struct{})}
	}
	return b.pause
}

// SetPause stores p, replacing a pause of the same job.
func (b *Backend) SetPause(ctx context.Context, p backend.Pause) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.pausesLocked()
	ps.byJob[p.Job] = p
	close(ps.notify)
	ps.notify = make(chan struct{})
	return nil
}

// ClearPause removes job's pause, if any.
func (b *Backend) ClearPause(ctx context.Context, job string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.pausesLocked()
	if _, ok := ps.byJob[job]; ok {
		delete(ps.byJob, job)
		close(ps.notify)
		ps.notify = make(chan struct{})
	}
	return nil
}

// Pauses returns the stored pauses, by job name (the all-jobs pause first).
func (b *Backend) Pauses(ctx context.Context) ([]backend.Pause, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	all, _ := b.snapshotPausesLocked()
	return all, nil
}

func (b *Backend) snapshotPausesLocked() ([]backend.Pause, <-chan struct{}) {
	ps := b.pausesLocked()
	out := make([]backend.Pause, 0, len(ps.byJob))
	for _, p := range ps.byJob {
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y backend.Pause) int { return strings.Compare(x.Job, y.Job) })
	return out, ps.notify
}

// WatchPauses calls fn with the pauses now and after every change until ctx ends.
func (b *Backend) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	return watchSet(ctx, b, b.snapshotPausesLocked, fn)
}

// watchSet calls fn with what snapshot (called under b.mu) returns, now and
// again each time its channel closes, until ctx ends.
func watchSet[T any](ctx context.Context, b *Backend, snapshot func() (T, <-chan struct{}), fn func(T)) error {
	for {
		b.mu.Lock()
		all, changed := snapshot()
		b.mu.Unlock()
		fn(all)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}
