package main

import (
	"context"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// windowGoal is the longest duplicate window a job every few seconds should get: the
// window is how long the server keeps every claim's message ID.
const windowGoal = time.Minute

// windowJob is one job of section 7 and the duplicate window its stream got.
type windowJob struct {
	name, options string
	every         time.Duration
	opts          []scheduler.JobOption
	goal          time.Duration // 0: shown for contrast, no goal
	window        time.Duration // the stream's Config.Duplicates, read from the server
}

// measureWindows runs section 7: a scheduler on jetstream.NewLeased with default
// options registers the jobs and starts on a fresh server, then each job's stream
// is read back from the server.
func measureWindows(ctx context.Context) (_ []*windowJob, err error) {
	jobs := []*windowJob{
		{name: "every-2s", options: "`Every(2s)`, default options", every: 2 * time.Second, goal: windowGoal},
		{name: "hourly", options: "`Every(1h)`, `WithMaxLate(20m)`", every: time.Hour, opts: []scheduler.JobOption{scheduler.WithMaxLate(20 * time.Minute)}},
	}
	srv, err := startServer(ctx, "")
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	c, err := dial(srv, "bench-window")
	if err != nil {
		return nil, err
	}
	defer c.nc.Close()
	st, err := newStore(ctx, c)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	b, err := jetstream.NewLeased(c.js, st)
	if err != nil {
		return nil, err
	}
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "bench-window"})
	if err != nil {
		return nil, err
	}
	noop := func(context.Context, scheduler.Run) error { return nil }
	for _, j := range jobs {
		if err := s.Every(j.name, j.every, noop, j.opts...); err != nil {
			return nil, err
		}
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if serr := s.Stop(sctx); err == nil && serr != nil {
			err = fmt.Errorf("stop: %w", serr)
		}
	}()
	for _, j := range jobs {
		// The stream name of a job whose name needs no escaping (jetstream/names.go).
		str, err := c.js.Stream(ctx, "ANARCHON_"+j.name)
		if err != nil {
			return nil, fmt.Errorf("the stream of %s: %w", j.name, err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("the stream of %s: %w", j.name, err)
		}
		j.window = info.Config.Duplicates
	}
	return jobs, nil
}

func (j *windowJob) goalMet() bool { return j.window > 0 && j.window <= j.goal }

func windowMarkdown(jobs []*windowJob) string {
	t := newTable("job", "duplicate window of its stream", "goal")
	for _, j := range jobs {
		goal := "for contrast"
		if j.goal > 0 {
			goal = fmt.Sprintf("%s ≤ %v", mark(j.goalMet()), fmtWindow(j.goal))
		}
		t.add(j.options, fmtWindow(j.window), goal)
	}
	return "Each job registered with `scheduler.New` on `jetstream.NewLeased` (default options) against a fresh embedded server, " +
		"after Start; the window is the stream's `Config.Duplicates` as the server reports it. " +
		"The backend fits it to the job (`jetstream.FitWindow`): jitter + max lateness + clock skew allowance + lease + call timeout, " +
		"rounded up to a second, at least " + fmtWindow(jetstream.MinFittedWindow) + ".\n\n" + t.String()
}

// fmtWindow prints a window in the units a reader compares it in: "44 s",
// "20 min 42 s".
func fmtWindow(d time.Duration) string {
	switch {
	case d <= 0:
		return "n/a"
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	}
	d = d.Round(time.Second)
	m, s := int(d/time.Minute), int(d%time.Minute/time.Second)
	if s == 0 {
		return fmt.Sprintf("%d min", m)
	}
	return fmt.Sprintf("%d min %d s", m, s)
}
