package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// jobTenants is a job of schedule entries only (Declare); an entry whose payload
// starts with "fail" fails with hostileErr.
const jobTenants = "tenants"

func declareTenants(s *scheduler.Scheduler) error {
	return s.Declare(jobTenants, func(_ context.Context, run scheduler.Run) error {
		if strings.HasPrefix(string(run.Payload), "fail") {
			return errors.New(hostileErr)
		}
		return nil
	})
}

// rareEntry is an entry schedule with no slot during a test (as rare).
var rareEntry = fleet.EntrySpec{Every: rare.String()}

// addEntry adds entry id of job through the fleet.
func (f *testFleet) addEntry(t testing.TB, job, id string, spec fleet.EntrySpec) fleet.Entry {
	t.Helper()
	r, err := f.client.AddEntry(t.Context(), job, fleet.AddEntryRequest{ID: id, EntrySpec: spec, By: "tester"})
	require.NoError(t, err, "add %q", id)
	return r.Entry
}

// entryURL is the path of an entry's page as the handler links it.
func entryURL(job, id string) string {
	seg := func(s string) string {
		if s == "." || s == ".." {
			return strings.ReplaceAll(s, ".", "%2E")
		}
		return url.PathEscape(s)
	}
	return "/anarchon/job/" + seg(job) + "/entry/" + seg(id)
}

// entriesTable is the job page's table of entries ("" without one).
func entriesTable(body string) string {
	_, table, ok := strings.Cut(body, `<table id="entries">`)
	if !ok {
		return ""
	}
	table, _, _ = strings.Cut(table, "</table>")
	return table
}

var (
	entryLinkRE = regexp.MustCompile(`<th scope="row"><a href="([^"]*)">`)
	nextLinkRE  = regexp.MustCompile(`<a href="([^"]*)" rel="next" id="entries-next">`)
	firstLinkRE = regexp.MustCompile(`<a href="([^"]*)" id="entries-first">`)
)

// entryLinks are the links of the entries table's rows, as a browser reads them.
func entryLinks(table string) []string {
	var out []string
	for _, m := range entryLinkRE.FindAllStringSubmatch(table, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// link is the href the regexp finds in body, as a browser reads it ("" if none).
func link(re *regexp.Regexp, body string) string {
	m := re.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestEntriesPaged: the job page lists a job's entries a page at a time, in order
// of ID; the next page's link carries the cursor and keeps the URL's counts, the
// last page has none and links back to the first.
func TestEntriesPaged(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	var ids []string
	for i := range 7 {
		id := fmt.Sprintf("tenant-%02d", i)
		f.addEntry(t, jobTenants, id, rareEntry)
		ids = append(ids, id)
	}
	var seen []string
	path := jobURL(jobTenants) + "?limit=5&entries=3"
	for page := 1; ; page++ {
		require.LessOrEqual(t, page, 3, "seven entries in pages of three")
		r := f.get(t, path)
		require.Equal(t, http.StatusOK, r.status, r.body)
		table := entriesTable(r.body)
		require.NotEmpty(t, table, "page %d lists entries", page)
		links := entryLinks(table)
		for _, l := range links {
			seen = append(seen, strings.TrimPrefix(l, entryURL(jobTenants, "")))
		}
		assert.Contains(t, table, fmt.Sprintf("<caption>%d of the job's entries", len(links)))
		assert.Contains(t, table, "(at most 3 a page;")
		assert.Contains(t, r.body, "The last 0 runs, newest first (at most 5;", "the history's limit is kept")
		next, first := link(nextLinkRE, r.body), link(firstLinkRE, r.body)
		if page == 1 {
			assert.Empty(t, first, "the first page links no first page")
		} else {
			assert.Equal(t, jobURL(jobTenants)+"?entries=3&limit=5", first)
		}
		if page < 3 {
			require.Len(t, links, 3)
			require.Equal(t, jobURL(jobTenants)+"?after="+ids[page*3-1]+"&entries=3&limit=5", next)
			path = next
			continue
		}
		require.Len(t, links, 1)
		assert.Empty(t, next, "the last page links no next page")
		break
	}
	assert.Equal(t, ids, seen, "each entry once, in order of ID")

	// The JSON of the page, and api/job/<name>/entries, carry the page.
	r := f.getJSON(t, jobURL(jobTenants)+"?entries=3")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var jv web.JobView
	require.NoError(t, json.Unmarshal([]byte(r.body), &jv))
	require.NotNil(t, jv.Entries)
	assert.Len(t, jv.Entries.Entries, 3)
	assert.Equal(t, ids[2], jv.Entries.Next)
	r = f.getJSON(t, "/anarchon/api/job/tenants/entries?after="+ids[5]+"&limit=3")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var er fleet.EntriesReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &er))
	require.Len(t, er.Entries, 1)
	assert.Equal(t, ids[6], er.Entries[0].ID)
	assert.Empty(t, er.Next)
}

// TestEntriesPageBounds: the page size is clamped like the history's, and what
// no page can be is a bad request.
func TestEntriesPageBounds(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	f.addEntry(t, jobTenants, "a", rareEntry)
	for _, c := range []struct {
		query  string
		status int
		want   string
	}{
		{"", http.StatusOK, fmt.Sprintf("(at most %d a page;", web.DefaultEntriesPage)},
		{"?entries=5000", http.StatusOK, "(at most 100 a page: entries=5000 was clamped to 100;"},
		{"?entries=99999999999999999999999", http.StatusOK, "entries=99999999999999999999999 was clamped to 100"},
		{"?entries=0", http.StatusBadRequest, "entries=&#34;0&#34;: a number of entries from 1 to 100"},
		{"?entries=x", http.StatusBadRequest, "a number of entries from 1 to 100"},
		{"?after=%20a", http.StatusBadRequest, "after=&#34; a&#34;"},
		{"?after=a%00b", http.StatusBadRequest, "control character"},
		{"?after=a", http.StatusOK, "No entries after “a”."},
	} {
		r := f.get(t, jobURL(jobTenants)+c.query)
		assert.Equal(t, c.status, r.status, c.query)
		assert.Contains(t, r.body, c.want, c.query)
	}
	r := f.getJSON(t, "/anarchon/api/job/tenants/entries?limit=0")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, "limit=\\\"0\\\": a number of entries from 1 to 100")
}

// TestEntryPage: an entry's page shows its spec, revision, payload and its own
// runs; a failing entry's last failure shows on its page and in the job's table,
// its error as text.
func TestEntryPage(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	start := time.Date(2090, 1, 1, 0, 0, 0, 0, time.UTC)
	acme := f.addEntry(t, jobTenants, "acme", fleet.EntrySpec{Cron: "0 9 * * MON-FRI", Zone: "Europe/Athens",
		Start: start, Payload: []byte(`{"tenant":"acme"}`)})
	f.addEntry(t, jobTenants, "flaky", fleet.EntrySpec{Every: "100ms", Payload: []byte("fail")})
	var one fleet.EntryReply
	require.Eventually(t, func() bool {
		var err error
		one, err = f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: "flaky", History: 5})
		require.NoError(t, err)
		return one.Entry.LastFailure != nil
	}, 10*time.Second, 20*time.Millisecond, "the entry runs and fails")
	// It stops failing: the pages show a still history.
	upd, err := f.client.UpdateEntry(t.Context(), jobTenants, fleet.UpdateEntryRequest{ID: "flaky", Rev: one.Entry.Revision,
		EntrySpec: fleet.EntrySpec{Every: "100ms", Payload: []byte("fail"), Paused: true}})
	require.NoError(t, err)

	r := f.get(t, entryURL(jobTenants, "acme"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<h1 id="entry-id">acme</h1>`)
	assert.Contains(t, r.body, `<a href="/anarchon/job/tenants">tenants</a>`, "a link to the job")
	assert.Contains(t, r.body, "at 09:00 on MON-FRI (Europe/Athens), from 2090-01-01T00:00:00.000Z <code>0 9 * * MON-FRI</code>")
	assert.Contains(t, r.body, "17 bytes<pre class=\"payload\">{&#34;tenant&#34;:&#34;acme&#34;}</pre>")
	assert.Contains(t, r.body, fmt.Sprintf("<dt>Revision</dt><dd>%d <span class=\"meta\">written", acme.Revision))
	assert.Contains(t, r.body, "No run recorded yet.")
	assert.Contains(t, r.body, `<a href="/anarchon/api/job/tenants/entry/acme">JSON</a>`)

	r = f.get(t, entryURL(jobTenants, "flaky")+"?limit=3")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<span class="st warn">paused</span>`)
	_, failure, ok := strings.Cut(r.body, `<dd id="entry-failure">`)
	require.True(t, ok)
	failure, _, _ = strings.Cut(failure, "</dd>")
	assert.Contains(t, failure, `<span class="st bad">error</span>`)
	assert.Contains(t, failure, "&lt;img src=x onerror=alert(2)&gt; &amp; &#34;quotes&#34;", "the error is text")
	assert.Contains(t, r.body, "runs of the entry, newest first (at most 3;")
	assert.Contains(t, r.body, `<tr class="run-row bad">`, "its failed runs are listed")
	assert.NotContains(t, r.body, "<img")

	// The job page's row says the same.
	table := entriesTable(f.get(t, jobURL(jobTenants)).body)
	require.NotEmpty(t, table)
	row := regexp.MustCompile(`(?s)<tr class="failing paused">.*?</tr>`).FindString(table)
	require.NotEmpty(t, row, "the failing, paused entry stands out")
	assert.Contains(t, row, `href="/anarchon/job/tenants/entry/flaky"`)
	assert.Contains(t, row, "every 100ms (aligned to UTC)")
	assert.Contains(t, row, "&lt;img src=x onerror=alert(2)&gt;")
	assert.Contains(t, row, "<td class=\"opt\">4 B</td>", "the payload's size")
	assert.Contains(t, row, fmt.Sprintf("<td class=\"opt\">%d</td>", upd.Entry.Revision))

	// The JSON is `anarchon schedule show --json`: the payload with it.
	r = f.getJSON(t, "/anarchon/api/job/tenants/entry/acme")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var er fleet.EntryReply
	dec := json.NewDecoder(strings.NewReader(r.body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&er))
	assert.Equal(t, `{"tenant":"acme"}`, string(er.Entry.Payload))
	assert.NotNil(t, er.Runs, "an empty list, not null")
}

// TestEntryIDsRoundTrip: IDs with what paths and queries escape reach their
// pages through the links, and the cursor of the next page through the query.
func TestEntryIDsRoundTrip(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	ids := []string{".", "..", "50% off?#top", "a+b&c=d;e", "a/../b", "dir/", "%2F", "ünï cødé", "no\u00a0break", "~x'y\"z"}
	for _, id := range ids {
		f.addEntry(t, jobTenants, id, rareEntry)
	}
	var seen []string
	path := jobURL(jobTenants) + "?entries=1"
	for range len(ids) {
		r := f.get(t, path)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		links := entryLinks(entriesTable(r.body))
		require.Len(t, links, 1, path)
		seen = append(seen, links[0])
		if path = link(nextLinkRE, r.body); path == "" {
			break
		}
	}
	assert.Empty(t, path, "the last page has no next")
	require.Len(t, seen, len(ids), "every entry, once")
	for _, href := range seen {
		id, err := url.PathUnescape(strings.TrimPrefix(href, entryURL(jobTenants, "")))
		require.NoError(t, err)
		assert.Equal(t, entryURL(jobTenants, id), href, "one path segment")
		r := f.get(t, href)
		require.Equal(t, http.StatusOK, r.status, "%q: %s", id, r.body)
		h1 := regexp.MustCompile(`<h1 id="entry-id">([^<]*)</h1>`).FindStringSubmatch(r.body)
		require.NotNil(t, h1, id)
		assert.Equal(t, id, html.UnescapeString(h1[1]), "the page of the entry itself")
	}
}

// TestEntryNotFound: an unknown entry, an entry of an unknown job, an ID no
// entry can have: 404, saying which.
func TestEntryNotFound(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	f.addEntry(t, jobTenants, "acme", rareEntry)
	for _, c := range []struct{ path, want string }{
		{entryURL(jobTenants, "nope"), "unknown entry &#34;nope&#34; of job &#34;tenants&#34;: the job has no schedule entry with this ID"},
		{entryURL(jobTenants, "<b>x</b>"), "unknown entry &#34;&lt;b&gt;x&lt;/b&gt;&#34;"},
		{entryURL("no such job", "acme"), `no replica declares job &#34;no such job&#34;`},
		{entryURL(jobTenants, " acme"), "no entry of job &#34;tenants&#34; can have this ID"},
		{"/anarchon/job/tenants/entry/", "no such page"},
		{"/anarchon/job/tenants/entry/acme/more", "no such page"},
		{"/anarchon/job/tenants/entries", "no such page"}, // JSON only: api/job/<name>/entries
		{"/anarchon/job/tenants/nope/acme", "no such page"},
	} {
		r := f.get(t, c.path)
		assert.Equal(t, http.StatusNotFound, r.status, c.path)
		assert.Contains(t, r.body, "<h1>404 Not Found</h1>", c.path)
		assert.Contains(t, r.body, c.want, c.path)
	}
	r := f.getJSON(t, "/anarchon/api/job/tenants/entry/nope")
	assert.Equal(t, http.StatusNotFound, r.status)
	var e fleet.ErrorBody
	require.NoError(t, json.Unmarshal([]byte(r.body), &e), r.body)
	assert.Equal(t, http.StatusNotFound, e.Code)
	assert.Contains(t, e.Error, `unknown entry "nope" of job "tenants"`)
}

// TestJobWithoutEntries: a job with no entries has no entries section; a job of
// entries only says it has none yet.
func TestJobWithoutEntries(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	r := f.get(t, jobURL(jobReport))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.NotContains(t, r.body, "Schedule entries")
	assert.NotContains(t, r.body, `id="entries"`)
	var jv web.JobView
	require.NoError(t, json.Unmarshal([]byte(f.getJSON(t, jobURL(jobReport)).body), &jv))
	require.NotNil(t, jv.Entries, "the JSON has the (empty) page")
	assert.Empty(t, jv.Entries.Entries)

	r = f.get(t, jobURL(jobTenants))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<h2 id="entries-h">Schedule entries</h2>`)
	assert.Contains(t, r.body, "No schedule entries yet: this job runs only its entries")
	assert.Contains(t, r.body, "<dt>Next</dt><dd>each entry's own, below</dd>")
	assert.NotContains(t, r.body, `id="entries"`, "no table")

	// An entry of a job with a schedule of its own shows the section.
	f.addEntry(t, jobReport, "extra", rareEntry)
	r = f.get(t, jobURL(jobReport))
	assert.Contains(t, entriesTable(r.body), `href="/anarchon/job/report/entry/extra"`)
	assert.Contains(t, r.body, "each entry's runs are on the entry's page")
}

// TestEntryHostile: an entry ID and a payload are data: no markup of theirs
// reaches a page, a bidi override is shown as an escape, and a payload is shown
// in part, or not at all when it is not text.
func TestEntryHostile(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	const id = `<script>alert(1)</script>`
	f.addEntry(t, jobTenants, id, fleet.EntrySpec{Every: rare.String(), Payload: []byte(`</pre><script>alert(3)</script>` + "\u202e")})
	f.addEntry(t, jobTenants, "bidi\u202etxt.exe", fleet.EntrySpec{Every: rare.String(), Payload: []byte{0xff, 0xfe, '<'}})
	f.addEntry(t, jobTenants, "big", fleet.EntrySpec{Every: rare.String(), Payload: []byte(strings.Repeat("é", 600))})

	page := f.get(t, jobURL(jobTenants))
	require.Equal(t, http.StatusOK, page.status, page.body)
	table := entriesTable(page.body)
	assert.Contains(t, table, `<a href="/anarchon/job/tenants/entry/%3Cscript%3Ealert%281%29%3C%2Fscript%3E">&lt;script&gt;alert(1)&lt;/script&gt;</a>`)
	assert.Contains(t, table, `>bidi\u202etxt.exe</a>`, "the override shown, not obeyed")
	assert.NotContains(t, page.body, "<script>")
	assert.NotContains(t, page.body, "\u202e")

	r := f.get(t, entryURL(jobTenants, id))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<h1 id="entry-id">&lt;script&gt;alert(1)&lt;/script&gt;</h1>`)
	assert.Contains(t, r.body, `<pre class="payload">&lt;/pre&gt;&lt;script&gt;alert(3)&lt;/script&gt;\u202e</pre>`)
	assert.NotContains(t, r.body, "<script>")
	assert.NotContains(t, r.body, "\u202e")

	r = f.get(t, entryURL(jobTenants, "bidi\u202etxt.exe"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `3 bytes, not text (the JSON has them in base64)`)
	assert.NotContains(t, r.body, "\u202e")

	r = f.get(t, entryURL(jobTenants, "big"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, "1200 bytes, the first 512 shown (the JSON has them all)")
	assert.Contains(t, r.body, `<pre class="payload">`+strings.Repeat("é", 256)+`</pre>`)
}

// entriesFailing is the fleet's client with its entry reads answered by err: a
// replica whose backend failed, or that has no entries.
type entriesFailing struct {
	web.Source
	err error
}

func (s entriesFailing) Entries(context.Context, string, fleet.EntriesRequest) (fleet.EntriesReply, error) {
	return fleet.EntriesReply{}, s.err
}

// TestEntriesUnreadable: entries that cannot be listed leave the job page up and
// say why, as text; a backend without entries shows none and says nothing.
func TestEntriesUnreadable(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	get := func(src web.Source, path string, accept string) *httptest.ResponseRecorder {
		h, err := web.New(web.Config{Source: src, Prefix: "/anarchon/"})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		h.ServeHTTP(rec, req)
		return rec
	}
	failed := entriesFailing{Source: f.client, err: &fleet.ServiceError{Subject: "anarchon.ENTRIES.x.LIST", Code: fleet.CodeInternal, Description: "<b>disk</b> full"}}
	rec := get(failed, jobURL(jobReport), "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `<h2 id="entries-h">Schedule entries</h2>`)
	assert.Contains(t, rec.Body.String(), "⚠ its schedule entries could not be listed: fleet: anarchon.ENTRIES.x.LIST: &lt;b&gt;disk&lt;/b&gt; full (500)")
	assert.Contains(t, rec.Body.String(), `<table id="runs">`, "the rest of the page is there")
	var jv web.JobView
	require.NoError(t, json.Unmarshal(get(failed, jobURL(jobReport), "application/json").Body.Bytes(), &jv))
	assert.Nil(t, jv.Entries)
	assert.Contains(t, jv.EntriesError, "<b>disk</b> full")

	old := entriesFailing{Source: f.client, err: &fleet.NoReplicaError{Job: jobTenants, Up: []string{"replica-a"}, Checked: true}}
	rec = get(old, jobURL(jobTenants), "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "no replica that declares the job answered for its schedule entries")

	none := entriesFailing{Source: f.client, err: &fleet.ServiceError{Code: fleet.CodeNotSupported, Description: "the backend cannot store schedule entries"}}
	rec = get(none, jobURL(jobTenants), "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.NotContains(t, rec.Body.String(), "Schedule entries")
	assert.NotContains(t, rec.Body.String(), "⚠")
}

// storedEntry reads entry id of job through the fleet.
func (f *testFleet) storedEntry(t testing.TB, job, id string) fleet.EntryView {
	t.Helper()
	r, err := f.client.Entry(t.Context(), job, fleet.EntryRequest{ID: id, History: 1})
	require.NoError(t, err)
	return r.Entry
}

// TestEntryActions: pause and resume on the entry's page store the entry with
// Paused changed, on the revision the page showed; a change made since is
// refused, not undone.
func TestEntryActions(t *testing.T) {
	f := startFleetWith(t, web.Config{Authorize: allow, Who: func(*http.Request) string { return "ana" }}, declareTenants)
	const id = "a/b c"
	e := f.addEntry(t, jobTenants, id, fleet.EntrySpec{Every: rare.String(), Payload: []byte("keep me")})
	page := f.get(t, entryURL(jobTenants, id))
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.Contains(t, page.body, `<form method="post" action="/anarchon/job/tenants/entry/a%2Fb%20c/pause"><input type="hidden" name="rev" value="`+fmt.Sprint(e.Revision)+`">`)

	rev := url.Values{"rev": {fmt.Sprint(e.Revision)}}
	r := f.post(t, entryURL(jobTenants, id)+"/pause", rev)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, entryURL(jobTenants, id)+"?done=entry-paused", r.header.Get("Location"))
	paused := f.storedEntry(t, jobTenants, id)
	assert.True(t, paused.Paused)
	assert.Equal(t, "keep me", string(paused.Payload), "the rest of the entry as it was")
	assert.Equal(t, rare.String(), paused.Every)
	page = f.get(t, r.header.Get("Location"))
	assert.Contains(t, page.body, "Paused: every replica follows within a second")
	assert.Contains(t, page.body, `id="resume"`, "a paused entry offers resume")

	// Again on the same revision: the entry changed since, and stays as it is.
	r = f.post(t, entryURL(jobTenants, id)+"/resume", rev)
	assert.Equal(t, http.StatusConflict, r.status, r.body)
	assert.Contains(t, r.body, "the entry changed since the page was read")
	assert.True(t, f.storedEntry(t, jobTenants, id).Paused)

	// Pause again on its revision: already paused, nothing written.
	r = f.post(t, entryURL(jobTenants, id)+"/pause", url.Values{"rev": {fmt.Sprint(paused.Revision)}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, entryURL(jobTenants, id)+"?done=entry-unchanged", r.header.Get("Location"))
	assert.Equal(t, paused.Revision, f.storedEntry(t, jobTenants, id).Revision)

	// Resume through the JSON API: the fleet's reply.
	r = f.do(t, http.MethodPost, "/anarchon/api"+strings.TrimPrefix(entryURL(jobTenants, id), "/anarchon")+"/resume",
		http.Header{"Content-Type": {"application/json"}}, fmt.Sprintf(`{"rev":%d}`, paused.Revision))
	require.Equal(t, http.StatusOK, r.status, r.body)
	var cr fleet.EntryChangeReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &cr))
	assert.False(t, cr.Entry.Paused)
	assert.Equal(t, "ana", cr.By)
	assert.False(t, f.storedEntry(t, jobTenants, id).Paused)

	for _, c := range []struct {
		path   string
		form   url.Values
		status int
		want   string
	}{
		{entryURL(jobTenants, id) + "/pause", nil, http.StatusBadRequest, "an entry&#39;s pause needs rev"},
		{entryURL(jobTenants, id) + "/pause", url.Values{"rev": {"x"}}, http.StatusBadRequest, "rev=&#34;x&#34;: an entry&#39;s revision"},
		{entryURL(jobTenants, "nope") + "/pause", rev, http.StatusNotFound, "pause entry &#34;nope&#34; of &#34;tenants&#34;: the job has no schedule entry with this ID"},
		{entryURL(jobTenants, "nope") + "/run", rev, http.StatusNotFound, "run entry &#34;nope&#34; of &#34;tenants&#34;: the job has no schedule entry with this ID"},
	} {
		r := f.post(t, c.path, c.form)
		assert.Equal(t, c.status, r.status, "%s %v", c.path, c.form)
		assert.Contains(t, r.body, c.want, "%s %v", c.path, c.form)
	}
	r = f.get(t, entryURL(jobTenants, id)+"/pause")
	assert.Equal(t, http.StatusMethodNotAllowed, r.status, "an action is a POST")
}

// TestEntryActionsRefused: without an authorizer, from another site, or when
// the authorizer says no, an entry's pause is refused and nothing is stored.
func TestEntryActionsRefused(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	e := f.addEntry(t, jobTenants, "acme", rareEntry)
	page := f.get(t, entryURL(jobTenants, "acme"))
	assert.NotContains(t, page.body, "<form", "no controls on a read-only page")
	rev := url.Values{"rev": {fmt.Sprint(e.Revision)}}
	r := f.post(t, entryURL(jobTenants, "acme")+"/pause", rev)
	assert.Equal(t, http.StatusForbidden, r.status)
	assert.Contains(t, r.body, "read-only: the service passes no authorizer")

	g := startFleetWith(t, web.Config{Authorize: func(r *http.Request) bool { return r.Method == http.MethodGet }}, declareTenants)
	e = g.addEntry(t, jobTenants, "acme", rareEntry)
	rev = url.Values{"rev": {fmt.Sprint(e.Revision)}}
	r = g.post(t, entryURL(jobTenants, "acme")+"/pause", rev)
	assert.Equal(t, http.StatusForbidden, r.status)
	assert.Contains(t, r.body, "not allowed: the authorizer refused pause entry &#34;acme&#34; of &#34;tenants&#34;")
	r = g.do(t, http.MethodPost, entryURL(jobTenants, "acme")+"/pause", http.Header{"Sec-Fetch-Site": {"cross-site"}}, rev.Encode())
	assert.Equal(t, http.StatusForbidden, r.status)
	assert.Contains(t, r.body, "cross-site request refused")
	assert.False(t, f.storedEntry(t, jobTenants, "acme").Paused)
	assert.False(t, g.storedEntry(t, jobTenants, "acme").Paused)
}
