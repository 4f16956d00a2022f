package memory

import (
	"context"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.RunCountReader = (*RunStore)(nil)

// RunCount returns how many runs of job the store counted for RunClaim.MaxRuns.
func (s *RunStore) RunCount(ctx context.Context, job string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[job], nil
}
