package browser

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/web"
)

// chromiumPath is Debian's chromium unless $ANARCHON_CHROMIUM says otherwise.
func chromiumPath() string {
	if p := os.Getenv("ANARCHON_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// startChromium starts a headless Chromium with a fresh profile and returns a
// tab's context. It fails, never skips, when Chromium is missing or cannot
// start.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Chromium is needed at %s (Debian's chromium package; .ci/deps installs it): %v", path, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		// On a closed network, Chromium's own traffic would only be refused.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	// The first action starts the browser.
	_, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.userAgent`))
	require.NoError(t, err, "Chromium must start (%s)", path)
	return ctx
}

// requests records every request the tab makes (the Network domain's
// requestWillBeSent, which fires before a request is sent, for documents,
// stylesheets, images, favicons and redirects alike), and those to another host
// than 127.0.0.1.
type requests struct {
	mu      sync.Mutex
	seen    []string
	outside []string
}

func watchRequests(t *testing.T, ctx context.Context) *requests {
	t.Helper()
	rs := &requests{}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		e, ok := ev.(*network.EventRequestWillBeSent)
		if !ok {
			return
		}
		u, err := url.Parse(e.Request.URL)
		rs.mu.Lock()
		defer rs.mu.Unlock()
		rs.seen = append(rs.seen, e.Request.Method+" "+e.Request.URL)
		if err != nil || u.Hostname() != "127.0.0.1" {
			rs.outside = append(rs.outside, e.Request.URL)
		}
	}))
	return rs
}

// screenshotDir is where the screenshots go: $ANARCHON_SCREENSHOTS (the
// repository's docs/screenshots when refreshing them), else a temp dir.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("ANARCHON_SCREENSHOTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Greater(t, len(png), 1000)
	require.Equal(t, "\x89PNG", string(png[:4]))
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// open loads a page, requires a 200 (else it fails with the page's error, rather
// than waiting for an element an error page does not have), and waits until sel
// is visible.
func open(t *testing.T, ctx context.Context, u, sel string) {
	t.Helper()
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(u))
	require.NoError(t, err, "open %s", u)
	if resp.Status != 200 {
		msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("open %s: %d: %s", u, resp.Status, msg)
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))), "open %s: %s", u, sel)
}

// openJobs opens the jobs page until every job shows its last run: each
// replica reads the runs within a budget (fleet's view), and on a loaded machine
// one page can show a job as unread ("no replica could read its runs"). Every job
// has a finished run before the test opens the page, so a page without one is
// reloaded, for at most 30 s.
func openJobs(t *testing.T, ctx context.Context, u string) []row {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		open(t, ctx, u, "#jobs")
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](readRows))
		require.NoError(t, err)
		unread := slices.ContainsFunc(rows, func(r row) bool { return !r.Ran })
		if !unread {
			return rows
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("for 30 s the jobs page had a job without its last run:\n%s", text)
		}
		t.Logf("a job shows no last run (its view was not read in time); reloading")
	}
}

// row is a job's row of the jobs table, as the browser shows it.
type row struct {
	Job    string `json:"job"`
	Href   string `json:"href"`
	Ran    bool   `json:"ran"`
	Button bool   `json:"button"`
}

const readRows = `[...document.querySelectorAll('#jobs tbody tr[data-job]')].map(r => ({
	job: r.dataset.job,
	href: r.querySelector('th a').href,
	ran: r.querySelector('td.last').textContent.trim() !== '–',
	button: r.querySelector('button') !== null,
}))`

// manualSlots are the slots of the manual runs on a job page.
const manualSlots = `[...document.querySelectorAll('#runs tbody tr.manual time')].map(t => t.getAttribute('datetime'))`

func TestStatusPageInChromium(t *testing.T) {
	began := time.Now()
	f := demoFleet(t)
	ctx := startChromium(t)
	reqs := watchRequests(t, ctx)
	dir := screenshotDir(t)
	t.Cleanup(func() {
		if t.Failed() {
			reqs.mu.Lock()
			t.Logf("requests: %v", reqs.seen)
			reqs.mu.Unlock()
			text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Logf("the page when it failed (%v):\n%s", err, text)
		}
	})

	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)))
	rows := openJobs(t, ctx, f.url)
	names := make([]string, 0, len(rows))
	for _, r := range rows {
		names = append(names, r.Job)
	}
	assert.ElementsMatch(t, []string{jobTick, jobFlaky, jobReport, jobCompact, jobLocked}, names)
	failing, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#jobs tr.failing')].map(r => r.dataset.job)`))
	require.NoError(t, err)
	assert.Equal(t, []string{jobFlaky}, failing, "the failing job stands out")
	paused, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#jobs tr.paused')].map(r => r.dataset.job)`))
	require.NoError(t, err)
	assert.Equal(t, []string{jobCompact}, paused, "the paused job stands out")
	screenshot(t, ctx, dir, "jobs.png")

	// Every job with a run: run it now where the authorizer allows it, and see the
	// new manual run on its page; where it does not, see 403.
	var ran, refused []string
	for _, r := range rows {
		if !r.Ran {
			continue
		}
		require.True(t, r.Button, "%s: the authorizer allows looking, so the page shows run now", r.Job)
		open(t, ctx, r.Href, "#runs")
		before, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](manualSlots))
		require.NoError(t, err)

		open(t, ctx, f.url, "#jobs")
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#jobs tr[data-job="`+r.Job+`"] button`)))
		require.NoError(t, err, "click run now of %s", r.Job)
		if r.Job == jobLocked {
			assert.Equal(t, int64(403), resp.Status, "the authorizer refuses %s", r.Job)
			h1, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("h1")))
			require.NoError(t, err)
			assert.Equal(t, "403 Forbidden", h1)
			refused = append(refused, r.Job)
			continue
		}
		require.Equal(t, int64(200), resp.Status, "run now of %s lands on its page", r.Job)
		loc, err := chromedp.Run(ctx, chromedp.Location())
		require.NoError(t, err)
		assert.Contains(t, loc, "?done=", r.Job)
		after, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](manualSlots))
		require.NoError(t, err)
		var added []string
		for _, s := range after {
			if !slices.Contains(before, s) {
				added = append(added, s)
			}
		}
		assert.Len(t, added, 1, "%s: one new manual run on its page (before %v, after %v)", r.Job, before, after)
		by, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#runs tbody tr.manual td:nth-child(5)`)))
		require.NoError(t, err)
		assert.Equal(t, "manual by browser-test", by)
		ran = append(ran, r.Job)
	}
	assert.ElementsMatch(t, []string{jobTick, jobFlaky, jobReport, jobCompact}, ran)
	assert.Equal(t, []string{jobLocked}, refused)

	// Pause through the labelled form, then resume.
	reportURL := f.url + "job/" + jobReport
	open(t, ctx, reportURL, "#pause-reason")
	labelled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('pause-reason').labels.length === 1 && document.getElementById('pause-for').labels.length === 1`))
	require.NoError(t, err)
	assert.True(t, labelled, "the pause fields have labels")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#pause-reason"), "quarter close"),
		chromedp.SendKeys(chromedp.CSS("#pause-for"), "45m"),
	))
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#pause")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("dl.facts dd")))
	require.NoError(t, err)
	assert.Contains(t, state, "paused: quarter close")
	assert.Contains(t, state, "by browser-test")
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#resume")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#pause-reason"))), "resumed: the pause form is back")

	// The job page of tick, with its runs and the manual one, and their chart.
	if os.Getenv("ANARCHON_SCREENSHOTS") != "" {
		// Refreshing the docs' screenshots: a chart of a dozen runs, not three.
		require.Eventually(t, func() bool {
			h, err := f.client.History(ctx, jobTick, 12)
			return err == nil && len(h.Runs) >= 12
		}, time.Minute, 250*time.Millisecond)
	}
	open(t, ctx, f.url+"job/"+jobTick+"?limit=12", "#runs")
	tick := readChart(t, ctx)
	assert.Equal(t, tick.Rows, tick.Marks, "one mark per run in the table")
	assert.Positive(t, tick.Marks)
	assert.Equal(t, tick.Marks, tick.Classes["ok"]+tick.Classes["run"], "every run of tick ended ok, or runs: %+v", tick)
	assert.Equal(t, []string{okGreen}, tick.Fills["ok"], "ok runs are drawn green, from the stylesheet")
	assertChartAccessible(t, tick)
	screenshot(t, ctx, dir, "job.png")
	open(t, ctx, f.url+"job/"+jobFlaky, "#runs")
	flaky := readChart(t, ctx)
	assert.Equal(t, flaky.Rows, flaky.Marks)
	assert.Equal(t, flaky.Marks-flaky.Classes["run"], flaky.Classes["bad"], "the failing job's finished runs are failures: %+v", flaky)
	assert.Equal(t, []string{badRed}, flaky.Fills["bad"], "failed runs are drawn red")
	assertChartAccessible(t, flaky)

	// At 375 px: no sideways scroll, and the key columns are in view.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(375, 812)))
	openJobs(t, ctx, f.url)
	type layout struct {
		DocScroll, DocClient, TableScroll, TableClient float64
		Visible                                        []string
		Right                                          float64
	}
	l, err := chromedp.Run(ctx, chromedp.Evaluate[layout](`(() => {
		const t = document.getElementById('jobs'), box = t.closest('.scroll');
		const heads = [...t.tHead.rows[0].cells].filter(c => getComputedStyle(c).display !== 'none');
		return {
			DocScroll: document.documentElement.scrollWidth, DocClient: document.documentElement.clientWidth,
			TableScroll: box.scrollWidth, TableClient: box.clientWidth,
			Visible: heads.map(c => c.textContent.trim()),
			Right: Math.max(...heads.map(c => c.getBoundingClientRect().right)),
		};
	})()`))
	require.NoError(t, err)
	t.Logf("at 375 px: %+v", l)
	assert.Equal(t, []string{"Job", "State", "Last run"}, l.Visible, "the key columns")
	assert.LessOrEqual(t, l.DocScroll, l.DocClient, "the page does not scroll sideways")
	assert.LessOrEqual(t, l.TableScroll, l.TableClient, "the table does not scroll sideways")
	assert.LessOrEqual(t, l.Right, 375.0, "the key columns are in view")
	screenshot(t, ctx, dir, "jobs-375.png")

	// The job page at 375 px: the chart fits the width, the page does not scroll
	// sideways (the runs table scrolls in its own box).
	open(t, ctx, f.url+"job/"+jobTick, "#runs")
	narrow := readChart(t, ctx)
	t.Logf("the job page at 375 px: %+v", narrow)
	assert.LessOrEqual(t, narrow.DocScroll, narrow.DocClient, "the job page does not scroll sideways")
	assert.LessOrEqual(t, narrow.Right, 375.0, "the chart fits the screen")
	assert.Greater(t, narrow.Width, 300.0, "and fills its width")
	assert.Equal(t, narrow.Rows, narrow.Marks)

	reqs.mu.Lock()
	defer reqs.mu.Unlock()
	assert.GreaterOrEqual(t, len(reqs.seen), 20, "the pages' requests were seen: %v", reqs.seen)
	assert.Empty(t, reqs.outside, "no request leaves 127.0.0.1")
	t.Logf("%d requests, all to 127.0.0.1; the browser test took %v", len(reqs.seen), time.Since(began).Round(time.Millisecond))
}

// The colours the stylesheet gives the chart's ok and failed runs.
const (
	okGreen = "rgb(26, 127, 55)"
	badRed  = "rgb(180, 35, 24)"
)

// chart is a job page's chart as the browser shows it.
type chart struct {
	Marks, Rows int            // the chart's marks; the rows of the runs table
	Classes     map[string]int // marks by outcome class
	Fills       map[string][]string
	// The SVG's accessible name and description, and the page's scripts.
	Title, Desc, LabelledBy string
	Scripts                 int
	Width, Right            float64 // the SVG's rendered width and right edge
	DocScroll, DocClient    float64
}

func readChart(t *testing.T, ctx context.Context) chart {
	t.Helper()
	c, err := chromedp.Run(ctx, chromedp.Evaluate[chart](`(() => {
		const svg = document.querySelector('svg.runs-chart');
		const marks = [...svg.querySelectorAll('g.mark')];
		const classes = {}, fills = {};
		for (const m of marks) {
			const cls = [...m.classList].find(c => c !== 'mark');
			classes[cls] = (classes[cls] || 0) + 1;
			const fill = getComputedStyle(m.querySelector('rect.dur')).fill;
			fills[cls] = [...new Set([...(fills[cls] || []), fill])];
		}
		const box = svg.getBoundingClientRect();
		return {
			Marks: marks.length,
			Rows: document.querySelectorAll('#runs tbody tr.run-row').length,
			Classes: classes, Fills: fills,
			Title: svg.querySelector(':scope > title').textContent,
			Desc: svg.querySelector(':scope > desc').textContent,
			LabelledBy: svg.getAttribute('aria-labelledby'),
			Scripts: document.scripts.length,
			Width: box.width, Right: box.right,
			DocScroll: document.documentElement.scrollWidth, DocClient: document.documentElement.clientWidth,
		};
	})()`))
	require.NoError(t, err, "the job page has a chart")
	return c
}

func assertChartAccessible(t *testing.T, c chart) {
	t.Helper()
	assert.Contains(t, c.Title, "Start lag and duration of the last")
	assert.Contains(t, c.Desc, "Start lag up to")
	assert.Equal(t, "chart-title chart-desc", c.LabelledBy)
	assert.Zero(t, c.Scripts, "no script on the page")
}

// TestJobsPageReloadsItselfInChromium: the jobs page reloads itself at the
// configured interval, and with ?refresh=0 it does not, nor do the filters it
// links to.
func TestJobsPageReloadsItselfInChromium(t *testing.T) {
	f := startFleet(t, fleetSetup{
		declare: func(t *testing.T, s *scheduler.Scheduler) {
			require.NoError(t, s.Every(jobTick, time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		},
		prepare: func(t *testing.T, ctx context.Context, c *fleet.Client) {
			_, err := c.Trigger(ctx, jobTick, fleet.TriggerRequest{Wait: true})
			require.NoError(t, err)
		},
		page: func(c *web.Config) { c.Refresh = time.Second },
	})
	ctx := startChromium(t)
	reqs := watchRequests(t, ctx)
	loads := make(chan string, 16)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*page.EventFrameNavigated); ok && e.Frame.ParentID == "" {
			select {
			case loads <- e.Frame.URL:
			default:
			}
		}
	}))
	drain := func() {
		for {
			select {
			case <-loads:
			default:
				return
			}
		}
	}
	refreshOf := func() string {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('meta[http-equiv="refresh"]') || {content: ''}).content`))
		require.NoError(t, err)
		return v
	}

	open(t, ctx, f.url, "#jobs")
	assert.Equal(t, "1", refreshOf())
	drain()
	select {
	case u := <-loads:
		assert.Equal(t, f.url, u, "the page reloaded itself")
	case <-time.After(15 * time.Second):
		t.Fatal("the jobs page did not reload itself within 15 s at a refresh of 1 s")
	}

	open(t, ctx, f.url+"?refresh=0", "#jobs")
	assert.Empty(t, refreshOf(), "?refresh=0: no reload")
	note, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#refresh")))
	require.NoError(t, err)
	assert.Equal(t, "This page does not reload itself: reload it every 1s.", note)
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`nav.filter a[href*="failing"]`)))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, f.url+"?refresh=0&show=failing", loc, "the filter keeps ?refresh=0")
	assert.Empty(t, refreshOf())
	drain()
	select {
	case u := <-loads:
		t.Fatalf("a page with ?refresh=0 reloaded: %s", u)
	case <-time.After(3 * time.Second): // three refresh intervals
	}

	reqs.mu.Lock()
	defer reqs.mu.Unlock()
	assert.Empty(t, reqs.outside, "no request leaves 127.0.0.1")
}

// TestHostileNamesInChromium: a job whose name and error are markup shows them as
// text; no script runs (no dialog opens) and no element of theirs exists.
func TestHostileNamesInChromium(t *testing.T) {
	const (
		name = `<img src=x onerror="alert('name')">`
		fail = `<script>alert('error')</script>`
	)
	f := startFleet(t, fleetSetup{
		declare: func(t *testing.T, s *scheduler.Scheduler) {
			require.NoError(t, s.Every(name, 365*24*time.Hour, func(context.Context, scheduler.Run) error { return errors.New(fail) }))
		},
		prepare: func(t *testing.T, ctx context.Context, c *fleet.Client) {
			_, err := c.Trigger(ctx, name, fleet.TriggerRequest{Wait: true})
			require.NoError(t, err)
		},
	})
	ctx := startChromium(t)
	reqs := watchRequests(t, ctx)
	var mu sync.Mutex
	var dialogs []string
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			dialogs = append(dialogs, e.Message)
			mu.Unlock()
		}
	}))
	rows := openJobs(t, ctx, f.url)
	require.Len(t, rows, 1)
	assert.Equal(t, name, rows[0].Job, "the name is text")
	open(t, ctx, rows[0].Href, "#runs")
	h1, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#job-name")))
	require.NoError(t, err)
	assert.Equal(t, name, h1)
	errText, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#runs tbody .err")))
	require.NoError(t, err)
	assert.Equal(t, fail, errText)
	elems, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('main img, main script').length`))
	require.NoError(t, err)
	assert.Zero(t, elems, "no element of the name's or the error's markup")
	mu.Lock()
	assert.Empty(t, dialogs, "no script ran")
	mu.Unlock()
	reqs.mu.Lock()
	assert.Empty(t, reqs.outside, "no request leaves 127.0.0.1")
	assert.NotContains(t, strings.Join(reqs.seen, "\n"), "/x", "no img src=x was loaded")
	reqs.mu.Unlock()
}
