package backend

import "context"

// LastRunsDepth is how many of a job's most recent history records
// Scheduler.LastRuns (package scheduler) reads for a job when the backend has no [LastRunsReader]:
// a job with no success (or failure) among them shows none.
const LastRunsDepth = 20

// LastRuns is a job's newest runs of each kind, what a fleet view or a status page
// shows for it.
type LastRuns struct {
	Job string
	// Run is the newest run that started (it may still be running).
	Run *RunRecord
	// Success is the newest run that ended ok.
	Success *RunRecord
	// Failure is the newest run that ended error, timeout, cancelled, lost or
	// superseded. Slots skipped, late or paused are neither success nor failure.
	Failure *RunRecord
}

// LastRunsReader is implemented by backends that read the last runs of many jobs
// in a few requests (for example one batched read of the last message of many
// subjects). Without it, Scheduler.LastRuns (package scheduler) reads each job's recent history.
type LastRunsReader interface {
	// LastRuns returns an entry for every job in jobs (empty for a job with no
	// run). With an error, the jobs it could read are in the map and those it
	// could not are left out.
	LastRuns(ctx context.Context, jobs []string) (map[string]LastRuns, error)
}

// Failed reports whether a run that ended with s counts as a failure.
func (s Status) Failed() bool {
	switch s {
	case StatusError, StatusTimeout, StatusCancelled, StatusLost, StatusSuperseded:
		return true
	}
	return false
}

// SummarizeRuns picks a job's newest run, success and failure from records
// ordered newest first, as History returns them.
func SummarizeRuns(job string, recs []RunRecord) LastRuns {
	out := LastRuns{Job: job}
	for i := range recs {
		r := &recs[i]
		if out.Run == nil && !r.StartedAt.IsZero() {
			out.Run = r
		}
		if out.Success == nil && r.Status == StatusOK {
			out.Success = r
		}
		if out.Failure == nil && r.Status.Failed() {
			out.Failure = r
		}
	}
	return out
}
