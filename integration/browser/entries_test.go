package browser

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// TestEntriesInChromium: a job's schedule entries on its page and an entry's
// own page, at 375 px: the key columns in view, nothing scrolls sideways (a long
// payload wraps), a failing entry stands out, a hostile ID is text, and the
// entry's pause button pauses it.
func TestEntriesInChromium(t *testing.T) {
	const (
		jobTenants = "tenants"
		hostile    = `<img src=x onerror="alert('id')">`
	)
	f := startFleet(t, fleetSetup{
		declare: func(t *testing.T, s *scheduler.Scheduler) {
			require.NoError(t, s.Declare(jobTenants, func(_ context.Context, run scheduler.Run) error {
				if strings.HasPrefix(string(run.Payload), "fail") {
					return errors.New("tenant database <b>unreachable</b>")
				}
				return nil
			}))
		},
		prepare: func(t *testing.T, ctx context.Context, c *fleet.Client) {
			add := func(id string, spec fleet.EntrySpec) {
				_, err := c.AddEntry(ctx, jobTenants, fleet.AddEntryRequest{ID: id, EntrySpec: spec})
				require.NoError(t, err)
			}
			add("acme", fleet.EntrySpec{Cron: "0 9 * * MON-FRI", Zone: "Europe/Athens",
				Payload: []byte(`{"tenant":"acme","regions":"` + strings.Repeat("eu-west-1,", 200) + `"}`)})
			add(hostile, fleet.EntrySpec{Every: "24h"})
			add("flaky", fleet.EntrySpec{Every: "1s", Payload: []byte("fail")})
			require.Eventually(t, func() bool {
				r, err := c.Entry(ctx, jobTenants, fleet.EntryRequest{ID: "flaky", History: 1})
				return err == nil && r.Entry.LastFailure != nil
			}, 30*time.Second, 100*time.Millisecond, "the flaky entry runs and fails")
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
	t.Cleanup(func() {
		if t.Failed() {
			text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Logf("the page when it failed (%v):\n%s", err, text)
		}
	})
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(375, 812)))

	type layout struct {
		DocScroll, DocClient float64
		Visible              []string
		Right                float64
		Entries, Failing     []string
	}
	open(t, ctx, f.url+"job/"+jobTenants, "#entries")
	l, err := chromedp.Run(ctx, chromedp.Evaluate[layout](`(() => {
		const t = document.getElementById('entries');
		const heads = [...t.tHead.rows[0].cells].filter(c => getComputedStyle(c).display !== 'none');
		return {
			DocScroll: document.documentElement.scrollWidth, DocClient: document.documentElement.clientWidth,
			Visible: heads.map(c => c.textContent.trim()),
			Right: Math.max(...heads.map(c => c.getBoundingClientRect().right)),
			Entries: [...t.tBodies[0].rows].map(r => r.querySelector('th a').textContent),
			Failing: [...t.querySelectorAll('tr.failing th a')].map(a => a.textContent),
		};
	})()`))
	require.NoError(t, err)
	t.Logf("the job page at 375 px: %+v", l)
	assert.Equal(t, []string{"Entry", "State", "Last run"}, l.Visible, "the key columns")
	assert.LessOrEqual(t, l.Right, 375.0, "the key columns are in view")
	assert.LessOrEqual(t, l.DocScroll, l.DocClient, "the page does not scroll sideways")
	assert.Equal(t, []string{hostile, "acme", "flaky"}, l.Entries, "in order of ID, the hostile one as text")
	assert.Equal(t, []string{"flaky"}, l.Failing, "the failing entry stands out")

	// acme's page, through its link: the long payload wraps, shown in part.
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#entries a[href$="/entry/acme"]`)))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	type entryLayout struct {
		H1                   string
		DocScroll, DocClient float64
		Payload              int
	}
	el, err := chromedp.Run(ctx, chromedp.Evaluate[entryLayout](`({
		H1: document.getElementById('entry-id').textContent,
		DocScroll: document.documentElement.scrollWidth, DocClient: document.documentElement.clientWidth,
		Payload: document.querySelector('pre.payload').textContent.length,
	})`))
	require.NoError(t, err)
	t.Logf("the entry page at 375 px: %+v", el)
	assert.Equal(t, "acme", el.H1)
	assert.LessOrEqual(t, el.DocScroll, el.DocClient, "the entry page does not scroll sideways")
	assert.Equal(t, 512, el.Payload, "the payload's first 512 bytes")

	// Pause it with its button, then resume it.
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#pause")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	done, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("p.done")))
	require.NoError(t, err)
	assert.Contains(t, done, "Paused")
	r, err := f.client.Entry(ctx, jobTenants, fleet.EntryRequest{ID: "acme", History: 1})
	require.NoError(t, err)
	assert.True(t, r.Entry.Paused)
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#resume")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#pause"))), "resumed: the pause button is back")

	// Add an entry with the job page's form, change it on its page, remove it.
	open(t, ctx, f.url+"job/"+jobTenants, "#add-entry")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#ef-id"), "initech/eu"),
		chromedp.SendKeys(chromedp.CSS("#ef-every"), "6h"),
		chromedp.SendKeys(chromedp.CSS("#ef-payload"), `{"tenant":"initech"}`),
	))
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#add-entry")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	done, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("p.done")))
	require.NoError(t, err)
	assert.Contains(t, done, "Added")
	added, err := f.client.Entry(ctx, jobTenants, fleet.EntryRequest{ID: "initech/eu", History: 1})
	require.NoError(t, err)
	assert.Equal(t, "6h0m0s", added.Entry.Every)
	assert.Equal(t, `{"tenant":"initech"}`, string(added.Entry.Payload))
	labelled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll('form.entry-form input:not([type=hidden]), form.entry-form textarea')].every(e => e.labels.length === 1)`))
	require.NoError(t, err)
	assert.True(t, labelled, "every field of the change form has its label")
	eform, err := chromedp.Run(ctx, chromedp.Evaluate[entryLayout](`({DocScroll: document.documentElement.scrollWidth, DocClient: document.documentElement.clientWidth})`))
	require.NoError(t, err)
	assert.LessOrEqual(t, eform.DocScroll, eform.DocClient, "the forms do not scroll sideways at 375 px")
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById('ef-every').value = '') === ''`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#ef-every"), "12h")))
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#update-entry")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	changed, err := f.client.Entry(ctx, jobTenants, fleet.EntryRequest{ID: "initech/eu", History: 1})
	require.NoError(t, err)
	assert.Equal(t, "12h0m0s", changed.Entry.Every)
	assert.Equal(t, `{"tenant":"initech"}`, string(changed.Entry.Payload), "the payload kept")
	assert.Greater(t, changed.Entry.Revision, added.Entry.Revision)
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#remove-entry")))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	done, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("p.done")))
	require.NoError(t, err)
	assert.Contains(t, done, "removed")
	_, err = f.client.Entry(ctx, jobTenants, fleet.EntryRequest{ID: "initech/eu", History: 1})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound)

	// The hostile entry's page: its ID is text, no element of its markup.
	open(t, ctx, f.url+"job/"+jobTenants, "#entries")
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#entries tbody tr:first-child th a`)))
	require.NoError(t, err)
	require.Equal(t, int64(200), resp.Status)
	h1, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#entry-id")))
	require.NoError(t, err)
	assert.Equal(t, hostile, h1)
	elems, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('main img, main script').length`))
	require.NoError(t, err)
	assert.Zero(t, elems, "no element of the ID's markup")
	mu.Lock()
	assert.Empty(t, dialogs, "no script ran")
	mu.Unlock()
	reqs.mu.Lock()
	assert.Empty(t, reqs.outside, "no request leaves 127.0.0.1")
	reqs.mu.Unlock()
}
