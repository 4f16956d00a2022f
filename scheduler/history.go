package scheduler

import (
	"context"
	"fmt"
	"slices"

	"github.com/anarchon/anarchon/backend"
)

// History returns the job's recent runs on every instance, newest first: the
// records the stores wrote as attempts ended, and the attempts running now
// (from the run store's Active). Without leases, a run with a timeout whose
// result has not come within it is shown lost: its instance stopped first.
func (s *Scheduler) History(ctx context.Context, name string, limit int) ([]RunRecord, error) {
	recs, err := s.history(ctx, name, limit)
	if err != nil {
		return nil, fmt.Errorf("scheduler: history of %q: %w", name, err)
	}
	return recs, nil
}

// history reads the records of a run name (a job's, or an entry's).
func (s *Scheduler) history(ctx context.Context, name string, limit int) ([]RunRecord, error) {
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	recs, err := s.backend.History(cctx, name, limit)
	if err != nil {
		return nil, err
	}
	if _, settles := s.runs.(backend.Settler); !settles {
		s.showLost(name, recs)
		return recs, nil
	}
	active, err := s.runs.Active(cctx, name)
	if err != nil {
		return nil, err
	}
	return withRunning(name, recs, active, limit), nil
}

// withRunning adds to recs, newest first, the attempts of active that hold a
// lease and have no record yet, at most limit records in all.
func withRunning(name string, recs []RunRecord, active []ActiveRun, limit int) []RunRecord {
	seen := make(map[string]bool, len(recs))
	for _, r := range recs {
		seen[r.Token] = true
	}
	added := false
	for _, a := range active {
		if a.Buffered || a.Attempt == 0 || seen[a.Token] {
			continue
		}
		recs = append(recs, RunRecord{Job: name, Slot: a.Slot, Instance: a.Instance, Token: a.Token, Attempt: a.Attempt,
			Manual: a.Manual, Backfill: a.Backfill, Status: StatusRunning, ClaimedAt: a.Claimed, StartedAt: a.Claimed, Fence: a.Fence})
		added = true
	}
	if !added {
		return recs
	}
	slices.SortStableFunc(recs, func(a, b RunRecord) int {
		if c := b.Slot.Compare(a.Slot); c != 0 {
			return c
		}
		return b.Attempt - a.Attempt
	})
	if limit > 0 && len(recs) > limit {
		recs = recs[:limit]
	}
	return recs
}

// showLost shows lost, without leases, the running records of a job with a
// timeout whose result has not come within it and the grace of a few calls.
func (s *Scheduler) showLost(name string, recs []RunRecord) {
	j, err := s.declared(backend.JobOf(name))
	if err != nil || s.runs != nil || j.cfg.timeout <= 0 {
		return
	}
	now := s.clock.Now()
	for i := range recs {
		r := &recs[i]
		if r.Status == StatusRunning && !r.ClaimedAt.IsZero() && now.Sub(r.ClaimedAt) > j.cfg.timeout+3*s.callTO {
			r.Status, r.Error = StatusLost, fmt.Sprintf("no result within the job's timeout (%v): its instance stopped before storing it", j.cfg.timeout)
		}
	}
}
