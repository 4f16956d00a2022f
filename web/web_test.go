package web_test

import (
	"encoding/json"
	"errors"
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

func allow(*http.Request) bool { return true }

// rowOf is the jobs table's row of a job.
func rowOf(t testing.TB, body, job string) string {
	t.Helper()
	escaped := strings.NewReplacer("<", "&lt;", ">", "&gt;", "&", "&amp;", `"`, "&#34;").Replace(job)
	re := regexp.MustCompile(`(?s)<tr class="[^"]*" data-job="` + regexp.QuoteMeta(escaped) + `">.*?</tr>`)
	row := re.FindString(body)
	require.NotEmpty(t, row, "the jobs table has a row for %q", job)
	return row
}

func TestJobsPage(t *testing.T) {
	f := startFleet(t, web.Config{})
	ok := f.trigger(t, jobReport)
	f.trigger(t, jobBroken)
	f.trigger(t, jobHostile)

	r := f.get(t, "/anarchon/")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
	assert.Contains(t, r.header.Get("Content-Security-Policy"), "default-src 'none'")
	assert.Contains(t, r.body, "<caption>5 of 5 jobs on 3 replicas; read-only</caption>")

	report := rowOf(t, r.body, jobReport)
	assert.Contains(t, report, `<a href="/anarchon/job/report">report</a>`)
	assert.Contains(t, report, "active")
	assert.Contains(t, report, `<span class="st ok">ok</span>`)
	assert.Contains(t, report, "on "+ok.Instance+", manual")
	assert.Contains(t, report, "every 876000h0m0s (aligned to UTC)")
	assert.Contains(t, report, "replica-a, replica-b, replica-c")
	assert.NotContains(t, report, "Run now", "read-only: no buttons")

	broken := rowOf(t, r.body, jobBroken)
	assert.Contains(t, broken, `class="failing"`, "a failing job stands out")
	assert.Contains(t, broken, `href="/anarchon/job/broken%2Fone"`, "a slash in a name stays in one path segment")
	assert.Contains(t, broken, "&lt;img src=x onerror=alert(2)&gt; &amp; &#34;quotes&#34;", "the error is text")

	dots := rowOf(t, r.body, jobDots)
	assert.Contains(t, dots, "cron 0 9 29 2 MON (Europe/Athens)", "a cron schedule with its zone")
	assert.Contains(t, dots, `href="/anarchon/job/%2E%2E"`)

	// Hostile names and errors render as text: no markup of theirs reaches the page.
	assert.NotContains(t, r.body, "<script>")
	assert.NotContains(t, r.body, "<img")
	assert.Contains(t, r.body, ">&lt;script&gt;alert(1)&lt;/script&gt;</a>")
	assert.Contains(t, r.body, `href="/anarchon/job/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"`)
}

func TestJobsFilter(t *testing.T) {
	f := startFleet(t, web.Config{})
	f.trigger(t, jobBroken)
	f.trigger(t, jobReport)
	_, err := f.client.Pause(t.Context(), jobHostile, fleet.PauseRequest{Reason: "maintenance <b>now</b>", By: "ops"})
	require.NoError(t, err)

	r := f.get(t, "/anarchon/?show=failing")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, "<caption>1 of 5 jobs (failing)")
	assert.Contains(t, r.body, `data-job="broken/one"`)
	assert.NotContains(t, r.body, `data-job="report"`)
	assert.Contains(t, r.body, "Failing (1)")

	// A pause reaches every replica within a second: ask until the view has it.
	require.Eventually(t, func() bool {
		return strings.Contains(f.get(t, "/anarchon/?show=paused").body, "<caption>1 of 5 jobs (paused)")
	}, 5*time.Second, 50*time.Millisecond)
	r = f.get(t, "/anarchon/?show=paused")
	row := rowOf(t, r.body, jobHostile)
	assert.Contains(t, row, `class=" paused"`, "a paused job stands out")
	assert.Contains(t, row, "paused: maintenance &lt;b&gt;now&lt;/b&gt;")
	assert.Contains(t, row, "by ops")
	assert.NotContains(t, r.body, `data-job="broken/one"`)

	r = f.get(t, "/anarchon/?show=nope")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, `show=&#34;nope&#34;: failing, paused, or none`)
}

func TestJobPage(t *testing.T) {
	f := startFleet(t, web.Config{})
	for range 3 {
		f.trigger(t, jobBroken)
	}
	r := f.get(t, jobURL(jobBroken))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<h1 id="job-name">broken/one</h1>`)
	assert.Contains(t, r.body, "The last 3 runs, newest first (at most 50;")
	assert.Equal(t, 3, strings.Count(r.body, "manual by tester"))
	assert.Equal(t, 3, strings.Count(r.body, `<tr class="run-row bad manual">`), "three failed manual runs, marked")
	assert.Contains(t, r.body, "&lt;img src=x onerror=alert(2)&gt;")
	assert.NotContains(t, r.body, "<img")
	assert.Contains(t, r.body, "No unfinished run holds a lease")
	assert.Contains(t, r.body, `<a href="/anarchon/">Jobs</a>`, "a link back to the jobs")
	assert.NotContains(t, r.body, "Run now", "read-only: no buttons")

	r = f.get(t, jobURL(jobHostile))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<h1 id="job-name">&lt;script&gt;alert(1)&lt;/script&gt;</h1>`)
	assert.NotContains(t, r.body, "<script>")

	r = f.get(t, jobURL(jobDots))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<h1 id="job-name">..</h1>`)
}

// A slot whose attempt failed and stored its retry is shown with the retry's time,
// and without a lease expiry.
func TestJobPageShowsAStoredRetry(t *testing.T) {
	f := startFleet(t, web.Config{})
	ctx := t.Context()
	runs := f.backend.Runs()
	in := backend.RunClaim{Job: jobBroken, Slot: time.Now().Truncate(time.Hour), Token: "tok-1", Instance: "replica-z",
		Lease: time.Minute, Deadline: time.Now().Add(time.Hour)}
	res, err := runs.Claim(ctx, in)
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeWon, res.Outcome)
	require.NoError(t, runs.(backend.Retrier).Retry(ctx, in.Key(), time.Hour, time.Minute))
	r := f.get(t, jobURL(jobBroken))
	require.Equal(t, http.StatusOK, r.status, r.body)
	_, leases, ok := strings.Cut(r.body, `<table id="leases">`)
	require.True(t, ok, "the unfinished runs are listed")
	leases, _, _ = strings.Cut(leases, "</table>")
	assert.Contains(t, leases, "replica-z")
	assert.Contains(t, leases, `failed, retry at <time datetime=`)
	assert.Equal(t, 2, strings.Count(leases, "<time "), "the slot and the retry, no lease expiry")
}

// A run a later slot asked to end shows the slot that asked and its replica.
func TestJobPageShowsACancelRequest(t *testing.T) {
	leases := leasesAfterTwoClaims(t, backend.OverlapCancelOther)
	assert.Contains(t, leases, "replica-tok-1")
	assert.Contains(t, leases, `cancelling for <time datetime=`)
	assert.Contains(t, leases, "asked by replica-tok-2")
}

func TestJobPageShowsABufferedSlot(t *testing.T) {
	leases := leasesAfterTwoClaims(t, backend.OverlapBufferOne)
	assert.Contains(t, leases, "replica-tok-2")
	assert.Contains(t, leases, "buffered, runs when the run before it ends")
}

// leasesAfterTwoClaims claims two slots of jobBroken under p, from two replicas,
// and returns the job page's table of unfinished runs.
func leasesAfterTwoClaims(t *testing.T, p backend.OverlapPolicy) string {
	t.Helper()
	f := startFleet(t, web.Config{})
	ctx := t.Context()
	first := time.Now().Truncate(time.Hour)
	for i, tok := range []string{"tok-1", "tok-2"} {
		in := backend.RunClaim{Job: jobBroken, Slot: first.Add(time.Duration(i) * time.Millisecond), Token: tok, Instance: "replica-" + tok,
			Lease: time.Minute, Deadline: time.Now().Add(time.Hour), Overlap: p}
		_, err := f.backend.Runs().Claim(ctx, in)
		require.NoError(t, err)
	}
	r := f.get(t, jobURL(jobBroken))
	require.Equal(t, http.StatusOK, r.status, r.body)
	_, leases, ok := strings.Cut(r.body, `<table id="leases">`)
	require.True(t, ok, "the unfinished runs are listed")
	leases, _, _ = strings.Cut(leases, "</table>")
	return leases
}

func TestJobPageLimit(t *testing.T) {
	f := startFleet(t, web.Config{HistoryLimit: 2})
	for range 3 {
		f.trigger(t, jobReport)
	}
	for _, c := range []struct {
		query  string
		status int
		want   string
	}{
		{"", http.StatusOK, "The last 2 runs, newest first (at most 2;"},
		{"?limit=3", http.StatusOK, "The last 3 runs, newest first (at most 3;"},
		{"?limit=5000", http.StatusOK, "(at most 1000: limit=5000 was clamped to 1000;"},
		{"?limit=99999999999999999999999", http.StatusOK, "limit=99999999999999999999999 was clamped to 1000"},
		{"?limit=abc", http.StatusBadRequest, "limit=&#34;abc&#34;: a number of runs from 1 to 1000"},
		{"?limit=0", http.StatusBadRequest, "a number of runs from 1 to 1000"},
		{"?limit=-5", http.StatusBadRequest, "a number of runs from 1 to 1000"},
		{"?limit=-99999999999999999999999", http.StatusBadRequest, "a number of runs from 1 to 1000"},
	} {
		r := f.get(t, jobURL(jobReport)+c.query)
		assert.Equal(t, c.status, r.status, c.query)
		assert.Contains(t, r.body, c.want, c.query)
	}
}

func TestNotFound(t *testing.T) {
	f := startFleet(t, web.Config{})
	for _, c := range []struct{ path, want string }{
		{jobURL("no such job"), "unknown job &#34;no such job&#34;: no replica that answered declares it"},
		{jobURL("<b>x</b>"), "unknown job &#34;&lt;b&gt;x&lt;/b&gt;&#34;"},
		{"/anarchon/nope", "no such page"},
		{"/anarchon/job/", "no such page"},
		{"/anarchon/job/report/nope", "no such page"},
		{"/anarchon/job/report/history", "no such page"}, // history is JSON only: api/job/<name>/history
	} {
		r := f.get(t, c.path)
		assert.Equal(t, http.StatusNotFound, r.status, c.path)
		assert.Contains(t, r.body, "<h1>404 Not Found</h1>", c.path)
		assert.Contains(t, r.body, c.want, c.path)
	}
	r := f.getJSON(t, "/anarchon/api/job/nope/history")
	assert.Equal(t, http.StatusNotFound, r.status)
	var e fleet.ErrorBody
	require.NoError(t, json.Unmarshal([]byte(r.body), &e), r.body)
	assert.Equal(t, 404, e.Code)
	assert.Contains(t, e.Error, `no replica declares job "nope" (replicas up: replica-a, replica-b, replica-c)`)

	// Without the prefix's slash: a redirect to the page (asked of the handler
	// itself: a ServeMux would redirect before it).
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/anarchon", nil))
	assert.Equal(t, http.StatusMovedPermanently, rec.Code)
	assert.Equal(t, "/anarchon/", rec.Header().Get("Location"))
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/elsewhere", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Contains(t, rec.Body.String(), "the status pages are under /anarchon/")
}

func TestFleetPage(t *testing.T) {
	asked := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := startFleet(t, web.Config{Now: func() time.Time { return asked }})
	r := f.get(t, "/anarchon/fleet")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, "<caption>3 replicas answered</caption>")
	for _, id := range []string{"replica-a", "replica-b", "replica-c"} {
		assert.Contains(t, r.body, `<th scope="row">`+id+`</th>`)
	}
	assert.Equal(t, 3, strings.Count(r.body, `<a href="/anarchon/job/broken%2Fone">broken/one</a>`), "each replica declares it")
	assert.Contains(t, r.body, "<td class=\"opt\">memory</td>")
	assert.Contains(t, r.body, `<a href="/anarchon/fleet" aria-current="page">Fleet</a>`)
	assert.Contains(t, r.body, "Asked at 12:00:00Z", "times are shown against Config.Now")
	assert.Contains(t, r.body, `<a href="/anarchon/api/fleet">JSON</a>`, "the page's own JSON")
}

// TestJSON: the JSON is what the CLI's --json prints: the fleet's own structs.
func TestJSON(t *testing.T) {
	f := startFleet(t, web.Config{})
	run := f.trigger(t, jobReport)

	for _, path := range []string{"/anarchon/api/jobs", "/anarchon/"} {
		r := f.getJSON(t, path)
		require.Equal(t, http.StatusOK, r.status, r.body)
		assert.Equal(t, "application/json; charset=utf-8", r.header.Get("Content-Type"))
		var got fleet.Fleet
		dec := json.NewDecoder(strings.NewReader(r.body))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&got), r.body)
		require.Len(t, got.Jobs, 5)
		require.Len(t, got.Replicas, 3)
		assert.GreaterOrEqual(t, slicesIndex(got.Jobs, jobHostile), 0, "names are data, not markup, in JSON")
		i := slicesIndex(got.Jobs, jobReport)
		require.GreaterOrEqual(t, i, 0)
		require.NotNil(t, got.Jobs[i].LastRun)
		assert.Equal(t, run.Run.Token, got.Jobs[i].LastRun.Token)
		assert.True(t, strings.HasPrefix(r.body, "{\n  \"replicas\": ["), "indented as the CLI prints it")
	}

	r := f.getJSON(t, "/anarchon/api/job/report/history?limit=5000")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var h fleet.HistoryReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &h))
	assert.Equal(t, fleet.MaxHistoryLimit, h.Limit, "clamped, and the reply says so")
	require.Len(t, h.Runs, 1)
	assert.Equal(t, "tester", h.Runs[0].RequestedBy)

	r = f.getJSON(t, "/anarchon/api/job/report/active")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var a fleet.ActiveReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &a))
	assert.Equal(t, jobReport, a.Job)

	r = f.getJSON(t, jobURL(jobReport))
	require.Equal(t, http.StatusOK, r.status, r.body)
	var jv web.JobView
	dec := json.NewDecoder(strings.NewReader(r.body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&jv))
	assert.Equal(t, jobReport, jv.Job.Name)
	assert.Len(t, jv.History.Runs, 1)
	assert.NotNil(t, jv.Active.Runs, "an empty list, not null")

	r = f.getJSON(t, "/anarchon/api/fleet")
	require.Equal(t, http.StatusOK, r.status)
	r = f.getJSON(t, "/anarchon/api/job/report/history?limit=x")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, `"code": 400`)
}

func slicesIndex(jobs []fleet.JobSummary, name string) int {
	for i, j := range jobs {
		if j.Name == name {
			return i
		}
	}
	return -1
}

func TestActionsReadOnly(t *testing.T) {
	f := startFleet(t, web.Config{})
	for _, action := range []string{"run", "pause", "resume"} {
		r := f.post(t, jobURL(jobReport)+"/"+action, url.Values{"reason": {"x"}})
		assert.Equal(t, http.StatusForbidden, r.status, action)
		assert.Contains(t, r.body, "read-only: the service passes no authorizer", action)
	}
	assert.Equal(t, 0, f.manualRuns(t, jobReport), "nothing ran")
	assert.NotContains(t, f.get(t, jobURL(jobReport)).body, "<form", "no controls on a read-only page")
}

func TestActions(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow, Who: func(r *http.Request) string { return "ana" }})
	page := f.get(t, jobURL(jobBroken))
	assert.Contains(t, page.body, `<form method="post" action="/anarchon/job/broken%2Fone/run">`)
	assert.Contains(t, page.body, `<label for="pause-reason">Reason</label>`)
	assert.Contains(t, f.get(t, "/anarchon/").body, `aria-label="Run broken/one now"`)

	// Run now: post, redirect to the job page, where the manual run is listed.
	r := f.post(t, jobURL(jobBroken)+"/run", nil)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/broken%2Fone?done=finished", r.header.Get("Location"))
	page = f.get(t, r.header.Get("Location"))
	assert.Contains(t, page.body, "The manual run finished")
	assert.Contains(t, page.body, "manual by ana")
	assert.Equal(t, 1, f.manualRuns(t, jobBroken))

	// Pause with a reason and a duration, then resume.
	r = f.post(t, jobURL(jobReport)+"/pause", url.Values{"reason": {"deploy"}, "for": {"90m"}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/report?done=paused", r.header.Get("Location"))
	require.Eventually(t, func() bool {
		return strings.Contains(rowOf(t, f.get(t, "/anarchon/").body, jobReport), "paused: deploy")
	}, 5*time.Second, 50*time.Millisecond)
	row := rowOf(t, f.get(t, "/anarchon/").body, jobReport)
	assert.Contains(t, row, "by ana")
	assert.Contains(t, row, "until")
	assert.Contains(t, f.get(t, jobURL(jobReport)).body, `id="resume"`, "a paused job offers resume")

	r = f.post(t, jobURL(jobReport)+"/resume", nil)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/report?done=resumed", r.header.Get("Location"))
	require.Eventually(t, func() bool {
		return !strings.Contains(rowOf(t, f.get(t, "/anarchon/").body, jobReport), "paused")
	}, 5*time.Second, 50*time.Millisecond)
	// Again: nothing to resume, and the page says so.
	r = f.post(t, jobURL(jobReport)+"/resume", nil)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/report?done=not-paused", r.header.Get("Location"))
	assert.Contains(t, f.get(t, r.header.Get("Location")).body, "The job had no pause of its own: nothing to resume.")

	// The JSON actions answer with the fleet's replies.
	r = f.do(t, http.MethodPost, "/anarchon/api/"+jobURL(jobReport)[len("/anarchon/"):]+"/run", nil, "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var tr fleet.TriggerReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &tr))
	assert.Equal(t, fleet.StateFinished, tr.State)
	assert.Equal(t, "ana", tr.By)
	r = f.do(t, http.MethodPost, "/anarchon/api/job/report/pause", http.Header{"Content-Type": {"application/json"}}, `{"reason":"json"}`)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var pr fleet.PauseReply
	require.NoError(t, json.Unmarshal([]byte(r.body), &pr))
	assert.Equal(t, "json", pr.Pause.Reason)
}

// TestRunNowGoesOn: a run longer than TriggerWait goes on; the page says so and
// lists it as running. One buffered behind it goes on waiting, and the page says
// that.
func TestRunNowGoesOn(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow, TriggerWait: 100 * time.Millisecond})
	r := f.post(t, jobURL(jobSlow)+"/run", nil)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/slow?done=started", r.header.Get("Location"))
	page := f.get(t, r.header.Get("Location"))
	assert.Contains(t, page.body, "The manual run started and goes on")
	assert.Contains(t, page.body, `<tr class="run-row run manual">`, "listed, running")

	// A second one waits for the first: buffered, and the page says so.
	r = f.post(t, jobURL(jobSlow)+"/run", nil)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/slow?done=buffered", r.header.Get("Location"))
	page = f.get(t, r.header.Get("Location"))
	assert.Contains(t, page.body, "The manual run waits for the run in progress")

	// Without waiting at all.
	f = startFleet(t, web.Config{Authorize: allow, TriggerWait: -1})
	r = f.post(t, jobURL(jobReport)+"/run", nil)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, "/anarchon/job/report?done=started", r.header.Get("Location"))
}

func TestActionsBadInput(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow})
	for _, c := range []struct {
		path   string
		form   url.Values
		status int
		want   string
	}{
		{jobURL(jobReport) + "/pause", nil, http.StatusBadRequest, "a pause needs a reason"},
		{jobURL(jobReport) + "/pause", url.Values{"reason": {"  "}}, http.StatusBadRequest, "a pause needs a reason"},
		{jobURL(jobReport) + "/pause", url.Values{"reason": {"x"}, "for": {"soon"}}, http.StatusBadRequest, "for=&#34;soon&#34;: a positive duration"},
		{jobURL(jobReport) + "/pause", url.Values{"reason": {"x"}, "for": {"-5m"}}, http.StatusBadRequest, "a positive duration"},
		{jobURL(jobReport) + "/pause", url.Values{"reason": {strings.Repeat("x", 1025)}}, http.StatusBadRequest, "reason of 1025 bytes: at most 1024"},
		{jobURL(jobReport) + "/pause", url.Values{"reason": {strings.Repeat("x", 20000)}}, http.StatusBadRequest, "body over 16384 bytes"},
		{jobURL("nope") + "/run", nil, http.StatusNotFound, `no replica declares job &#34;nope&#34; (replicas up: replica-a, replica-b, replica-c)`},
		{jobURL(jobReport) + "/stop", nil, http.StatusNotFound, "no such page"},
	} {
		r := f.post(t, c.path, c.form)
		assert.Equal(t, c.status, r.status, "%s %v", c.path, c.form)
		assert.Contains(t, r.body, c.want, "%s %v", c.path, c.form)
	}
	r := f.do(t, http.MethodPost, "/anarchon/api/job/report/pause", http.Header{"Content-Type": {"application/json"}}, `{"reason":"x","by":"mallory"}`)
	assert.Equal(t, http.StatusBadRequest, r.status, "who asked comes from Config.Who, never from the body")
	assert.Contains(t, r.body, `unknown field`)

	// Actions are POST only; pages are GET only.
	r = f.get(t, jobURL(jobReport)+"/run")
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)
	assert.Equal(t, "POST", r.header.Get("Allow"))
	r = f.post(t, "/anarchon/", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)
	assert.Equal(t, 0, f.manualRuns(t, jobReport), "nothing ran")
}

func TestActionsRefused(t *testing.T) {
	// The authorizer lets people look, and act on report only.
	authorize := func(r *http.Request) bool {
		return r.Method == http.MethodGet || strings.HasPrefix(r.URL.Path, "/anarchon/job/report/")
	}
	f := startFleet(t, web.Config{Authorize: authorize})
	r := f.post(t, jobURL(jobBroken)+"/run", nil)
	assert.Equal(t, http.StatusForbidden, r.status)
	assert.Contains(t, r.body, "not allowed: the authorizer refused run of &#34;broken/one&#34;")

	// A form posted from another site is refused before the authorizer is asked.
	for _, h := range []http.Header{
		{"Sec-Fetch-Site": {"cross-site"}},
		{"Origin": {"https://evil.example"}},
	} {
		r = f.do(t, http.MethodPost, jobURL(jobReport)+"/run", h, "x=1")
		assert.Equal(t, http.StatusForbidden, r.status, h)
		assert.Contains(t, r.body, "cross-site request refused", h)
	}
	assert.Equal(t, 0, f.manualRuns(t, jobReport)+f.manualRuns(t, jobBroken), "nothing ran")

	// The same origin goes through.
	r = f.do(t, http.MethodPost, jobURL(jobReport)+"/run", http.Header{"Sec-Fetch-Site": {"same-origin"}}, "x=1")
	assert.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, 1, f.manualRuns(t, jobReport))
}

func TestWhoTooLong(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow, Who: func(*http.Request) string { return strings.Repeat("a", 1025) }})
	r := f.post(t, jobURL(jobReport)+"/run", nil)
	assert.Equal(t, http.StatusInternalServerError, r.status)
	assert.Contains(t, r.body, "web.Config.Who returned 1025 bytes: at most 1024")
	assert.Equal(t, 0, f.manualRuns(t, jobReport), "nothing ran")
}

func TestStyle(t *testing.T) {
	f := startFleet(t, web.Config{})
	r := f.get(t, "/anarchon/style.css")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "text/css; charset=utf-8", r.header.Get("Content-Type"))
	assert.NotEmpty(t, r.header.Get("ETag"))
	// The narrow layout hides the optional columns; the key ones are not optional.
	assert.Regexp(t, `@media \(max-width: 720px\) \{\s*\.opt \{ display: none; \}`, r.body)
	assert.NotContains(t, r.body, "http", "nothing from elsewhere")
	page := f.get(t, "/anarchon/").body
	head := regexp.MustCompile(`(?s)<thead>.*?</thead>`).FindString(page)
	for _, key := range []string{"Job", "State", "Last run"} {
		assert.Contains(t, head, `<th scope="col">`+key+`</th>`, "key column %s is always shown", key)
	}
	assert.NotRegexp(t, `(src|href)="(https?:)?//`, page, "nothing fetched from elsewhere")
}

func TestNewConfig(t *testing.T) {
	f := startFleet(t, web.Config{})
	for _, c := range []struct {
		cfg  web.Config
		want string
	}{
		{web.Config{}, "Source is required"},
		{web.Config{Source: f.client, Prefix: "anarchon"}, `Prefix "anarchon" must start and end with /`},
		{web.Config{Source: f.client, Prefix: "/a?b/"}, "a plain path"},
		{web.Config{Source: f.client, HistoryLimit: -1}, "HistoryLimit -1"},
		{web.Config{Source: f.client, HistoryLimit: 1001}, "HistoryLimit 1001"},
		{web.Config{Source: f.client, Timeout: -time.Second}, "Timeout -1s"},
		{web.Config{Source: f.client, Timeout: time.Second, TriggerWait: 2 * time.Second}, "TriggerWait 2s: shorter than Timeout"},
	} {
		_, err := web.New(c.cfg)
		require.Error(t, err, c.want)
		assert.True(t, errors.Is(err, web.ErrInvalidConfig), err)
		assert.Contains(t, err.Error(), c.want)
	}
}
