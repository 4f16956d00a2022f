package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.RunCountReader = (*RunStore)(nil)

// RunCount returns the runs the jobs table counted for job (RunClaim.MaxRuns):
// 0 for a job with no row.
func (s *RunStore) RunCount(ctx context.Context, job string) (int, error) {
	ctx, cancel := s.b.callCtx(ctx)
	defer cancel()
	if err := s.b.Init(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.b.db.QueryRowContext(ctx, s.b.q(0, "SELECT runs FROM {p}jobs WHERE job = ?"), job).Scan(&n)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("sqlbackend: run count of %q: %w", job, err)
	}
	return int(n), nil
}
