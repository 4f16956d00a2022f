package browser

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/web"
)

// The jobs of the test fleet. billing-export's actions are refused by the
// authorizer; compact is paused; flaky-sync fails every run.
const (
	jobTick    = "tick"
	jobFlaky   = "flaky-sync"
	jobReport  = "nightly-report"
	jobCompact = "compact"
	jobLocked  = "billing-export"
)

// testFleet is three replicas on the JetStream backend with leases (kvlease),
// each on its own connection to an embedded nats-server, each serving the fleet
// service; a fleet.Client; and the status pages on an httptest server on
// 127.0.0.1.
type testFleet struct {
	client *fleet.Client
	url    string // the jobs page
}

// fleetSetup is what a test fleet's replicas declare, and what is done through
// the client before the page is served.
type fleetSetup struct {
	declare func(t *testing.T, s *scheduler.Scheduler)
	prepare func(t *testing.T, ctx context.Context, c *fleet.Client)
	// page changes the status page's configuration, when set.
	page func(*web.Config)
}

func startFleet(t *testing.T, setup fleetSetup) *testFleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := natstest.Server(t, embedded.Options{})
	for _, id := range []string{"replica-a", "replica-b", "replica-c"} {
		nc := natstest.Conn(t, ns)
		js := natstest.JetStream(t, nc)
		runs, err := kvlease.New(js)
		require.NoError(t, err)
		t.Cleanup(runs.Close)
		b, err := jetstream.NewLeased(js, runs)
		require.NoError(t, err)
		events, err := fleet.Events(nc)
		require.NoError(t, err)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: id, OnEvent: events})
		require.NoError(t, err)
		setup.declare(t, s)
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
		svc, err := fleet.Serve(ctx, nc, s)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	}
	// The default gather window: on a loaded machine a replica's answer can take
	// longer than a shorter one, and the page would say no replica answers (503).
	client, err := fleet.NewClient(natstest.Conn(t, ns))
	require.NoError(t, err)
	setup.prepare(t, ctx, client)

	cfg := web.Config{
		Source: client,
		Prefix: "/anarchon/",
		// People may look at everything and act on every job but billing-export.
		Authorize: func(r *http.Request) bool {
			return r.Method == http.MethodGet || !strings.Contains(r.URL.EscapedPath(), "/"+jobLocked+"/")
		},
		Who: func(*http.Request) string { return "browser-test" },
	}
	if setup.page != nil {
		setup.page(&cfg)
	}
	h, err := web.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/anarchon/", h)
	srv := httptest.NewServer(mux) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), srv.URL)
	return &testFleet{client: client, url: srv.URL + "/anarchon/"}
}

// demoFleet is the fleet of the screenshots: a job that ticks, one that fails,
// a cron job with one manual run, a paused one, and one the authorizer guards.
func demoFleet(t *testing.T) *testFleet {
	athens, err := time.LoadLocation("Europe/Athens")
	require.NoError(t, err)
	ok := func(context.Context, scheduler.Run) error { return nil }
	return startFleet(t, fleetSetup{
		declare: func(t *testing.T, s *scheduler.Scheduler) {
			require.NoError(t, s.Every(jobTick, 2*time.Second, ok))
			require.NoError(t, s.Every(jobFlaky, 2*time.Second, func(context.Context, scheduler.Run) error {
				return errors.New("upstream inventory answered 503 <html>Service Unavailable</html>")
			}))
			require.NoError(t, s.Cron(jobReport, "0 3 * * *", ok, scheduler.WithLocation(athens)))
			require.NoError(t, s.Every(jobCompact, 3*time.Second, ok))
			require.NoError(t, s.Every(jobLocked, 2*time.Second, ok))
		},
		// Every job but the nightly report runs by itself; the report gets one
		// manual run. Then compact is paused, so the page has every kind of row.
		prepare: func(t *testing.T, ctx context.Context, client *fleet.Client) {
			_, err := client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "setup", Wait: true})
			require.NoError(t, err)
			for _, job := range []string{jobTick, jobFlaky, jobCompact, jobLocked} {
				require.Eventually(t, func() bool {
					h, err := client.History(ctx, job, 1)
					return err == nil && len(h.Runs) > 0 && h.Runs[0].Status != scheduler.StatusRunning
				}, 20*time.Second, 100*time.Millisecond, "%s has a finished run", job)
			}
			_, err = client.Pause(ctx, jobCompact, fleet.PauseRequest{Reason: "disk full on db-2", By: "ana", For: "2h"})
			require.NoError(t, err)
		},
	})
}
