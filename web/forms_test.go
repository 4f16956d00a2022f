package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/web"
)

// TestSearch: a job by part of its name (an exact, unique name opens its
// page), an entry by its ID (one exact match opens its page) or the ID's
// beginning; what was asked is shown as text.
func TestSearch(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	for _, id := range []string{"acme", "acme-eu", "acme-us", "globex"} {
		f.addEntry(t, jobTenants, id, rareEntry)
	}
	r := f.get(t, "/anarchon/search?job=report")
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/report", r.header.Get("Location"))

	r = f.get(t, "/anarchon/search?job=O")
	require.Equal(t, http.StatusOK, r.status, r.body)
	for _, j := range []string{"report", "broken/one", "slow"} {
		assert.Contains(t, r.body, `<a href="`+jobURL(j)+`">`+j+`</a>`, "any case, any part")
	}
	assert.NotContains(t, r.body, `<a href="/anarchon/job/tenants">`)

	r = f.get(t, "/anarchon/search?job=tenants&entry=globex")
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, entryURL(jobTenants, "globex"), r.header.Get("Location"))

	r = f.get(t, "/anarchon/search?entry=acme")
	require.Equal(t, http.StatusOK, r.status, r.body)
	found := strings.Count(r.body, `<li><a href="/anarchon/job/tenants/entry/`)
	assert.Equal(t, 3, found, "acme itself and the IDs that begin with it, in every job: %s", r.body)
	assert.Contains(t, r.body, "this very ID")

	r = f.get(t, "/anarchon/search?job="+url.QueryEscape(jobHostile))
	require.Equal(t, http.StatusSeeOther, r.status, "a hostile name is a name")
	assert.Equal(t, jobURL(jobHostile), r.header.Get("Location"))
	r = f.get(t, "/anarchon/search?job="+url.QueryEscape("<img src=x onerror=alert(9)>"))
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.body, "No job's name holds “&lt;img src=x onerror=alert(9)&gt;”.")
	assert.NotContains(t, r.body, "<img")

	for _, q := range []string{"entry=" + url.QueryEscape("a\x00b"), "entry=" + strings.Repeat("x", backend.MaxEntryIDLen+1), "job=" + strings.Repeat("j", 1025)} {
		r = f.get(t, "/anarchon/search?"+q)
		assert.Equal(t, http.StatusBadRequest, r.status, q)
	}
	r = f.get(t, "/anarchon/search")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.body, `<input id="q-job" name="job"`)
	r = f.post(t, "/anarchon/search", url.Values{"job": {"x"}})
	assert.Equal(t, http.StatusMethodNotAllowed, r.status, "search is a GET")
}

// entryForm is what the add form posts.
func entryForm(id string, kv ...string) url.Values {
	v := url.Values{}
	if id != "" {
		v.Set("id", id)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// TestEntryForms: an operator adds an entry on the job's page, changes it on
// its page on the revision shown (a change made since is refused, not undone),
// and removes it on the revision shown.
func TestEntryForms(t *testing.T) {
	f := startFleetWith(t, web.Config{Authorize: allow, Who: func(*http.Request) string { return "ana" }}, declareTenants)
	job := f.get(t, jobURL(jobTenants))
	require.Equal(t, http.StatusOK, job.status, job.body)
	assert.Contains(t, job.body, `<form method="post" action="/anarchon/job/tenants/add-entry" class="entry-form">`)

	const id = "eu/acme"
	r := f.post(t, jobURL(jobTenants)+"/add-entry", entryForm(id, "cron", "0 9 * * MON-FRI", "zone", "Europe/Athens",
		"start", "2090-01-01T00:00:00Z", "payload", "{\"tenant\":\"acme\"}\r\nline 2", "paused", "1", "deadline", "45m"))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, entryURL(jobTenants, id)+"?done=entry-added", r.header.Get("Location"))
	e := f.storedEntry(t, jobTenants, id)
	assert.Equal(t, "0 9 * * MON-FRI", e.Cron)
	assert.Equal(t, "Europe/Athens", e.Zone)
	assert.Equal(t, "{\"tenant\":\"acme\"}\nline 2", string(e.Payload), "the payload as typed, with its line ends")
	assert.True(t, e.Paused)
	assert.Equal(t, "45m0s", e.Deadline)

	page := f.get(t, r.header.Get("Location"))
	assert.Contains(t, page.body, `name="deadline" maxlength="32" placeholder="30m, optional: the job's" value="45m0s"`, "the change form keeps the deadline")
	assert.Contains(t, page.body, `(Europe/Athens), from 2090-01-01T00:00:00.000Z, deadline 45m0s <code>`, "the schedule says it")
	assert.Contains(t, page.body, "Added: every replica")
	assert.Contains(t, page.body, `value="0 9 * * MON-FRI"`, "the change form holds the entry as read")
	assert.Contains(t, page.body, fmt.Sprintf(`<input type="hidden" name="rev" value="%d">`, e.Revision))

	r = f.post(t, jobURL(jobTenants)+"/add-entry", entryForm(id, "every", "1h"))
	assert.Equal(t, http.StatusConflict, r.status, "the ID is taken: %s", r.body)

	rev := fmt.Sprint(e.Revision)
	r = f.post(t, entryURL(jobTenants, id)+"/update", entryForm("", "every", "90m", "payload", "v2", "rev", rev))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, entryURL(jobTenants, id)+"?done=entry-updated", r.header.Get("Location"))
	changed := f.storedEntry(t, jobTenants, id)
	assert.Equal(t, "1h30m0s", changed.Every)
	assert.Empty(t, changed.Cron)
	assert.False(t, changed.Paused, "unticked: resumed")
	assert.Equal(t, "v2", string(changed.Payload))
	assert.Empty(t, changed.Deadline, "emptied: the job's")

	r = f.post(t, entryURL(jobTenants, id)+"/update", entryForm("", "every", "2h", "rev", rev))
	assert.Equal(t, http.StatusConflict, r.status, r.body)
	assert.Contains(t, r.body, "the entry changed since the page was read")
	assert.Equal(t, "1h30m0s", f.storedEntry(t, jobTenants, id).Every, "not undone")

	r = f.post(t, entryURL(jobTenants, id)+"/remove", url.Values{"rev": {rev}})
	assert.Equal(t, http.StatusConflict, r.status, "a removal on an old revision: %s", r.body)
	r = f.post(t, entryURL(jobTenants, id)+"/remove", url.Values{"rev": {fmt.Sprint(changed.Revision)}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, jobURL(jobTenants)+"?done=entry-removed", r.header.Get("Location"))
	_, err := f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: id})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound)

	for _, c := range []struct {
		path string
		form url.Values
		want string
	}{
		{jobURL(jobTenants) + "/add-entry", entryForm("x"), "give one schedule"},
		{jobURL(jobTenants) + "/add-entry", entryForm("x", "every", "1h", "cron", "* * * * *"), "give one schedule"},
		{jobURL(jobTenants) + "/add-entry", entryForm("x", "cron", "0 9 * * *", "start", "tomorrow"), "start=&#34;tomorrow&#34;: an RFC 3339 time"},
		{jobURL(jobTenants) + "/add-entry", entryForm("x", "every", "1h", "zone", "UTC"), "zone is for a cron schedule"},
		{jobURL(jobTenants) + "/add-entry", entryForm("", "every", "1h"), "id=&#34;&#34;"},
		{jobURL(jobTenants) + "/add-entry", entryForm("a\x01b", "every", "1h"), "id=&#34;a\\x01b&#34;"},
		{jobURL(jobTenants) + "/add-entry", entryForm("x", "every", "1h", "payload", strings.Repeat("p", backend.MaxEntryPayload+1)), "payload of 16385 bytes"},
		{jobURL(jobTenants) + "/add-entry", entryForm("x", "every", "1h", "paused", "maybe"), "paused=&#34;maybe&#34;"},
		{jobURL(jobTenants) + "/add-entry", entryForm("x", "every", "1h", "deadline", "soon"), "deadline: time: invalid duration"},
		{jobURL(jobTenants) + "/add-entry", url.Values{"id": {"x", "y"}, "every": {"1h"}}, "id given 2 times"},
		{entryURL(jobTenants, "x") + "/update", entryForm("", "every", "1h"), "a change needs rev"},
		{entryURL(jobTenants, "x") + "/remove", nil, "a removal needs rev"},
	} {
		r := f.post(t, c.path, c.form)
		assert.Equal(t, http.StatusBadRequest, r.status, "%s %v: %s", c.path, c.form, r.body)
		assert.Contains(t, r.body, c.want, "%s %v", c.path, c.form)
	}
	_, err = f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: "x"})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound, "no bad form stored anything")
}

// TestEntryFormDST: the form sets an entry's DST policy, the entry's page says
// it, and its change form holds the stored values (a default spelled out too),
// so a change that does not touch them keeps them. A value that is no policy
// is refused.
func TestEntryFormDST(t *testing.T) {
	f := startFleetWith(t, web.Config{Authorize: allow}, declareTenants)
	r := f.post(t, jobURL(jobTenants)+"/add-entry", entryForm("ny", "cron", "30 1 * * *", "zone", "America/New_York",
		"dst_repeated", "both", "dst_missing", "skip", "start", "2090-01-01T00:00:00Z"))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	e := f.storedEntry(t, jobTenants, "ny")
	assert.Equal(t, "both", e.DSTRepeated)
	assert.Equal(t, "skip", e.DSTMissing)
	page := f.get(t, entryURL(jobTenants, "ny"))
	assert.Contains(t, page.body, "at 01:30 every day (America/New_York; DST repeated=both missing=skip), from 2090-01-01T00:00:00.000Z")
	assert.Contains(t, page.body, `<option value="both" selected>twice</option>`)
	assert.Contains(t, page.body, `<option value="skip" selected>not at all</option>`)
	assert.NotContains(t, page.body, `<option value="" selected>`, "no default selected over the stored values")

	// A change of the pause posts the selects as the page holds them: kept.
	r = f.post(t, entryURL(jobTenants, "ny")+"/update", entryForm("", "cron", "30 1 * * *", "zone", "America/New_York",
		"dst_repeated", "both", "dst_missing", "skip", "start", "2090-01-01T00:00:00Z", "paused", "1", "rev", fmt.Sprint(e.Revision)))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	changed := f.storedEntry(t, jobTenants, "ny")
	assert.True(t, changed.Paused)
	assert.Equal(t, e.EntrySpec.DSTRepeated, changed.DSTRepeated)
	assert.Equal(t, e.EntrySpec.DSTMissing, changed.DSTMissing)

	// Values the form does not offer, stored by another writer, are shown
	// selected rather than replaced by the default.
	f.addEntry(t, jobTenants, "spelled", fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DSTRepeated: "first", DSTMissing: "shift"})
	page = f.get(t, entryURL(jobTenants, "spelled"))
	assert.Contains(t, page.body, `<option value="first" selected>once, the first time</option>`)
	assert.Contains(t, page.body, `<option value="shift" selected>later by the jump</option>`)
	plain := f.addEntry(t, jobTenants, "plain", fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York"})
	page = f.get(t, entryURL(jobTenants, "plain"))
	assert.Contains(t, page.body, `<option value="" selected>once, the first time (default)</option>`)
	assert.Contains(t, page.body, `<option value="" selected>later by the jump (default)</option>`)
	assert.Zero(t, plain.DSTRepeated)

	for _, c := range []struct {
		form url.Values
		want string
	}{
		{entryForm("x", "cron", "30 1 * * *", "zone", "America/New_York", "dst_repeated", "twice"), "dst_repeated=&#34;twice&#34;: first, last or both, or empty for the default"},
		{entryForm("x", "cron", "30 1 * * *", "zone", "America/New_York", "dst_missing", "later"), "dst_missing=&#34;later&#34;: shift or skip, or empty for the default"},
		{entryForm("x", "every", "1h", "dst_missing", "skip"), "dst_missing is for a cron schedule: leave it at the default"},
		{entryForm("x", "cron", "30 1 * * *", "dst_repeated", "both"), "zone UTC never changes its clocks"},
	} {
		r := f.post(t, jobURL(jobTenants)+"/add-entry", c.form)
		assert.Equal(t, http.StatusBadRequest, r.status, "%v: %s", c.form, r.body)
		assert.Contains(t, r.body, c.want, "%v", c.form)
	}
	_, err := f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: "x"})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound, "no bad form stored anything")
}

// TestEntryFormsRefused: the forms pass the checks every action passes.
// Without an authorizer, when it says no, from another site (a forged
// Sec-Fetch-Site or Origin), for a Host that is not this machine's (DNS
// rebinding), or as a GET, nothing is added, changed or removed; a body over
// the limit is refused before it is read whole.
func TestEntryFormsRefused(t *testing.T) {
	open := startFleetWith(t, web.Config{}, declareTenants)
	e := open.addEntry(t, jobTenants, "acme", rareEntry)
	page := open.get(t, entryURL(jobTenants, "acme"))
	assert.NotContains(t, page.body, "entry-form", "no forms on a read-only page")
	page = open.get(t, jobURL(jobTenants))
	assert.NotContains(t, page.body, "add-entry")

	guarded := startFleetWith(t, web.Config{Authorize: func(r *http.Request) bool { return r.Method == http.MethodGet }}, declareTenants)
	ge := guarded.addEntry(t, jobTenants, "acme", rareEntry)
	acting := startFleetWith(t, web.Config{Authorize: allow}, declareTenants)
	ae := acting.addEntry(t, jobTenants, "acme", rareEntry)
	port := func(f *testFleet) string { u, _ := url.Parse(f.srv.URL); return u.Port() }

	type attempt struct {
		name   string
		f      *testFleet
		rev    uint64
		header http.Header
		status int
		want   string
	}
	for _, a := range []attempt{
		{"read-only", open, e.Revision, nil, http.StatusForbidden, "read-only"},
		{"the authorizer says no", guarded, ge.Revision, nil, http.StatusForbidden, "not allowed: the authorizer refused"},
		{"a cross-site form", acting, ae.Revision, http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden, "cross-site request refused"},
		{"a forged Origin", acting, ae.Revision, http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden, "cross-site request refused"},
		{"DNS rebinding", acting, ae.Revision, http.Header{"Host": {"evil.example:" + port(acting)}, "Origin": {"http://evil.example:" + port(acting)}, "Sec-Fetch-Site": {"same-origin"}}, http.StatusForbidden, ""},
	} {
		for _, action := range []struct{ path, body string }{
			{jobURL(jobTenants) + "/add-entry", entryForm("new", "every", "1h").Encode()},
			{entryURL(jobTenants, "acme") + "/update", entryForm("", "every", "2h", "rev", fmt.Sprint(a.rev)).Encode()},
			{entryURL(jobTenants, "acme") + "/remove", url.Values{"rev": {fmt.Sprint(a.rev)}}.Encode()},
		} {
			r := a.f.do(t, http.MethodPost, action.path, a.header, action.body)
			assert.Equal(t, a.status, r.status, "%s: %s: %s", a.name, action.path, r.body)
			assert.Contains(t, r.body, a.want, "%s: %s", a.name, action.path)
			r = a.f.get(t, action.path)
			assert.Contains(t, []int{http.StatusMethodNotAllowed, http.StatusNotFound}, r.status, "%s: GET %s", a.name, action.path)
		}
		stored := a.f.storedEntry(t, jobTenants, "acme")
		assert.Equal(t, rare.String(), stored.Every, "%s: unchanged", a.name)
		_, err := a.f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: "new"})
		assert.ErrorIs(t, err, fleet.ErrEntryNotFound, "%s: nothing added", a.name)
	}

	// An oversized form: 4 MiB of payload, refused with nothing stored.
	big := "id=big&every=1h&payload=" + strings.Repeat("A", 4<<20)
	r := acting.do(t, http.MethodPost, jobURL(jobTenants)+"/add-entry", nil, big)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, "body over")
	_, err := acting.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: "big"})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound)
	// A form of many fields (each small) is bounded the same way.
	many := strings.Repeat("x=1&", 1<<18)
	r = acting.do(t, http.MethodPost, entryURL(jobTenants, "acme")+"/update", nil, many)
	assert.Equal(t, http.StatusBadRequest, r.status, r.body)
}

// TestEntryFormCalendars: the entry form names calendars, separated by commas;
// the change form holds them, escaped, and an empty field names none.
func TestEntryFormCalendars(t *testing.T) {
	f := startFleetWith(t, web.Config{Authorize: allow}, declareTenants)
	const hostile = `<b>x</b>"`
	r := f.post(t, jobURL(jobTenants)+"/add-entry", entryForm("acme", "every", "1h", "calendars", " holidays, "+hostile+" ,"))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	e := f.storedEntry(t, jobTenants, "acme")
	assert.Equal(t, []string{"holidays", hostile}, e.Calendars)
	page := f.get(t, r.header.Get("Location"))
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.Contains(t, page.body, `name="calendars" maxlength="4200" placeholder="holidays, weekends: optional, their days are excluded" value="holidays, &lt;b&gt;x&lt;/b&gt;&#34;"`)
	assert.NotContains(t, page.body, "<b>x</b>")

	r = f.post(t, entryURL(jobTenants, "acme")+"/update", entryForm("", "every", "1h", "calendars", "a, a", "rev", fmt.Sprint(e.Revision)))
	assert.Equal(t, http.StatusBadRequest, r.status, r.body)
	assert.Contains(t, r.body, "named twice")
	r = f.post(t, entryURL(jobTenants, "acme")+"/update", entryForm("", "every", "1h", "calendars", strings.Repeat("c,", 17), "rev", fmt.Sprint(e.Revision)))
	assert.Equal(t, http.StatusBadRequest, r.status, r.body)
	r = f.post(t, entryURL(jobTenants, "acme")+"/update", entryForm("", "every", "1h", "rev", fmt.Sprint(e.Revision)))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Empty(t, f.storedEntry(t, jobTenants, "acme").Calendars, "an empty field names none")
}
