package backend

import "context"

// RunCountReader is implemented by run stores that count runs (RunCounter) and
// can say how many they counted for a job: Scheduler.Preview tells from it how
// many runs a job's run limit leaves.
type RunCountReader interface {
	// RunCount returns how many first wins of job's slots the store counted
	// for RunClaim.MaxRuns: 0 for a job it counted nothing for.
	RunCount(ctx context.Context, job string) (int, error)
}
