package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// scheduleFlags are the flags of the schedule command: an entry's spec for add
// and set, the revision for set and rm, the page for ls.
type scheduleFlags struct {
	every, cron, zone, at, start, end string
	payload, payloadFile              string
	paused                            bool
	rev                               uint64
	after                             string
	limit                             int
}

func (p *scheduleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.every, "every", "", "run on the multiples of this interval (a Go duration: 90m)")
	fs.StringVar(&p.cron, "cron", "", "run on this cron expression (5 fields, or 6 with seconds)")
	fs.StringVar(&p.zone, "zone", "", "the IANA time zone of --cron (default UTC)")
	fs.StringVar(&p.at, "at", "", "run once at this time (RFC 3339, or +D from now)")
	fs.StringVar(&p.start, "start", "", "no slot before this time (RFC 3339, or +D from now; empty: none)")
	fs.StringVar(&p.end, "end", "", "no slot after this time (RFC 3339, or +D from now; empty: none)")
	fs.StringVar(&p.payload, "payload", "", "the payload handed to every run")
	fs.StringVar(&p.payloadFile, "payload-file", "", "read the payload from this file (- for stdin)")
	fs.BoolVar(&p.paused, "paused", false, "store the entry paused (set: --paused=false resumes it)")
	fs.Uint64Var(&p.rev, "rev", 0, "the revision the change is based on (set, rm)")
	fs.StringVar(&p.after, "after", "", "list the entries after this ID (ls)")
	fs.IntVar(&p.limit, "limit", 0, "how many entries (ls; default 50, at most 100)")
}

// registerSchedule registers the schedule command's flags, -n (show's recent
// runs) among them.
func (c *cli) registerSchedule(fs *flag.FlagSet) {
	c.sched.register(fs)
	fs.IntVar(&c.n, "n", c.n, "how many recent runs (show)")
}

// The schedule command's actions and the flags each takes.
var scheduleActions = map[string][]string{
	"ls":   {"after", "limit"},
	"show": {"n"},
	"add":  {"every", "cron", "zone", "at", "start", "end", "payload", "payload-file", "paused"},
	"set":  {"every", "cron", "zone", "at", "start", "end", "payload", "payload-file", "paused", "rev"},
	"rm":   {"rev"},
}

// commonFlags are the flags every command takes.
var commonFlags = map[string]bool{"context": true, "server": true, "prefix": true, "json": true, "timeout": true,
	"by": true, "inbox-prefix": true}

// scheduleArgs checks a schedule command line before any request: the action,
// JOB and ID, and that each flag given applies to the action.
func (c *cli) scheduleArgs(args []string) (action, job, id string, err error) {
	if len(args) == 0 {
		return "", "", "", usagef("schedule needs an action: ls, show, add, set or rm")
	}
	action = args[0]
	allowed, ok := scheduleActions[action]
	if !ok {
		return "", "", "", usagef("schedule %q: the actions are ls, show, add, set and rm", action)
	}
	want := 2 // JOB ID
	if action == "ls" {
		want = 1
	}
	switch rest := args[1:]; {
	case len(rest) < want && want == 1:
		return "", "", "", usagef("schedule ls needs a JOB")
	case len(rest) < want:
		return "", "", "", usagef("schedule %s needs a JOB and an entry ID", action)
	case len(rest) > want:
		return "", "", "", usagef("schedule %s takes %d arguments, got %d (quote a name with spaces)", action, want, len(rest))
	case want == 2:
		job, id = rest[0], rest[1]
	default:
		job = rest[0]
	}
	for name := range c.given {
		if !commonFlags[name] && !slices.Contains(allowed, name) {
			return "", "", "", usagef("schedule %s does not take --%s", action, name)
		}
	}
	if action != "ls" {
		if err := backend.ValidateEntryID(id); err != nil {
			return "", "", "", usagef("entry ID %q: %v", id, errors.Unwrap(err))
		}
	}
	switch {
	case action == "ls" && c.sched.limit < 0:
		return "", "", "", usagef("--limit %d is negative", c.sched.limit)
	case action == "show" && c.n < 0:
		return "", "", "", usagef("-n %d is negative", c.n)
	case c.given["payload"] && c.given["payload-file"]:
		return "", "", "", usagef("give --payload or --payload-file, not both")
	case action == "set" && !c.specGiven():
		return "", "", "", usagef("schedule set changes nothing without a flag: give the schedule, bounds, payload or --paused to change")
	}
	if action == "add" {
		kinds := 0
		for _, k := range []string{"every", "cron", "at"} {
			if c.given[k] {
				kinds++
			}
		}
		if kinds != 1 {
			return "", "", "", usagef("schedule add needs one of --every, --cron and --at")
		}
	}
	return action, job, id, nil
}

// specGiven reports whether a flag of the entry's spec was given.
func (c *cli) specGiven() bool {
	for _, name := range scheduleActions["add"] {
		if c.given[name] {
			return true
		}
	}
	return false
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
// schedule (a new --cron keeps the zone of a cron schedule unless --zone is
// given), an empty --start or --end removes the bound.
func (c *cli) applySpec(spec fleet.EntrySpec, now time.Time) (fleet.EntrySpec, error) {
	p, g := &c.sched, c.given
	if g["every"] || g["cron"] || g["at"] {
		zone := spec.Zone
		spec.Every, spec.Cron, spec.Zone, spec.At = "", "", "", time.Time{}
		if g["cron"] && !g["every"] && !g["at"] {
			spec.Zone = zone
		}
	}
	if g["every"] {
		spec.Every = p.every
	}
	if g["cron"] {
		spec.Cron = p.cron
	}
	if g["zone"] {
		spec.Zone = p.zone
	}
	var err error
	if g["at"] {
		if p.at == "" {
			return spec, usagef("--at needs a time")
		}
		if spec.At, err = entryTime("at", p.at, now); err != nil {
			return spec, err
		}
	}
	if g["start"] {
		if spec.Start, err = entryTime("start", p.start, now); err != nil {
			return spec, err
		}
	}
	if g["end"] {
		if spec.End, err = entryTime("end", p.end, now); err != nil {
			return spec, err
		}
	}
	switch {
	case g["payload"]:
		spec.Payload = []byte(p.payload)
	case g["payload-file"]:
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
	if g["paused"] {
		spec.Paused = p.paused
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
			return fmt.Errorf("schedule add %q %q: %w", job, id, err)
		}
		return c.entryChanged("added", r)
	case "set":
		// The change is made on the entry as read, and stored only if nobody
		// changed it since (its revision, or --rev when given).
		cur, err := client.Entry(ctx, job, fleet.EntryRequest{ID: id, History: 1})
		if err != nil {
			return fmt.Errorf("schedule set %q %q: %w", job, id, err)
		}
		spec, err := c.applySpec(cur.Entry.EntrySpec, now)
		if err != nil {
			return err
		}
		rev := cur.Entry.Revision
		if c.given["rev"] {
			rev = c.sched.rev
		}
		r, err := client.UpdateEntry(ctx, job, fleet.UpdateEntryRequest{ID: id, Rev: rev, EntrySpec: spec, By: c.by})
		if err != nil {
			return fmt.Errorf("schedule set %q %q: %w", job, id, err)
		}
		return c.entryChanged("updated", r)
	default:
		r, err := client.RemoveEntry(ctx, job, fleet.RemoveEntryRequest{ID: id, Rev: c.sched.rev, By: c.by})
		if err != nil {
			return fmt.Errorf("schedule rm %q %q: %w", job, id, err)
		}
		if c.json {
			return c.printJSON(r)
		}
		makeVisible(&r)
		fmt.Fprintf(c.stdout, "removed entry %q of %q on %s; every replica stops it within a second (a run in progress finishes)\n", id, job, r.Instance)
		return nil
	}
}

func (c *cli) entryChanged(what string, r fleet.EntryChangeReply) error {
	if c.json {
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
	case e.Cron != "" && e.Zone != "":
		s = scheduler.DescribeSchedule("CRON_TZ=" + e.Zone + " " + e.Cron)
	case e.Cron != "":
		s = scheduler.DescribeSchedule(e.Cron)
	case !e.At.IsZero():
		s = "once at " + e.At.UTC().Format(timeFormat)
	default:
		s = "-"
	}
	if !e.Start.IsZero() {
		s += ", from " + e.Start.UTC().Format(timeFormat)
	}
	if !e.End.IsZero() {
		s += ", until " + e.End.UTC().Format(timeFormat)
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
			return fmt.Errorf("schedule ls %q: %w; the entries of a job no replica declares stay stored and never run: declare the job on a replica to list, change or remove them (anarchon jobs --json counts them per replica, orphaned_entries)", job, err)
		}
		return fmt.Errorf("schedule ls %q: %w", job, err)
	}
	if c.json {
		return c.printJSON(r)
	}
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
	w := c.table()
	fmt.Fprintln(w, "ID\tSCHEDULE\tSTATE\tNEXT\tLAST RUN\tLAST SUCCESS\tLAST FAILURE\tPAYLOAD\tREV")
	for _, e := range r.Entries {
		state := entryState(e)
		if !e.Paused && !e.Followed {
			state = "not followed"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", e.ID, entrySchedule(e.Entry), state, when(e.Next, now),
			lastRun(e.LastRun, now), lastAt(e.LastSuccess, now), lastFailure(e.LastFailure, now), size(e.PayloadSize), e.Revision)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if r.Next != "" {
		fmt.Fprintf(c.stdout, "more: anarchon schedule ls %q --after %q\n", job, r.Next)
	}
	return nil
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
		return fmt.Errorf("schedule show %q %q: %w", job, id, err)
	}
	if c.json {
		return c.printJSON(r)
	}
	makeVisible(&r)
	e, now := r.Entry, time.Now()
	w := c.table()
	fmt.Fprintf(w, "entry\t%s of %s\n", e.ID, e.Job)
	fmt.Fprintf(w, "schedule\t%s\n", entrySchedule(e.Entry))
	fmt.Fprintf(w, "state\t%s\n", entryState(e))
	fmt.Fprintf(w, "next\t%s (on %s)\n", when(e.Next, now), r.Instance)
	fmt.Fprintf(w, "payload\t%s\n", payloadText(e.Payload))
	fmt.Fprintf(w, "revision\t%d, written %s by %s\n", e.Revision, e.Updated.UTC().Format(timeFormat), orDash(e.By))
	fmt.Fprintf(w, "last run\t%s\n", lastRun(e.LastRun, now))
	fmt.Fprintf(w, "last success\t%s\n", lastAt(e.LastSuccess, now))
	fmt.Fprintf(w, "last failure\t%s\n", lastFailure(e.LastFailure, now))
	if err := w.Flush(); err != nil {
		return err
	}
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
