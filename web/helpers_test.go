package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/web"
)

// Jobs of the test fleet: every 100 years (slots aligned to the Unix epoch, the next
// on 7 December 2069), so no scheduled slot runs during a test; runs come from
// triggers. (Every 365 days had a slot on 18 December of each year: in its first
// minute the tests saw a run of each job more.) dots's cron fires on February's
// Mondays and 29 February, which no assertion about it minds. hostile is a name a
// page must show as text; broken fails with an error a page must show as text.
const (
	jobReport  = "report"
	jobHostile = "<script>alert(1)</script>"
	jobBroken  = "broken/one"
	jobDots    = ".."
	jobSlow    = "slow"
	hostileErr = `<img src=x onerror=alert(2)> & "quotes"`
	rare       = 100 * 365 * 24 * time.Hour
)

// testFleet is three replicas on a memory backend over an embedded nats-server,
// each serving the fleet service, a fleet.Client and the web handler on an
// httptest server.
type testFleet struct {
	client  *fleet.Client
	srv     *httptest.Server
	h       *web.Handler
	backend *memory.Backend // the replicas' shared backend
}

// startFleet starts the fleet and serves web.New(cfg) with cfg.Source set to the
// client, mounted at /anarchon/. It fails, never skips, when the embedded server
// cannot start.
func startFleet(t testing.TB, cfg web.Config) *testFleet {
	t.Helper()
	return startFleetWith(t, cfg, nil)
}

// startFleetWith is startFleet with declare called on each replica's scheduler
// before it starts, for jobs beyond the five (nil: none).
func startFleetWith(t testing.TB, cfg web.Config, declare func(*scheduler.Scheduler) error) *testFleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Server(t, embedded.Options{})
	b := memory.New()
	// slow's runs last until the test ends (closed before the schedulers stop); a
	// run asked while one goes on is buffered behind it.
	release := make(chan struct{})
	slow := func(ctx context.Context, _ scheduler.Run) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	for _, id := range []string{"replica-a", "replica-b", "replica-c"} {
		nc := natstest.Conn(t, ns)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: id})
		require.NoError(t, err)
		ok := func(context.Context, scheduler.Run) error { return nil }
		require.NoError(t, s.Every(jobReport, rare, ok))
		require.NoError(t, s.Every(jobHostile, rare, ok))
		require.NoError(t, s.Every(jobBroken, rare, func(context.Context, scheduler.Run) error { return errors.New(hostileErr) }))
		require.NoError(t, s.Cron(jobDots, "0 9 29 2 MON", ok, scheduler.WithLocation(mustZone(t, "Europe/Athens"))))
		require.NoError(t, s.Every(jobSlow, rare, slow, scheduler.WithOverlap(scheduler.OverlapBufferOne)))
		if declare != nil {
			require.NoError(t, declare(s))
		}
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
		svc, err := fleet.Serve(ctx, nc, s)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	}
	t.Cleanup(func() { close(release) })
	// The default gather window (500ms): a shorter one can miss a replica on a
	// loaded machine, and the page would say no replica answers.
	client, err := fleet.NewClient(natstest.Conn(t, ns))
	require.NoError(t, err)
	cfg.Source = client
	if cfg.Prefix == "" {
		cfg.Prefix = "/anarchon/"
	}
	h, err := web.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(cfg.Prefix, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testFleet{client: client, srv: srv, h: h, backend: b}
}

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// trigger runs job now through the client and waits for the run to end.
func (f *testFleet) trigger(t testing.TB, job string) fleet.TriggerReply {
	t.Helper()
	r, err := f.client.Trigger(t.Context(), job, fleet.TriggerRequest{By: "tester", Wait: true})
	require.NoError(t, err)
	require.NotNil(t, r.Run)
	return r
}

// response is what a request got.
type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request to the handler; it does not follow redirects. A "Host" in
// header is sent as the request's Host.
func (f *testFleet) do(t testing.TB, method, path string, header http.Header, body string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		if k == "Host" {
			req.Host = v[0]
			continue
		}
		req.Header[k] = v
	}
	if body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func (f *testFleet) get(t testing.TB, path string) response {
	t.Helper()
	return f.do(t, http.MethodGet, path, nil, "")
}

func (f *testFleet) getJSON(t testing.TB, path string) response {
	t.Helper()
	return f.do(t, http.MethodGet, path, http.Header{"Accept": {"application/json"}}, "")
}

func (f *testFleet) post(t testing.TB, path string, form url.Values) response {
	t.Helper()
	return f.do(t, http.MethodPost, path, nil, form.Encode())
}

// jobURL is the path of a job's page as the handler links it.
func jobURL(job string) string {
	if job == ".." {
		return "/anarchon/job/%2E%2E"
	}
	return "/anarchon/job/" + url.PathEscape(job)
}

// manualRuns counts job's manual runs in its history.
func (f *testFleet) manualRuns(t testing.TB, job string) int {
	t.Helper()
	h, err := f.client.History(t.Context(), job, 100)
	require.NoError(t, err)
	n := 0
	for _, r := range h.Runs {
		if r.Manual {
			n++
		}
	}
	return n
}
