package scheduler

import (
	"context"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// JobInfo describes a job this instance declares: its limits (name, schedule in
// words, options) and its next slot.
type JobInfo struct {
	backend.JobLimits
	// Next is the job's first slot after now that will run, by this instance's
	// clock and its view of the pauses. While a pause with an end holds the job, it
	// is the first slot at or after that end. A job with catch-up also runs the
	// slots the pause held, within its window, when the pause ends. Zero when the
	// schedule has no further slot, once the job's run limit was reached, or while
	// a pause without an end holds the job.
	Next time.Time
	// LimitReached says a claim told this instance that the job's run limit
	// (WithMaxRuns, JobLimits.MaxRuns) was reached: its loop ended.
	LimitReached bool
	// EntriesOnly says the job has no schedule of its own (Declare): its slots
	// are its schedule entries', and Next is zero.
	EntriesOnly bool
}

// maxPauseSteps bounds how many pauses nextRun steps past: a job is held by at
// most its own pause and the all-jobs pause.
const maxPauseSteps = 4

// nextRun is j's first slot after now that no pause in this instance's view holds.
// Zero when there is none (the schedule ends, or a pause has no end).
func (s *Scheduler) nextRun(j *job, now time.Time) time.Time {
	if j.ended.Err() != nil {
		return time.Time{}
	}
	next := j.sched.Next(now)
	for range maxPauseSteps {
		p, paused := s.pauses.of(j.name, next)
		switch {
		case next.IsZero() || !paused:
			return next
		case p.Until.IsZero():
			return time.Time{}
		}
		// The first slot at or after the pause's end.
		next = j.sched.Next(p.Until.Add(-time.Nanosecond))
	}
	return next
}

// Jobs returns the jobs this instance declares, in registration order.
func (s *Scheduler) Jobs() []JobInfo {
	s.mu.Lock()
	jobs := append([]*job(nil), s.order...)
	s.mu.Unlock()
	now := s.clock.Now()
	out := make([]JobInfo, 0, len(jobs))
	for _, j := range jobs {
		_, entriesOnly := j.sched.(noSchedule)
		out = append(out, JobInfo{JobLimits: j.limits, Next: s.nextRun(j, now), LimitReached: j.ended.Err() != nil, EntriesOnly: entriesOnly})
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
// whether each lease is live (running now) — every instance's, not only this one's,
// manual runs included (ActiveRun.Manual). Without leases there is no run store to
// ask: it returns nil.
func (s *Scheduler) Active(ctx context.Context, job string) ([]ActiveRun, error) {
	j, err := s.declared(job)
	if err != nil {
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
	runs, err := s.runs.Active(cctx, job)
	for i := range runs {
		runs[i].Manual = !j.onSchedule(runs[i].Slot)
	}
	return runs, err
}
