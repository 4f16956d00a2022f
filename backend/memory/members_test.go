package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/stepclock"
)

// Members expire by the backend's clock, a timer on it waking the watch; a
// beat that only extends a member does not call the watch's fn, a group change
// does, and so does Leave.
func TestMembersExpireByTheBackendsClock(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := stepclock.New(t0)
	b := memory.NewWithClock(clock)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sets := make(chan []backend.Member, 16)
	done := make(chan error, 1)
	go func() { done <- b.WatchMembers(ctx, func(all []backend.Member) { sets <- all }) }()
	next := func(what string) []backend.Member {
		t.Helper()
		select {
		case s := <-sets:
			return s
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no set", what)
			return nil
		}
	}
	assert.Empty(t, next("the first set"))

	a := backend.Member{Instance: "a", Group: "g1"}
	require.NoError(t, b.Beat(ctx, a, 3*time.Second))
	assert.Equal(t, []backend.Member{a}, next("the beat"))

	// Extended at t0+1s to t0+4s: the watch wakes at t0+3s, says nothing and
	// waits for t0+4s.
	clock.WaitTimers(t0.Add(3*time.Second), 1)
	clock.Set(t0.Add(time.Second))
	require.NoError(t, b.Beat(ctx, a, 3*time.Second))
	clock.Set(t0.Add(3 * time.Second))
	clock.WaitTimers(t0.Add(4*time.Second), 1)
	assert.Empty(t, sets, "a beat that only extends calls nothing")

	a.Group = "g2"
	require.NoError(t, b.Beat(ctx, a, 3*time.Second))
	assert.Equal(t, []backend.Member{a}, next("the group change"))

	clock.WaitTimers(t0.Add(6*time.Second), 1)
	clock.Set(t0.Add(6*time.Second - time.Nanosecond))
	assert.Empty(t, sets, "live until its ttl has passed")
	clock.Set(t0.Add(6 * time.Second))
	assert.Empty(t, next("the expiry"), "gone once its ttl has passed")

	require.NoError(t, b.Leave(ctx, "a"), "leaving after expiry")
	require.NoError(t, b.Beat(ctx, backend.Member{Instance: "b"}, time.Hour))
	assert.Equal(t, []backend.Member{{Instance: "b"}}, next("b"))
	require.NoError(t, b.Leave(ctx, "b"))
	assert.Empty(t, next("b left"))
	require.NoError(t, b.Leave(ctx, "b"), "leaving twice")
	assert.Empty(t, sets, "leaving an instance not stored changes nothing")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the watch did not end with its context")
	}
}
