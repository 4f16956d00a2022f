package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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
		if err := c.printJSON(f); err != nil {
			return err
		}
		return unreadable(f)
	}
	makeVisible(f)
	now := time.Now()
	w := c.table()
	fmt.Fprintln(w, "JOB\tSTATE\tSCHEDULE\tNEXT\tLAST RUN\tLAST SUCCESS\tLAST FAILURE\tRUNNING\tREPLICAS")
	for _, j := range f.Jobs {
		sched := scheduler.DescribeSchedule(j.Schedule) // as the status page says it
		if j.Schedules != nil {
			sched = "(replicas differ)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, jobState(j), sched, when(j.Next, now),
			lastRun(j.LastRun, now), lastAt(j.LastSuccess, now), lastFailure(j.LastFailure, now), running(j.Running)+more(j.RunningMore),
			strings.Join(j.Replicas, ","))
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
			c.warn("job \"%s\": %s", j.Name, warning)
		}
	}
	return unreadable(f)
}

// unreadable fails a jobs command whose view misses registry entries this version
// cannot read (written by a newer version): what was printed is not the whole fleet.
func unreadable(f *fleet.Fleet) error {
	switch n := len(f.Unreadable); n {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("jobs: %s", f.Unreadable[0])
	default:
		return fmt.Errorf("jobs: %s (and %d more registry entries not read)", f.Unreadable[0], n-1)
	}
}

// jobState is active, or paused with the reason, who and until, and on which
// replicas when not all see it; a job with a run limit says it ("active (run
// limit 3)"), and "ended: run limit 3 reached" once it is.
func jobState(j fleet.JobSummary) string {
	if j.Pause == nil {
		switch {
		case j.LimitReached:
			return fmt.Sprintf("ended: run limit %d reached", j.MaxRuns)
		case j.MaxRuns > 0:
			return fmt.Sprintf("%s (run limit %d)", j.State, j.MaxRuns)
		case j.State == fleet.JobEnded:
			return fleet.JobEnded // the schedule has no slot left
		}
		return fleet.JobActive
	}
	state := "paused: " + pauseText(j.Pause)
	if on := pausedOn(j); on != "yes" {
		state += " [" + on + "]"
	}
	return state
}

// when writes a time for a table: the clock time in UTC when it is within a day of
// now, else the date too.
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := t.Sub(now); d > -24*time.Hour && d < 24*time.Hour {
		return t.UTC().Format("15:04:05Z")
	}
	return t.UTC().Format("2006-01-02 15:04Z")
}

// lastRun: the slot, outcome, replica, start lag and duration.
func lastRun(r *fleet.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%s %s on %s, lag %s", when(r.Slot, now), r.Status, orDash(r.Instance), ms(r.LagMS))
	if r.DurationMS > 0 || r.Status.Finished() {
		s += ", took " + ms(r.DurationMS)
	}
	if r.Manual {
		s += ", manual"
	}
	return s
}

func lastAt(r *fleet.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	return when(r.Slot, now)
}

func lastFailure(r *fleet.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	s := when(r.Slot, now) + " " + string(r.Status)
	if r.Error != "" {
		e := oneLine(r.Error)
		if len(e) > 40 {
			e = shorten(e, 37) + "..."
		}
		s += ": " + e
	}
	return s
}

func running(rs []fleet.ActiveRun) string {
	if len(rs) == 0 {
		return "-"
	}
	var parts []string
	for _, r := range rs {
		p := fmt.Sprintf("%s#%d", r.Instance, r.Attempt)
		switch {
		case r.Buffered:
			p = "buffered " + r.Slot.UTC().Format(timeFormat)
		case r.CancelBy != nil:
			p += " (cancelling for " + r.CancelBy.Slot.UTC().Format(timeFormat) + ")"
		case !r.RetryAt.IsZero():
			p += " (failed, retry at " + r.RetryAt.UTC().Format(timeFormat) + ")"
		case !r.Live:
			p += " (expired)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

// more says how many runs in progress the jobs view left out.
func more(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(",+%d", n)
}

// ms writes milliseconds as a rounded duration.
func ms(v float64) string {
	d := time.Duration(v * float64(time.Millisecond))
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(100 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
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
	makeVisible(&h)
	if len(h.Runs) == 0 {
		fmt.Fprintf(c.stdout, "no runs of %q recorded\n", job)
		return nil
	}
	return c.runsTable(h.Runs)
}

// runsTable prints runs, newest first, one a row.
func (c *cli) runsTable(runs []fleet.Run) error {
	w := c.table()
	fmt.Fprintln(w, "SLOT\tSTATUS\tINSTANCE\tATTEMPT\tKIND\tDURATION\tERROR")
	for _, r := range runs {
		kind := "scheduled"
		switch {
		case r.Manual && r.RequestedBy != "":
			kind = "manual by " + r.RequestedBy
		case r.Manual:
			kind = "manual"
		case r.Backfill:
			kind = "backfill"
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
	}
	makeVisible(&r) // for the lines below and the error
	switch {
	case c.json:
	case r.Run == nil && r.State == fleet.StateBuffered:
		fmt.Fprintf(c.stdout, "triggered %q on %s (by %s): buffered behind the run in progress, it runs once that ends; anarchon history %q shows how it ends\n", job, r.Instance, r.By, job)
	case r.Run == nil:
		fmt.Fprintf(c.stdout, "triggered %q on %s (by %s); anarchon history %q shows how it ends\n", job, r.Instance, r.By, job)
	default:
		fmt.Fprintf(c.stdout, "%q ran on %s (by %s): %s in %s\n", job, r.Instance, r.By, r.Run.Status, duration(*r.Run))
	}
	if r.Run != nil && r.Run.Status != scheduler.StatusOK {
		return fmt.Errorf("trigger %q: the run on %s ended %s: %s", job, r.Instance, r.Run.Status, orDash(r.Run.Error))
	}
	return nil
}

func (c *cli) pause(ctx context.Context, client *fleet.Client, job string, until time.Time) error {
	in := fleet.PauseRequest{Reason: c.reason, By: c.by, Until: until}
	if c.given["for"] {
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
	makeVisible(&r)
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
	makeVisible(&r)
	switch {
	case job == "" && r.NotPaused:
		fmt.Fprintln(c.stdout, "no all-jobs pause is in force: nothing to resume (the pauses of single jobs stay)")
		return nil
	case job == "":
		fmt.Fprintln(c.stdout, "resumed every job (the pauses of single jobs stay)")
		return nil
	case r.NotPaused && r.StillPaused != nil:
		fmt.Fprintf(c.stdout, "%q has no pause of its own: nothing to resume\n", job)
	case r.NotPaused:
		fmt.Fprintf(c.stdout, "%q is not paused: nothing to resume\n", job)
	default:
		fmt.Fprintf(c.stdout, "resumed %q\n", job)
	}
	if r.StillPaused != nil {
		c.warn("%q is still paused by the all-jobs pause: %s; anarchon resume --all ends it", job, pauseText(r.StillPaused))
	}
	return nil
}

func (c *cli) active(ctx context.Context, client *fleet.Client, job string) error {
	var runs []fleet.ActiveRun
	var unlisted []string // the jobs view lists a few runs of each job
	defer func() {
		for _, u := range unlisted {
			c.warn("%s", u)
		}
	}()
	if job != "" {
		a, err := client.Active(ctx, job)
		if err != nil {
			return fmt.Errorf("active %q: %w", job, err)
		}
		if c.json {
			return c.printJSON(a)
		}
		runs = a.Runs
	} else {
		// Every job's running runs are in the jobs reply: one scatter-gather.
		f, err := client.Jobs(ctx)
		if err != nil {
			return fmt.Errorf("active: %w", err)
		}
		runs = []fleet.ActiveRun{}
		for _, j := range f.Jobs {
			runs = append(runs, j.Running...)
			if j.RunningMore > 0 {
				unlisted = append(unlisted, fmt.Sprintf("%d more unfinished runs of %q than listed: anarchon active %q lists them all",
					j.RunningMore, j.Name, j.Name))
			}
		}
		if c.json {
			return c.printJSON(struct {
				Runs []fleet.ActiveRun `json:"runs"`
			}{runs})
		}
	}
	makeVisible(&runs)
	if len(runs) == 0 {
		if job != "" {
			fmt.Fprintf(c.stdout, "no unfinished run of %q\n", job)
		} else {
			fmt.Fprintln(c.stdout, "no unfinished run")
		}
		return nil
	}
	w := c.table()
	fmt.Fprintln(w, "JOB\tSLOT\tINSTANCE\tATTEMPT\tFENCE\tLIVE\tEXPIRES")
	for _, r := range runs {
		live := "yes"
		switch {
		case r.Buffered:
			live = "buffered (runs when the run before it ends)"
		case r.CancelBy != nil:
			live = "cancelling for " + r.CancelBy.Slot.UTC().Format(timeFormat) + " (asked by " + r.CancelBy.Instance + ")"
		case !r.RetryAt.IsZero():
			live = "retry at " + r.RetryAt.UTC().Format(timeFormat)
		case !r.Live:
			live = "no"
		}
		expires := "-" // a run waiting for its retry holds no lease
		if !r.Expires.IsZero() && r.RetryAt.IsZero() {
			expires = r.Expires.UTC().Format(timeFormat)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Job, r.Slot.UTC().Format(timeFormat), r.Instance, r.Attempt,
			r.Fence, live, expires)
	}
	return w.Flush()
}

// watch prints the replicas' events until ctx ends (an interrupt): one line each,
// or one JSON object per line with --json.
func (c *cli) watch(ctx context.Context, client *fleet.Client, job string) error {
	enc := json.NewEncoder(c.stdout)
	if !c.json {
		what := "every job"
		if job != "" {
			what = fmt.Sprintf("%q", job)
		}
		fmt.Fprintf(c.stderr, "watching %s (replicas publish with fleet.Events); interrupt to stop\n", what)
	}
	err := client.Watch(ctx, job, func(e fleet.Event) {
		if c.json {
			_ = enc.Encode(e)
			return
		}
		makeVisible(&e)
		fmt.Fprintln(c.stdout, eventLine(e))
	})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("watch: %w", cause)
	}
	return nil
}

// eventLine writes an event for a person: when, where, what, then its details.
func eventLine(e fleet.Event) string {
	job := e.Job
	if job == "" {
		job = "(all jobs)"
	}
	parts := []string{e.At.UTC().Format(timeFormat), e.Instance, job, string(e.Kind)}
	if !e.Slot.IsZero() {
		parts = append(parts, "slot "+e.Slot.UTC().Format(timeFormat))
	}
	if e.Attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", e.Attempt))
	}
	if e.Manual {
		parts = append(parts, "manual")
	}
	if e.Backfill {
		parts = append(parts, "backfill")
	}
	if e.Outcome != "" {
		parts = append(parts, string(e.Outcome))
	}
	if e.Status != "" {
		parts = append(parts, string(e.Status))
	}
	switch e.Kind {
	case scheduler.EventFinished:
		parts = append(parts, "took "+ms(e.DurationMS))
	case scheduler.EventStarted:
		parts = append(parts, "lag "+ms(e.LagMS))
	case scheduler.EventScheduled:
		if !e.Next.IsZero() {
			parts = append(parts, "next "+e.Next.UTC().Format(timeFormat))
		}
	case scheduler.EventPauseChanged:
		if e.Pause != nil {
			parts = append(parts, "paused: "+pauseText(e.Pause))
		} else {
			parts = append(parts, "runs")
		}
	}
	if e.Op != "" {
		parts = append(parts, "op "+e.Op)
	}
	if e.Error != "" {
		parts = append(parts, "error: "+oneLine(e.Error))
	}
	return strings.Join(parts, "  ")
}

// backfillRange reads --from and --to: RFC 3339 times, or durations back from
// now ("-10m" and "10m" alike). Both are required, from before to.
func (c *cli) backfillRange(now time.Time) (from, to time.Time, err error) {
	read := func(name, v string) (time.Time, error) {
		if v == "" {
			return time.Time{}, usagef("backfill needs --%s", name)
		}
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t, nil
		}
		d, err := time.ParseDuration(strings.TrimPrefix(v, "-"))
		if err != nil || d < 0 {
			return time.Time{}, usagef("--%s %q is neither an RFC 3339 time nor a duration back from now (-10m)", name, v)
		}
		return now.Add(-d), nil
	}
	if from, err = read("from", c.from); err != nil {
		return from, to, err
	}
	if to, err = read("to", c.to); err != nil {
		return from, to, err
	}
	if !from.Before(to) {
		return from, to, usagef("--from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return from, to, nil
}

func (c *cli) backfill(ctx context.Context, client *fleet.Client, job string, from, to time.Time) error {
	r, err := client.Backfill(ctx, job, fleet.BackfillRequest{From: from, To: to, Rerun: c.rerun, By: c.by, Wait: c.wait})
	if err != nil && r.State == "" {
		return fmt.Errorf("backfill %q: %w", job, err)
	}
	if c.json {
		if jerr := c.printJSON(r); jerr != nil {
			return jerr
		}
	}
	makeVisible(&r)
	counts := func() string {
		keys := make([]string, 0, len(r.Counts))
		for k := range r.Counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%d %s", r.Counts[k], strings.ReplaceAll(k, "_", " "))
		}
		return strings.Join(parts, ", ")
	}
	switch {
	case c.json:
	case r.State != fleet.StateFinished:
		fmt.Fprintf(c.stdout, "backfilling %q on %s (by %s): %s; anarchon history %q shows how they end\n",
			job, r.Instance, r.By, orDash(counts()), job)
	default:
		w := c.table()
		fmt.Fprintln(w, "SLOT\tOUTCOME\tSTATUS\tINSTANCE\tATTEMPT\tERROR")
		for _, s := range r.Slots {
			attempt := "-"
			if s.Attempt > 0 {
				attempt = fmt.Sprint(s.Attempt)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Slot.UTC().Format(timeFormat), strings.ReplaceAll(s.Outcome, "_", " "),
				orDash(string(s.Status)), orDash(s.Instance), attempt, oneLine(s.Error))
		}
		if werr := w.Flush(); werr != nil {
			return werr
		}
		fmt.Fprintf(c.stdout, "backfilled %q on %s (by %s): %s\n", job, r.Instance, r.By, orDash(counts()))
	}
	if err != nil {
		return fmt.Errorf("backfill %q: %w", job, err)
	}
	if r.Error != "" {
		return fmt.Errorf("backfill %q on %s: %s", job, r.Instance, r.Error)
	}
	return nil
}
