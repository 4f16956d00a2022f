package scheduler

import (
	"context"
	"slices"
	"strings"
)

var _ Pauser = (*MemoryBackend)(nil)

// memPauses holds the memory backend's pauses and wakes its watchers.
type memPauses struct {
	byJob  map[string]Pause
	notify chan struct{} // closed and replaced on every change
}

// pausesLocked returns the pause state, creating it on first use.
func (b *MemoryBackend) pausesLocked() *memPauses {
	if b.pause == nil {
		b.pause = &memPauses{byJob: map[string]Pause{}, notify: make(chan struct{})}
	}
	return b.pause
}

// SetPause stores p, replacing a pause of the same job.
func (b *MemoryBackend) SetPause(ctx context.Context, p Pause) error {
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
func (b *MemoryBackend) ClearPause(ctx context.Context, job string) error {
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
func (b *MemoryBackend) Pauses(ctx context.Context) ([]Pause, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	all, _ := b.snapshotPausesLocked()
	return all, nil
}

func (b *MemoryBackend) snapshotPausesLocked() ([]Pause, <-chan struct{}) {
	ps := b.pausesLocked()
	out := make([]Pause, 0, len(ps.byJob))
	for _, p := range ps.byJob {
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y Pause) int { return strings.Compare(x.Job, y.Job) })
	return out, ps.notify
}

// WatchPauses calls fn with the pauses now and after every change until ctx ends.
func (b *MemoryBackend) WatchPauses(ctx context.Context, fn func([]Pause)) error {
	for {
		b.mu.Lock()
		all, changed := b.snapshotPausesLocked()
		b.mu.Unlock()
		fn(all)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}
