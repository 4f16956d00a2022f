package natsutil

import (
	"time"

	"github.com/anarchon/anarchon/internal/backendutil"
)

// CheckClaim is backendutil.CheckClaim: it refuses a job name the scheduler
// refuses or an empty token, with an error matching scheduler.ErrInvalidClaim.
func CheckClaim(pkg, job, token string) error { return backendutil.CheckClaim(pkg, job, token) }

// DescribeRun names a run in messages: job "report" slot 2026-01-02T03:04:05Z.
func DescribeRun(job string, slot time.Time) string { return backendutil.DescribeRun(job, slot) }
