package web_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/web"
)

// port is the port of the fleet's test server, for the Host headers a browser
// would send to it under another name.
func (f *testFleet) port(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(f.srv.URL)
	require.NoError(t, err)
	return u.Port()
}

// sameOrigin is what a browser sends with a form posted from a page of host:
// Host, Origin and Sec-Fetch-Site all agree.
func sameOrigin(host string) http.Header {
	return http.Header{"Host": {host}, "Origin": {"http://" + host}, "Sec-Fetch-Site": {"same-origin"}}
}

// paused reports whether the fleet says job is paused.
func (f *testFleet) paused(t *testing.T, job string) bool {
	t.Helper()
	fl, err := f.client.Jobs(t.Context())
	require.NoError(t, err)
	for _, j := range fl.Jobs {
		if j.Name == job {
			return j.Pause != nil
		}
	}
	require.Failf(t, "job not in the fleet", "%q", job)
	return false
}

// TestDNSRebinding: with AllowLoopback and no Hosts, a page of attacker.example
// whose name now resolves to 127.0.0.1 posts from loopback, same-origin in every
// header. Before the Host check the pause was executed (303); now every action is
// refused with 403 and nothing is done, and its pages show no controls. The real
// page, opened as localhost, 127.0.0.1, [::1] or a name under .localhost, acts.
func TestDNSRebinding(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: web.AllowLoopback})
	port := f.port(t)
	attacker := "attacker.example:" + port

	for _, action := range []string{"pause", "resume", "run"} {
		for _, path := range []string{jobURL(jobReport) + "/" + action, "/anarchon/api/job/report/" + action} {
			r := f.do(t, http.MethodPost, path, sameOrigin(attacker), url.Values{"reason": {"pwned"}}.Encode())
			assert.Equal(t, http.StatusForbidden, r.status, path)
			assert.Contains(t, r.body, `the host `, path)
			assert.Contains(t, r.body, `is not a loopback name`, path)
			assert.Contains(t, r.body, `DNS rebinding`, path)
		}
	}
	// A forged Origin, with the real Host or the attacker's.
	for _, h := range []http.Header{
		{"Host": {"127.0.0.1:" + port}, "Origin": {"http://" + attacker}},
		{"Host": {attacker}, "Origin": {"http://127.0.0.1:" + port}},
		{"Host": {"127.0.0.1:" + port}, "Origin": {"http://" + attacker}, "Sec-Fetch-Site": {"cross-site"}},
	} {
		r := f.do(t, http.MethodPost, jobURL(jobReport)+"/pause", h, url.Values{"reason": {"pwned"}}.Encode())
		assert.Equal(t, http.StatusForbidden, r.status, h)
	}
	assert.False(t, f.paused(t, jobReport), "nothing paused")
	assert.Equal(t, 0, f.manualRuns(t, jobReport), "nothing ran")

	// The read-only pages answer any Host, without controls for another site's.
	page := f.do(t, http.MethodGet, jobURL(jobReport), http.Header{"Host": {attacker}}, "")
	assert.Equal(t, http.StatusOK, page.status)
	assert.NotContains(t, page.body, "<form")
	assert.Contains(t, f.get(t, jobURL(jobReport)).body, "<form", "the real page (127.0.0.1) shows them")

	// The real page acts, by every loopback name.
	runs := 0
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "app.localhost:" + port,
		"LOCALHOST.:" + port, "127.0.0.2:" + port, "localhost"} {
		r := f.do(t, http.MethodPost, jobURL(jobReport)+"/run", sameOrigin(host), "")
		assert.Equal(t, http.StatusSeeOther, r.status, "%s: %s", host, r.body)
		runs++
	}
	assert.Equal(t, runs, f.manualRuns(t, jobReport))
	r := f.do(t, http.MethodPost, jobURL(jobReport)+"/pause", sameOrigin("localhost:"+port), url.Values{"reason": {"deploy"}}.Encode())
	assert.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.True(t, f.paused(t, jobReport))

	// Names that look local but DNS answers for are not loopback names.
	for _, host := range []string{"localhost.attacker.example:" + port, "127.0.0.1.nip.io:" + port, "0.0.0.0:" + port,
		"2130706433:" + port, "[::ffff:10.0.0.1]:" + port, "localhost:" + port + ":1"} {
		r := f.do(t, http.MethodPost, jobURL(jobReport)+"/resume", sameOrigin(host), "")
		assert.Contains(t, []int{http.StatusForbidden, http.StatusBadRequest}, r.status, "%q: %s", host, r.body)
	}
	assert.True(t, f.paused(t, jobReport), "still paused")
}

// TestHosts: with Config.Hosts, a request for any other Host is refused with 421
// before anything else, pages included; a listed name answers and acts.
func TestHosts(t *testing.T) {
	f := startFleet(t, web.Config{Authorize: allow, Hosts: []string{"Status.Example.com", "127.0.0.1:1", "[::1]"}})
	port := f.port(t)
	for _, host := range []string{"attacker.example:" + port, "localhost:" + port, "127.0.0.1:" + port,
		"status.example.com.evil:" + port, "evil.status.example.com"} {
		for _, path := range []string{"/anarchon/", "/anarchon/api/jobs", "/anarchon/style.css", "/anarchon/nowhere"} {
			r := f.do(t, http.MethodGet, path, http.Header{"Host": {host}}, "")
			assert.Equal(t, http.StatusMisdirectedRequest, r.status, "%s %s", host, path)
			assert.Contains(t, r.body, "does not answer to the host", "%s %s", host, path)
		}
		r := f.do(t, http.MethodPost, jobURL(jobReport)+"/run", sameOrigin(host), "")
		assert.Equal(t, http.StatusMisdirectedRequest, r.status, host)
	}
	r := f.do(t, http.MethodGet, "/anarchon/api/jobs", http.Header{"Host": {"attacker.example"}, "Accept": {"application/json"}}, "")
	assert.Equal(t, http.StatusMisdirectedRequest, r.status)
	assert.Contains(t, r.body, `"code": 421`)
	assert.Equal(t, 0, f.manualRuns(t, jobReport), "nothing ran")

	for _, host := range []string{"status.example.com:" + port, "STATUS.example.com.", "[::1]:" + port} {
		page := f.do(t, http.MethodGet, jobURL(jobReport), http.Header{"Host": {host}}, "")
		assert.Equal(t, http.StatusOK, page.status, host)
		assert.Contains(t, page.body, "<form", host)
	}
	r = f.do(t, http.MethodPost, jobURL(jobReport)+"/run", sameOrigin("status.example.com:"+port), "")
	assert.Equal(t, http.StatusSeeOther, r.status, r.body)
	assert.Equal(t, 1, f.manualRuns(t, jobReport))
	r = f.do(t, http.MethodGet, "/anarchon/", http.Header{"Host": {"127.0.0.1:1"}}, "")
	assert.Equal(t, http.StatusOK, r.status, "a host:port entry matches that port")
}

func TestHostsConfig(t *testing.T) {
	f := startFleet(t, web.Config{})
	for _, bad := range []string{"", "http://status.example.com", "status.example.com/anarchon", "*.example.com",
		"status.example.com:", "status.example.com:https", "[status.example.com]", "a:b:c", "user@host", "with space"} {
		_, err := web.New(web.Config{Source: f.client, Hosts: []string{"localhost", bad}})
		require.Error(t, err, "%q", bad)
		assert.True(t, errors.Is(err, web.ErrInvalidConfig), err)
		assert.Contains(t, err.Error(), "Hosts[1] ", bad)
		assert.True(t, strings.Contains(err.Error(), "a host name, an IP address or either with :port"), err)
	}
	for _, good := range []string{"localhost", "status.example.com:8443", "10.0.0.7", "::1", "[::1]:8080", "xn--bcher-kva.example"} {
		_, err := web.New(web.Config{Source: f.client, Hosts: []string{good}})
		assert.NoError(t, err, good)
	}
}
