package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/web"
)

// noWhy is a Source that cannot say why a slot ran.
type noWhy struct{ web.Source }

// brokenWhy is a Source whose why requests fail.
type brokenWhy struct{ web.Source }

func (brokenWhy) Why(context.Context, string, fleet.WhyRequest) (fleet.WhyReply, error) {
	return fleet.WhyReply{}, errors.New("fleet: no replica answers <why>")
}

// TestAttemptPageWhy: an attempt's page says what was decided for its slot, as
// a replica read it, the attempt's own step marked and the texts as text; a
// Source that cannot say shows no such section, and one whose request fails
// says so in the page, which still shows the attempt.
func TestAttemptPageWhy(t *testing.T) {
	f := startFleet(t, web.Config{})
	run := f.trigger(t, jobBroken).Run
	r := f.get(t, attemptURL(jobBroken, run.Token))
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `<h2 id="why-h">Why</h2>`)
	assert.Regexp(t, `<ol id="why">\s*<li data-kind="manual">manual run requested by tester: ran on `+run.Instance+
		` as attempt 1: failed: `+regexp.QuoteMeta(`&lt;img src=x onerror=alert(2)&gt; &amp; &#34;quotes&#34;`)+
		` <span class="meta">this attempt</span></li>\s*</ol>`, r.body)
	assert.Regexp(t, `as replica-[abc] read the stored decisions`, r.body)

	for _, c := range []struct {
		src  web.Source
		want []string
		not  []string
	}{
		{noWhy{f.client}, nil, []string{`id="why-h"`}},
		{brokenWhy{f.client}, []string{`<p class="note" id="why-error">Not known: fleet: no replica answers &lt;why&gt;</p>`}, []string{`<ol id="why">`}},
	} {
		h, err := web.New(web.Config{Source: c.src, Prefix: "/anarchon/"})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, attemptURL(jobBroken, run.Token), nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Contains(t, rec.Body.String(), `id="attempt-error"`, "the attempt is shown")
		for _, s := range c.want {
			assert.Contains(t, rec.Body.String(), s)
		}
		for _, s := range c.not {
			assert.NotContains(t, rec.Body.String(), s)
		}
	}
}
