package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// timeFormat shows times in UTC at millisecond precision, the slots' precision.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) table() *tabwriter.Writer { return tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0) }

func (c *cli) warn(format string, args ...any) {
	fmt.Fprintf(c.stderr, "warning: "+format+"\n", args...)
}

func (c *cli) jobs(ctx context.Context, client *fleet.Client) error {
	f, err := client.Jobs(ctx)
	if err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	if c.json {
		return c.printJSON(f)
	}
	w := c.table()
	fmt.Fprintln(w, "JOB\tSCHEDULE\tREPLICAS\tPAUSED\tREASON")
	for _, j := range f.Jobs {
		sched := j.Schedule
		if j.Schedules != nil {
			sched = "(replicas differ)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", j.Name, orDash(sched), strings.Join(j.Replicas, ","), pausedOn(j), pauseText(j.Pause))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "REPLICA\tVERSION\tBACKEND\tPAUSES\tJOBS")
	for _, r := range f.Replicas {
		pauses := "yes"
		if !r.PauseSupported {
			pauses = "no"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", r.Instance, r.Version, r.Backend, pauses, len(r.Jobs))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, warning := range f.Warnings {
		c.warn("%s", warning)
	}
	for _, j := range f.Jobs {
		for _, warning := range j.Warnings {
			c.warn("job %q: %s", j.Name, warning)
		}
	}
	return nil
}

// pausedOn says whether the job is paused: yes (on every replica that declares it),
// no, or on which replicas.
func pausedOn(j fleet.JobSummary) string {
	switch len(j.PausedOn) {
	case 0:
		return "no"
	case len(j.Replicas):
		return "yes"
	}
	return "on " + strings.Join(j.PausedOn, ",")
}

func pauseText(p *fleet.PauseInfo) string {
	if p == nil {
		return ""
	}
	var about []string
	if p.By != "" {
		about = append(about, "by "+p.By)
	}
	if !p.Until.IsZero() {
		about = append(about, "until "+p.Until.UTC().Format(time.RFC3339))
	}
	if p.Job == "" {
		about = append(about, "all jobs")
	}
	if len(about) == 0 {
		return p.Reason
	}
	return p.Reason + " (" + strings.Join(about, ", ") + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) history(ctx context.Context, client *fleet.Client, job string) error {
	h, err := client.History(ctx, job, c.n)
	if err != nil {
		return fmt.Errorf("history %q: %w", job, err)
	}
	if c.json {
		return c.printJSON(h)
	}
	if len(h.Runs) == 0 {
		fmt.Fprintf(c.stdout, "no runs of %q recorded\n", job)
		return nil
	}
	w := c.table()
	fmt.Fprintln(w, "SLOT\tSTATUS\tINSTANCE\tATTEMPT\tKIND\tDURATION\tERROR")
	for _, r := range h.Runs {
		kind := "scheduled"
		switch {
		case r.Manual && r.RequestedBy != "":
			kind = "manual by " + r.RequestedBy
		case r.Manual:
			kind = "manual"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Slot.UTC().Format(timeFormat), r.Status, orDash(r.Instance),
			r.Attempt, kind, duration(r), oneLine(r.Error))
	}
	return w.Flush()
}

func duration(r fleet.Run) string {
	if r.FinishedAt.IsZero() || r.StartedAt.IsZero() {
		return "-"
	}
	return r.FinishedAt.Sub(r.StartedAt).Round(time.Microsecond).String()
}

func (c *cli) trigger(ctx context.Context, client *fleet.Client, job string) error {
	r, err := client.Trigger(ctx, job, fleet.TriggerRequest{By: c.by, Wait: c.wait})
	if err != nil {
		return fmt.Errorf("trigger %q: %w", job, err)
	}
	if c.json {
		if err := c.printJSON(r); err != nil {
			return err
		}
	} else if r.Run == nil {
		fmt.Fprintf(c.stdout, "triggered %q on %s (by %s); anarchon history %q shows how it ends\n", job, r.Instance, r.By, job)
	} else {
		fmt.Fprintf(c.stdout, "%q ran on %s (by %s): %s in %s\n", job, r.Instance, r.By, r.Run.Status, duration(*r.Run))
	}
	if r.Run != nil && r.Run.Status != scheduler.StatusOK {
		return fmt.Errorf("trigger %q: the run on %s ended %s: %s", job, r.Instance, r.Run.Status, orDash(r.Run.Error))
	}
	return nil
}

func (c *cli) pause(ctx context.Context, client *fleet.Client, job string, until time.Time) error {
	in := fleet.PauseRequest{Reason: c.reason, By: c.by, Until: until}
	if c.forD > 0 {
		in.For = c.forD.String()
	}
	var r fleet.PauseReply
	var err error
	what := fmt.Sprintf("%q", job)
	if job == "" {
		what = "every job"
		r, err = client.PauseAll(ctx, in)
	} else {
		r, err = client.Pause(ctx, job, in)
	}
	if err != nil {
		return fmt.Errorf("pause %s: %w", what, err)
	}
	if c.json {
		return c.printJSON(r)
	}
	fmt.Fprintf(c.stdout, "paused %s: %s; every replica follows within a second\n", what, pauseText(&r.Pause))
	return nil
}

func (c *cli) resume(ctx context.Context, client *fleet.Client, job string) error {
	in := fleet.ResumeRequest{By: c.by}
	var r fleet.ResumeReply
	var err error
	if job == "" {
		r, err = client.ResumeAll(ctx, in)
	} else {
		r, err = client.Resume(ctx, job, in)
	}
	if err != nil {
		if job == "" {
			return fmt.Errorf("resume every job: %w", err)
		}
		return fmt.Errorf("resume %q: %w", job, err)
	}
	if c.json {
		return c.printJSON(r)
	}
	if job == "" {
		fmt.Fprintln(c.stdout, "resumed every job (the pauses of single jobs stay)")
		return nil
	}
	fmt.Fprintf(c.stdout, "resumed %q\n", job)
	if r.StillPaused != nil {
		c.warn("%q is still paused by the all-jobs pause: %s; anarchon resume --all ends it", job, pauseText(r.StillPaused))
	}
	return nil
}
