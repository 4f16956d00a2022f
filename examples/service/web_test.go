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
	for _, job := range jobs {
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

	for _, r := range []*replica{a, b} {
		assert.NoError(t, r.stop(t))
	}
}
