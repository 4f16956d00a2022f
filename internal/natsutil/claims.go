package natsutil

import (
	"fmt"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// CheckClaim refuses what no backend stores: a job name scheduler.ValidateJobName
// refuses, or an empty token. The error matches scheduler.ErrInvalidClaim and, for
// the name, scheduler.ErrInvalidJobName; pkg ("jetstream", "kvlease") starts its
// message.
func CheckClaim(pkg, job, token string) error {
	if err := scheduler.ValidateJobName(job); err != nil {
		return fmt.Errorf("%w: %s: %w", scheduler.ErrInvalidClaim, pkg, err)
	}
	if token == "" {
		return fmt.Errorf("%w: %s: claim for job %q has no token", scheduler.ErrInvalidClaim, pkg, job)
	}
	return nil
}

// DescribeRun names a run in messages: job "report" slot 2026-01-02T03:04:05Z.
func DescribeRun(job string, slot time.Time) string {
	return fmt.Sprintf("job %q slot %s", job, slot.UTC().Format(time.RFC3339Nano))
}
