package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// scheduleFlags are the flags of the schedule command: an entry's spec for add
// and set, the revision for set and rm, the page for ls.
type scheduleFlags struct {
	every, cron, zone, at, start, end string
	payload, payloadFile, deadline    string
	dstRepeated, dstMissing           string
	calendars                         []string
	paused                            bool
	rev                               uint64
	after                             string
	limit                             int
}

// specFlags registers the flags of an entry's spec (add and set).
func (p *scheduleFlags) specFlags(fs *pflag.FlagSet) {
	fs.StringVar(&p.every, "every", "", "run on the multiples of this interval (a Go duration: 90m)")
	fs.StringVar(&p.cron, "cron", "", "run on this cron expression (5 fields, or 6 with seconds)")
	fs.StringVar(&p.zone, "zone", "", "the IANA time zone of --cron (default UTC)")
	fs.StringVar(&p.at, "at", "", "run once at this time (RFC 3339, or +D from now)")
	fs.StringVar(&p.start, "start", "", "no slot before this time (RFC 3339, or +D from now; empty: none)")
	fs.StringVar(&p.end, "end", "", "no slot after this time (RFC 3339, or +D from now; empty: none)")
	fs.StringVar(&p.payload, "payload", "", "the payload handed to every run (at most 16 KiB)")
	fs.StringVar(&p.payloadFile, "payload-file", "", "read the payload from this file (- for stdin)")
	fs.BoolVar(&p.paused, "paused", false, "store the entry paused (set: --paused=false resumes it)")
	fs.StringVar(&p.deadline, "deadline", "", "each slot must have ended ok this long after its time, or is recorded deadline (a Go duration: 30m; empty: the job's)")
	fs.StringVar(&p.dstRepeated, "dst-repeated", "", "a --cron time that clocks repeat (fall back) runs at its first, last or both occurrences: first|last|both (empty: first)")
	fs.StringSliceVar(&p.calendars, "calendar", nil, "exclude the days of this calendar (repeat; set: replaces them, --calendar= none)")
	fs.StringVar(&p.dstMissing, "dst-missing", "", "a --cron time that clocks skip (spring forward) runs later by the jump, or not: shift|skip (empty: shift)")
}

// specNames are the flags of an entry's spec.
var specNames = []string{"every", "cron", "zone", "at", "start", "end", "payload", "payload-file", "paused", "deadline", "dst-repeated", "dst-missing", "calendar"}

// entryArgs is the Args of a schedule action about one entry.
func entryArgs(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) < 2:
		return usagef("%s needs a JOB and an entry ID", path(cmd))
	case len(args) > 2:
		return usagef("%s takes a JOB and an entry ID, got %d arguments (quote a name with spaces)", path(cmd), len(args))
	}
	if err := backend.ValidateEntryID(args[1]); err != nil {
		return usagef("entry ID %q: %v", args[1], errors.Unwrap(err))
	}
	return nil
}

func (c *cli) scheduleCommand() *cobra.Command {
	group := &cobra.Command{
		Use:   "schedule",
		Short: "A job's schedule entries: ls, show, add, set, rm",
		Long: `schedule operates a job's schedule entries: schedules stored in the backend at runtime
and run by every replica that declares the job, each slot once. The entries of a job no
replica declares stay stored and are never run, and no replica answers for them.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return groupArgs(cmd, args) },
	}
	run := func(action string) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if err := c.checkSpec(action); err != nil {
				return err
			}
			id := ""
			if len(args) > 1 {
				id = args[1]
			}
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.schedule(ctx, client, action, args[0], id)
			})
		}
	}
	ls := &cobra.Command{
		Use:               "ls JOB",
		Short:             "List a page of a job's entries, ordered by ID",
		Args:              oneJob,
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.sched.limit < 0 {
				return usagef("--limit %d is negative", c.sched.limit)
			}
			return run("ls")(cmd, args)
		},
	}
	ls.Flags().StringVar(&c.sched.after, "after", "", "list the entries after this ID (the next page)")
	ls.Flags().IntVar(&c.sched.limit, "limit", 0, "how many entries (default 50, at most 100)")
	show := &cobra.Command{
		Use:   "show JOB ID",
		Short: "One entry with its payload and recent runs",
		Args:  entryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.n < 0 {
				return usagef("-n %d is negative", c.n)
			}
			return run("show")(cmd, args)
		},
	}
	show.Flags().IntVarP(&c.n, "n", "n", 0, "how many recent runs")
	add := &cobra.Command{
		Use:   "add JOB ID (--every D | --cron E [--zone Z] [--dst-…] | --at T)",
		Short: "Store an entry",
		Example: `  anarchon schedule add feeds eu-west --cron "0 9 * * *" --zone Europe/Athens \
    --payload '{"region":"eu-west"}'
  anarchon schedule add feeds ny-night --cron "30 1 * * *" --zone America/New_York \
    --dst-repeated both
  anarchon schedule add feeds once --at +10m`,
		Args: entryArgs,
		RunE: run("add"),
	}
	c.sched.specFlags(add.Flags())
	set := &cobra.Command{
		Use:   "set JOB ID [--rev N] [the flags of add that change]",
		Short: "Change the flags given on an entry, stored only if nobody changed it since",
		Long: `set changes the flags given on the entry as read (an empty --start or --end removes the
bound) and stores it only if nobody changed it since it was read, or since --rev N: a
conflict stores nothing and says so.`,
		Example: `  anarchon schedule set feeds eu-west --paused
  anarchon schedule set feeds eu-west --every 30m --rev 4`,
		Args: entryArgs,
		RunE: run("set"),
	}
	c.sched.specFlags(set.Flags())
	set.Flags().Uint64Var(&c.sched.rev, "rev", 0, "the revision the change is based on")
	rm := &cobra.Command{
		Use:   "rm JOB ID [--rev N]",
		Short: "Remove an entry",
		Args:  entryArgs,
		RunE:  run("rm"),
	}
	rm.Flags().Uint64Var(&c.sched.rev, "rev", 0, "remove it only if its revision is this")
	group.AddCommand(ls, show, add, set, rm)
	return group
}

// checkSpec checks the spec flags of add and set before any request.
func (c *cli) checkSpec(action string) error {
	if action != "add" && action != "set" {
		return nil
	}
	var kinds []string
	for _, k := range []string{"every", "cron", "at"} {
		if c.given(k) {
			kinds = append(kinds, "--"+k)
		}
	}
	switch {
	case len(kinds) > 1:
		return usagef("%s conflict: an entry has one schedule, give one of --every, --cron and --at", strings.Join(kinds, " and "))
	case action == "add" && len(kinds) == 0:
		return usagef("schedule add needs a schedule: one of --every, --cron and --at")
	case c.given("zone") && !c.given("cron") && action == "add":
		return usagef("--zone is the time zone of --cron; give --cron too")
	case c.givenDST() != "" && !c.given("cron") && (action == "add" || len(kinds) > 0):
		return usagef("--%s is the daylight saving time policy of --cron; give --cron too", c.givenDST())
	case !slices.Contains([]string{"", "first", "last", "both"}, c.sched.dstRepeated):
		return usagef("--dst-repeated %q: want first, last or both", c.sched.dstRepeated)
	case !slices.Contains([]string{"", "shift", "skip"}, c.sched.dstMissing):
		return usagef("--dst-missing %q: want shift or skip", c.sched.dstMissing)
	case c.given("payload") && c.given("payload-file"):
		return usagef("give --payload or --payload-file, not both")
	case action == "set" && !c.specGiven():
		return usagef("schedule set changes nothing without a flag: give the schedule, bounds, payload, calendars or --paused to change")
	}
	return nil
}

// givenDST is the first DST flag given, "" when none is.
func (c *cli) givenDST() string {
	for _, f := range []string{"dst-repeated", "dst-missing"} {
		if c.given(f) {
			return f
		}
	}
	return ""
}

// specGiven reports whether a flag of the entry's spec was given.
func (c *cli) specGiven() bool {
	return slices.ContainsFunc(specNames, c.given)
}

// entryTime reads a time flag: RFC 3339, or +D (a duration from now).
func entryTime(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, ok := strings.CutPrefix(v, "+"); ok {
		dd, err := time.ParseDuration(d)
		if err != nil || dd < 0 {
			return time.Time{}, usagef("--%s %q: +D wants a duration from now (+10m)", name, v)
		}
		return now.Add(dd), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usagef("--%s %q is neither an RFC 3339 time nor +D from now (+10m)", name, v)
	}
	return t, nil
}

// applySpec changes spec by the flags given: a schedule flag replaces the
// schedule (a new --cron keeps the zone and DST policy of a cron schedule
// unless --zone or --dst-* are given), an empty --start or --end removes the
// bound, an empty --dst-* returns to the default.
func (c *cli) applySpec(spec fleet.EntrySpec, now time.Time) (fleet.EntrySpec, error) {
	p, g := &c.sched, c.given
	if g("every") || g("cron") || g("at") {
		zone, repeated, missing := spec.Zone, spec.DSTRepeated, spec.DSTMissing
		spec.Every, spec.Cron, spec.Zone, spec.At, spec.DSTRepeated, spec.DSTMissing = "", "", "", time.Time{}, "", ""
		if g("cron") && !g("every") && !g("at") {
			spec.Zone, spec.DSTRepeated, spec.DSTMissing = zone, repeated, missing
		}
	}
	if g("every") {
		spec.Every = p.every
	}
	if g("cron") {
		spec.Cron = p.cron
	}
	if g("zone") {
		spec.Zone = p.zone
	}
	if g("dst-repeated") {
		spec.DSTRepeated = p.dstRepeated
	}
	if g("dst-missing") {
		spec.DSTMissing = p.dstMissing
	}
	var err error
	if g("at") {
		if p.at == "" {
			return spec, usagef("--at needs a time")
		}
		if spec.At, err = entryTime("at", p.at, now); err != nil {
			return spec, err
		}
	}
	if g("start") {
		if spec.Start, err = entryTime("start", p.start, now); err != nil {
			return spec, err
		}
	}
	if g("end") {
		if spec.End, err = entryTime("end", p.end, now); err != nil {
			return spec, err
		}
	}
	switch {
	case g("payload"):
		spec.Payload = []byte(p.payload)
	case g("payload-file"):
		var data []byte
		if p.payloadFile == "-" {
			data, err = readAllLimited(os.Stdin)
		} else {
			data, err = readFileLimited(p.payloadFile)
		}
		if err != nil {
			return spec, fmt.Errorf("--payload-file: %w", err)
		}
		spec.Payload = data
	}
	if len(spec.Payload) > backend.MaxEntryPayload {
		return spec, usagef("a payload of %d bytes: at most %d", len(spec.Payload), backend.MaxEntryPayload)
	}
	if g("paused") {
		spec.Paused = p.paused
	}
	if g("calendar") {
		spec.Calendars = p.calendars
	}
	if g("deadline") {
		spec.Deadline = ""
		if p.deadline != "" {
			d, err := time.ParseDuration(p.deadline)
			if err != nil || d <= 0 {
				return spec, usagef("--deadline %q: a positive Go duration (30m), or empty for the job's", p.deadline)
			}
			spec.Deadline = d.String()
		}
	}
	return spec, nil
}

// readFileLimited reads a payload file, refusing one larger than an entry holds
// without reading all of it.
func readFileLimited(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllLimited(f)
}

func readAllLimited(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, backend.MaxEntryPayload+1))
	if err != nil {
		return nil, err
	}
	if len(data) > backend.MaxEntryPayload {
		return nil, fmt.Errorf("more than %d bytes: a payload is at most that", backend.MaxEntryPayload)
	}
	return data, nil
}

// schedule runs one action of the schedule command.
func (c *cli) schedule(ctx context.Context, client *fleet.Client, action, job, id string) error {
	now := time.Now()
	switch action {
	case "ls":
		return c.scheduleList(ctx, client, job)
	case "show":
		return c.scheduleShow(ctx, client, job, id)
	case "add":
		spec, err := c.applySpec(fleet.EntrySpec{}, now)
		if err != nil {
			return err
		}
		r, err := client.AddEntry(ctx, job, fleet.AddEntryRequest{ID: id, EntrySpec: spec, By: c.by})
		if err != nil {
			return c.failed(ctx, client, fmt.Sprintf("schedule add %q %q", job, id), job, err)
		}
		return c.entryChanged("added", r)
	case "set":
		// The change is made on the entry as read, and stored only if nobody
		// changed it since (its revision, or --rev when given).
		cur, err := client.Entry(ctx, job, fleet.EntryRequest{ID: id, History: 1})
		if err != nil {
			return c.failed(ctx, client, fmt.Sprintf("schedule set %q %q", job, id), job, err)
		}
		spec, err := c.applySpec(cur.Entry.EntrySpec, now)
		if err != nil {
			return err
		}
		rev := cur.Entry.Revision
		if c.given("rev") {
			rev = c.sched.rev
		}
		r, err := client.UpdateEntry(ctx, job, fleet.UpdateEntryRequest{ID: id, Rev: rev, EntrySpec: spec, By: c.by})
		if err != nil {
			return c.failed(ctx, client, fmt.Sprintf("schedule set %q %q", job, id), job, err)
		}
		return c.entryChanged("updated", r)
	default:
		r, err := client.RemoveEntry(ctx, job, fleet.RemoveEntryRequest{ID: id, Rev: c.sched.rev, By: c.by})
		if err != nil {
			return c.failed(ctx, client, fmt.Sprintf("schedule rm %q %q", job, id), job, err)
		}
		if c.jsonOut() {
			return c.printJSON(r)
		}
		makeVisible(&r)
		fmt.Fprintf(c.stdout, "removed entry %q of %q on %s; every replica stops it within a second (a run in progress finishes)\n", id, job, r.Instance)
		return nil
	}
}

func (c *cli) entryChanged(what string, r fleet.EntryChangeReply) error {
	if c.jsonOut() {
		return c.printJSON(r)
	}
	makeVisible(&r)
	fmt.Fprintf(c.stdout, "%s entry %q of %q on %s: %s%s, revision %d; every replica follows within a second\n",
		what, r.Entry.ID, r.Job, r.Instance, entrySchedule(r.Entry), pausedText(r.Entry.Paused), r.Entry.Revision)
	return nil
}

func pausedText(paused bool) string {
	if paused {
		return " (paused)"
	}
	return ""
}

// entrySchedule says an entry's schedule in words, with its bounds.
func entrySchedule(e fleet.Entry) string {
	var s string
	switch {
	case e.Every != "":
		s = scheduler.DescribeSchedule("every " + e.Every)
	case e.Cron != "":
		dst := scheduler.DSTPolicy{Repeated: scheduler.DSTRepeated(e.DSTRepeated), Missing: scheduler.DSTMissing(e.DSTMissing)}
		s = scheduler.DescribeSchedule(scheduler.CronText(e.Cron, e.Zone, dst))
	case !e.At.IsZero():
		s = "once at " + stamp(e.At)
	default:
		s = "-"
	}
	if !e.Start.IsZero() {
		s += ", from " + stamp(e.Start)
	}
	if !e.End.IsZero() {
		s += ", until " + stamp(e.End)
	}
	if e.Deadline != "" {
		s += ", deadline " + e.Deadline
	}
	return s
}

// entryState is paused, active, or why no replica that answered runs it.
func entryState(e fleet.EntryView) string {
	switch {
	case e.Paused:
		return "paused"
	case !e.Followed:
		return "not followed on the replica that answered (loading, or it cannot run the schedule: its log says why)"
	case e.Next.IsZero():
		return "ended"
	}
	return "active"
}

func (c *cli) scheduleList(ctx context.Context, client *fleet.Client, job string) error {
	r, err := client.Entries(ctx, job, fleet.EntriesRequest{After: c.sched.after, Limit: c.sched.limit})
	if err != nil {
		var nr *fleet.NoReplicaError
		if errors.As(err, &nr) && len(nr.Up) > 0 {
			return fmt.Errorf("schedule ls %q: no replica declares job %q (replicas up: %s); the entries of a job no replica declares stay stored and never run: declare the job on a replica to list, change or remove them (anarchon jobs --json counts them per replica, orphaned_entries)",
				job, job, upList(nr.Up))
		}
		return c.failed(ctx, client, fmt.Sprintf("schedule ls %q", job), job, err)
	}
	if c.jsonOut() {
		return c.printJSON(r)
	}
	next := r.Next // IDs have no control characters: visible leaves them as they are
	makeVisible(&r)
	if len(r.Entries) == 0 {
		if c.sched.after != "" {
			fmt.Fprintf(c.stdout, "no entries of %q after %q\n", job, c.sched.after)
		} else {
			fmt.Fprintf(c.stdout, "no entries of %q\n", job)
		}
		return nil
	}
	now := time.Now()
	var t *table
	if c.wide() {
		t = newTable(fixed("ID"), fixed("SCHEDULE"), fixed("STATE"), fixed("NEXT"), fixed("LAST RUN"), fixed("LAST SUCCESS"),
			fixed("LAST FAILURE"), fixed("PAYLOAD"), fixed("REV"), fixed("BY"))
	} else {
		t = newTable(cut("ID"), cut("SCHEDULE"), fixed("STATE"), fixed("NEXT"), cut("LAST RUN"), fixed("FAILED"), fixed("REV"))
	}
	for _, e := range r.Entries {
		state := entryState(e)
		if !e.Paused && !e.Followed {
			state = "not followed"
		}
		if c.wide() {
			t.add(e.ID, entrySchedule(e.Entry), state, stampAgo(e.Next, now), lastRunWide(e.LastRun, now), lastAt(e.LastSuccess, now),
				lastFailure(e.LastFailure, now), size(e.PayloadSize), fmt.Sprint(e.Revision), orDash(e.By))
			continue
		}
		t.add(e.ID, compactSchedule(entrySchedule(e.Entry)), state, ago(e.Next, now), lastRun(e.LastRun, now), failedAgo(e.LastFailure, now),
			fmt.Sprint(e.Revision))
	}
	if err := t.write(c.stdout, c.width()); err != nil {
		return err
	}
	if next != "" {
		flags := []string{"after", next}
		if c.sched.limit > 0 {
			flags = append(flags, "limit", fmt.Sprint(c.sched.limit))
		}
		fmt.Fprintf(c.stdout, "more: %s\n", cmdline("schedule ls", []string{job}, flags...))
	}
	return nil
}

// changedBy says who made an entry's last change: the by given, the NATS user
// the server named, the replica that stored it.
func changedBy(e fleet.Entry) string {
	parts := []string{orDash(e.By)}
	if e.User != "" {
		parts = append(parts, "NATS user "+e.User)
	}
	if e.Instance != "" && e.Instance != e.By {
		parts = append(parts, "through replica "+e.Instance)
	}
	return strings.Join(parts, ", ")
}

// size writes a payload's size.
func size(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%dB", n)
}

// maxPayloadShown is how much of a payload show prints; --json carries it all.
const maxPayloadShown = 512

func (c *cli) scheduleShow(ctx context.Context, client *fleet.Client, job, id string) error {
	r, err := client.Entry(ctx, job, fleet.EntryRequest{ID: id, History: c.n})
	if err != nil {
		return c.failed(ctx, client, fmt.Sprintf("schedule show %q %q", job, id), job, err)
	}
	if c.jsonOut() {
		return c.printJSON(r)
	}
	makeVisible(&r)
	e, now := r.Entry, time.Now()
	kv := &pairs{}
	kv.add("entry", e.ID+" of "+e.Job)
	kv.add("schedule", entrySchedule(e.Entry))
	kv.add("state", entryState(e))
	kv.add("next", fmt.Sprintf("%s (on %s)", stampAgo(e.Next, now), r.Instance))
	kv.add("payload", payloadText(e.Payload))
	kv.add("calendars", orDash(strings.Join(e.Calendars, ", ")))
	kv.add("revision", fmt.Sprintf("%d, written %s", e.Revision, stampAgo(e.Updated, now)))
	kv.add("changed by", changedBy(e.Entry))
	kv.add("last run", lastRunWide(e.LastRun, now))
	kv.add("last success", lastAt(e.LastSuccess, now))
	kv.add("last failure", lastFailure(e.LastFailure, now))
	kv.write(c.stdout)
	fmt.Fprintln(c.stdout)
	if len(r.Runs) == 0 {
		fmt.Fprintln(c.stdout, "no runs recorded")
		return nil
	}
	return c.runsTable(r.Runs)
}

// payloadText shows a payload for a person: its size, and its text when it is
// UTF-8, controls made visible and cut at maxPayloadShown.
func payloadText(p []byte) string {
	switch {
	case len(p) == 0:
		return "-"
	case !utf8.Valid(p):
		return fmt.Sprintf("%d bytes, not text (--json shows them in base64)", len(p))
	case len(p) > maxPayloadShown:
		return fmt.Sprintf("%d bytes: %s... (--json shows it whole)", len(p), visible(shorten(string(p), maxPayloadShown)))
	}
	return fmt.Sprintf("%d bytes: %s", len(p), visible(string(p)))
}
