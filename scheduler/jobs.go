package scheduler

import (
	"context"
	"time"
)

// JobInfo describes a job this instance declares: its limits (name, schedule in
// words, options) and its next slot.
type JobInfo struct {
	JobLimits
	// Next is the job's first slot after now, by this instance's clock; zero when
	// the schedule has no further slot.
	Next time.Time
}

// Jobs returns the jobs this instance declares, in registration order.
func (s *Scheduler) Jobs() []JobInfo {
	s.mu.Lock()
	jobs := append([]*job(nil), s.order...)
	s.mu.Unlock()
	now := s.clock.Now()
	out := make([]JobInfo, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, JobInfo{JobLimits: j.limits, Next: j.sched.Next(now)})
	}
	return out
}

// Clock returns the scheduler's clock (Config.Clock, or SystemClock).
func (s *Scheduler) Clock() Clock { return s.clock }

// Running reports whether the scheduler has been started and not stopped: RunNow
// works, and slots are claimed.
func (s *Scheduler) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateStarted
}

// Active lists the job's unfinished runs in the run store, oldest slot first, with
// whether each lease is live (running now) — every instance's, not only this one's.
// Without leases there is no run store to ask: it returns nil.
func (s *Scheduler) Active(ctx context.Context, job string) ([]ActiveRun, error) {
	if _, err := s.declared(job); err != nil {
		return nil, err
	}
	if s.runs == nil {
		return nil, nil
	}
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	return s.runs.Active(cctx, job)
}
