package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// TestQuick runs the command in -quick mode with tiny numbers: every section must
// run and the table must hold them all, and anarchon must never run a slot twice.
// It asserts no timing: the machine is shared. The load runs on the leased backend
// only (-plain=false), which keeps the test under 30s with -race.
func TestQuick(t *testing.T) {
	var out bytes.Buffer
	page := filepath.Join(t.TempDir(), "benchmarks.md")
	rep, err := run(t.Context(), []string{"-quick", "-jobs", "10", "-duration", "3s", "-samples", "50", "-scale", "10,20", "-plain=false", "-fleet-jobs", "20", "-write-docs", page}, &out, io.Discard)
	text := out.String()
	t.Log("\n" + text)
	require.NoError(t, err)
	require.NotNil(t, rep)

	for _, h := range []string{headClaims, headLoad, headScale, headTakeover, headPeer, headFleet, headWindow, headTurns, headGoals} {
		assert.Equal(t, 1, strings.Count(text, h), "section %q appears once", h)
	}
	assert.Contains(t, text, "- command: `go run -C integration/bench . -quick -jobs 10 -duration 3s")
	assert.Contains(t, text, "- date: ")
	assert.Contains(t, text, "- Go: go")
	assert.Contains(t, text, "- machine: ")

	// -write-docs: the same report as a page, its title and how it was made at the
	// top, its sections one heading level up.
	data, err := os.ReadFile(page)
	require.NoError(t, err, "-write-docs wrote the page")
	doc := string(data)
	assert.True(t, strings.HasPrefix(doc, "# Benchmarks\n"), "the page starts with its title")
	assert.Contains(t, doc, "- command: `go run -C integration/bench . -quick")
	assert.Contains(t, doc, "-write-docs "+page+"`", "the command names the page")
	for _, h := range []string{headClaims, headLoad, headScale, headTakeover, headPeer, headFleet, headWindow, headTurns, headGoals} {
		assert.Equal(t, 1, strings.Count(doc, "\n"+strings.TrimPrefix(h, "#")), "section %q is a level-2 heading of the page", h)
	}
	assert.Less(t, strings.Index(doc, "- machine: "), strings.Index(doc, "\n## 1."), "the machine is named above the tables")

	require.NotNil(t, rep.claims, "claims measured")
	assert.Len(t, rep.claims.win.lat, 50)
	assert.Len(t, rep.claims.lose.lat, 50)
	// The samples are split over the -quick default of trials, and every ratio the
	// goals judge is a median of one ratio per trial.
	require.Equal(t, quickDefaults.claimTrials, rep.claims.trials)
	for _, o := range []*op{rep.claims.raw, rep.claims.rawDedupe, rep.claims.win, rep.claims.leasedPath, rep.claims.history[1], rep.claims.lastRuns} {
		require.Len(t, o.starts, rep.claims.trials, "%s: one start per trial", o.name)
		for i := range rep.claims.trials {
			assert.NotEmpty(t, o.trial(i), "%s: samples in trial %d", o.name, i)
		}
	}
	assert.Len(t, rep.claims.leasedPath.lat, 50, "the leased path has a sample per round")
	assert.Equal(t, rep.claims.trials, rep.claims.winRatio().n, "a won claim's ratio in every trial")
	assert.Equal(t, rep.claims.trials, rep.claims.leasedRatio().n, "the leased path's ratio in every trial")
	assert.Contains(t, text, fmt.Sprintf(", %d trials)", rep.claims.trials), "the goals print the ratios with their trials")
	assert.Len(t, rep.claims.history, 2, "history reads of 10 and 100 records")
	// Request counts are not timings: they hold on any machine.
	assert.Equal(t, 1.0, rep.claims.win.roundTrips(), "a plain claim won is one request")
	assert.Equal(t, 1.0, rep.claims.lose.roundTrips(), "a plain claim lost is one request")
	assert.Equal(t, 2.0, rep.claims.leasedPath.roundTrips(), "a leased claim won: the lease key and the run record (chained), no read")
	// A backup's lost claim: its two chained writes lose, and its shared watcher has
	// delivered the holder's lease (a read only when the watcher is 250 ms late).
	assert.GreaterOrEqual(t, rep.claims.lloseRun.roundTrips(), 2.0, "a leased claim lost to a running holder")
	assert.LessOrEqual(t, rep.claims.lloseRun.roundTrips(), 2.5, "a leased claim lost to a running holder: no read as a rule")
	assert.Equal(t, 1.0, rep.claims.fin.roundTrips(), "finish: the run record; the purge asks for no answer")
	assert.LessOrEqual(t, rep.claims.history[1].roundTrips(), 3.0, "History(job, 100) in at most 3 requests")
	require.NotNil(t, rep.claims.lastRuns)

	require.NotNil(t, rep.fleet, "larger fleet measured")
	assert.Equal(t, 20*2, rep.fleet.slotsDue, "20 jobs × 2 slots of 2s in 4s")
	assert.Zero(t, rep.fleet.dups, "the larger fleet ran no slot twice")
	require.NotNil(t, rep.schedules, "NATS message schedules measured beside it")
	assert.Equal(t, 20*2, rep.schedules.slotsDue)
	assert.Zero(t, rep.schedules.dups, "a fire per schedule and slot")
	assert.Contains(t, text, "| NATS message schedules (server-side) |")

	require.Len(t, rep.loads, 1, "load measured on the leased backend")
	require.Same(t, rep.loads[0], rep.load, "the goals judge the leased run")
	assert.Contains(t, rep.load.name, "kvlease")
	assert.Contains(t, text, "| duplicates (must be 0) | 0 ✅ |")
	for _, l := range rep.loads {
		assert.Equal(t, 10*3, l.slotsDue, "%s: 10 jobs × 3 slots", l.name)
		assert.Zero(t, l.dups, "%s ran no slot twice", l.name)
		assert.Equal(t, l.runs, l.slotsDue-l.missed, "%s: every slot that ran, ran once", l.name)
	}

	require.NotNil(t, rep.peer, "peer measured")
	assert.Equal(t, 10*3, rep.peer.slotsDue)
	assert.Contains(t, text, "gocron v2.21.2 + NATS KV Locker")

	require.Len(t, rep.takeover, 1)
	assert.NotEmpty(t, rep.takeover[0].backup, "a backup took the killed holder's run over")
	assert.NotEqual(t, rep.takeover[0].holder, rep.takeover[0].backup)
	assert.GreaterOrEqual(t, rep.takeover[0].attempt, 2)

	// The fitted duplicate window, a configured value: the job's max lateness (its
	// interval), the clock skew allowance, the lease and the call timeout.
	require.Len(t, rep.windows, 2)
	assert.Equal(t, 2*time.Second+scheduler.DefaultMaxClockSkew+scheduler.DefaultLease+scheduler.DefaultCallTimeout, rep.windows[0].window, "an Every(2s) job")
	assert.Equal(t, 20*time.Minute+scheduler.DefaultMaxClockSkew+scheduler.DefaultLease+scheduler.DefaultCallTimeout, rep.windows[1].window, "an hourly job WithMaxLate(20m)")
	assert.Contains(t, text, "| `Every(2s)`, default options | "+fmtWindow(rep.windows[0].window)+" | ✅ ≤ 1 min |")

	require.NotNil(t, rep.scale)
	require.Len(t, rep.scale.rows, 2)
	for _, r := range rep.scale.rows {
		assert.Empty(t, r.err, "%d jobs", r.jobs)
		assert.Empty(t, r.skipped, "%d jobs", r.jobs)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-jobs", "0"},
		{"-instances", "0"},
		{"-instances", "101"},
		{"-duration", "1s"},
		{"-duration", "2500ms"},
		{"-samples", "5"},
		{"-scale", "10,x"},
		{"-jitter", "1s"},
		{"-claim-trials", "0"},
		{"-turns-jobs", "-1"},
		{"-turns-duration", "1s"},
		{"-samples", "50", "-claim-trials", "6"},
		{"extra"},
		{"-nope"},
	} {
		_, err := parseFlags(args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
	c, err := parseFlags([]string{"-quick", "-jobs", "7"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 7, c.jobs, "an explicit flag wins over -quick")
	assert.Equal(t, quickDefaults.duration, c.duration)
	assert.Equal(t, quickDefaults.scale, c.scale)
	c, err = parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1000, c.jobs)
	assert.Equal(t, 3, c.instances)
	assert.Equal(t, fullDefaults.duration, c.duration)
	assert.Equal(t, fullDefaults.claimTrials, c.claimTrials)
}

// TestSpread: a ratio across trials is their median, with their range.
func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		want        spread
		str, trials string
	}{
		{nil, spread{}, "n/a", "n/a"},
		{[]float64{1.2}, spread{1.2, 1.2, 1.2, 1}, "1.20", "1.200 (1 trial)"},
		{[]float64{1.15, 1.04, 1.08}, spread{1.08, 1.04, 1.15, 3}, "1.08 (1.04–1.15)", "1.080 (1.04–1.15, 3 trials)"},
		{[]float64{1.3, 1.0, 1.1, 1.2}, spread{1.15, 1.0, 1.3, 4}, "1.15 (1.00–1.30)", "1.150 (1.00–1.30, 4 trials)"},
	} {
		got := spreadOf(tc.in)
		assert.InDelta(t, tc.want.med, got.med, 1e-9, "%v", tc.in)
		assert.Equal(t, tc.want.lo, got.lo, "%v", tc.in)
		assert.Equal(t, tc.want.hi, got.hi, "%v", tc.in)
		assert.Equal(t, tc.want.n, got.n, "%v", tc.in)
		assert.Equal(t, tc.str, got.String(), "%v", tc.in)
		assert.Equal(t, tc.trials, got.withTrials(), "%v", tc.in)
	}
}

// TestTrialRatios: each trial's percentile against the other operation's in the
// same trial, not against the pooled samples.
func TestTrialRatios(t *testing.T) {
	a, b := &op{}, &op{}
	add := func(o *op, ds ...time.Duration) {
		o.startTrial()
		o.lat = append(o.lat, ds...)
	}
	add(a, 10, 10, 10)
	add(b, 10, 10, 10) // trial 0: 1.0
	add(a, 30, 30, 30)
	add(b, 20, 20, 20) // trial 1: 1.5
	add(a, 40, 40, 40)
	add(b, 20, 20, 20) // trial 2: 2.0
	r := trialRatios(a, b, 50)
	assert.Equal(t, 3, r.n)
	assert.InDelta(t, 1.5, r.med, 1e-9)
	assert.InDelta(t, 1.0, r.lo, 1e-9)
	assert.InDelta(t, 2.0, r.hi, 1e-9)
	assert.Equal(t, durations{30, 30, 30}, a.trial(1))

	for n := range 12 {
		sum := 0
		for i := range 5 {
			p := share(n, 5, i)
			assert.LessOrEqual(t, p, n/5+1, "share(%d, 5, %d)", n, i)
			assert.GreaterOrEqual(t, p, n/5, "share(%d, 5, %d)", n, i)
			sum += p
		}
		assert.Equal(t, n, sum, "the shares of %d add up to it", n)
	}
}

func TestFmtWindow(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "n/a", 44 * time.Second: "44 s", time.Minute: "1 min", 20*time.Minute + 42*time.Second: "20 min 42 s",
	} {
		assert.Equal(t, want, fmtWindow(d), "%v", d)
	}
}

// TestDocsPath: a relative -write-docs name is the repository's file, wherever go
// run -C started the command, and a directory that does not exist is refused before
// the run rather than after it.
func TestDocsPath(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	root := filepath.Dir(filepath.Dir(wd)) // the test runs in integration/bench
	p, err := docsPath("docs/benchmarks.md")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "docs", "benchmarks.md"), p)

	abs := filepath.Join(t.TempDir(), "page.md")
	p, err = docsPath(abs)
	require.NoError(t, err)
	assert.Equal(t, abs, p, "an absolute name is kept")

	_, err = docsPath("no-such-dir/benchmarks.md")
	assert.Error(t, err)
	_, err = parseFlags([]string{"-write-docs", filepath.Join(t.TempDir(), "missing", "page.md")}, io.Discard)
	assert.Error(t, err, "a page in a directory that does not exist is refused at once")

	p, err = docsPath("")
	require.NoError(t, err)
	assert.Empty(t, p, "no -write-docs, no page")
}
