package web_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/web"
)

// The job page of a job with a run limit shows the limit, and the job and
// jobs pages show it ended once the limit is reached.
func TestJobPageShowsTheRunLimit(t *testing.T) {
	for _, reached := range []bool{false, true} {
		src := bigFleet(1, 3)
		j := &src.fleet.Jobs[0]
		j.Pause, j.PausedOn, j.MaxRuns, j.LimitReached = nil, nil, 3, reached
		if reached {
			j.State = fleet.JobEnded
		}
		h, err := web.New(web.Config{Source: src, Prefix: "/anarchon/"})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, jobURL(j.Name), nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		body := rec.Body.String()
		assert.Contains(t, body, `<dd id="run-limit">3 scheduled runs, counted across the fleet</dd>`)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/anarchon/", nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		if reached {
			assert.Contains(t, body, "<dd>ended: its run limit was reached</dd>")
			assert.Contains(t, rec.Body.String(), `<span class="st">ended</span> <span class="meta">run limit 3 reached</span>`, "the jobs page")
		} else {
			assert.Contains(t, body, "<dt>State</dt><dd>active</dd>")
			assert.NotContains(t, rec.Body.String(), "run limit", "the jobs page")
		}
	}
}
