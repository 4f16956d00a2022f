package web_test

import (
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/web"
)

var metaRefresh = regexp.MustCompile(`<meta http-equiv="refresh" content="([0-9]+)">`)

// refreshOf is the page's meta refresh in seconds, "" without one.
func refreshOf(body string) string {
	if m := metaRefresh.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// The jobs page reloads itself every Config.Refresh (DefaultRefresh by default);
// ?refresh=0 turns it off for that view and ?refresh=N sets it, kept by the
// filters' links; the page says which, with a link to switch. Only the jobs
// page reloads.
func TestJobsPageRefreshes(t *testing.T) {
	src := chartSource(nil)
	for _, tc := range []struct {
		name     string
		refresh  time.Duration // Config.Refresh
		path     string
		want     string // the meta refresh, "" for none
		note     string // the note's link
		failing  string // the failing filter's link
		noteText string
	}{
		{"default", 0, "/anarchon/", "30", `<a href="/anarchon/?refresh=0">stop reloading</a>`, `/anarchon/?show=failing`, "This page reloads every 30s"},
		{"configured", 10 * time.Second, "/anarchon/?show=failing", "10", `<a href="/anarchon/?refresh=0&amp;show=failing">stop reloading</a>`, `/anarchon/?show=failing`, "This page reloads every 10s"},
		{"turned off by the URL", 0, "/anarchon/?refresh=0", "", `<a href="/anarchon/">reload it every 30s</a>`, `/anarchon/?refresh=0&amp;show=failing`, "This page does not reload itself"},
		{"set by the URL", 0, "/anarchon/?refresh=5&show=paused", "5", `<a href="/anarchon/?refresh=0&amp;show=paused">stop reloading</a>`, `/anarchon/?refresh=5&amp;show=failing`, "This page reloads every 5s"},
		{"turned off by the config", -1, "/anarchon/", "", `<a href="/anarchon/?refresh=30">reload it every 30s</a>`, `/anarchon/?show=failing`, "This page does not reload itself"},
		{"asked for despite the config", -1, "/anarchon/?refresh=60", "60", `<a href="/anarchon/?refresh=0">stop reloading</a>`, `/anarchon/?refresh=60&amp;show=failing`, "This page reloads every 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := serve(t, web.Config{Source: src, Refresh: tc.refresh}, tc.path)
			require.Equal(t, http.StatusOK, status, body)
			assert.Equal(t, tc.want, refreshOf(body))
			assert.Contains(t, body, tc.noteText)
			assert.Contains(t, body, tc.note)
			assert.Contains(t, body, `<a href="`+tc.failing+`"`, "the failing filter keeps the URL's refresh")
		})
	}

	for _, path := range []string{"/anarchon/job/sync", "/anarchon/fleet"} {
		_, _, body := serve(t, web.Config{Source: src}, path)
		assert.Empty(t, refreshOf(body), "%s does not reload itself", path)
	}
	for _, bad := range []string{"x", "-1", "1.5", "86401"} {
		status, _, body := serve(t, web.Config{Source: src}, "/anarchon/?refresh="+bad)
		assert.Equal(t, http.StatusBadRequest, status, bad)
		assert.Contains(t, body, "seconds from 1 to 86400, or 0 for none", bad)
	}
}

func TestRefreshConfig(t *testing.T) {
	src := chartSource(nil)
	for _, c := range []struct {
		refresh time.Duration
		want    string
	}{
		{1500 * time.Millisecond, "Refresh 1.5s: whole seconds"},
		{25 * time.Hour, "Refresh 25h0m0s: whole seconds up to 24h0m0s"},
	} {
		_, err := web.New(web.Config{Source: src, Refresh: c.refresh})
		require.Error(t, err)
		assert.True(t, errors.Is(err, web.ErrInvalidConfig), err)
		assert.Contains(t, err.Error(), c.want)
	}
}
