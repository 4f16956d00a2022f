package browser

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runsLayout is how a job page's runs table reads in the browser.
type runsLayout struct {
	DocScroll, DocClient    float64 // the page: no sideways scroll
	BoxScroll, BoxClient    float64 // the table's box
	CaptionRight, Viewport  float64 // the caption's right edge, in view
	CaptionScroll, CaptionW float64 // the caption's text, not cut
	RunRows, ErrRows, Bad   int
	MaxBadRow, MaxOkRow     float64 // the tallest failed run's row and ok run's row, in px
	ErrTexts                []string
	Visible                 []string // the column heads shown
	LinkedSlots             int      // runs whose slot links their attempt
}

const readRuns = `(() => {
	const t = document.getElementById('runs'), box = t.closest('.scroll'), cap = t.caption;
	const rows = [...t.tBodies[0].rows];
	const h = r => r.getBoundingClientRect().height;
	const runs = rows.filter(r => r.classList.contains('run-row'));
	const bad = runs.filter(r => r.classList.contains('bad'));
	const ok = runs.filter(r => r.classList.contains('ok'));
	return {
		DocScroll: document.documentElement.scrollWidth, DocClient: document.documentElement.clientWidth,
		BoxScroll: box.scrollWidth, BoxClient: box.clientWidth,
		CaptionRight: cap.getBoundingClientRect().right, Viewport: window.innerWidth,
		CaptionScroll: cap.scrollWidth, CaptionW: cap.clientWidth,
		RunRows: runs.length, ErrRows: rows.filter(r => r.classList.contains('err-row')).length, Bad: bad.length,
		MaxBadRow: Math.max(0, ...bad.map(h)), MaxOkRow: Math.max(0, ...ok.map(h)),
		ErrTexts: [...t.querySelectorAll('tr.err-row .err')].map(e => e.textContent),
		Visible: [...t.tHead.rows[0].cells].filter(c => getComputedStyle(c).display !== 'none').map(c => c.textContent.trim()),
		LinkedSlots: runs.filter(r => r.querySelector('td:first-child a[href*="/run/"]')).length,
	};
})()`

// TestRunsAndAttemptsInChromium: at 1280 and 375 px a failing job's runs read
// well (a failed run's row is as tall as an ok one's, its error in a row of
// its own, the caption whole and in view, nothing scrolls sideways); the
// status filter keeps the failures; a run's slot opens its attempt's page,
// which has the whole error; the search finds the job by part of its name.
func TestRunsAndAttemptsInChromium(t *testing.T) {
	f := demoFleet(t)
	ctx := startChromium(t)
	reqs := watchRequests(t, ctx)
	dir := screenshotDir(t)
	const wantErr = "upstream inventory answered 503 <html>Service Unavailable</html>"
	for _, width := range []int64{1280, 375} {
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(width, 812)))
		open(t, ctx, f.url+"job/"+jobFlaky, "#runs")
		l, err := chromedp.Run(ctx, chromedp.Evaluate[runsLayout](readRuns))
		require.NoError(t, err)
		t.Logf("flaky-sync's runs at %d px: %+v", width, l)
		require.Positive(t, l.Bad, "flaky-sync has failed runs")
		assert.Equal(t, l.Bad, l.ErrRows, "%d px: each failed run's error in a row of its own", width)
		assert.LessOrEqual(t, l.MaxBadRow, 48.0, "%d px: a failed run's row holds one line, no blank space", width)
		for _, e := range l.ErrTexts {
			assert.Equal(t, wantErr, e, "%d px: the error as text", width)
		}
		assert.Equal(t, l.RunRows, l.LinkedSlots, "%d px: every run links its attempt", width)
		assert.LessOrEqual(t, l.DocScroll, l.DocClient, "%d px: the page does not scroll sideways", width)
		assert.LessOrEqual(t, l.BoxScroll, l.BoxClient, "%d px: the runs table does not scroll sideways", width)
		assert.LessOrEqual(t, l.CaptionRight, l.Viewport, "%d px: the caption is in view", width)
		assert.LessOrEqual(t, l.CaptionScroll, l.CaptionW, "%d px: the caption is not cut", width)
		if width == 375 {
			assert.Equal(t, []string{"Slot", "Status", "Instance", "Duration"}, l.Visible, "the key columns; the attempt page has the rest")
		}
		screenshot(t, ctx, dir, fmt.Sprintf("job-failing-%d.png", width))

		// The failures only, through the filter's link.
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`nav.filter a[href$="status=failed"]`)))
		require.NoError(t, err)
		require.Equal(t, int64(200), resp.Status)
		fl, err := chromedp.Run(ctx, chromedp.Evaluate[runsLayout](readRuns))
		require.NoError(t, err)
		assert.Equal(t, fl.RunRows, fl.Bad, "%d px: the filter keeps the failures", width)

		// The newest run's attempt page, through its slot.
		resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#runs tr.run-row td:first-child a`)))
		require.NoError(t, err)
		require.Equal(t, int64(200), resp.Status)
		type attempt struct {
			H1, Status, Error    string
			DocScroll, DocClient float64
		}
		a, err := chromedp.Run(ctx, chromedp.Evaluate[attempt](`({
			H1: document.getElementById('attempt-h').textContent,
			Status: document.getElementById('attempt-status').textContent,
			Error: document.getElementById('attempt-error').textContent,
			DocScroll: document.documentElement.scrollWidth, DocClient: document.documentElement.clientWidth,
		})`))
		require.NoError(t, err)
		assert.Contains(t, a.H1, "Attempt 1 of ")
		assert.Equal(t, "error", a.Status)
		assert.Equal(t, wantErr, a.Error)
		assert.LessOrEqual(t, a.DocScroll, a.DocClient, "%d px: the attempt's page does not scroll sideways", width)
		screenshot(t, ctx, dir, fmt.Sprintf("attempt-%d.png", width))
	}

	// Search from the jobs page: part of a name lists the job.
	open(t, ctx, f.url, "#q-job")
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#q-job"), "FLAKY")))
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#search")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	found, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#found-jobs a')].map(a => a.textContent)`))
	require.NoError(t, err)
	assert.Equal(t, []string{jobFlaky}, found)

	reqs.mu.Lock()
	defer reqs.mu.Unlock()
	assert.Empty(t, reqs.outside, "no request leaves 127.0.0.1")
}
