package web_test

import (
	"encoding/json"
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

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/web"
)

// calendarURL is the path of a calendar's page as the handler links it.
func calendarURL(name string) string {
	if name == "." || name == ".." {
		return "/anarchon/calendar/" + strings.ReplaceAll(name, ".", "%2E")
	}
	return "/anarchon/calendar/" + url.PathEscape(name)
}

// putCalendar stores c through the fleet: a create, or a change on rev.
func (f *testFleet) putCalendar(t testing.TB, c fleet.Calendar, rev uint64) fleet.Calendar {
	t.Helper()
	r, err := f.client.PutCalendar(t.Context(), fleet.PutCalendarRequest{Calendar: c, Rev: rev, By: "tester"})
	require.NoError(t, err, "put %q", c.Name)
	return r.Calendar
}

func (f *testFleet) storedCalendar(t testing.TB, name string) fleet.Calendar {
	t.Helper()
	r, err := f.client.Calendar(t.Context(), name)
	require.NoError(t, err, "calendar %q", name)
	return r.Calendar
}

// calendarForm is what a calendar's form posts; weekdays are checkboxes.
func calendarForm(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// textarea is the text of the textarea named name in body, as a browser reads
// it ("" and false without one).
func textarea(body, name string) (string, bool) {
	m := regexp.MustCompile(`<textarea [^>]*name="` + name + `"[^>]*>([^<]*)</textarea>`).FindStringSubmatch(body)
	if m == nil {
		return "", false
	}
	return html.UnescapeString(m[1]), true
}

// TestCalendarPages: an operator creates a calendar on the calendars page,
// reads its days on its page, changes it on the revision shown (a change made
// since is refused, not undone, and the form keeps what was typed), and
// removes it on the revision shown.
func TestCalendarPages(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow, Who: func(*http.Request) string { return "ana" }})
	jobs := f.get(t, "/anarchon/")
	assert.Contains(t, jobs.body, `<a href="/anarchon/calendars">Calendars</a>`, "the navigation links the calendars")
	list := f.get(t, "/anarchon/calendars")
	require.Equal(t, http.StatusOK, list.status, list.body)
	assert.Contains(t, list.body, `<a href="/anarchon/calendars" aria-current="page">Calendars</a>`)
	assert.Contains(t, list.body, "No calendar is stored yet.")
	assert.Contains(t, list.body, `<form method="post" action="/anarchon/calendars/add" class="entry-form calendar-form">`)

	r := f.post(t, "/anarchon/calendars/add", calendarForm("name", "holidays", "zone", "Europe/Athens", "description", "office closed",
		"dates", "2026-12-25, 2026-12-26\r\n2026-12-31\r\n", "ranges", "2026-08-01..2026-08-15\r\n2026-04-10 .. 2026-04-13",
		"yearly", "01-01,05-01", "weekday", "saturday", "weekday", "sunday"))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, calendarURL("holidays")+"?done=calendar-added", r.header.Get("Location"))
	c := f.storedCalendar(t, "holidays")
	assert.Equal(t, "Europe/Athens", c.Zone)
	assert.Equal(t, "office closed", c.Description)
	assert.Equal(t, []string{"2026-12-25", "2026-12-26", "2026-12-31"}, c.Dates, "one a line or separated by commas")
	assert.Equal(t, []fleet.DateRange{{From: "2026-08-01", To: "2026-08-15"}, {From: "2026-04-10", To: "2026-04-13"}}, c.Ranges)
	assert.Equal(t, []string{"01-01", "05-01"}, c.Yearly)
	assert.Equal(t, []string{"saturday", "sunday"}, c.Weekdays)
	assert.Equal(t, "ana", c.By, "who asked")

	page := f.get(t, r.header.Get("Location"))
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.Contains(t, page.body, "Created: every replica follows it")
	assert.Contains(t, page.body, `<h1 id="calendar-name">holidays</h1>`)
	assert.Contains(t, page.body, `<dd id="calendar-dates">3<ul class="inline days"><li>2026-12-25</li><li>2026-12-26</li><li>2026-12-31</li></ul></dd>`)
	assert.Contains(t, page.body, `<li>2026-08-01..2026-08-15</li>`)
	assert.Contains(t, page.body, `<dd id="calendar-weekdays">every saturday, sunday</dd>`)
	assert.Contains(t, page.body, `<dd id="calendar-by">ana</dd>`)
	assert.Contains(t, page.body, `<input type="checkbox" id="cf-wd-saturday" name="weekday" value="saturday" checked>`, "the change form holds the calendar as read")
	assert.Contains(t, page.body, `<input type="checkbox" id="cf-wd-monday" name="weekday" value="monday">`)
	dates, ok := textarea(page.body, "dates")
	require.True(t, ok)
	assert.Equal(t, "2026-12-25\n2026-12-26\n2026-12-31", dates)
	assert.Contains(t, page.body, fmt.Sprintf(`<input type="hidden" name="rev" value="%d">`, c.Revision))

	list = f.get(t, "/anarchon/calendars")
	assert.Regexp(t, `<th scope="row"><a href="/anarchon/calendar/holidays">holidays</a></th>\s*<td>Europe/Athens</td>\s*<td>3</td>\s*<td>2</td>\s*<td>2</td>\s*<td>saturday, sunday</td>\s*<td class="opt">office closed</td>\s*<td class="opt">ana</td>`, list.body)
	assert.Contains(t, list.body, fmt.Sprintf(`<td class="opt">%d</td>`, c.Revision))

	// A change replaces what the form holds: emptied lists are emptied.
	rev := fmt.Sprint(c.Revision)
	r = f.post(t, calendarURL("holidays")+"/update", calendarForm("zone", "", "dates", "2027-01-01", "weekday", "friday", "rev", rev))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, calendarURL("holidays")+"?done=calendar-updated", r.header.Get("Location"))
	changed := f.storedCalendar(t, "holidays")
	assert.Equal(t, []string{"2027-01-01"}, changed.Dates)
	assert.Empty(t, changed.Ranges)
	assert.Empty(t, changed.Zone)
	assert.Empty(t, changed.Description)
	assert.Equal(t, []string{"friday"}, changed.Weekdays)

	// On the old revision: refused, shown clearly, the typed form kept.
	r = f.post(t, calendarURL("holidays")+"/update", calendarForm("dates", "2028-02-29\r\n2028-03-01", "description", `mine "typed"`, "rev", rev))
	assert.Equal(t, http.StatusConflict, r.status, r.body)
	assert.Contains(t, r.body, fmt.Sprintf("the calendar changed since the page was read (revision %s, now %d); nothing was stored.", rev, changed.Revision))
	assert.Contains(t, r.body, `<p class="error" role="alert" id="form-error">`)
	typed, ok := textarea(r.body, "dates")
	require.True(t, ok)
	assert.Equal(t, "2028-02-29\n2028-03-01", typed, "the form keeps what was typed")
	assert.Contains(t, r.body, `value="mine &#34;typed&#34;"`)
	assert.Contains(t, r.body, `<dd id="calendar-dates">1<ul class="inline days"><li>2027-01-01</li></ul></dd>`, "the facts are the calendar as stored now")
	assert.Contains(t, r.body, fmt.Sprintf(`<input type="hidden" name="rev" value="%s">`, rev), "the form stays on the revision read: sent again, it is refused again")
	assert.Equal(t, changed, f.storedCalendar(t, "holidays"), "not undone")

	r = f.post(t, calendarURL("holidays")+"/remove", url.Values{"rev": {rev}})
	assert.Equal(t, http.StatusConflict, r.status, "a removal on an old revision: %s", r.body)
	assert.Contains(t, r.body, "the calendar changed since the page was read")
	r = f.post(t, calendarURL("holidays")+"/remove", url.Values{"rev": {fmt.Sprint(changed.Revision)}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/calendars?done=calendar-removed", r.header.Get("Location"))
	_, err := f.client.Calendar(t.Context(), "holidays")
	assert.ErrorIs(t, err, fleet.ErrCalendarNotFound)
	r = f.get(t, calendarURL("holidays"))
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Contains(t, r.body, "unknown calendar &#34;holidays&#34;")
	r = f.post(t, calendarURL("holidays")+"/update", calendarForm("dates", "2027-01-01", "rev", "9"))
	assert.Equal(t, http.StatusNotFound, r.status, "a change of a removed calendar: %s", r.body)

	// The JSON: as the command's --json prints it.
	f.putCalendar(t, fleet.Calendar{Name: "weekends", Weekdays: []string{"sat", "sun"}}, 0)
	r = f.getJSON(t, "/anarchon/api/calendars")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var cs fleet.CalendarsReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &cs))
	require.Len(t, cs.Calendars, 1)
	assert.Equal(t, []string{"saturday", "sunday"}, cs.Calendars[0].Weekdays)
	r = f.getJSON(t, "/anarchon/api/calendar/weekends")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var one fleet.CalendarReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &one))
	assert.Equal(t, "weekends", one.Calendar.Name)
}

// TestCalendarFormBadInput: what no calendar can be is refused with the
// message the fleet or the form gives, the page shows the form again with
// what was typed, and nothing is stored.
func TestCalendarFormBadInput(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow})
	stored := f.putCalendar(t, fleet.Calendar{Name: "stored", Dates: []string{"2026-01-01"}}, 0)
	rev := fmt.Sprint(stored.Revision)
	for _, c := range []struct {
		path   string
		form   url.Values
		status int
		want   string
	}{
		{"/anarchon/calendars/add", calendarForm("name", "x", "dates", "2026-12-25\r\n2026-02-30"), http.StatusBadRequest, `date &#34;2026-02-30&#34;: want YYYY-MM-DD, a real day`},
		{"/anarchon/calendars/add", calendarForm("name", "x", "dates", "25/12/2026"), http.StatusBadRequest, `date &#34;25/12/2026&#34;: want YYYY-MM-DD`},
		{"/anarchon/calendars/add", calendarForm("name", "x", "ranges", "2026-08-15..2026-08-01"), http.StatusBadRequest, "range 2026-08-15..2026-08-01 ends before it starts"},
		{"/anarchon/calendars/add", calendarForm("name", "x", "ranges", "2026-08-01 to 2026-08-15"), http.StatusBadRequest, `range &#34;2026-08-01 to 2026-08-15&#34;: want FROM..TO`},
		{"/anarchon/calendars/add", calendarForm("name", "x", "yearly", "13-01"), http.StatusBadRequest, `yearly day &#34;13-01&#34;: want MM-DD`},
		{"/anarchon/calendars/add", calendarForm("name", "x", "zone", "Mars/Olympus"), http.StatusBadRequest, `unknown zone &#34;Mars/Olympus&#34;`},
		{"/anarchon/calendars/add", calendarForm("name", "x", "weekday", "funday"), http.StatusBadRequest, `weekday &#34;funday&#34;: want sunday to saturday`},
		{"/anarchon/calendars/add", calendarForm("name", " x", "dates", "2026-12-25"), http.StatusBadRequest, `name &#34; x&#34; has leading or trailing space`},
		{"/anarchon/calendars/add", calendarForm("name", strings.Repeat("n", 257), "dates", "2026-12-25"), http.StatusBadRequest, "name of 257 bytes, at most 256"},
		{"/anarchon/calendars/add", calendarForm("name", "x", "description", strings.Repeat("d", 1025)), http.StatusBadRequest, "at most 1024 bytes"},
		{"/anarchon/calendars/add", calendarForm("name", "stored", "dates", "2027-12-25"), http.StatusConflict, "a calendar of this name is stored"},
		{calendarURL("stored") + "/update", calendarForm("dates", "2026-13-01", "rev", rev), http.StatusBadRequest, `date &#34;2026-13-01&#34;`},
		{calendarURL("stored") + "/update", calendarForm("dates", "2027-13-01"), http.StatusBadRequest, "a change needs rev"},
		{calendarURL("stored") + "/update", calendarForm("name", "other", "dates", "2027-01-01", "rev", rev), http.StatusBadRequest, "a calendar&#39;s name does not change"},
		{calendarURL("stored") + "/update", calendarForm("dates", "2027-01-01", "rev", "x"), http.StatusBadRequest, `rev=&#34;x&#34;`},
		{calendarURL("stored") + "/update", url.Values{"dates": {"2027-01-01"}, "zone": {"UTC", "UTC"}, "rev": {rev}}, http.StatusBadRequest, "zone given 2 times"},
	} {
		r := f.post(t, c.path, c.form)
		assert.Equal(t, c.status, r.status, "%s %v: %s", c.path, c.form, r.body)
		assert.Contains(t, r.body, c.want, "%s %v", c.path, c.form)
		assert.Contains(t, r.body, `id="form-error"`, "%s %v: the form again", c.path, c.form)
		if d := c.form.Get("dates"); d != "" {
			typed, ok := textarea(r.body, "dates")
			assert.True(t, ok, "%s %v", c.path, c.form)
			assert.Equal(t, strings.ReplaceAll(d, "\r\n", "\n"), typed, "%s %v: what was typed", c.path, c.form)
		}
		if n := c.form.Get("name"); n != "" && strings.HasSuffix(c.path, "/add") {
			assert.Contains(t, r.body, `name="name" required maxlength="256" value="`+html.EscapeString(n)+`"`, "%s %v", c.path, c.form)
		}
	}
	r := f.post(t, "/anarchon/calendars/add", calendarForm("name", "stored", "dates", "2027-12-25"))
	assert.Contains(t, r.body, `<a href="/anarchon/calendar/stored" id="existing-calendar">`, "the existing calendar is linked")
	r = f.post(t, "/anarchon/calendars/add", calendarForm("name", "x", "weekday", "monday", "weekday", "mon", "weekday", "funday"))
	assert.Contains(t, r.body, `value="monday" checked>`, "the weekdays ticked stay ticked")
	r = f.post(t, calendarURL("stored")+"/remove", nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, "a removal needs rev")

	cs, err := f.client.Calendars(t.Context())
	require.NoError(t, err)
	require.Len(t, cs.Calendars, 1, "no bad form stored anything")
	assert.Equal(t, stored, f.storedCalendar(t, "stored"))
}

// TestCalendarFormsRefused: the calendars' forms pass the checks every action
// passes. Without an authorizer (a viewer), when it says no, from another site,
// for a Host that is not this machine's, or as a GET, nothing is created,
// changed or removed, and a viewer's pages show no form.
func TestCalendarFormsRefused(t *testing.T) {
	open := startFleet(t, web.Config{})
	oc := open.putCalendar(t, fleet.Calendar{Name: "c", Dates: []string{"2026-01-01"}}, 0)
	for _, path := range []string{"/anarchon/calendars", calendarURL("c")} {
		page := open.get(t, path)
		require.Equal(t, http.StatusOK, page.status, page.body)
		assert.NotContains(t, page.body, "<form", "%s: read-only", path)
		assert.Contains(t, page.body, "An operator ", path)
	}
	guarded := startFleet(t, web.Config{Authorize: func(r *http.Request) bool { return r.Method == http.MethodGet }})
	gc := guarded.putCalendar(t, fleet.Calendar{Name: "c", Dates: []string{"2026-01-01"}}, 0)
	acting := startFleet(t, web.Config{Authorize: allow})
	ac := acting.putCalendar(t, fleet.Calendar{Name: "c", Dates: []string{"2026-01-01"}}, 0)
	port := func(f *testFleet) string { u, _ := url.Parse(f.srv.URL); return u.Port() }

	for _, a := range []struct {
		name   string
		f      *testFleet
		rev    uint64
		header http.Header
		status int
		want   string
	}{
		{"read-only", open, oc.Revision, nil, http.StatusForbidden, "read-only"},
		{"the authorizer says no", guarded, gc.Revision, nil, http.StatusForbidden, "not allowed: the authorizer refused"},
		{"a cross-site form", acting, ac.Revision, http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden, "cross-site request refused"},
		{"a forged Origin", acting, ac.Revision, http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden, "cross-site request refused"},
		{"DNS rebinding", acting, ac.Revision, http.Header{"Host": {"evil.example:" + port(acting)}, "Origin": {"http://evil.example:" + port(acting)}, "Sec-Fetch-Site": {"same-origin"}}, http.StatusForbidden, ""},
	} {
		for _, action := range []struct{ path, body string }{
			{"/anarchon/calendars/add", calendarForm("name", "new", "dates", "2026-01-02").Encode()},
			{calendarURL("c") + "/update", calendarForm("dates", "2027-01-01", "rev", fmt.Sprint(a.rev)).Encode()},
			{calendarURL("c") + "/remove", url.Values{"rev": {fmt.Sprint(a.rev)}}.Encode()},
		} {
			r := a.f.do(t, http.MethodPost, action.path, a.header, action.body)
			assert.Equal(t, a.status, r.status, "%s: %s: %s", a.name, action.path, r.body)
			assert.Contains(t, r.body, a.want, "%s: %s", a.name, action.path)
			r = a.f.get(t, action.path)
			assert.Equal(t, http.StatusMethodNotAllowed, r.status, "%s: GET %s", a.name, action.path)
		}
		assert.Equal(t, []string{"2026-01-01"}, a.f.storedCalendar(t, "c").Dates, "%s: unchanged", a.name)
		_, err := a.f.client.Calendar(t.Context(), "new")
		assert.ErrorIs(t, err, fleet.ErrCalendarNotFound, "%s: nothing created", a.name)
	}

	// An oversized form is refused before it is read whole.
	big := "name=big&dates=" + strings.Repeat("2026-01-01%0A", 100_000)
	r := acting.do(t, http.MethodPost, "/anarchon/calendars/add", nil, big)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, "body over")
	_, err := acting.client.Calendar(t.Context(), "big")
	assert.ErrorIs(t, err, fleet.ErrCalendarNotFound)
}

// TestCalendarHostileNames: names and text that are markup, quotes, paths,
// spaces and other scripts, and a name of the longest length, are shown as
// text and linked so that the link opens their page.
func TestCalendarHostileNames(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow, Who: func(*http.Request) string { return `<b>who</b>` }})
	long := strings.Repeat("é", backend.MaxCalendarNameLen/2)
	require.Len(t, long, backend.MaxCalendarNameLen)
	names := []string{"<script>alert(1)</script>", `"quoted" 'single' & amp`, "../../etc/passwd", "..", ".", "a/b", "with spaces ünïcödé 日本語", "100%", "x?y#z", long}
	for _, n := range names {
		f.putCalendar(t, fleet.Calendar{Name: n, Description: `<img src=x onerror=alert(2)> "d"`, Dates: []string{"2026-01-01"}}, 0)
	}
	list := f.get(t, "/anarchon/calendars")
	require.Equal(t, http.StatusOK, list.status, list.body)
	assert.NotContains(t, list.body, "<script>alert")
	assert.NotContains(t, list.body, "<img")
	assert.Contains(t, list.body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	links := regexp.MustCompile(`<th scope="row"><a href="([^"]*)">([^<]*)</a></th>`).FindAllStringSubmatch(list.body, -1)
	require.Len(t, links, len(names))
	for _, m := range links {
		href, shown := html.UnescapeString(m[1]), html.UnescapeString(m[2])
		assert.Contains(t, names, shown, "the name as text")
		assert.Equal(t, calendarURL(shown), href)
		page := f.get(t, href)
		require.Equal(t, http.StatusOK, page.status, "%q: %s", shown, page.body)
		assert.Contains(t, page.body, `<h1 id="calendar-name">`+html.EscapeString(shown)+`</h1>`)
		assert.NotContains(t, page.body, "<img")
		assert.NotContains(t, page.body, "<script>")

		// The page's forms post to the calendar itself.
		c := f.storedCalendar(t, shown)
		r := f.post(t, href+"/update", calendarForm("dates", "2026-01-02", "description", `<i>x</i>`, "rev", fmt.Sprint(c.Revision)))
		require.Equal(t, http.StatusSeeOther, r.status, "%q: %s", shown, r.body)
		assert.Equal(t, href+"?done=calendar-updated", r.header.Get("Location"))
		page = f.get(t, href)
		assert.Contains(t, page.body, `<dd id="calendar-by">&lt;b&gt;who&lt;/b&gt;</dd>`)
		assert.Contains(t, page.body, `<dd id="calendar-description">&lt;i&gt;x&lt;/i&gt;</dd>`)
	}
	r := f.get(t, "/anarchon/calendar/"+strings.Repeat("n", backend.MaxCalendarNameLen+1))
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Contains(t, r.body, "no calendar can have this name")
	r = f.post(t, "/anarchon/calendars/add", calendarForm("name", `<script>alert(3)</script>`, "dates", "2026-02-30"))
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.NotContains(t, r.body, "<script>alert(3)")
	assert.Contains(t, r.body, `value="&lt;script&gt;alert(3)&lt;/script&gt;"`, "the typed name kept, as text")
}

// TestCalendarManyDates: a calendar of 10,000 dates shows its count and the
// first maxShownDays; its change form keeps the dates as stored rather than
// holding them all, and a change on it keeps them; its JSON has them all.
func TestCalendarManyDates(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow})
	const n = 10_000
	dates := make([]string, n)
	day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range dates {
		dates[i] = day.AddDate(0, 0, i).Format(time.DateOnly)
	}
	c := f.putCalendar(t, fleet.Calendar{Name: "many", Dates: dates, Ranges: []fleet.DateRange{{From: "2030-01-01", To: "2030-01-02"}}}, 0)

	list := f.get(t, "/anarchon/calendars")
	assert.Regexp(t, `<a href="/anarchon/calendar/many">many</a></th>\s*<td>–</td>\s*<td>10000</td>\s*<td>1</td>`, list.body)
	page := f.get(t, calendarURL("many"))
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.Less(t, len(page.body), 64<<10, "the page is bounded")
	_, dd, _ := strings.Cut(page.body, `<dd id="calendar-dates">`)
	dd, _, _ = strings.Cut(dd, "</dd>")
	assert.True(t, strings.HasPrefix(dd, "10000, the first 200 shown (the JSON has them all)"), dd)
	assert.Equal(t, 200, strings.Count(dd, "<li>"))
	assert.Contains(t, dd, "<li>2000-01-01</li>")
	assert.NotContains(t, dd, "<li>"+dates[200]+"</li>")
	_, ok := textarea(page.body, "dates")
	assert.False(t, ok, "no textarea of 10,000 dates")
	assert.Contains(t, page.body, `<input type="hidden" name="keep_dates" value="10000">`)
	assert.Contains(t, page.body, "10000 dates, more than the form holds: kept as stored")
	ranges, ok := textarea(page.body, "ranges")
	require.True(t, ok, "a short list is in the form")
	assert.Equal(t, "2030-01-01..2030-01-02", ranges)

	r := f.post(t, calendarURL("many")+"/update", calendarForm("keep_dates", "10000", "ranges", "", "description", "kept", "rev", fmt.Sprint(c.Revision)))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	changed := f.storedCalendar(t, "many")
	assert.Equal(t, dates, changed.Dates, "the dates kept as stored")
	assert.Empty(t, changed.Ranges)
	assert.Equal(t, "kept", changed.Description)
	r = f.post(t, calendarURL("many")+"/update", calendarForm("keep_dates", "10000", "description", "stale", "rev", fmt.Sprint(c.Revision)))
	assert.Equal(t, http.StatusConflict, r.status, "keeping what a later revision stores is a conflict: %s", r.body)
	assert.Contains(t, r.body, `<input type="hidden" name="keep_dates" value="10000">`, "the form again, as posted")

	r = f.getJSON(t, "/anarchon/api/calendar/many")
	require.Equal(t, http.StatusOK, r.status)
	var one fleet.CalendarReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &one))
	assert.Len(t, one.Calendar.Dates, n)

	// A create of 10,000 typed dates fits the form.
	r = f.post(t, "/anarchon/calendars/add", calendarForm("name", "typed", "dates", strings.Join(dates, "\r\n")))
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Len(t, f.storedCalendar(t, "typed").Dates, n)
}

// noCalendars is a Source that keeps no calendars.
type noCalendars struct{ web.Source }

// TestCalendarsOnlyWithCalendarSource: a source that is no CalendarSource has
// no calendars page, nor a link to one.
func TestCalendarsOnlyWithCalendarSource(t *testing.T) {
	f := startFleet(t, web.Config{})
	cfg := web.Config{Source: noCalendars{f.client}, Authorize: allow}
	for _, path := range []string{"/anarchon/calendars", "/anarchon/calendar/x", "/anarchon/api/calendars"} {
		status, _, body := serve(t, cfg, path)
		assert.Equal(t, http.StatusNotFound, status, path)
		assert.Contains(t, body, "keeps no calendars", path)
	}
	h, err := web.New(web.Config{Source: noCalendars{f.client}, Prefix: "/anarchon/", Authorize: allow})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/anarchon/calendars/add", strings.NewReader("name=x")))
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Contains(t, rec.Body.String(), "keeps no calendars")
	status, _, body := serve(t, cfg, "/anarchon/search")
	require.Equal(t, http.StatusOK, status)
	assert.NotContains(t, body, "calendars", "no link")
	for _, path := range []string{"/anarchon/calendar/", "/anarchon/calendar/x/", "/anarchon/calendar/x/run", "/anarchon/calendars/x"} {
		r := f.get(t, path)
		assert.Equal(t, http.StatusNotFound, r.status, path)
	}
}
