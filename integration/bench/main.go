// Command bench measures anarchon on this machine against its own limits and
// against the way Go services share scheduled jobs today, and prints the results as
// markdown tables. With -write-docs it also writes them as the documentation page
// docs/benchmarks.md: the tables of one run, under the command, the date, the Go
// version and the machine that produced them.
//
// It starts its own embedded nats-server (JetStream on a file store, clients over
// loopback TCP so every call pays a real network round trip) and runs:
//
//  1. claims beside a raw synchronous JetStream publish: p50/p99, round trips, and
//     each ratio as the median of -claim-trials trials with its range; lease
//     operations and history reads for reference;
//  2. load: -jobs jobs every second on three instances for -duration, with kvlease
//     leases and on the plain JetStream backend: duplicates, missed slots, slot lag,
//     CPU, memory and what the server is asked per slot;
//  3. the stream layout at scale: PrepareJob time, memory, restart recovery;
//  4. takeover: the holder of a 2s lease killed mid-run, delay until a backup runs;
//  5. the peer: go-co-op/gocron v2 with a NATS KV Locker, the same jobs side by side;
//  6. a larger fleet: -fleet-jobs jobs every -fleet-interval on three instances with
//     leases: start-up, memory, lag, duplicates, missed;
//  7. the duplicate window the JetStream backend fits to an Every(2s) job with
//     default options, and to an hourly job with WithMaxLate(20m);
//  8. claims, messages and CPU per slot on 3 and 10 instances, every instance
//     claiming every slot and taking turns (scheduler.Config.Turns).
//
// Usage:
//
//	go run -C integration/bench . [-jobs 1000] [-duration 30s] [-quick]
//	                              [-leases=true] [-plain=true] [-peer=true] [-jitter 0]
//	                              [-samples 2000] [-claim-trials 5] [-scale 100,1000] [-trials 3]
//	                              [-fleet-jobs 5000] [-fleet-interval 10s] [-fleet-duration 20s] [-fleet-jitter 0]
//	                              [-turns=false] [-turns-jobs 500] [-turns-duration 15s]
//	                              [-cpuprofile FILE] [-memprofile PREFIX] [-write-docs FILE]
//
// from the repository's root. The documentation page is written by
//
//	go run -C integration/bench . -write-docs docs/benchmarks.md
//
// (a relative -write-docs name is taken from the repository's root, not from
// integration/bench, where go run -C starts the command). The command is a module of its own
// (github.com/anarchon/anarchon/integration/bench, with a replace of the library to
// ../..) so that the peer it compares with, gocron and its dependencies, is not a
// dependency of the library.
//
// The whole run is budgeted to finish within seven minutes on two cores; -quick
// in about a minute and a half. Progress goes to stderr, the tables to stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	args      []string
	jobs      int
	instances int
	duration  time.Duration
	quick     bool
	leases    bool
	// turns runs the anarchon instances with Config.Turns.
	turns bool
	// turnsJobs jobs every second for turnsDuration in section 8 (0: not run).
	turnsJobs     int
	turnsDuration time.Duration
	// entries runs the load's jobs as schedule entries of one declared job.
	entries bool
	plain   bool
	peer    bool
	samples int
	// claimTrials is how many trials section 1 splits its samples into.
	claimTrials int
	scale       []int
	trials      int
	jitter      time.Duration
	budget      time.Duration
	// fleetJobs jobs every fleetInterval, measured for fleetDuration (section 6;
	// fleetJobs 0: not run).
	fleetJobs     int
	fleetInterval time.Duration
	fleetDuration time.Duration
	fleetJitter   time.Duration
	// msgSchedules runs section 6's slots as NATS message schedules too.
	msgSchedules bool
	// warmup is how long the instances run before a load window opens.
	warmup time.Duration
	// progress receives progress lines (stderr for the command).
	progress io.Writer
	// cpuProfile names the file a CPU profile of the whole run goes to ("": none).
	cpuProfile string
	// memProfile starts the names of the heap profiles taken at the end of each
	// load window ("": none).
	memProfile string
	// writeDocs names the documentation page the report is also written to, as
	// an absolute path ("": none).
	writeDocs string
}

func (c config) logf(format string, args ...any) {
	if c.progress != nil {
		fmt.Fprintf(c.progress, "bench:   "+format+"\n", args...)
	}
}

// phase runs f and logs how long it took.
func (c config) phase(name string, f func()) {
	t := time.Now()
	f()
	c.logf("%s in %v", name, time.Since(t).Round(time.Millisecond))
}

// Defaults of the full run and of -quick (a flag given explicitly wins over both).
var (
	fullDefaults = config{jobs: 1000, duration: 30 * time.Second, samples: 2000, claimTrials: 5, scale: []int{100, 1000}, trials: 3, budget: 6*time.Minute + 30*time.Second, warmup: 2 * time.Second,
		fleetJobs: 5000, fleetInterval: 10 * time.Second, fleetDuration: 20 * time.Second, turnsJobs: 500, turnsDuration: 15 * time.Second}
	quickDefaults = config{jobs: 50, duration: 5 * time.Second, samples: 300, claimTrials: 3, scale: []int{10, 100}, trials: 1, budget: 85 * time.Second, warmup: time.Second,
		fleetJobs: 200, fleetInterval: 2 * time.Second, fleetDuration: 4 * time.Second, turnsJobs: 20, turnsDuration: 2 * time.Second}
)

func parseFlags(args []string, out io.Writer) (config, error) {
	c := config{args: args}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.jobs, "jobs", fullDefaults.jobs, "jobs every second in the load and peer sections")
	fs.IntVar(&c.instances, "instances", instances, "instances (replicas) of the load and larger-fleet sections")
	fs.DurationVar(&c.duration, "duration", fullDefaults.duration, "measured window of the load and peer sections (whole seconds)")
	fs.BoolVar(&c.quick, "quick", false, "a smoke test: small defaults, finishes in about a minute and a half")
	fs.BoolVar(&c.leases, "leases", true, "run anarchon with kvlease leases (false: the plain JetStream backend; no takeover section)")
	fs.BoolVar(&c.turns, "turns", false, "run the anarchon instances with scheduler.Config.Turns (one instance claims each slot, a second a grace later); needs leases")
	fs.IntVar(&c.turnsJobs, "turns-jobs", fullDefaults.turnsJobs, "jobs every second of section 8, on 3 and 10 instances with and without turns (0: not run)")
	fs.DurationVar(&c.turnsDuration, "turns-duration", fullDefaults.turnsDuration, "measured window of each run of section 8 (whole seconds)")
	fs.BoolVar(&c.entries, "entries", false, "run the load section's jobs as schedule entries of one job (one stream) instead of declared jobs (a stream each); needs leases")
	fs.BoolVar(&c.plain, "plain", true, "also run the load on the plain JetStream backend (no leases), for comparison")
	fs.BoolVar(&c.peer, "peer", true, "run the gocron peer (section 5)")
	fs.IntVar(&c.samples, "samples", fullDefaults.samples, "samples of each claim operation, split over -claim-trials")
	fs.IntVar(&c.claimTrials, "claim-trials", fullDefaults.claimTrials, "trials of the claim section: each ratio is the median of the trials' ratios")
	scale := fs.String("scale", joinInts(fullDefaults.scale), "job counts of the stream-layout section, comma-separated")
	fs.IntVar(&c.trials, "trials", fullDefaults.trials, "takeover trials")
	fs.DurationVar(&c.jitter, "jitter", 0, "jitter of every load job (0: all instances claim at the slot)")
	fs.IntVar(&c.fleetJobs, "fleet-jobs", fullDefaults.fleetJobs, "jobs of the larger-fleet section (0: not run)")
	fs.DurationVar(&c.fleetInterval, "fleet-interval", fullDefaults.fleetInterval, "interval of every job of the larger-fleet section")
	fs.DurationVar(&c.fleetDuration, "fleet-duration", fullDefaults.fleetDuration, "measured window of the larger-fleet section (whole intervals)")
	fs.BoolVar(&c.msgSchedules, "msg-schedules", true, "run the larger fleet's slots as NATS's own message schedules too, side by side")
	fs.DurationVar(&c.fleetJitter, "fleet-jitter", 0, "jitter of every job of the larger-fleet section (0: every instance claims at the slot)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server and instances) to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "write a heap profile at the end of each load window (server and instances, before they stop) to this file name with the section's backend and job count appended")
	fs.StringVar(&c.writeDocs, "write-docs", "", "also write the report as a documentation page to this file (relative to the repository's root: docs/benchmarks.md)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.budget, c.warmup = fullDefaults.budget, fullDefaults.warmup
	if c.quick {
		q := quickDefaults
		if !set["jobs"] {
			c.jobs = q.jobs
		}
		if !set["duration"] {
			c.duration = q.duration
		}
		if !set["samples"] {
			c.samples = q.samples
		}
		if !set["scale"] {
			*scale = joinInts(q.scale)
		}
		if !set["claim-trials"] {
			c.claimTrials = q.claimTrials
		}
		if !set["trials"] {
			c.trials = q.trials
		}
		if !set["fleet-jobs"] {
			c.fleetJobs = q.fleetJobs
		}
		if !set["fleet-interval"] {
			c.fleetInterval = q.fleetInterval
		}
		if !set["fleet-duration"] {
			c.fleetDuration = q.fleetDuration
		}
		if !set["turns-jobs"] {
			c.turnsJobs = q.turnsJobs
		}
		if !set["turns-duration"] {
			c.turnsDuration = q.turnsDuration
		}
		c.budget, c.warmup = q.budget, q.warmup
	}
	var err error
	if c.scale, err = parseInts(*scale); err != nil {
		return c, fmt.Errorf("-scale: %w", err)
	}
	if c.writeDocs, err = docsPath(c.writeDocs); err != nil {
		return c, fmt.Errorf("-write-docs: %w", err)
	}
	switch {
	case c.jobs < 1:
		return c, fmt.Errorf("-jobs must be at least 1, got %d", c.jobs)
	case c.instances < 1 || c.instances > 100:
		return c, fmt.Errorf("-instances must be from 1 to 100, got %d", c.instances)
	case c.duration < 2*time.Second || c.duration%time.Second != 0:
		return c, fmt.Errorf("-duration must be whole seconds, at least 2s, got %v", c.duration)
	case c.samples < 10:
		return c, fmt.Errorf("-samples must be at least 10, got %d", c.samples)
	case c.claimTrials < 1:
		return c, fmt.Errorf("-claim-trials must be at least 1, got %d", c.claimTrials)
	case c.samples/c.claimTrials < 10:
		return c, fmt.Errorf("-samples must give each of the %d claim trials at least 10 samples, got %d", c.claimTrials, c.samples)
	case c.trials < 0:
		return c, fmt.Errorf("-trials must not be negative, got %d", c.trials)
	case c.fleetJitter < 0 || c.fleetJitter >= c.fleetInterval:
		return c, fmt.Errorf("-fleet-jitter must be in [0, -fleet-interval), got %v", c.fleetJitter)
	case c.fleetJobs < 0:
		return c, fmt.Errorf("-fleet-jobs must not be negative, got %d", c.fleetJobs)
	case c.fleetInterval < time.Second || c.fleetInterval%time.Second != 0:
		return c, fmt.Errorf("-fleet-interval must be whole seconds, at least 1s, got %v", c.fleetInterval)
	case c.fleetDuration < c.fleetInterval || c.fleetDuration%c.fleetInterval != 0:
		return c, fmt.Errorf("-fleet-duration must be whole intervals of -fleet-interval, got %v", c.fleetDuration)
	case c.turnsJobs < 0:
		return c, fmt.Errorf("-turns-jobs must not be negative, got %d", c.turnsJobs)
	case c.turnsDuration < 2*time.Second || c.turnsDuration%time.Second != 0:
		return c, fmt.Errorf("-turns-duration must be whole seconds, at least 2s, got %v", c.turnsDuration)
	case c.jitter < 0 || c.jitter >= loadInterval:
		return c, fmt.Errorf("-jitter must be in [0, %v), got %v", loadInterval, c.jitter)
	}
	return c, nil
}

func (c config) jobOptions() []scheduler.JobOption {
	if c.jitter > 0 {
		return []scheduler.JobOption{scheduler.WithJitter(c.jitter)}
	}
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive job count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// run runs every section and writes the report to out, progress to progress. It
// returns the report, and an error when a section could not run (the report then
// says which).
func run(ctx context.Context, args []string, out, progress io.Writer) (*report, error) {
	cfg, err := parseFlags(args, progress)
	if err != nil {
		return nil, err
	}
	cfg.progress = progress
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	budget := start.Add(cfg.budget)
	rep := &report{cfg: cfg, started: start}
	step := func(name string) func() {
		fmt.Fprintf(progress, "bench: %s…\n", name)
		t := time.Now()
		return func() { fmt.Fprintf(progress, "bench: %s done in %v\n", name, time.Since(t).Round(time.Millisecond)) }
	}
	var errs []error
	fail := func(section string, err error) string {
		errs = append(errs, fmt.Errorf("%s: %w", section, err))
		return fmt.Sprintf("**failed:** %v\n", err)
	}

	done := step("1. claims")
	if rep.claims, err = measureClaims(ctx, cfg); err != nil {
		rep.claimsErr = fail("claims", err)
	}
	done()
	settledProc()

	done = step("7. duplicate window")
	if rep.windows, err = measureWindows(ctx); err != nil {
		rep.windowErr = fail("duplicate window", err)
	}
	done()

	// The load and peer runs come before the scale section, whose thousands of
	// streams would otherwise stay in the process's memory during them. The leased
	// run comes last of them: when it cannot keep up, it leaves the most behind.
	var backends []bool
	if cfg.plain || !cfg.leases {
		backends = append(backends, false)
	}
	if cfg.leases {
		backends = append(backends, true)
	}
	for i, leases := range backends {
		if leases && cfg.peer {
			runPeerSection(ctx, cfg, rep, step, fail)
		}
		done = step("2. load, " + backendName(leases))
		l, err := runLoad(ctx, cfg, leases)
		if err != nil {
			rep.loadErr += fail("load, "+backendName(leases), err)
		} else {
			rep.loads = append(rep.loads, l)
			if i == len(backends)-1 {
				rep.load = l
			}
		}
		done()
		settledProc()
	}
	if !cfg.leases && cfg.peer {
		runPeerSection(ctx, cfg, rep, step, fail)
	}

	if cfg.fleetJobs > 0 && cfg.leases {
		done = step("6. larger fleet")
		rep.fleet, err = runFleet(ctx, cfg, fleet{
			jobs: cfg.fleetJobs, interval: cfg.fleetInterval, window: cfg.fleetDuration,
			span: span{lead: cfg.warmup, settle: cfg.fleetInterval}, jitter: cfg.fleetJitter,
		}, true)
		if err != nil {
			rep.fleetErr = fail("larger fleet", err)
		}
		done()
		settledProc()
		if cfg.msgSchedules {
			done = step("6. larger fleet, NATS message schedules")
			rep.schedules, err = runMsgSchedules(ctx, cfg, fleet{
				jobs: cfg.fleetJobs, interval: cfg.fleetInterval, window: cfg.fleetDuration,
				span: span{lead: cfg.warmup, settle: cfg.fleetInterval},
			})
			if err != nil {
				rep.schedulesErr = fail("NATS message schedules", err)
			}
			done()
			settledProc()
		}
	}

	if cfg.leases && cfg.turnsJobs > 0 {
		rep.turns = runTurns(ctx, cfg, step)
		for _, r := range rep.turns {
			if r.err != "" {
				errs = append(errs, fmt.Errorf("turns, %d instances: %s", r.instances, r.err))
			} else if r.l.dups > 0 {
				errs = append(errs, fmt.Errorf("turns, %d instances: %d duplicate runs", r.instances, r.l.dups))
			}
		}
	}

	if cfg.leases && cfg.trials > 0 {
		done = step("4. takeover")
		if rep.takeover, err = measureTakeover(ctx, cfg); err != nil {
			rep.takeoverErr = fail("takeover", err)
		}
		for _, tr := range rep.takeover {
			if tr.err != "" {
				errs = append(errs, fmt.Errorf("takeover: %s", tr.err))
			}
		}
		done()
		settledProc()
	}

	done = step("3. scale")
	rep.scale = measureScale(ctx, cfg, budget)
	for _, r := range rep.scale.rows {
		if r.err != "" {
			errs = append(errs, fmt.Errorf("scale %d jobs: %s", r.jobs, r.err))
		}
	}
	done()

	rep.elapsed = time.Since(start)
	if rep.load != nil && rep.load.dups > 0 {
		errs = append(errs, fmt.Errorf("load: %d duplicate runs", rep.load.dups))
	}
	if rep.fleet != nil && rep.fleet.dups > 0 {
		errs = append(errs, fmt.Errorf("larger fleet: %d duplicate runs", rep.fleet.dups))
	}
	if _, err := io.WriteString(out, rep.markdown()); err != nil {
		errs = append(errs, err)
	}
	if cfg.writeDocs != "" && ctx.Err() == nil {
		if err := os.WriteFile(cfg.writeDocs, []byte(rep.docsPage()), 0o644); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(progress, "bench: wrote %s\n", cfg.writeDocs)
		}
	}
	return rep, errors.Join(errs...)
}

func runPeerSection(ctx context.Context, cfg config, rep *report, step func(string) func(), fail func(string, error) string) {
	done := step("5. peer (gocron)")
	var err error
	if rep.peer, err = runPeer(ctx, cfg); err != nil {
		rep.peerErr = fail("peer", err)
	}
	done()
	settledProc()
}

// writeHeapProfile writes the heap in use (after a collection) to name; a failure
// is reported and the run goes on.
func writeHeapProfile(cfg config, name string) {
	runtime.GC()
	f, err := os.Create(name)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cfg.logf("heap profile %s: %v", name, err)
		return
	}
	cfg.logf("heap profile written to %s", name)
}

// libraryModule is the module path whose go.mod marks the repository's root.
const libraryModule = "github.com/anarchon/anarchon"

// docsPath resolves the -write-docs file name. A relative name is taken from the
// repository's root, the nearest directory at or above the working directory whose
// go.mod is the library's, so that `go run -C integration/bench . -write-docs
// docs/benchmarks.md` writes the repository's page; the directory must exist, so
// that a run does not end in a file it cannot write.
func docsPath(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	if !filepath.IsAbs(name) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		root := ""
		for dir := wd; root == ""; dir = filepath.Dir(dir) {
			if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == libraryModule {
				root = dir
			} else if filepath.Dir(dir) == dir {
				return "", fmt.Errorf("%s is relative, and no directory above %s holds the go.mod of %s: give an absolute path", name, wd, libraryModule)
			}
		}
		name = filepath.Join(root, name)
	}
	if st, err := os.Stat(filepath.Dir(name)); err != nil || !st.IsDir() {
		return "", fmt.Errorf("the directory of %s does not exist", name)
	}
	return name, nil
}

// modulePath returns the path a go.mod's module directive names.
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
