package web

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anarchon/anarchon/fleet"
)

// MaxChartRuns is how many of the runs a job page lists its chart shows: the
// newest ones.
const MaxChartRuns = 100

// The chart's drawing, in the units of its viewBox: each run a column of
// chartColumn, its bars chartBar wide; two lanes of chartLane, start lag above
// and duration below, chartGap apart. The SVG is stretched to the page's width
// (preserveAspectRatio="none") and has no text of its own, so it reads the same
// at any width: its labels are the page's HTML around it.
const (
	chartColumn = 10
	chartBar    = 7
	chartLane   = 40
	chartGap    = 6
	chartHeight = 2*chartLane + chartGap
	// chartStub is the height of the mark of a run with nothing to draw (one that
	// did not start, or a zero figure), so every run shows.
	chartStub = 2
	// chartColumns is the fewest columns the chart has: fewer runs keep their
	// width, newest on the right, rather than being stretched across the page.
	chartColumns = 50
)

// runChart is the job page's chart of its last runs: start lag and duration per
// run, oldest first, each run coloured by its status.
type runChart struct {
	Width, Height int // the viewBox
	Bar, Lane     int // a bar's width, a lane's height
	// LowerLane is where the duration lane begins.
	LowerLane int
	Marks     []chartMark
	// Shown is how many runs the chart has, of Listed on the page.
	Shown, Listed int
	// MaxLag and MaxDuration are the lanes' full heights, as text ("1.2s").
	MaxLag, MaxDuration string
	// Summary says the runs' statuses in words: "10 ok, 2 error".
	Summary string
	// First and Last are the oldest and newest run's slots.
	First, Last time.Time
}

// chartMark is one run: its bars in the two lanes, and what it says in words.
type chartMark struct {
	Status string // the run's status
	Class  string // its status class (statusClass): the colour
	Title  string // the run in words: the mark's tooltip and accessible name
	X      string
	// LagY, LagH and DurY, DurH are the bars of the lag and duration lanes.
	LagY, LagH, DurY, DurH string
}

// chartOf draws runs (newest first, as history lists them): the newest
// MaxChartRuns of them, oldest on the left, the newest at the right edge. It
// returns nil for no run.
func chartOf(runs []fleet.Run, now time.Time) *runChart {
	if len(runs) == 0 {
		return nil
	}
	shown := slices.Clone(runs[:min(len(runs), MaxChartRuns)])
	slices.Reverse(shown)
	var maxLag, maxDur float64
	counts := map[string]int{}
	var order []string
	for _, r := range shown {
		maxLag, maxDur = max(maxLag, r.LagMS), max(maxDur, r.DurationMS)
		s := string(r.Status)
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
	}
	cols := max(len(shown), chartColumns)
	c := &runChart{Width: cols * chartColumn, Height: chartHeight, Bar: chartBar, Lane: chartLane, LowerLane: chartLane + chartGap,
		Shown: len(shown), Listed: len(runs),
		MaxLag: msText(maxLag), MaxDuration: msText(maxDur), First: shown[0].Slot, Last: shown[len(shown)-1].Slot}
	parts := make([]string, 0, len(order))
	for _, s := range order {
		parts = append(parts, strconv.Itoa(counts[s])+" "+s)
	}
	c.Summary = strings.Join(parts, ", ")
	for i, r := range shown {
		lagH, durH := barHeight(r.LagMS, maxLag), barHeight(r.DurationMS, maxDur)
		c.Marks = append(c.Marks, chartMark{
			Status: string(r.Status), Class: runClass(r), Title: markTitle(r, now),
			X:    num(float64((cols-len(shown)+i)*chartColumn) + (chartColumn-chartBar)/2.0),
			LagY: num(chartLane - lagH), LagH: num(lagH),
			DurY: num(chartHeight - durH), DurH: num(durH),
		})
	}
	return c
}

// barHeight is v's bar in a lane whose full height is top; a run with nothing to
// show gets a stub.
func barHeight(v, top float64) float64 {
	if v <= 0 || top <= 0 {
		return chartStub
	}
	return max(chartStub, chartLane*v/top)
}

// markTitle says a run in words: "09:00:00Z ok, scheduled: lag 12ms, took 3ms".
func markTitle(r fleet.Run, now time.Time) string {
	kind := "scheduled"
	switch {
	case r.Manual:
		kind = "manual"
	case r.Backfill:
		kind = "backfill"
	}
	t := fmt.Sprintf("%s %s, %s", clock(r.Slot, now), r.Status, kind)
	if r.Instance != "" {
		t += " on " + r.Instance
	}
	switch {
	case r.StartedAt.IsZero():
		return t + ": not started"
	case r.FinishedAt.IsZero():
		return t + ": lag " + msText(r.LagMS) + ", still running"
	}
	return t + ": lag " + msText(r.LagMS) + ", took " + msText(r.DurationMS)
}

// num writes a coordinate with one decimal at most.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }
