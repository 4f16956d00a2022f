package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/web"
)

// hostileEntry is an entry ID a page must show as text: markup, a bidi override,
// shell text (an ID holds no control character).
const hostileEntry = `<b onclick=x>acme</b>` + "\u202e" + `gpj.exe $(touch pwned)`

// TestEntryRunNow: the entry page runs its entry now, behind the page's action
// checks, as a manual run of the entry by who asked; it shows who changed the
// entry last.
func TestEntryRunNow(t *testing.T) {
	f := startFleetWith(t, web.Config{Authorize: func(*http.Request) bool { return true },
		Who: func(*http.Request) string { return "ana\x1b[2J" }}, declareTenants)
	f.addEntry(t, jobTenants, hostileEntry, rareEntry)
	page := f.get(t, entryURL(jobTenants, hostileEntry))
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.Contains(t, page.body, `id="run-entry">Run now</button>`)
	assert.Regexp(t, `<dd id="entry-by">tester <span class="meta">through replica-[abc]</span></dd>`, page.body)
	assert.NotContains(t, page.body, "<b onclick", "the ID is text")
	assert.NotContains(t, page.body, "\u202e", "the bidi override is shown as an escape")

	r := f.post(t, entryURL(jobTenants, hostileEntry)+"/run", nil)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, entryURL(jobTenants, hostileEntry)+"?done=finished", r.header.Get("Location"))
	got, err := f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: hostileEntry})
	require.NoError(t, err)
	require.Len(t, got.Runs, 1)
	assert.True(t, got.Runs[0].Manual)
	assert.Equal(t, "ana\x1b[2J", got.Runs[0].RequestedBy, "Who's name, recorded with the run")
	page = f.get(t, r.header.Get("Location"))
	assert.Contains(t, page.body, `manual by ana\x1b[2J`, "who asked, its control shown as an escape")
	assert.NotContains(t, page.body, "\x1b")

	// The JSON API answers the fleet's reply.
	api := "/anarchon/api" + strings.TrimPrefix(entryURL(jobTenants, hostileEntry), "/anarchon") + "/run"
	r = f.do(t, http.MethodPost, api, http.Header{"Content-Type": {"application/json"}}, `{}`)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var tr fleet.TriggerReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &tr))
	assert.Equal(t, hostileEntry, tr.Entry)
	assert.Equal(t, fleet.StateFinished, tr.State)

	r = f.post(t, entryURL(jobTenants, "nope")+"/run", nil)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Contains(t, r.body, "run entry &#34;nope&#34; of &#34;tenants&#34;: the job has no schedule entry with this ID")
	r = f.do(t, http.MethodPost, entryURL(jobTenants, hostileEntry)+"/run", http.Header{"Sec-Fetch-Site": {"cross-site"}}, "")
	assert.Equal(t, http.StatusForbidden, r.status)
	r = f.do(t, http.MethodPost, entryURL(jobTenants, hostileEntry)+"/run", http.Header{"Host": {"evil.example"}}, "")
	assert.Equal(t, http.StatusForbidden, r.status, "a Host the page does not answer to")
	got, err = f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: hostileEntry})
	require.NoError(t, err)
	assert.Len(t, got.Runs, 2, "the refused runs ran nothing")
}

// TestEntryRunNowRefused: without an authorizer the page has no Run now and a
// POST is refused; an authorizer that says no refuses it too; nothing runs.
func TestEntryRunNowRefused(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	f.addEntry(t, jobTenants, "acme", rareEntry)
	page := f.get(t, entryURL(jobTenants, "acme"))
	assert.NotContains(t, page.body, "run-entry")
	r := f.post(t, entryURL(jobTenants, "acme")+"/run", nil)
	assert.Equal(t, http.StatusForbidden, r.status)
	g := startFleetWith(t, web.Config{Authorize: func(r *http.Request) bool { return r.Method == http.MethodGet }}, declareTenants)
	g.addEntry(t, jobTenants, "acme", rareEntry)
	r = g.post(t, entryURL(jobTenants, "acme")+"/run", url.Values{})
	assert.Equal(t, http.StatusForbidden, r.status)
	assert.Contains(t, r.body, "not allowed: the authorizer refused run entry &#34;acme&#34; of &#34;tenants&#34;")
	for _, fl := range []*testFleet{f, g} {
		got, err := fl.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: "acme"})
		require.NoError(t, err)
		assert.Empty(t, got.Runs)
	}
}

// TestJobsRowOfAJobOfEntries: the jobs page's row of a job of entries counts
// them by state, names the failing ones and is marked failing.
func TestJobsRowOfAJobOfEntries(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	f.addEntry(t, jobTenants, hostileEntry, fleet.EntrySpec{Every: "300ms", Payload: []byte("fail")})
	f.addEntry(t, jobTenants, "fine", fleet.EntrySpec{Every: "300ms"})
	f.addEntry(t, jobTenants, "held", fleet.EntrySpec{Every: rare.String(), Paused: true})
	var row string
	require.Eventually(t, func() bool {
		page := f.get(t, "/anarchon/")
		_, row, _ = strings.Cut(page.body, `data-job="`+jobTenants+`">`)
		row, _, _ = strings.Cut(row, "</tr>")
		return strings.Contains(row, "failing: ")
	}, 10*time.Second, 100*time.Millisecond)
	assert.Contains(t, row, "its schedule entries: 2 active, 1 paused")
	assert.Contains(t, row, `failing: &lt;b onclick=x&gt;acme&lt;/b&gt;\u202egpj.exe $(touch pwned)`)
	page := f.get(t, "/anarchon/?show=failing")
	assert.Contains(t, page.body, fmt.Sprintf(`class="failing" data-job="%s"`, jobTenants), "listed among the failing jobs")
}
