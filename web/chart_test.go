package web_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/web"
)

// chartSource holds one job, "sync", with runs (newest first) and one job without
// any, "idle".
func chartSource(runs []fleet.Run) *fixedSource {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return &fixedSource{
		fleet: &fleet.Fleet{
			Replicas: []fleet.Replica{{Instance: "replica-a", Version: fleet.Version}},
			Jobs: []fleet.JobSummary{
				{Name: "sync", Schedule: "every 1m0s", Replicas: []string{"replica-a"}, State: fleet.JobActive, Next: now},
				{Name: "idle", Schedule: "every 1m0s", Replicas: []string{"replica-a"}, State: fleet.JobActive, Next: now},
			},
		},
		history: map[string][]fleet.Run{"sync": runs, "idle": {}},
	}
}

// run is a run of sync at minute m past 11:00, newest runs having the largest m.
func run(m int, status scheduler.Status, lagMS, durMS float64) fleet.Run {
	slot := time.Date(2026, 11, 30, 11, m, 0, 0, time.UTC)
	r := fleet.Run{Job: "sync", Slot: slot, Instance: "replica-a", Attempt: 1, Status: status, LagMS: lagMS, DurationMS: durMS}
	if lagMS > 0 {
		r.StartedAt = slot.Add(time.Duration(lagMS * float64(time.Millisecond)))
	}
	if durMS > 0 {
		r.FinishedAt = r.StartedAt.Add(time.Duration(durMS * float64(time.Millisecond)))
	}
	return r
}

func serve(t *testing.T, cfg web.Config, path string) (int, http.Header, string) {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = "/anarchon/"
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
	}
	h, err := web.New(cfg)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return rec.Code, rec.Header(), string(body)
}

var (
	svgRe  = regexp.MustCompile(`(?s)<svg class="runs-chart"[^>]*>.*?</svg>`)
	markRe = regexp.MustCompile(`<g class="mark ([a-z]+)" data-status="([a-z]+)"><title>([^<]*)</title>` +
		`<rect class="lag" x="([0-9.]+)" y="([0-9.]+)" width="7" height="([0-9.]+)"/>` +
		`<rect class="dur" x="[0-9.]+" y="([0-9.]+)" width="7" height="([0-9.]+)"/></g>`)
)

// A job's page draws its last runs as an SVG with one mark per run, oldest on
// the left, each coloured by its outcome, its start lag and duration as bars
// scaled to the largest; the SVG has a title and a description, and no script
// is on the page.
func TestJobPageChartsTheLastRuns(t *testing.T) {
	runs := []fleet.Run{ // newest first, as history lists them
		run(5, scheduler.StatusRunning, 10, 0),
		run(4, scheduler.StatusPaused, 0, 0),
		run(3, scheduler.StatusTimeout, 20, 400),
		run(2, scheduler.StatusError, 40, 100),
		run(1, scheduler.StatusOK, 5, 200),
	}
	status, hdr, body := serve(t, web.Config{Source: chartSource(runs)}, "/anarchon/job/sync")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		hdr.Get("Content-Security-Policy"), "the policy stays as strict: no script, no inline style")
	assert.NotContains(t, body, "<script", "no script")
	assert.NotContains(t, body, "style=", "no inline style, which the policy would block")

	svgs := svgRe.FindAllString(body, -1)
	require.Len(t, svgs, 1, "one chart")
	svg := svgs[0]
	assert.Contains(t, svg, `viewBox="0 0 500 86"`, "50 columns at least: few runs are not stretched")
	assert.Contains(t, svg, `role="img" aria-labelledby="chart-title chart-desc"`)
	assert.Contains(t, svg, `<title id="chart-title">Start lag and duration of the last 5 runs</title>`)
	assert.Contains(t, svg, `<desc id="chart-desc">From the slot 11:01:00Z to 11:05:00Z: 1 ok, 1 error, 1 timeout, 1 paused, 1 running. Start lag up to 40ms, duration up to 400ms.</desc>`)
	assert.NotContains(t, svg, "<text", "no text in the stretched SVG: its labels are HTML")

	marks := markRe.FindAllStringSubmatch(svg, -1)
	require.Len(t, marks, len(runs), "one mark per run:\n%s", svg)
	type mark struct{ class, status, title, x, lagY, lagH, durY, durH string }
	var got []mark
	for _, m := range marks {
		got = append(got, mark{m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8]})
	}
	assert.Equal(t, []mark{ // oldest first, the newest at the right edge; lanes 40 high, the lower one from 46
		{"ok", "ok", "11:01:00Z ok, scheduled on replica-a: lag 5ms, took 200ms", "451.5", "35", "5", "66", "20"},
		{"bad", "error", "11:02:00Z error, scheduled on replica-a: lag 40ms, took 100ms", "461.5", "0", "40", "76", "10"},
		{"bad", "timeout", "11:03:00Z timeout, scheduled on replica-a: lag 20ms, took 400ms", "471.5", "20", "20", "46", "40"},
		{"warn", "paused", "11:04:00Z paused, scheduled on replica-a: not started", "481.5", "38", "2", "84", "2"},
		{"run", "running", "11:05:00Z running, scheduled on replica-a: lag 10ms, still running", "491.5", "30", "10", "84", "2"},
	}, got)

	// The figure says what the lanes are, and the table below has every number.
	assert.Contains(t, body, "Start lag (upper lane, full height 40ms) and duration (lower lane, full height 400ms) of the last 5 runs, oldest on the left")
	table := regexp.MustCompile(`(?s)<table id="runs">.*?</table>`).FindString(body)
	for _, n := range []string{"5ms", "200ms", "40ms", "100ms", "400ms", "10ms"} {
		assert.Contains(t, table, ">"+n+"<", "the table has %s", n)
	}

	// The colours are the stylesheet's, one per outcome class.
	_, _, css := serve(t, web.Config{Source: chartSource(runs)}, "/anarchon/style.css")
	for class, colour := range map[string]string{"ok": "var(--ok)", "bad": "var(--bad)", "warn": "var(--warn-fill)", "run": "var(--run)"} {
		assert.Contains(t, css, "svg.runs-chart ."+class+" rect { fill: "+colour+"; }")
	}
}

// The chart has the newest MaxChartRuns of the runs the page lists, and a job
// without runs has no chart.
func TestJobPageChartBounds(t *testing.T) {
	var runs []fleet.Run
	for i := range 150 {
		runs = append(runs, run(59-i%60, scheduler.StatusOK, float64(i+1), 1))
	}
	_, _, body := serve(t, web.Config{Source: chartSource(runs)}, "/anarchon/job/sync?limit=150")
	svg := svgRe.FindString(body)
	assert.Len(t, markRe.FindAllString(svg, -1), web.MaxChartRuns)
	assert.Contains(t, body, fmt.Sprintf("of the last %d runs of the 150 below", web.MaxChartRuns))
	assert.Contains(t, svg, "Start lag up to 100ms", "the lanes are scaled to the runs shown")

	_, _, body = serve(t, web.Config{Source: chartSource(runs)}, "/anarchon/job/idle")
	assert.NotContains(t, body, "<svg", "no run, no chart")
	assert.True(t, strings.Contains(body, "No run recorded yet."))
}

// A backfill's run is marked as such in the job's history and chart, as a
// manual one is.
func TestJobPageMarksBackfillRuns(t *testing.T) {
	bf := run(2, scheduler.StatusOK, 5, 20)
	bf.Backfill = true
	status, _, body := serve(t, web.Config{Source: chartSource([]fleet.Run{bf, run(1, scheduler.StatusOK, 5, 20)})}, "/anarchon/job/sync")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<tr class="run-row ok backfill">`)
	assert.Contains(t, body, `<td class="opt">backfill</td>`)
	assert.Contains(t, body, "ok, backfill on replica-a")
	assert.Contains(t, body, "ok, scheduled on replica-a")
}
