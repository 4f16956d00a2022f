package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// report is everything one run measured. Sections that could not run keep the
// reason in their *Err field.
type report struct {
	cfg                                      config
	claims                                   *claimResult
	load                                     *loadResult   // the run the goals judge: with leases unless -leases=false
	loads                                    []*loadResult // every anarchon load run, plain first
	peer                                     *loadResult
	takeover                                 []takeoverTrial
	scale                                    *scaleResult
	fleet                                    *loadResult // section 6
	schedules                                *loadResult // section 6: NATS's own message schedules
	schedulesErr                             string
	windows                                  []*windowJob // section 7
	turns                                    []turnsRun   // section 8
	claimsErr, loadErr, peerErr, takeoverErr string
	fleetErr, windowErr                      string
	started                                  time.Time
	elapsed                                  time.Duration
}

// Section headings; the smoke test looks for them.
const (
	headClaims   = "### 1. Claim vs the limit"
	headLoad     = "### 2. Load"
	headScale    = "### 3. Scale of the stream layout"
	headTakeover = "### 4. Takeover"
	headPeer     = "### 5. Peer side by side"
	headFleet    = "### 6. A larger fleet"
	headWindow   = "### 7. Duplicate window of a job's stream"
	headTurns    = "### 8. Turns: claims per slot as the fleet grows"
	headGoals    = "### Goals"
)

// markdown is the report as the command prints it.
func (r *report) markdown() string {
	return "## Benchmarks\n\n" + r.meta() + "\n" + r.sections()
}

// docsPage is the report as the documentation page docs/benchmarks.md: a title,
// what the page is and how to make it again, then the report with its sections
// one heading level up.
func (r *report) docsPage() string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n" + docsNote)
	b.WriteString(r.meta())
	b.WriteString("\n" + docsIntro)
	for line := range strings.SplitAfterSeq(r.sections(), "\n") {
		if rest, ok := strings.CutPrefix(line, "### "); ok {
			line = "## " + rest
		}
		b.WriteString(line)
	}
	return b.String()
}

// docsNote and docsIntro open the documentation page, around the report's list of
// how, when and where it was made.
const (
	docsNote  = "<!-- Written by the benchmark command (integration/bench) with -write-docs: run it again rather than edit this page. -->\n\n"
	docsIntro = "The tables of one run of the benchmark command, as it printed them, made as the list above\n" +
		"says. Make the page again on your machine (about 6 minutes on 2 cores):\n\n" +
		"```sh\ngo run -C integration/bench . -write-docs docs/benchmarks.md\n```\n\n" +
		"The command starts its own embedded nats-server in the same process and measures the cost\n" +
		"of a claim against a raw JetStream publish (1), the scheduler under load with and without\n" +
		"leases (2), the stream layout at scale (3), a takeover after the holder is killed (4), the\n" +
		"same load on go-co-op/gocron with a NATS KV Locker (5), a larger fleet (6), the duplicate\n" +
		"window a job's stream gets (7), and the claims per slot on 3 and 10 instances with and\n" +
		"without turns (8). On a shared machine absolute times are noisy: compare the\n" +
		"ratios to a raw publish measured in the same trial (each the median of the trials, with\n" +
		"their range), and the counts (round trips, messages, duplicates, missed slots). A goal\n" +
		"marked ❌ is a target not met, with the figure this run reached.\n\n" +
		"Not on this page:\n\n" +
		"- the hot paths as Go benchmarks: `go test -run '^$' -bench . ./scheduler/ ./jetstream/ ./kvlease/`;\n" +
		"- kvlease's requests per operation: `go test -run TestRoundTrips -v ./kvlease/`;\n" +
		"- the status page: `go test -run '^$' -bench 'JobsPage$|JobPage$' -benchmem ./web/`, and over NATS\n" +
		"  `go test -run '^$' -bench JobsPageNATS -benchtime 5x ./web/`;\n" +
		"- the SQL backends on PostgreSQL and SQLite: `go run -C sqlbackend ./internal/bench`.\n\n" +
		"[Development](development.md) lists the tests; [Backends](backends.md) says what a claim\n" +
		"costs on each backend in requests and statements.\n\n"
)

// meta is the list that says how, when and where the report was made.
func (r *report) meta() string {
	var b strings.Builder
	fmt.Fprintf(&b, "- command: `go run -C integration/bench .%s`\n", argLine(r.cfg.args))
	fmt.Fprintf(&b, "- date: %s\n", r.started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- Go: %s\n", runtime.Version())
	fmt.Fprintf(&b, "- machine: %d CPUs (GOMAXPROCS %d)%s, %s/%s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuSuffix(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "- server: embedded nats-server %s in the same process (file storage, default sync), clients over loopback TCP with nats.go %s\n", server.VERSION, nats.Version)
	fmt.Fprintf(&b, "- %s; total run time %v\n", modLine(), r.elapsed.Round(time.Second))
	b.WriteString("- the machine is shared: absolute times are noisy, ratios within one section are measured in the same run\n")
	return b.String()
}

// sections is the report's tables, each under its heading.
func (r *report) sections() string {
	var b strings.Builder
	c := r.cfg
	b.WriteString(headClaims + "\n\n")
	switch {
	case r.claims != nil:
		b.WriteString(r.claims.markdown())
	default:
		b.WriteString(r.claimsErr)
	}

	fmt.Fprintf(&b, "\n%s: %d jobs every second × %d instances × %v\n\n", headLoad, c.jobs, c.instances, c.duration)
	b.WriteString(r.loadErr)
	if len(r.loads) > 0 {
		fmt.Fprintf(&b, "Every job `Every(1s)`%s, max lateness 1s (the default for a 1s job); the handler records the run and returns. "+
			"A slot counts when its handler started; the window opens %v after Start. Each run has its own fresh embedded server. "+
			"CPU and memory are the whole process: the server runs in it. API requests counted by a subscriber on `$JS.API.>`.\n\n", jitterNote(c.jitter, c.turns), c.warmup)
		b.WriteString(loadMarkdown(r.loads))
	}

	b.WriteString("\n" + headScale + "\n\n")
	b.WriteString(scaleMarkdown(r.scale))

	b.WriteString("\n" + headTakeover + "\n\n")
	switch {
	case !c.leases:
		b.WriteString(takeoverMarkdown(nil, true))
	case c.trials == 0:
		b.WriteString("not run (-trials 0)\n")
	default:
		if r.takeoverErr != "" {
			b.WriteString(r.takeoverErr)
		}
		b.WriteString(takeoverMarkdown(r.takeover, false))
	}

	b.WriteString("\n" + headPeer + "\n\n")
	switch {
	case !c.peer:
		b.WriteString("not run (-peer=false)\n")
	case len(r.loads) == 0 || r.peer == nil:
		b.WriteString(r.loadErr + r.peerErr)
	default:
		fmt.Fprintf(&b, "The same %d jobs every second on %d instances for %v, each instance on its own connection to a fresh embedded server like section 2's. "+
			"gocron: `DurationJob(1s)` started at the same whole second on every instance (`WithStartAt`, as gocron's Locker notes advise), "+
			"`WithDistributedLocker` on a NATS KV bucket (TTL %v): Lock = `kv.Create(job name)`, Unlock = `kv.Delete`. "+
			"gocron tells a handler no slot, so its runs are counted for the second they started in.\n\n",
			c.jobs, instances, c.duration, peerLockTTL)
		b.WriteString(peerMarkdown(r.loads, r.peer))
	}

	fmt.Fprintf(&b, "\n%s: %d jobs every %v × %d instances with leases × %v\n\n", headFleet, c.fleetJobs, c.fleetInterval, c.instances, c.fleetDuration)
	switch {
	case c.fleetJobs == 0 || !c.leases:
		b.WriteString("not run (-fleet-jobs 0 or -leases=false)\n")
	case r.fleet == nil:
		b.WriteString(r.fleetErr)
	default:
		fmt.Fprintf(&b, "Like section 2 with leases (every instance `NewLeased` with the default options), on a fresh server: every job `Every(%v)`%s, "+
			"max lateness %v; one stream per job, so Start creates %d streams. The baseline for the next step in scale.\n\n", c.fleetInterval, jitterNote(c.fleetJitter, c.turns), c.fleetInterval, c.fleetJobs)
		fleets := []*loadResult{r.fleet}
		switch {
		case r.schedules != nil:
			fmt.Fprintf(&b, "Beside it, the substrate's limit: the same %d slots every %v as NATS's own message schedules (ADR-51) on one stream of a fresh server, "+
				"each a cron `*/%d * * * * *` with a target subject of its own, every fire taken by one ordered consumer and counted at arrival; "+
				"a fire's slot is its `Nats-Schedule-Next` less the interval.\n\n", c.fleetJobs, c.fleetInterval, int(c.fleetInterval/time.Second))
			fleets = append(fleets, r.schedules)
		case r.schedulesErr != "":
			b.WriteString("NATS message schedules: " + r.schedulesErr + "\n")
		}
		b.WriteString(fleetMarkdown(fleets...))
	}

	b.WriteString("\n" + headWindow + "\n\n")
	switch {
	case r.windows == nil:
		b.WriteString(r.windowErr)
	default:
		b.WriteString(windowMarkdown(r.windows))
	}

	b.WriteString("\n" + headTurns + "\n\n")
	switch {
	case c.turnsJobs == 0 || !c.leases:
		b.WriteString("not run (-turns-jobs 0 or -leases=false)\n")
	default:
		fmt.Fprintf(&b, "%d jobs `Every(1s)` with leases for %v, on %d and on %d instances (each on its own connection to a fresh server), "+
			"every instance claiming every slot, then taking turns (`Config.Turns`: the first member claims at the slot, the second a grace later, "+
			"the rest only once those are gone). The window opens %v after Start: the instances start together and see each other only "+
			"after their first beats, and a kvlease store's lease watch, started by the stand-bys of those first slots, stops 10 s after its last use. "+
			"Claims per slot count the claimed and lost events of the window's slots.\n\n",
			c.turnsJobs, c.turnsDuration, turnsFleets[0], turnsFleets[1], turnsLead(c))
		b.WriteString(turnsMarkdown(r.turns))
	}

	b.WriteString("\n" + headGoals + "\n\n")
	b.WriteString(r.goals())
	return b.String()
}

func (r *report) goals() string {
	t := newTable("goal", "result")
	if cl := r.claims; cl != nil {
		t.add("plain claim won p50 ≤ 1.05 × the claim-shaped raw publish p50", fmt.Sprintf("%s %s", mark(cl.winGoalMet()), cl.winRatio().withTrials()))
		t.add("plain claim, one round trip won", fmt.Sprintf("%s %.2f", mark(cl.win.roundTrips() == 1), cl.win.roundTrips()))
		t.add("plain claim, one round trip lost", fmt.Sprintf("%s %.2f", mark(cl.lose.roundTrips() == 1), cl.lose.roundTrips()))
		if cl.leasedPath != nil {
			t.add("leased claim won, default options: ≤ 2 round trips before the handler", fmt.Sprintf("%s %.2f", mark(cl.leasedPath.roundTrips() <= 2), cl.leasedPath.roundTrips()))
			t.add("leased claim won: p50 ≤ 2 × raw publish", fmt.Sprintf("%s %s", mark(cl.leasedGoalMet()), cl.leasedRatio().withTrials()))
			t.add("leased claim lost (holder running): ≤ 2 round trips", fmt.Sprintf("%s %.2f", mark(cl.lloseRun.roundTrips() <= 2), cl.lloseRun.roundTrips()))
			t.add("lease Finish: 1 round trip", fmt.Sprintf("%s %.2f", mark(cl.fin.roundTrips() == 1), cl.fin.roundTrips()))
		}
		for _, o := range cl.history {
			if strings.Contains(o.name, "100 records") {
				t.add("History(job, 100): ≤ 3 round trips", fmt.Sprintf("%s %.2f", mark(o.roundTrips() <= 3), o.roundTrips()))
				t.add("History(job, 100): p50 ≤ 2 ms", fmt.Sprintf("%s %s", mark(o.lat.pct(50) <= 2*time.Millisecond), dur(o.lat.pct(50))))
			}
		}
	} else {
		t.add("claims", "not measured")
	}
	for _, l := range r.loads {
		t.add("load, "+l.name+": duplicates = 0", fmt.Sprintf("%s %d", mark(l.dups == 0), l.dups))
		t.add("load, "+l.name+": missed = 0", fmt.Sprintf("%s %d of %d", mark(l.missed == 0), l.missed, l.slotsDue))
		if strings.Contains(l.name, "leases") && len(l.lag) > 0 {
			t.add("load, "+l.name+": lag p99 ≤ 250 ms", fmt.Sprintf("%s %s", mark(l.lag.pct(99) <= 250*time.Millisecond), dur(l.lag.pct(99))))
			t.add("load, "+l.name+": CPU per slot ≤ 0.5 ms (server included)", fmt.Sprintf("%s %s", mark(l.cpuPerSlot() <= 500*time.Microsecond), dur(l.cpuPerSlot())))
			per := l.msgsPerSlot()
			t.add("load, "+l.name+": client messages per slot ≤ 25.8", fmt.Sprintf("%s %.2f", mark(per <= 25.76), per))
		}
	}
	if f := r.fleet; f != nil {
		t.add(fmt.Sprintf("larger fleet (%d jobs every %v): duplicates = 0", f.jobs, f.interval), fmt.Sprintf("%s %d", mark(f.dups == 0), f.dups))
		t.add(fmt.Sprintf("larger fleet (%d jobs every %v): missed = 0", f.jobs, f.interval), fmt.Sprintf("%s %d of %d", mark(f.missed == 0), f.missed, f.slotsDue))
	}
	if len(r.loads) == 0 {
		t.add("load", "not measured")
	}
	for _, j := range r.windows {
		if j.goal > 0 {
			t.add(fmt.Sprintf("duplicate window, %s: ≤ %s", j.options, fmtWindow(j.goal)), fmt.Sprintf("%s %s", mark(j.goalMet()), fmtWindow(j.window)))
		}
	}
	if r.cfg.leases && r.cfg.turnsJobs > 0 {
		turnsGoals(t, r.turns)
	}
	limit := 7 * time.Minute
	if r.cfg.quick {
		limit = 90 * time.Second
	}
	t.add(fmt.Sprintf("whole run < %v", limit), fmt.Sprintf("%s %v", mark(r.elapsed < limit), r.elapsed.Round(time.Second)))
	return t.String()
}

func argLine(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return " " + strings.Join(args, " ")
}

func cpuSuffix() string {
	if m := cpuModel(); m != "" {
		return ", " + m
	}
	return ""
}

func jitterNote(j time.Duration, turns bool) string {
	switch {
	case turns && j == 0:
		return " with no jitter, the instances taking turns (`Config.Turns`: one claims at the slot, a second a grace later)"
	case turns:
		return fmt.Sprintf(" with jitter %v, the instances taking turns (`Config.Turns`)", j)
	case j == 0:
		return " with no jitter (every instance claims at the slot)"
	}
	return fmt.Sprintf(" with jitter %v", j)
}

// modLine names the versions of the modules measured.
func modLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "module versions unknown"
	}
	want := map[string]bool{"github.com/go-co-op/gocron/v2": true, "github.com/nats-io/nats-server/v2": true}
	var parts []string
	for _, d := range bi.Deps {
		if want[d.Path] {
			parts = append(parts, d.Path+" "+d.Version)
		}
	}
	return "modules: " + strings.Join(parts, ", ")
}
