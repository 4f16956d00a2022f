package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func getPage(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestStatusPage: two replicas, one serving the status page read-only and one
// with actions: both pages list the four jobs on both replicas; the read-only
// one refuses run now with 403, the other runs it.
func TestStatusPage(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	common := []string{"-url", srv.ClientURL(), "-interval", "1s", "-log-format", "json", "-metrics-addr", "", "-stop-timeout", "300ms", "-history", "0", "-web", "127.0.0.1:0"}
	a := start(t, append(common, "-instance", "a")...)
	b := start(t, append(common, "-web-actions", "-instance", "b")...)
	pageA := a.waitFor(t, 10*time.Second, msg("serving the status page"))["url"].(string)
	pageB := b.waitFor(t, 10*time.Second, msg("serving the status page"))["url"].(string)
	require.True(t, strings.HasPrefix(pageA, "http://127.0.0.1:"), pageA)

	// Both replicas are listed once both serve the fleet service.
	var body string
	require.Eventually(t, func() bool {
		var status int
		status, body = getPage(t, pageA)
		return status == http.StatusOK && strings.Contains(body, "on 2 replicas")
	}, 10*time.Second, 100*time.Millisecond, "the jobs page lists both replicas")
	for _, job := range []string{"tick", "report", "flaky", "compact", "retried", "refresh", "digest", "warmup"} {
		assert.Contains(t, body, `<a href="/anarchon/job/`+job+`">`+job+`</a>`)
	}
	assert.Contains(t, body, "read-only")
	assert.NotContains(t, body, "Run now")
	status, fleetPage := getPage(t, pageA+"fleet")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, fleetPage, `<th scope="row">a</th>`)
	assert.Contains(t, fleetPage, `<th scope="row">b</th>`)

	resp, err := http.PostForm(pageA+"job/tick/run", url.Values{})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "read-only by default")

	resp, err = http.PostForm(pageB+"job/tick/run", url.Values{})
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "-web-actions: run now from this machine, redirected to the job page")
	assert.Contains(t, string(page), "manual by web@127.0.0.1")

	// A page of another site whose name is re-pointed at 127.0.0.1 (DNS rebinding)
	// posts same-origin from this machine: refused, its Host is not a loopback name.
	assert.Equal(t, http.StatusForbidden, postAs(t, pageB+"job/tick/run", "attacker.example"), "a rebound name may not act")

	for _, r := range []*replica{a, b} {
		assert.NoError(t, r.stop(t))
	}
}

// postAs posts an empty form to u as a page of host on u's port would, and
// returns the status (without following a redirect).
func postAs(t *testing.T, u, host string) int {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(""))
	require.NoError(t, err)
	req.Host = host + ":" + pu.Port()
	req.Header.Set("Origin", "http://"+req.Host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// TestStatusPageHosts: with -web-hosts the page answers to the names listed only
// (421 for any other Host, pages too), and acts for them.
func TestStatusPageHosts(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	r := start(t, "-url", srv.ClientURL(), "-interval", "1s", "-log-format", "json", "-metrics-addr", "", "-stop-timeout", "300ms",
		"-history", "0", "-web", "127.0.0.1:0", "-web-actions", "-web-hosts", "status.example.com, localhost", "-instance", "a")
	page := r.waitFor(t, 10*time.Second, msg("serving the status page"))["url"].(string)

	status, _ := getPage(t, page)
	assert.Equal(t, http.StatusMisdirectedRequest, status, "127.0.0.1 is not listed")
	assert.Equal(t, http.StatusMisdirectedRequest, postAs(t, page+"job/tick/run", "attacker.example"))
	assert.Equal(t, http.StatusSeeOther, postAs(t, page+"job/tick/run", "status.example.com"))
	assert.Equal(t, http.StatusSeeOther, postAs(t, page+"job/tick/run", "localhost"))
	assert.NoError(t, r.stop(t))
}
