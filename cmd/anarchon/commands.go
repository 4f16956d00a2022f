package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// withClient connects, runs f with a client of the fleet within --timeout, and
// closes the connection. A permissions violation ends ctx with its cause.
func (c *cli) withClient(ctx context.Context, f func(ctx context.Context, client *fleet.Client) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	nc, err := c.connect(ctx, cancel)
	if err != nil {
		return err
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc, fleet.WithPrefix(c.prefix), fleet.WithTimeout(c.timeout), fleet.WithGatherWindow(c.window))
	if err != nil {
		return usagef("%v", err)
	}
	return f(ctx, client)
}

// request is withClient for one request: within --timeout.
func (c *cli) request(ctx context.Context, f func(ctx context.Context, client *fleet.Client) error) error {
	return c.withClient(ctx, func(ctx context.Context, client *fleet.Client) error {
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		return f(rctx, client)
	})
}

// oneJob is the Args of a command about one job.
func oneJob(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usagef("%s needs a JOB (anarchon jobs lists them)", path(cmd))
	case len(args) > 1:
		return usagef("%s takes one JOB, got %d arguments (quote a name with spaces)", path(cmd), len(args))
	}
	return nil
}

// atMostOneJob is the Args of a command about one job or all.
func atMostOneJob(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return usagef("%s takes at most one JOB, got %d arguments (quote a name with spaces)", path(cmd), len(args))
	}
	return nil
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", path(cmd), args[0])
	}
	return nil
}

// commands are the commands about jobs.
func (c *cli) commands() []*cobra.Command {
	jobs := &cobra.Command{
		Use:   "jobs",
		Short: "List every job, its state, schedule, last and next run, and the replicas",
		Long: `jobs lists every job the replicas declare: its state (active; paused with reason, who
and until; ended), schedule, next slot, last run and last failure, and runs in progress,
then the replicas. Every replica answers within --window. -o wide adds the last run's
replica, lag and duration, the last success, the last failure's error and the replicas.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.window <= 0 {
				return usagef("--window %v is not positive", c.window)
			}
			return c.request(cmd.Context(), c.jobs)
		},
	}
	jobs.Flags().DurationVar(&c.window, "window", c.window, "how long to collect the replicas' answers")

	history := &cobra.Command{
		Use:   "history JOB",
		Short: "A job's recent runs, newest first",
		Long: `history lists a job's recent runs, newest first: slot, status, replica, attempt, kind
(scheduled, manual and by whom, backfill), start lag, duration and error. --status and
--since filter on the replica, which searches the newest 10,000 runs (and says when
older ones were not searched); -n says how many to show. --entry shows one schedule
entry's runs, which the job's own history does not hold.`,
		Example: `  anarchon history report -n 50
  anarchon history report --status error,timeout --since 24h
  anarchon history feeds --entry eu-west`,
		Args:              oneJob,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.n < 0 {
				return usagef("-n %d is negative", c.n)
			}
			since, err := c.sinceTime(time.Now())
			if err != nil {
				return err
			}
			for _, s := range c.status {
				if !knownStatus(s) {
					return usagef("--status %q: the statuses are %s", s, strings.Join(statuses(), ", "))
				}
			}
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.history(ctx, client, args[0], since)
			})
		},
	}
	history.Flags().IntVarP(&c.n, "n", "n", 0, "how many runs (default 20, at most 1000)")
	history.Flags().StringSliceVar(&c.status, "status", nil, "only runs of these statuses (ok,error,timeout,...)")
	history.Flags().StringVar(&c.since, "since", "", "only slots since this time (RFC 3339, or a duration back: 24h)")
	history.Flags().StringVar(&c.entry, "entry", "", "only the runs of this schedule entry")

	active := &cobra.Command{
		Use:               "active [JOB]",
		Short:             "Unfinished runs (leases) of a job, or of every job",
		Args:              atMostOneJob,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.active(ctx, client, strings.Join(args, ""))
			})
		},
	}

	trigger := &cobra.Command{
		Use:   "trigger JOB [--entry ID]",
		Short: "Run a job, or one of its schedule entries, now, on one replica",
		Long: `trigger runs the job now on one replica that declares it, recorded as a manual run with
who asked (--by). --entry runs one of its schedule entries instead, with the entry's
payload, recorded in the entry's history. It is answered once the run has started; --wait
waits (within --timeout) for it to end and shows how it ended. A run that cannot start is
refused and nothing runs.`,
		Example: `  anarchon trigger report --wait
  anarchon trigger tenants --entry acme --by ana`,
		Args:              oneJob,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.trigger(ctx, client, args[0])
			})
		},
	}
	trigger.Flags().BoolVar(&c.wait, "wait", false, "wait for the run to end and show how it ended")
	trigger.Flags().StringVar(&c.entry, "entry", "", "run this schedule entry of the job, with its payload")

	backfill := &cobra.Command{
		Use:   "backfill JOB --from T --to T [--entry ID | --all-entries]",
		Short: "Run a job's (or its entries') slots of a past range that never ran, each once",
		Long: `backfill runs, on one replica that declares the job, its slots in [--from, --to) that
never ran, each once across the fleet; --rerun also runs the slots that ran. --entry
backfills one schedule entry of the job instead, --all-entries every entry (a job of
entries has no slots of its own). An entry's slots begin when it was last stored. A time
is RFC 3339 or a duration back from now (-2h, or 2h). --wait waits (within --timeout) for
every slot to end and lists them. At most 1,000 slots per request, the entries' together;
the backend needs leases.`,
		Example: `  anarchon backfill report --from -6h --to -1h
  anarchon backfill report --from 2026-06-01T00:00:00Z --to 2026-06-02T00:00:00Z \
    --wait --timeout 10m
  anarchon backfill tenants --entry acme --from -2h --to -1h
  anarchon backfill tenants --all-entries --from -2h --to -1h --wait`,
		Args:              oneJob,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.entry != "" && c.allEntries {
				return usagef("give --entry or --all-entries, not both")
			}
			from, to, err := c.backfillRange(time.Now())
			if err != nil {
				return err
			}
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.backfill(ctx, client, args[0], from, to)
			})
		},
	}
	backfill.Flags().StringVar(&c.from, "from", "", "the range's start (RFC 3339, or a duration back from now)")
	backfill.Flags().StringVar(&c.to, "to", "", "the range's end, not included")
	backfill.Flags().BoolVar(&c.rerun, "rerun", false, "also run the slots that ran")
	backfill.Flags().BoolVar(&c.wait, "wait", false, "wait for every slot to end and list them")
	backfill.Flags().StringVar(&c.entry, "entry", "", "backfill this schedule entry of the job")
	backfill.Flags().BoolVar(&c.allEntries, "all-entries", false, "backfill every schedule entry of the job")

	pause := &cobra.Command{
		Use:   "pause JOB|--all --reason R [--for D | --until T]",
		Short: "Pause a job, or every job, on every replica",
		Long: `pause stores a pause in the backend, which every replica follows within a second. A
pause without --for or --until has no end; a --for or --until that is given must end it
in the future.`,
		Example: `  anarchon pause report --reason "quarter close" --for 2h
  anarchon pause --all --reason "freeze" --until 2026-12-24T18:00:00Z`,
		Args:              c.jobOrAll,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			until, err := c.pauseEnd()
			if err != nil {
				return err
			}
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.pause(ctx, client, strings.Join(args, ""), until)
			})
		},
	}
	pause.Flags().StringVar(&c.reason, "reason", "", "why (required)")
	pause.Flags().DurationVar(&c.forD, "for", 0, "end the pause after this long")
	pause.Flags().StringVar(&c.until, "until", "", "end the pause at this time (RFC 3339)")
	pause.Flags().BoolVar(&c.all, "all", false, "pause every job (the all-jobs pause)")

	resume := &cobra.Command{
		Use:               "resume JOB|--all",
		Short:             "End a job's pause, or the all-jobs pause",
		Args:              c.jobOrAll,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.resume(ctx, client, strings.Join(args, ""))
			})
		},
	}
	resume.Flags().BoolVar(&c.all, "all", false, "end the all-jobs pause (the pauses of single jobs stay)")

	watch := &cobra.Command{
		Use:   "watch [JOB]",
		Short: "Print the replicas' events as they happen, until interrupted",
		Long: `watch prints one line per scheduler event from every replica that publishes them
(fleet.Events), until interrupted; --json prints one fleet.Event per line. An event of a
schedule entry names it ("tenants entry acme"): an entry's run and the job's own run of
the same slot are two runs. --entry shows one entry's events only.`,
		Args:              atMostOneJob,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.entry != "" && len(args) == 0 {
				return usagef("watch --entry needs the entry's JOB")
			}
			return c.withClient(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.watch(ctx, client, strings.Join(args, ""))
			})
		},
	}
	watch.Flags().StringVar(&c.entry, "entry", "", "only the events of this schedule entry of JOB")
	return []*cobra.Command{jobs, c.describeCommand(), c.previewCommand(), history, c.whyCommand(), active, trigger, backfill, pause, resume, watch}
}

// jobOrAll is the Args of pause and resume: one JOB, or --all and none.
func (c *cli) jobOrAll(cmd *cobra.Command, args []string) error {
	switch {
	case c.all && len(args) > 0:
		return usagef("%s --all takes no JOB", path(cmd))
	case c.all:
		return nil
	}
	return oneJob(cmd, args)
}

// completeJobs completes a JOB argument with the jobs the registry lists.
func (c *cli) completeJobs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	_ = c.withClient(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
		ctx, cancel := context.WithTimeout(ctx, min(c.timeout, 2*time.Second))
		defer cancel()
		regs, _, err := client.Registry(ctx)
		seen := map[string]bool{}
		for _, r := range regs {
			for _, d := range r.Jobs {
				if !seen[d.Name] {
					seen[d.Name] = true
					names = append(names, d.Name)
				}
			}
		}
		return err
	})
	sort.Strings(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

func (c *cli) jobs(ctx context.Context, client *fleet.Client) error {
	f, err := client.Jobs(ctx)
	if err != nil {
		return c.failed(ctx, client, "jobs", "", err)
	}
	if c.jsonOut() {
		if err := c.printJSON(f); err != nil {
			return err
		}
		return unreadable(f)
	}
	makeVisible(f)
	now := time.Now()
	var t *table
	if c.wide() {
		t = newTable(fixed("JOB"), fixed("STATE"), fixed("SCHEDULE"), fixed("NEXT"), fixed("LAST RUN"), fixed("LAST SUCCESS"),
			fixed("LAST FAILURE"), fixed("RUNNING"), fixed("REPLICAS"))
	} else {
		t = newTable(cut("JOB"), cut("STATE"), cut("SCHEDULE"), fixed("NEXT"), cut("LAST RUN"), fixed("FAILED"), fixed("RUNNING"))
	}
	for _, j := range f.Jobs {
		sched := scheduler.DescribeSchedule(j.Schedule) // as the status page says it
		short := compactSchedule(sched)
		if j.Schedules != nil {
			sched, short = "(replicas differ)", "(replicas differ)"
		}
		failed, lastFail := failedAgo(j.LastFailure, now), lastFailure(j.LastFailure, now)
		if e := j.Entries; e != nil {
			if j.EntriesOnly && j.Schedules == nil {
				short = "entries: " + e.Counts()
				sched += ": " + e.Counts()
			}
			if n := failingCount(e); n > 0 {
				failed = fmt.Sprintf("%d entries", n)
				if n == 1 {
					failed = "1 entry"
				}
				if lastFail == "-" {
					lastFail = "failing: " + failingText(e)
				} else {
					lastFail += "; failing: " + failingText(e)
				}
			}
		}
		if c.wide() {
			t.add(j.Name, jobState(j), sched, stampAgo(j.Next, now), lastRunWide(j.LastRun, now), lastAt(j.LastSuccess, now),
				lastFail, running(j.Running)+more(j.RunningMore), strings.Join(j.Replicas, ","))
			continue
		}
		t.add(j.Name, shortState(j), short, ago(j.Next, now), lastRun(j.LastRun, now), failed,
			count(len(j.Running)+j.RunningMore))
	}
	if err := t.write(c.stdout, c.width()); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	rt := newTable(cut("REPLICA"), fixed("VERSION"), fixed("BACKEND"), fixed("PAUSES"), fixed("JOBS"))
	for _, r := range f.Replicas {
		pauses := "yes"
		if !r.PauseSupported {
			pauses = "no"
		}
		rt.add(r.Instance, r.Version, r.Backend, pauses, fmt.Sprint(len(r.Jobs)))
	}
	if err := rt.write(c.stdout, c.width()); err != nil {
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
	return unreadable(f)
}

// unreadable fails a jobs command whose view misses registry entries this version
// cannot read (written by a newer version): what was printed is not the whole fleet.
func unreadable(f *fleet.Fleet) error {
	switch n := len(f.Unreadable); n {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("jobs: %s", plain(f.Unreadable[0]))
	default:
		return fmt.Errorf("jobs: %s (and %d more registry entries not read)", plain(f.Unreadable[0]), n-1)
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

// shortState is jobState for the narrow table: a pause's reason without who
// and until, which -o wide and describe show.
func shortState(j fleet.JobSummary) string {
	if j.Pause == nil {
		return jobState(j)
	}
	state := "paused: " + j.Pause.Reason
	if on := pausedOn(j); on != "yes" {
		state += " [" + on + "]"
	}
	return state
}

// compactSchedule is a schedule in words for the narrow tables: without its
// bounds (", from T", ", until T") and the alignment of an interval, which -o
// wide and describe show, and with durations written short (24h, not 24h0m0s).
func compactSchedule(s string) string {
	for _, b := range []string{", from ", ", until "} {
		if i := strings.Index(s, b); i >= 0 {
			s = s[:i]
		}
	}
	s = strings.Replace(s, " (aligned to UTC)", "", 1)
	return goDuration.ReplaceAllStringFunc(s, func(m string) string {
		d, err := time.ParseDuration(m)
		if err != nil {
			return m
		}
		var b strings.Builder
		for _, u := range []struct {
			unit time.Duration
			name string
		}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
			if n := d / u.unit; n > 0 {
				fmt.Fprintf(&b, "%d%s", n, u.name)
				d -= n * u.unit
			}
		}
		if d > 0 || b.Len() == 0 {
			return m
		}
		return b.String()
	})
}

// goDuration is a Go duration with hours or minutes: 1h0m0s, 5m0s.
var goDuration = regexp.MustCompile(`\b(\d+h)?\d+m\d+s\b`)

func count(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// lastRun, for the narrow table: the outcome and when ("ok 12s ago"), and the
// entry it is of.
func lastRun(r *fleet.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	s := string(r.Status) + " " + ago(r.Slot, now)
	switch {
	case r.Entry != "" && r.Manual:
		s += " (" + r.Entry + ", manual)"
	case r.Entry != "":
		s += " (" + r.Entry + ")"
	case r.Manual:
		s += " (manual)"
	}
	return s
}

// failingText names a job's failing entries, "" when none: "acme, bolt and 3
// more".
func failingText(e *fleet.EntriesState) string {
	if e == nil || len(e.Failing) == 0 && e.FailingMore == 0 {
		return ""
	}
	s := strings.Join(e.Failing, ", ")
	if e.FailingMore > 0 {
		s += fmt.Sprintf(" and %d more", e.FailingMore)
	}
	if e.Unchecked {
		s += " (not all checked in the history: some may have run well since)"
	}
	return s
}

// failingCount is how many of a job's entries fail, for the narrow table.
func failingCount(e *fleet.EntriesState) int {
	if e == nil {
		return 0
	}
	return len(e.Failing) + e.FailingMore
}

// lastRunWide: the slot, outcome, replica, start lag and duration.
func lastRunWide(r *fleet.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%s %s on %s, lag %s", stampAgo(r.Slot, now), r.Status, orDash(r.Instance), ms(r.LagMS))
	if r.DurationMS > 0 || r.Status.Finished() {
		s += ", took " + ms(r.DurationMS)
	}
	if r.Entry != "" {
		s += ", entry " + r.Entry
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
	return stampAgo(r.Slot, now)
}

func failedAgo(r *fleet.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	return ago(r.Slot, now)
}

func lastFailure(r *fleet.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	s := stampAgo(r.Slot, now) + " " + string(r.Status)
	if r.Entry != "" {
		s += " (entry " + r.Entry + ")"
	}
	if r.Error != "" {
		s += ": " + oneLine(r.Error)
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
			p = "buffered " + stamp(r.Slot)
		case r.CancelBy != nil:
			p += " (cancelling for " + stamp(r.CancelBy.Slot) + ")"
		case !r.RetryAt.IsZero():
			p += " (failed, retry at " + stamp(r.RetryAt) + ")"
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
		about = append(about, "until "+stamp(p.Until))
	}
	if p.Job == "" {
		about = append(about, "all jobs")
	}
	if len(about) == 0 {
		return p.Reason
	}
	return p.Reason + " (" + strings.Join(about, ", ") + ")"
}

// statuses are the run statuses history's --status takes.
func statuses() []string {
	var out []string
	for _, s := range []scheduler.Status{scheduler.StatusOK, scheduler.StatusError, scheduler.StatusTimeout,
		scheduler.StatusCancelled, scheduler.StatusSkipped, scheduler.StatusLate, scheduler.StatusMissed, scheduler.StatusPaused,
		scheduler.StatusLost, scheduler.StatusSuperseded, scheduler.StatusLimit, scheduler.StatusDeadline, scheduler.StatusExcluded,
		scheduler.StatusRunning} {
		out = append(out, string(s))
	}
	return out
}

func knownStatus(s string) bool {
	return slices.Contains(statuses(), s)
}

// sinceTime reads --since: RFC 3339, or a duration back from now.
func (c *cli) sinceTime(now time.Time) (time.Time, error) {
	if c.since == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, c.since); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(strings.TrimPrefix(c.since, "-"))
	if err != nil || d <= 0 {
		return time.Time{}, usagef("--since %q is neither an RFC 3339 time nor a duration back from now (24h)", c.since)
	}
	return now.Add(-d), nil
}

func (c *cli) history(ctx context.Context, client *fleet.Client, job string, since time.Time) error {
	filtered := len(c.status) > 0 || !since.IsZero()
	in := fleet.HistoryRequest{Limit: c.n, Entry: c.entry, Since: since}
	for _, st := range c.status {
		in.Status = append(in.Status, scheduler.Status(st))
	}
	h, err := client.HistoryOf(ctx, job, in)
	if olderReplica(err) && (filtered || c.entry != "") {
		// A replica of an earlier version filters nothing: read its newest runs
		// and filter them here, as this command once did.
		c.warn("the replica that answered predates filters on the replica: the newest %d runs were read and filtered here", historyScan)
		h, err = c.historyHere(ctx, client, job, in)
	}
	if err != nil {
		what := fmt.Sprintf("history of job %q", job)
		if c.entry != "" {
			what = fmt.Sprintf("history of entry %q of job %q", c.entry, job)
		}
		return c.failed(ctx, client, what, job, err)
	}
	if h.ScanLimited {
		c.warn("only the newest %d runs were searched: older runs that match are not shown", h.Scanned)
	}
	if c.jsonOut() {
		return c.printJSON(h)
	}
	makeVisible(&h)
	if len(h.Runs) == 0 && c.entry != "" {
		// No runs of an entry that is not stored: a misspelt ID, most likely.
		if _, err := client.Entry(ctx, job, fleet.EntryRequest{ID: c.entry, History: 1}); errors.Is(err, fleet.ErrEntryNotFound) {
			return c.failed(ctx, client, fmt.Sprintf("history of entry %q of job %q", c.entry, job), job, err)
		}
	}
	if len(h.Runs) == 0 {
		of := fmt.Sprintf("%q", job)
		if c.entry != "" {
			of = fmt.Sprintf("entry %q of %q", c.entry, job)
		}
		if filtered {
			fmt.Fprintf(c.stdout, "no runs of %s match\n", visible(of))
		} else {
			fmt.Fprintf(c.stdout, "no runs of %s recorded\n", visible(of))
		}
		return nil
	}
	return c.runsTable(h.Runs)
}

// historyScan is how many runs history reads from a replica of an earlier
// version to filter them itself.
const historyScan = 1000

// olderReplica reports whether err is a replica's refusal of a request field it
// does not know: it runs an earlier version.
func olderReplica(err error) bool {
	return errors.Is(err, fleet.ErrBadRequest) && strings.Contains(err.Error(), "unknown field")
}

// historyHere reads the newest runs as a replica of an earlier version serves
// them (an entry's through its entry request) and filters them as in asks.
func (c *cli) historyHere(ctx context.Context, client *fleet.Client, job string, in fleet.HistoryRequest) (fleet.HistoryReply, error) {
	var (
		h   fleet.HistoryReply
		err error
	)
	if in.Entry != "" {
		var e fleet.EntryReply
		e, err = client.Entry(ctx, job, fleet.EntryRequest{ID: in.Entry, History: historyScan})
		h = fleet.HistoryReply{Job: job, Entry: in.Entry, Instance: e.Instance, Limit: e.History, Runs: e.Runs}
	} else {
		h, err = client.History(ctx, job, historyScan)
	}
	if err != nil {
		return h, err
	}
	read := len(h.Runs)
	keep := h.Runs[:0]
	for _, r := range h.Runs {
		if (len(in.Status) == 0 || slices.Contains(in.Status, r.Status)) && (in.Since.IsZero() || !r.Slot.Before(in.Since)) {
			keep = append(keep, r)
		}
	}
	n := in.Limit
	if n == 0 {
		n = fleet.DefaultHistoryLimit
	}
	h.Runs, h.Limit, h.Scanned = keep[:min(len(keep), n)], n, read
	h.ScanLimited = read >= historyScan && len(keep) < n
	return h, nil
}

// runsTable prints runs, newest first, one a row; an ENTRY column when any run
// is an entry's.
func (c *cli) runsTable(runs []fleet.Run) error {
	entries := false
	for _, r := range runs {
		entries = entries || r.Entry != ""
	}
	cols := []column{fixed("SLOT")}
	if entries {
		cols = append(cols, cut("ENTRY"))
	}
	cols = append(cols, fixed("STATUS"), cut("INSTANCE"), fixed("ATTEMPT"), cut("KIND"), fixed("LAG"), fixed("DURATION"), cutFirst("ERROR"))
	t := newTable(cols...)
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
		lag := "-"
		if !r.StartedAt.IsZero() {
			lag = ms(r.LagMS)
		}
		row := []string{stamp(r.Slot)}
		if entries {
			row = append(row, orDash(r.Entry))
		}
		row = append(row, string(r.Status), orDash(r.Instance), fmt.Sprint(r.Attempt), kind, lag, duration(r), oneLine(r.Error))
		t.add(row...)
	}
	return t.write(c.stdout, c.width())
}

func duration(r fleet.Run) string {
	if r.FinishedAt.IsZero() || r.StartedAt.IsZero() {
		return "-"
	}
	return r.FinishedAt.Sub(r.StartedAt).Round(time.Microsecond).String()
}

func (c *cli) trigger(ctx context.Context, client *fleet.Client, job string) error {
	what, hint := fmt.Sprintf("%q", job), cmdline("history", []string{job})
	var (
		r   fleet.TriggerReply
		err error
	)
	if c.entry != "" {
		what, hint = fmt.Sprintf("entry %q of %q", c.entry, job), cmdline("history", []string{job}, "entry", c.entry)
		r, err = client.TriggerEntry(ctx, job, fleet.TriggerEntryRequest{ID: c.entry, By: c.by, Wait: c.wait})
	} else {
		r, err = client.Trigger(ctx, job, fleet.TriggerRequest{By: c.by, Wait: c.wait})
	}
	if err != nil {
		return c.failed(ctx, client, "trigger "+what, job, err)
	}
	if c.jsonOut() {
		if err := c.printJSON(r); err != nil {
			return err
		}
	}
	makeVisible(&r) // for the lines below and the error
	what = visible(what)
	switch {
	case c.jsonOut():
	case r.Run == nil && r.State == fleet.StateBuffered:
		fmt.Fprintf(c.stdout, "triggered %s on %s (by %s): buffered behind the run in progress, it runs once that ends; %s shows how it ends\n", what, r.Instance, r.By, hint)
	case r.Run == nil:
		fmt.Fprintf(c.stdout, "triggered %s on %s (by %s); %s shows how it ends\n", what, r.Instance, r.By, hint)
	default:
		fmt.Fprintf(c.stdout, "%s ran on %s (by %s): %s in %s\n", what, r.Instance, r.By, r.Run.Status, duration(*r.Run))
	}
	if r.Run != nil && r.Run.Status != scheduler.StatusOK {
		return fmt.Errorf("trigger %s: the run on %s ended %s: %s", what, r.Instance, r.Run.Status, orDash(oneLine(r.Run.Error)))
	}
	return nil
}

func (c *cli) pause(ctx context.Context, client *fleet.Client, job string, until time.Time) error {
	in := fleet.PauseRequest{Reason: c.reason, By: c.by, Until: until}
	if c.given("for") {
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
		return c.failed(ctx, client, "pause "+what, job, err)
	}
	if c.jsonOut() {
		return c.printJSON(r)
	}
	makeVisible(&r)
	fmt.Fprintf(c.stdout, "paused %s: %s; every replica follows within a second\n", what, pauseText(&r.Pause))
	return nil
}

// pauseEnd checks the pause flags before any request: a pause without --for and
// --until has no end, so one that was given must end in the future (--for 0s, an
// empty --until or one in the past by this machine's clock are refused, never read
// as "no end"). The replica judges the time again on its own clock.
func (c *cli) pauseEnd() (time.Time, error) {
	switch {
	case c.reason == "":
		return time.Time{}, usagef("pause needs --reason")
	case c.given("for") && c.given("until"):
		return time.Time{}, usagef("give --for or --until, not both")
	case c.given("for") && c.forD <= 0:
		return time.Time{}, usagef("--for %v is not positive (a pause without --for or --until has no end)", c.forD)
	case !c.given("until"):
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, c.until)
	if err != nil {
		return time.Time{}, usagef("--until %q is not an RFC 3339 time such as 2026-03-01T18:00:00Z", c.until)
	}
	if now := time.Now(); !t.After(now) {
		return time.Time{}, usagef("--until %s is in the past (this machine's clock says %s)", stamp(t), stamp(now.Truncate(time.Second)))
	}
	return t, nil
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
			return c.failed(ctx, client, "resume every job", job, err)
		}
		return c.failed(ctx, client, fmt.Sprintf("resume %q", job), job, err)
	}
	if c.jsonOut() {
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
			return c.failed(ctx, client, fmt.Sprintf("active runs of job %q", job), job, err)
		}
		if c.jsonOut() {
			return c.printJSON(a)
		}
		runs = a.Runs
	} else {
		// Every job's running runs are in the jobs reply: one scatter-gather.
		f, err := client.Jobs(ctx)
		if err != nil {
			return c.failed(ctx, client, "active runs", "", err)
		}
		runs = []fleet.ActiveRun{}
		for _, j := range f.Jobs {
			runs = append(runs, j.Running...)
			if j.RunningMore > 0 {
				unlisted = append(unlisted, fmt.Sprintf("%d more unfinished runs of %q than listed: %s lists them all",
					j.RunningMore, j.Name, cmdline("active", []string{j.Name})))
			}
		}
		if c.jsonOut() {
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
	now := time.Now()
	var t *table
	if c.wide() {
		t = newTable(fixed("JOB"), fixed("SLOT"), fixed("INSTANCE"), fixed("ATTEMPT"), fixed("FENCE"), fixed("LIVE"), fixed("EXPIRES"))
	} else {
		t = newTable(cut("JOB"), fixed("SLOT"), cut("INSTANCE"), fixed("ATTEMPT"), cut("LIVE"), fixed("EXPIRES"))
	}
	for _, r := range runs {
		live, short := "yes", "yes"
		switch {
		case r.Buffered:
			live, short = "buffered (runs when the run before it ends)", "buffered"
		case r.CancelBy != nil:
			live = "cancelling for " + stamp(r.CancelBy.Slot) + " (asked by " + r.CancelBy.Instance + ")"
			short = "cancelling (asked by " + r.CancelBy.Instance + ")"
		case !r.RetryAt.IsZero():
			live, short = "retry at "+stampAgo(r.RetryAt, now), "retry "+ago(r.RetryAt, now)
		case !r.Live:
			live, short = "no", "no"
		}
		expires := "-" // a run waiting for its retry holds no lease
		if !r.Expires.IsZero() && r.RetryAt.IsZero() {
			expires = ago(r.Expires, now)
			if c.wide() {
				expires = stampAgo(r.Expires, now)
			}
		}
		if c.wide() {
			t.add(r.Job, stamp(r.Slot), r.Instance, fmt.Sprint(r.Attempt), fmt.Sprint(r.Fence), live, expires)
			continue
		}
		t.add(r.Job, stamp(r.Slot), r.Instance, fmt.Sprint(r.Attempt), short, expires)
	}
	return t.write(c.stdout, c.width())
}

// watch prints the replicas' events until ctx ends (an interrupt): one line each,
// or one JSON object per line with --json.
func (c *cli) watch(ctx context.Context, client *fleet.Client, job string) error {
	enc := json.NewEncoder(c.stdout)
	if !c.jsonOut() {
		what := "every job"
		if job != "" {
			what = fmt.Sprintf("%q", job)
		}
		fmt.Fprintf(c.stderr, "watching %s (replicas publish with fleet.Events); interrupt to stop\n", what)
	}
	err := client.Watch(ctx, job, func(e fleet.Event) {
		if c.entry != "" && e.Entry != c.entry {
			return
		}
		if c.jsonOut() {
			_ = enc.Encode(e)
			return
		}
		makeVisible(&e)
		fmt.Fprintln(c.stdout, eventLine(e))
	})
	if err != nil {
		return c.failed(ctx, client, "watch", job, err)
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return c.failed(ctx, client, "watch", job, cause)
	}
	return nil
}

// eventLine writes an event for a person: when, where, what, then its details.
func eventLine(e fleet.Event) string {
	job := e.Job
	if job == "" {
		job = "(all jobs)"
	}
	if e.Entry != "" {
		job += " entry " + e.Entry
	}
	parts := []string{stamp(e.At), e.Instance, job, string(e.Kind)}
	if !e.Slot.IsZero() {
		parts = append(parts, "slot "+stamp(e.Slot))
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
			parts = append(parts, "next "+stamp(e.Next))
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

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// noSlots says that a backfill found no slot in its range.
func (c *cli) noSlots(job string, from, to time.Time) error {
	of := fmt.Sprintf("%q", job)
	switch {
	case c.entry != "":
		of = fmt.Sprintf("entry %q of %q", c.entry, job)
	case c.allEntries:
		of = fmt.Sprintf("the entries of %q", job)
	}
	fmt.Fprintf(c.stdout, "no slot of %s falls in [%s, %s): nothing to run\n", visible(of), stamp(from), stamp(to))
	return nil
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
		return from, to, usagef("--from %s is not before --to %s", stamp(from), stamp(to))
	}
	return from, to, nil
}

func (c *cli) backfill(ctx context.Context, client *fleet.Client, job string, from, to time.Time) error {
	in := fleet.BackfillRequest{From: from, To: to, Rerun: c.rerun, By: c.by, Wait: c.wait, Entry: c.entry, AllEntries: c.allEntries}
	r, err := client.Backfill(ctx, job, in)
	op, hint := fmt.Sprintf("backfill %q", job), cmdline("history", []string{job})
	switch {
	case c.entry != "":
		op, hint = fmt.Sprintf("backfill entry %q of %q", c.entry, job), cmdline("history", []string{job}, "entry", c.entry)
	case c.allEntries:
		op, hint = fmt.Sprintf("backfill the entries of %q", job), cmdline("schedule ls", []string{job})
	}
	if err != nil && r.State == "" {
		return c.failed(ctx, client, op, job, err)
	}
	if c.jsonOut() {
		if jerr := c.printJSON(r); jerr != nil {
			return jerr
		}
	}
	if total := sumCounts(r.Counts); total == 0 && err == nil && r.Error == "" && !c.jsonOut() {
		return c.noSlots(job, from, to)
	}
	makeVisible(&r)
	what := visible(strings.TrimPrefix(op, "backfill "))
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
	case c.jsonOut():
	case r.State != fleet.StateFinished:
		fmt.Fprintf(c.stdout, "backfilling %s on %s (by %s): %s; %s shows how they end\n", what, r.Instance, r.By, orDash(counts()), hint)
	default:
		entries := false
		for _, s := range r.Slots {
			entries = entries || s.Entry != ""
		}
		cols := []column{fixed("SLOT")}
		if entries {
			cols = append(cols, cut("ENTRY"))
		}
		cols = append(cols, cut("OUTCOME"), fixed("STATUS"), cut("INSTANCE"), fixed("ATTEMPT"), cutFirst("ERROR"))
		t := newTable(cols...)
		for _, s := range r.Slots {
			attempt := "-"
			if s.Attempt > 0 {
				attempt = fmt.Sprint(s.Attempt)
			}
			row := []string{stamp(s.Slot)}
			if entries {
				row = append(row, orDash(s.Entry))
			}
			row = append(row, strings.ReplaceAll(s.Outcome, "_", " "), orDash(string(s.Status)), orDash(s.Instance), attempt, oneLine(s.Error))
			t.add(row...)
		}
		if werr := t.write(c.stdout, c.width()); werr != nil {
			return werr
		}
		fmt.Fprintf(c.stdout, "backfilled %s on %s (by %s): %s\n", what, r.Instance, r.By, orDash(counts()))
	}
	if err != nil {
		return c.failed(ctx, client, op, job, err)
	}
	if r.Error != "" {
		return fmt.Errorf("%s on %s: %s", op, r.Instance, plain(r.Error))
	}
	return nil
}
