package web_test

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
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

// attemptURL is the path of an attempt's page as the handler links it.
func attemptURL(job, token string) string { return jobURL(job) + "/run/" + url.PathEscape(token) }

// TestAttemptPage: an attempt's page has its whole error (as text), its
// timings, its kind and token; the runs table links it from the run's slot;
// its JSON is the run; an unknown token is 404. The trace is shown when
// Config.Trace knows it, linked only to a web address.
func TestAttemptPage(t *testing.T) {
	traces := map[string]string{}
	f := startFleet(t, web.Config{Trace: func(r fleet.Run) (string, string) {
		return "4bf92f3577b34da6a3ce929d0e0e4736", traces[r.Token]
	}})
	run := f.trigger(t, jobBroken).Run
	job := f.get(t, jobURL(jobBroken))
	require.Equal(t, http.StatusOK, job.status, job.body)
	assert.Contains(t, job.body, `<a href="`+attemptURL(jobBroken, run.Token)+`"><time`, "the slot links the attempt")

	r := f.get(t, attemptURL(jobBroken, run.Token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<pre class="err" id="attempt-error">&lt;img src=x onerror=alert(2)&gt; &amp; &#34;quotes&#34;</pre>`)
	assert.NotContains(t, r.body, "<img")
	for _, dt := range []string{"<dt>Slot</dt>", "<dt>Started</dt>", "<dt>Finished</dt>", "the handler&#39;s run"} {
		assert.Contains(t, r.body, dt)
	}
	assert.Contains(t, r.body, "manual, asked by tester")
	assert.Contains(t, r.body, `<code id="attempt-token">`+run.Token+`</code>`)
	assert.Contains(t, r.body, `<dd id="attempt-trace"><code>4bf92f3577b34da6a3ce929d0e0e4736</code></dd>`, "no link without one")

	traces[run.Token] = "javascript:alert(1)"
	r = f.get(t, attemptURL(jobBroken, run.Token))
	assert.NotContains(t, r.body, "javascript:", "only a web address is a link")
	traces[run.Token] = "https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?a=1&b=2"
	r = f.get(t, attemptURL(jobBroken, run.Token))
	assert.Contains(t, r.body, `<a href="https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?a=1&amp;b=2">`)

	r = f.getJSON(t, "/anarchon/api"+strings.TrimPrefix(attemptURL(jobBroken, run.Token), "/anarchon"))
	require.Equal(t, http.StatusOK, r.status, r.body)
	var got fleet.Run
	require.NoError(t, json.Unmarshal([]byte(r.body), &got))
	assert.Equal(t, run.Token, got.Token)
	assert.Equal(t, hostileErr, got.Error)

	for _, token := range []string{"nope", `<script>alert(3)</script>`, strings.Repeat("x", 2000)} {
		r = f.get(t, attemptURL(jobBroken, token))
		assert.Equal(t, http.StatusNotFound, r.status, token)
		assert.NotContains(t, r.body, "<script>alert(3)", "a hostile token is text")
	}
	r = f.get(t, attemptURL("no-such-job", run.Token))
	assert.Equal(t, http.StatusNotFound, r.status, r.body)
}

// TestAttemptPageWithoutTrace: nil Config.Trace says the trace is not known.
func TestAttemptPageWithoutTrace(t *testing.T) {
	f := startFleet(t, web.Config{})
	run := f.trigger(t, jobReport).Run
	r := f.get(t, attemptURL(jobReport, run.Token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, "not known: the run store keeps no trace ID")
	assert.Contains(t, r.body, "<p>None.</p>", "no error")
}

// TestEntryAttemptPage: an entry's attempt is under the entry's page, with
// the entry's payload as text (its hidden characters made visible) and the
// run's error as text.
func TestEntryAttemptPage(t *testing.T) {
	f := startFleetWith(t, web.Config{}, declareTenants)
	const id = "<b>x</b>"
	f.addEntry(t, jobTenants, id, fleet.EntrySpec{Every: "1s", Payload: []byte("fail <script>\u202e")})
	var run fleet.Run
	require.Eventually(t, func() bool {
		r, err := f.client.Entry(t.Context(), jobTenants, fleet.EntryRequest{ID: id, History: 5})
		if err != nil {
			return false
		}
		for _, x := range r.Runs {
			if x.Status == scheduler.StatusError {
				run = x
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "the entry ran and failed")
	entry := f.get(t, entryURL(jobTenants, id))
	require.Equal(t, http.StatusOK, entry.status, entry.body)
	path := entryURL(jobTenants, id) + "/run/" + url.PathEscape(run.Token)
	assert.Contains(t, entry.body, `<a href="`+path+`"><time`, "the entry's runs link their attempts")

	r := f.get(t, path)
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<pre class="err" id="attempt-error">&lt;img src=x onerror=alert(2)&gt; &amp; &#34;quotes&#34;</pre>`)
	assert.Contains(t, r.body, `<pre class="payload">fail &lt;script&gt;\u202e</pre>`, "the payload as text, the override visible")
	assert.Contains(t, r.body, "<dt>Entry</dt><dd><a href=\""+entryURL(jobTenants, id)+"\">&lt;b&gt;x&lt;/b&gt;</a></dd>")
	assert.NotContains(t, r.body, "<b>x")
	assert.NotContains(t, r.body, "<script>")

	r = f.get(t, entryURL(jobTenants, "other")+"/run/"+url.PathEscape(run.Token))
	assert.Equal(t, http.StatusNotFound, r.status, "another entry's path")
	r = f.get(t, entryURL(jobTenants, "bad\x00id")+"/run/x")
	assert.Equal(t, http.StatusNotFound, r.status)
}

// TestRunsStatusFilter: ?status= keeps the runs of a status, or the failures;
// an unknown status is 400.
func TestRunsStatusFilter(t *testing.T) {
	runs := []fleet.Run{
		run(5, scheduler.StatusOK, 5, 20), run(4, scheduler.StatusError, 5, 20), run(3, scheduler.StatusSkipped, 0, 0),
		policyCancelled(run(2, scheduler.StatusCancelled, 5, 20)), run(1, scheduler.StatusTimeout, 5, 20),
	}
	for _, c := range []struct {
		status string
		rows   int
	}{{"", 5}, {"failed", 2}, {"ok", 1}, {"cancelled", 1}, {"not-run", 1}, {"running", 0}} {
		status, _, body := serve(t, web.Config{Source: chartSource(runs)}, "/anarchon/job/sync?status="+c.status)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, c.rows, strings.Count(body, `<tr class="run-row `), "status=%s", c.status)
		if c.status != "" {
			assert.Contains(t, body, fmt.Sprintf(`href="/anarchon/job/sync?status=%s" aria-current="page"`, c.status))
		}
	}
	_, _, body := serve(t, web.Config{Source: chartSource(runs)}, "/anarchon/job/sync?status=running")
	assert.Contains(t, body, "No run matches the filter “running”.")
	status, _, body := serve(t, web.Config{Source: chartSource(runs)}, "/anarchon/job/sync?status=%3Cb%3E")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "status=&#34;&lt;b&gt;&#34;: one of failed, ok, cancelled, not-run, running")
}

// policyCancelled is r as a run a later slot cancelled is stored.
func policyCancelled(r fleet.Run) fleet.Run {
	r.Status = scheduler.StatusCancelled
	r.Error = scheduler.ErrOverlapCancelled.Error() + ": slot 2030-01-01T00:10:00.000Z asked from instance replica-b"
	return r
}

// TestCancelledByPolicyIsNoFailure: a run a later slot cancelled (cancel-other)
// is the policy's normal ending: not red, and its job is not failing; a run
// Stop cancelled still is.
func TestCancelledByPolicyIsNoFailure(t *testing.T) {
	cancelled := policyCancelled(run(2, scheduler.StatusCancelled, 5, 20))
	status, _, body := serve(t, web.Config{Source: chartSource([]fleet.Run{cancelled})}, "/anarchon/job/sync")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<tr class="run-row policy">`)
	assert.Contains(t, body, `<span class="st policy">cancelled by a later slot</span>`)
	assert.NotContains(t, body, `class="run-row bad`)
	assert.Contains(t, body, `<g class="mark policy"`, "the chart does not draw it red")

	stopped := run(2, scheduler.StatusCancelled, 5, 20)
	stopped.Error = "scheduler: stopped"
	_, _, body = serve(t, web.Config{Source: chartSource([]fleet.Run{stopped})}, "/anarchon/job/sync")
	assert.Contains(t, body, `<tr class="run-row bad">`, "cancelled by Stop is no policy")
}

// TestHostileRunFields: every text of a run that a page renders (its instance,
// who asked, its error, its token, a trace ID and link from Config.Trace) is
// text on the job's page and the attempt's page, and a token of dots or
// slashes still names one attempt.
func TestHostileRunFields(t *testing.T) {
	const evil = `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	for _, token := range []string{evil, "..", "a/b", "%2e%2e", "\u202eabc"} {
		r := run(3, scheduler.StatusError, 5, 20)
		r.Token, r.Instance, r.RequestedBy, r.Manual = token, evil, evil, true
		r.Error = evil + strings.Repeat("x", 400) + evil
		cfg := web.Config{Source: chartSource([]fleet.Run{r}),
			Trace: func(fleet.Run) (string, string) { return evil, "https://x.example/" + evil }}
		status, _, body := serve(t, cfg, "/anarchon/job/sync")
		require.Equal(t, http.StatusOK, status, body)
		assert.NotContains(t, body, "<script>", "token %q", token)
		assert.NotContains(t, body, "<img", "token %q", token)
		assert.Contains(t, body, "the whole error</a>", "a long error is cut in the table, with a link")
		href := regexp.MustCompile(`<td><a href="([^"]+)"><time`).FindStringSubmatch(body)
		require.Len(t, href, 2, "token %q", token)
		path := html.UnescapeString(href[1])
		status, _, body = serve(t, cfg, path)
		require.Equal(t, http.StatusOK, status, "token %q: %s: %s", token, path, body)
		assert.NotContains(t, body, "<script>", "token %q", token)
		assert.NotContains(t, body, "<img", "token %q", token)
		assert.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
		assert.Contains(t, body, `href="https://x.example/%22%3e%3cscript%3ealert%281%29%3c/script%3e%3cimg%20src=x%20onerror=alert%282%29%3e"`, "the link escaped as a URL")
	}
}
