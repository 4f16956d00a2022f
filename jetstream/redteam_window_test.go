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

// waitPast blocks until d has surely passed since from (the server purges its
// duplicate table on a timer, so this is the one condition that can only be
// waited for).
func waitPast(t *testing.T, from time.Time, d time.Duration) {
	t.Helper()
	select {
	case <-time.After(time.Until(from.Add(d + 2*time.Second))):
	case <-t.Context().Done():
		t.Fatal("ended before the window passed")
	}
}

// TestRedTeamMixedFleetCatchUpPastFittedWindow: in a mixed fleet (a rolling
// upgrade that turns leases on), an instance without leases runs slot S; a leased
// instance that starts later with WithCatchUp(CatchUpAll, 1h) catches S up (its
// lease store never heard of S), wins the lease and records the claim. The slot's
// claim must still decide: RecordClaim must answer ErrClaimedElsewhere, as it does
// inside the window, or the slot runs twice: the window fitted to a job with
// catch-up covers its catch-up window. The test waits past the shortest fitted
// window, which a window that left the catch-up out would be here.
func TestRedTeamMixedFleetCatchUpPastFittedWindow(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	plain := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	runs := memory.NewRunStore(backend.SystemClock{})
	lb, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), runs, WithMixedFleet())
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
	// The leased instance prepares the stream first: an instance without leases
	// that prepared it before, with its own narrower window, stores its claims
	// for that window only (a limit documented in docs/backends.md).
	require.NoError(t, lb.PrepareJob(ctx, ll))
	require.NoError(t, plain.PrepareJob(ctx, pl))

	s0 := time.Now().Truncate(time.Minute)
	pin := claimIn(job, s0, token(), "plain")
	won, err := plain.Claim(ctx, pin)
	require.NoError(t, err)
	require.True(t, won, "the instance without leases runs the slot")
	ran := time.Now()

	require.Greater(t, streamWindow(t, lb.Backend, job), ll.CatchUpWindow, "the stream's window covers the catch-up window")
	waitPast(t, ran, MinFittedWindow)
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
