package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/web"
)

// TestPagesOfALargeFleet: a replica whose jobs answer comes in parts (2,000 jobs
// with long names) is shown whole on the jobs page, and a job with more runs in
// progress than the jobs view lists says how many more.
func TestPagesOfALargeFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Server(t, embedded.Options{})
	b := memory.New()
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "big"})
	require.NoError(t, err)
	ok := func(context.Context, scheduler.Run) error { return nil }
	const n = 2000
	name := func(i int) string { return fmt.Sprintf("job-%04d-%s", i, strings.Repeat("x", 600)) }
	for i := range n {
		require.NoError(t, s.Every(name(i), rare, ok))
	}
	const running = fleet.MaxViewRunning + 3
	for i := range running {
		slot := time.Now().Truncate(time.Hour).Add(-time.Duration(i+1) * time.Minute)
		res, err := b.Runs().Claim(ctx, backend.RunClaim{Job: name(0), Slot: slot, Token: fmt.Sprintf("t%d", i), Instance: "big",
			Lease: time.Hour, Deadline: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, scheduler.OutcomeWon, res.Outcome)
	}
	svc, err := fleet.Serve(ctx, natstest.Conn(t, ns), s)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	client, err := fleet.NewClient(natstest.Conn(t, ns), fleet.WithGatherWindow(5*time.Second))
	require.NoError(t, err)
	h, err := web.New(web.Config{Source: client, Prefix: "/anarchon/"})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/anarchon/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f := &testFleet{client: client, srv: srv, h: h}

	fl, err := client.Jobs(ctx)
	require.NoError(t, err)
	require.Greater(t, fl.Replicas[0].Parts, 1, "the answer came in parts")
	r := f.get(t, "/anarchon/")
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, name(0))
	assert.Contains(t, r.body, name(n-1), "the last job, from the last part")
	assert.Contains(t, r.body, fmt.Sprintf("%d live", fleet.MaxViewRunning))
	assert.Contains(t, r.body, "and 3 more")
}
