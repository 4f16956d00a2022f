package browser

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// requests intercepts every request of the tab (the Fetch domain): one to
// 127.0.0.1 goes on, any other is failed and recorded.
type requests struct {
	mu      sync.Mutex
	seen    []string
	blocked []string
}

func interceptRequests(t *testing.T, ctx context.Context) *requests {
	t.Helper()
	rs := &requests{}
	paused := make(chan *fetch.EventRequestPaused, 256)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e // handled below: a listener must not call the browser
		}
	}))
	go func() {
		for {
			var e *fetch.EventRequestPaused
			select {
			case e = <-paused:
			case <-ctx.Done():
				return
			}
			u, err := url.Parse(e.Request.URL)
			local := err == nil && u.Hostname() == "127.0.0.1"
			rs.mu.Lock()
			rs.seen = append(rs.seen, e.Request.URL)
			if !local {
				rs.blocked = append(rs.blocked, e.Request.URL)
			}
			rs.mu.Unlock()
			if local {
				_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
			} else {
				_, _ = chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
			}
		}
	}()
	_, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*"}}})
	require.NoError(t, err)
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
	f := startFleet(t)
	ctx := startChromium(t)
	reqs := interceptRequests(t, ctx)
	dir := screenshotDir(t)

	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(f.url), chromedp.WaitVisible(chromedp.CSS("#jobs"))))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](readRows))
	require.NoError(t, err)
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
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(r.Href), chromedp.WaitVisible(chromedp.CSS("#runs"))))
		before, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](manualSlots))
		require.NoError(t, err)

		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(f.url), chromedp.WaitVisible(chromedp.CSS("#jobs"))))
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
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(reportURL), chromedp.WaitVisible(chromedp.CSS("#pause-reason"))))
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

	// The job page of tick, with its runs and the manual one.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(f.url+"job/"+jobTick+"?limit=12"), chromedp.WaitVisible(chromedp.CSS("#runs"))))
	screenshot(t, ctx, dir, "job.png")

	// At 375 px: no sideways scroll, and the key columns are in view.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(375, 812), chromedp.Navigate(f.url), chromedp.WaitVisible(chromedp.CSS("#jobs"))))
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

	reqs.mu.Lock()
	defer reqs.mu.Unlock()
	assert.NotEmpty(t, reqs.seen, "the interception saw the pages' requests")
	assert.Empty(t, reqs.blocked, "no request leaves 127.0.0.1")
	t.Logf("%d requests, all to 127.0.0.1; the browser test took %v", len(reqs.seen), time.Since(began).Round(time.Millisecond))
}
