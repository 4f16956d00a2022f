package kvlease

import (
	"context"
	"fmt"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.RunCountReader = (*Store)(nil)

// RunCount returns the run count the job key of job holds (RunClaim.MaxRuns):
// 0 when the key is not stored.
func (s *Store) RunCount(ctx context.Context, job string) (int, error) {
	if err := backend.ValidateRunName(job); err != nil {
		return 0, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return 0, err
	}
	got, err := s.readKeys(ctx, b, jobKey(job))
	if err != nil {
		return 0, fmt.Errorf("kvlease: run count of %q: %w", job, err)
	}
	j, err := jobOf(got[jobKey(job)])
	if err != nil {
		return 0, fmt.Errorf("kvlease: run count of %q: %w", job, err)
	}
	return j.val.Count, nil
}
