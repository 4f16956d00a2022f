package metrics

import (
	"sync"
	"time"
)

// slotGaps keeps each job's last slot of its own schedule, so that the next
// one gives the job's interval. It holds one time per job.
type slotGaps struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// next records job's next slot and returns the gap from the slot before it: 0
// for the job's first slot here, or a slot not after the last (the job
// registered again).
func (g *slotGaps) next(job string, next time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev, ok := g.last[job]
	g.last[job] = next
	if !ok || !next.After(prev) {
		return 0
	}
	return next.Sub(prev)
}

// forget drops job's last slot: its loop ended.
func (g *slotGaps) forget(job string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.last, job)
}
