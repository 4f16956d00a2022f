package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

func (c *cli) describeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "describe JOB [ENTRY]",
		Short: "Everything about a job, or one of its schedule entries: state, policies, limits, runs",
		Long: `describe shows a job as the fleet knows it: its state, schedule, next slot, and every
policy and limit its replicas declare in the registry (daylight saving, overlap, catch-up
and its window, lease, lateness, jitter, timeout, retry, run limit, manual runs, pause
after failures, buffer cap, dedupe window, retention), per replica where they differ;
then its last runs, runs in progress, replicas and schedule entries. With an ENTRY, the entry: its
schedule, bounds, state, payload, revision and who changed it (the --by given, the NATS
user, the replica), its runs, and the job's policies it runs under. --json prints what it
read: the job's summary and its declarations.`,
		Example: `  anarchon describe report
  anarchon describe feeds eu-west`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || len(args) > 2 {
				return usagef("%s takes a JOB and, for one of its schedule entries, an ENTRY; got %d arguments", path(cmd), len(args))
			}
			return nil
		},
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				if len(args) == 2 {
					return c.describeEntry(ctx, client, args[0], args[1])
				}
				return c.describe(ctx, client, args[0])
			})
		},
	}
}

// Description is what describe --json prints: the job as the jobs view sums it
// up, and what each replica declares of it in the registry.
type Description struct {
	Job          fleet.JobSummary  `json:"job"`
	Declarations []DeclaredBy      `json:"declarations"`
	Replicas     []fleet.Replica   `json:"replicas,omitempty"`
	Entry        *fleet.EntryReply `json:"entry,omitempty"`
	Warnings     []string          `json:"warnings,omitempty"`
}

// DeclaredBy is one replica's declaration of the job.
type DeclaredBy struct {
	Instance    string            `json:"instance"`
	Declaration fleet.Declaration `json:"declaration"`
}

type fieldVals map[string][]string // value → the replicas that declare it

// find reads the job's summary and declarations; a job that no replica
// declares is the fleet's unknown-job error.
func (c *cli) find(ctx context.Context, client *fleet.Client, job string) (*Description, error) {
	f, err := client.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	d := &Description{}
	i := slices.IndexFunc(f.Jobs, func(j fleet.JobSummary) bool { return j.Name == job })
	if i < 0 {
		var up []string
		for _, r := range f.Replicas {
			up = append(up, r.Instance)
		}
		sort.Strings(up)
		return nil, &fleet.NoReplicaError{Job: job, Up: slices.Compact(up), Checked: true}
	}
	d.Job = f.Jobs[i]
	for _, r := range f.Registered {
		for _, decl := range r.Jobs {
			if decl.Name == job {
				d.Declarations = append(d.Declarations, DeclaredBy{Instance: r.Instance, Declaration: decl})
			}
		}
	}
	for _, r := range f.Replicas {
		if slices.Contains(d.Job.Replicas, r.Instance) {
			r.Jobs = slices.DeleteFunc(slices.Clone(r.Jobs), func(s fleet.JobState) bool { return s.Name != job })
			d.Replicas = append(d.Replicas, r)
		}
	}
	d.Warnings = append(d.Warnings, d.Job.Warnings...)
	if len(d.Declarations) == 0 {
		d.Warnings = append(d.Warnings, "no replica that declares the job is in the registry: its policies are not known (a replica served WithoutRegistry?)")
	}
	return d, nil
}

// policies are the declared policies and limits in words, each with the replicas
// that declare each value.
func (d *Description) policies() ([]string, map[string]fieldVals) {
	order := []string{"daylight saving", "overlap", "catch-up", "catch-up window", "lease", "max lateness", "jitter", "timeout", "retry",
		"run limit", "manual runs", "pause after", "buffer cap", "concurrency", "dedupe window", "retention"}
	vals := map[string]fieldVals{}
	for _, db := range d.Declarations {
		x := db.Declaration
		pairs := [][2]string{
			{"overlap", explained(x.Overlap, overlapWords)},
			{"catch-up", explained(x.CatchUp, catchUpWords)},
			{"lease", msText(x.LeaseMS, "none: no backup takes over (no run store)")},
			{"max lateness", msText(x.MaxLateMS, "none")},
			{"jitter", msText(x.JitterMS, "none")},
			{"timeout", msText(x.TimeoutMS, "none")},
			{"run limit", runLimit(x.MaxRuns)},
		}
		for _, f := range []string{"daylight saving", "catch-up window", "retry", "manual runs", "pause after", "buffer cap", "concurrency", "dedupe window", "retention"} {
			if f == "daylight saving" && !strings.HasPrefix(x.Schedule, "CRON_TZ=") && !strings.HasPrefix(x.Schedule, "TZ=") {
				continue // only a cron schedule has one
			}
			v := fleet.PolicyText(f, x)
			if v == "" {
				v = "not declared (an earlier version)"
			}
			pairs = append(pairs, [2]string{f, v})
		}
		for _, kv := range pairs {
			if vals[kv[0]] == nil {
				vals[kv[0]] = fieldVals{}
			}
			vals[kv[0]][kv[1]] = append(vals[kv[0]][kv[1]], db.Instance)
		}
	}
	return order, vals
}

// overlapWords and catchUpWords say what each policy does.
var (
	overlapWords = map[string]string{
		"allow":        "runs of the job may overlap",
		"skip":         "a slot due while a run is in progress is recorded skipped",
		"cancel-other": "a slot due while a run is in progress asks that run to end, then runs",
		"buffer-one":   "one slot due while a run is in progress waits for it; the others are skipped",
		"buffer-all":   "every slot due while a run is in progress waits its turn",
	}
	catchUpWords = map[string]string{
		"none":   "slots missed while no replica could run them are recorded late",
		"latest": "the newest missed slot runs, within the catch-up window",
		"all":    "every missed slot runs, within the catch-up window",
	}
)

func explained(v string, words map[string]string) string {
	if w, ok := words[v]; ok {
		return v + ": " + w
	}
	return v
}

func msText(v int64, zero string) string {
	if v == 0 {
		return zero
	}
	return (time.Duration(v) * time.Millisecond).String()
}

func runLimit(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d runs, counted fleet-wide", n)
}

// valueText says a policy's value, or each value with the replicas that declare
// it when they differ.
func valueText(v fieldVals) string {
	if len(v) == 1 {
		for k := range v {
			return k
		}
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s (%s)", k, strings.Join(v[k], ", "))
	}
	return strings.Join(parts, "; ") + "  [replicas differ]"
}

func (c *cli) describe(ctx context.Context, client *fleet.Client, job string) error {
	d, err := c.find(ctx, client, job)
	if err != nil {
		return c.failed(ctx, client, fmt.Sprintf("describe job %q", job), job, err)
	}
	if c.jsonOut() {
		return c.printJSON(d)
	}
	makeVisible(d)
	now := time.Now()
	j := d.Job
	kv := &pairs{}
	kv.add("job", j.Name)
	kv.add("state", jobState(j))
	sched := j.ScheduleText
	if j.Schedules != nil {
		var parts []string
		for s, on := range j.Schedules {
			parts = append(parts, fmt.Sprintf("%s (%s)", scheduler.DescribeSchedule(s), strings.Join(on, ", ")))
		}
		sort.Strings(parts)
		sched = strings.Join(parts, "; ") + "  [replicas differ]"
	}
	kv.add("schedule", orDash(sched))
	kv.add("next", stampAgo(j.Next, now))
	order, vals := d.policies()
	for _, f := range order {
		if v, ok := vals[f]; ok {
			kv.add(f, valueText(v))
		}
	}
	kv.add("last run", lastRunWide(j.LastRun, now))
	kv.add("last success", lastAt(j.LastSuccess, now))
	kv.add("last failure", lastFailure(j.LastFailure, now))
	kv.add("running", running(j.Running)+more(j.RunningMore))
	var reps []string
	for _, r := range d.Replicas {
		reps = append(reps, fmt.Sprintf("%s (%s, %s)", r.Instance, r.Version, r.Backend))
	}
	kv.add("replicas", orDash(strings.Join(reps, ", ")))
	if e := j.Entries; e != nil {
		kv.add("entries", fmt.Sprintf("%s; %s lists them", e.Counts(), cmdline("schedule ls", []string{job})))
		if f := failingText(e); f != "" {
			kv.add("failing entries", f)
		}
	} else if n, more := c.entryCount(ctx, client, job); n > 0 {
		count := fmt.Sprint(n)
		if more {
			count = fmt.Sprintf("more than %d", n)
		}
		kv.add("entries", fmt.Sprintf("%s; %s lists them", count, cmdline("schedule ls", []string{job})))
	}
	kv.write(c.stdout)
	for _, w := range d.Warnings {
		c.warn("%s", w)
	}
	c.warnDiffer(job, order, vals)
	return nil
}

// warnDiffer warns when the replicas declare a job's policies differently.
func (c *cli) warnDiffer(job string, order []string, vals map[string]fieldVals) {
	var differ []string
	for _, f := range order {
		if len(vals[f]) > 1 {
			differ = append(differ, f)
		}
	}
	if len(differ) > 0 {
		c.warn("replicas declare job %q with different %s: a rolling upgrade, or configurations that differ", job, strings.Join(differ, ", "))
	}
}

func (c *cli) describeEntry(ctx context.Context, client *fleet.Client, job, id string) error {
	d, err := c.find(ctx, client, job)
	if err != nil {
		return c.failed(ctx, client, fmt.Sprintf("describe entry %q of job %q", id, job), job, err)
	}
	r, err := client.Entry(ctx, job, fleet.EntryRequest{ID: id, History: 5})
	if err != nil {
		return c.failed(ctx, client, fmt.Sprintf("describe entry %q of job %q", id, job), job, err)
	}
	d.Entry = &r
	if c.jsonOut() {
		return c.printJSON(d)
	}
	makeVisible(d)
	e, now := d.Entry.Entry, time.Now()
	kv := &pairs{}
	kv.add("entry", e.ID)
	kv.add("job", e.Job)
	kv.add("schedule", entrySchedule(e.Entry))
	kv.add("state", entryState(e))
	kv.add("next", fmt.Sprintf("%s (on %s)", stampAgo(e.Next, now), d.Entry.Instance))
	kv.add("payload", payloadText(e.Payload))
	kv.add("revision", fmt.Sprintf("%d, written %s", e.Revision, stampAgo(e.Updated, now)))
	kv.add("changed by", changedBy(e.Entry))
	order, vals := d.policies()
	for _, f := range order {
		if v, ok := vals[f]; ok && f != "daylight saving" { // an entry's is its own, in its schedule
			kv.add(f, valueText(v)+" (the job's)")
		}
	}
	kv.add("last run", lastRunWide(e.LastRun, now))
	kv.add("last success", lastAt(e.LastSuccess, now))
	kv.add("last failure", lastFailure(e.LastFailure, now))
	kv.write(c.stdout)
	fmt.Fprintln(c.stdout)
	if len(d.Entry.Runs) == 0 {
		fmt.Fprintln(c.stdout, "no runs recorded")
	} else if err := c.runsTable(d.Entry.Runs); err != nil {
		return err
	}
	for _, w := range d.Warnings {
		c.warn("%s", w)
	}
	return nil
}

// entryCount counts a job's schedule entries, up to a page of them; none when
// the replica cannot say (a backend without entries).
func (c *cli) entryCount(ctx context.Context, client *fleet.Client, job string) (int, bool) {
	r, err := client.Entries(ctx, job, fleet.EntriesRequest{Limit: fleet.MaxEntriesLimit})
	if err != nil {
		return 0, false
	}
	return len(r.Entries), r.Next != ""
}

// pairs are a key-value listing: the keys in a column, the values after them.
type pairs struct{ keys, values []string }

func (p *pairs) add(k, v string) { p.keys, p.values = append(p.keys, k), append(p.values, v) }

func (p *pairs) write(w io.Writer) {
	width := 0
	for _, k := range p.keys {
		width = max(width, runes(k))
	}
	for i, k := range p.keys {
		fmt.Fprintf(w, "%s%s  %s\n", k, strings.Repeat(" ", width-runes(k)), p.values[i])
	}
}
