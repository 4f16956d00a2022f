package scheduler

import (
	"context"
	"fmt"

	"github.com/anarchon/anarchon/backend"
)

// LastRuns returns the newest run, success and failure of each named job (every
// declared job when none is named). It reads them from the backend the replicas
// share. That is one batched read when it implements [backend.LastRunsReader], else
// each job's last [LastRunsDepth] history records. With an error, the jobs it could
// read are in the map and those it could not are left out.
func (s *Scheduler) LastRuns(ctx context.Context, jobs ...string) (map[string]LastRuns, error) {
	if len(jobs) == 0 {
		for _, j := range s.Jobs() {
			jobs = append(jobs, j.Job)
		}
	}
	for _, name := range jobs {
		if _, err := s.declared(name); err != nil {
			return nil, err
		}
	}
	return s.lastRunsOf(ctx, jobs)
}

// lastRunsOf reads the last runs of jobs (run names: a job's, or an entry's).
func (s *Scheduler) lastRunsOf(ctx context.Context, jobs []string) (map[string]LastRuns, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	if r, ok := s.backend.(backend.LastRunsReader); ok {
		out, err := r.LastRuns(ctx, jobs)
		if err != nil {
			return out, fmt.Errorf("scheduler: last runs: %w", err)
		}
		return out, nil
	}
	out := make(map[string]LastRuns, len(jobs))
	var first error
	for _, name := range jobs {
		recs, err := s.backend.History(ctx, name, LastRunsDepth)
		if err != nil {
			if first == nil {
				first = fmt.Errorf("scheduler: last runs of %q: %w", name, err)
			}
			continue
		}
		out[name] = backend.SummarizeRuns(name, recs)
	}
	return out, first
}
