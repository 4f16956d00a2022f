package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// waitPast blocks until the server's duplicate window of job's stream, counted
// from from, has surely passed (the server purges its table on a timer, so this is
// the one condition that can only be waited for).
func waitPast(t *testing.T, b *Backend, job string, from time.Time) {
	t.Helper()
	until := from.Add(streamWindow(t, b, job) + 2*time.Second)
	select {
	case <-time.After(time.Until(until)):
	case <-t.Context().Done():
		t.Fatal("ended before the window passed")
	}
}

// TestRedTeamMixedFleetCatchUpPastFittedWindow: in a mixed fleet (a rolling
// upgrade that turns leases on), an instance without leases runs slot S; a leased
// instance that starts later with WithCatchUp(CatchUpAll, 1h) catches S up (its
// lease store never heard of S), wins the lease and records the claim. The slot's
// claim must still decide: RecordClaim must answer ErrClaimedElsewhere, as it does
// inside the window, or the slot runs twice. The fitted window (30 s here) ignores
// the catch-up window, which reaches an hour back.
func TestRedTeamMixedFleetCatchUpPastFittedWindow(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	plain := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	runs := memory.NewRunStore(backend.SystemClock{})
	lb, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), runs)
	require.NoError(t, err)
	require.NoError(t, lb.Init(ctx))
	t.Cleanup(func() { _ = lb.Close(context.Background()) })

	job := jobName("rt-catchup")
	timing := func(l backend.JobLimits) backend.JobLimits {
		l.Schedule, l.Interval, l.MaxLate = "every 1m", time.Minute, time.Second
		l.ClockSkew, l.Lease, l.CallTimeout = time.Second, 5*time.Second, 5*time.Second
		return l
	}
	pl := timing(limits(job)) // a plain instance: no catch-up (refused without leases)
	ll := timing(limits(job))
	ll.CatchUp, ll.CatchUpWindow = backend.CatchUpAll, time.Hour
	require.NoError(t, plain.PrepareJob(ctx, pl))
	require.NoError(t, lb.PrepareJob(ctx, ll))

	s0 := time.Now().Truncate(time.Minute)
	pin := claimIn(job, s0, token(), "plain")
	won, err := plain.Claim(ctx, pin)
	require.NoError(t, err)
	require.True(t, won, "the instance without leases runs the slot")
	ran := time.Now()

	waitPast(t, lb.Backend, job, ran)
	ctx = ctxFor(t)

	// The leased instance starts: catch-up claims s0 in its lease store.
	lin := claimIn(job, s0, token(), "leased")
	res, err := runs.Claim(ctx, backend.RunClaim{Job: job, Slot: s0, Token: lin.Token, Instance: "leased",
		Lease: 5 * time.Second, Deadline: s0.Add(time.Hour), Keep: time.Hour})
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeWon, res.Outcome, "the lease store never heard of the slot")
	err = lb.RecordClaim(ctx, lin)
	assert.ErrorIs(t, err, backend.ErrClaimedElsewhere,
		"the slot the instance without leases ran %v ago is run again by a catch-up (stream window %v)",
		time.Since(ran).Round(time.Second), streamWindow(t, lb.Backend, job))
}
