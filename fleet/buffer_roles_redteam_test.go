package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

func redteamToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// replicaStore is a kvlease store on a connection of the replica role.
func replicaStore(t *testing.T, dial func() *kvlease.Store) *kvlease.Store {
	t.Helper()
	s := dial()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Init(ctx))
	return s
}

// Every step of the buffer policies on kvlease, done by two stores connected
// as the replica role (fleet.Permissions with kvlease.Permissions): a buffered
// claim, a repeat, a claim at the cap, Active, a watch, a withdrawal, a stored
// retry that holds the buffer, an adoption (takeover-only claim) of a buffered
// slot and its run. The replica is refused nothing. The viewer and the operator
// can neither write nor purge the job's buffer key, nor read it.
func TestRedteamBufferUnderRoles(t *testing.T) {
	s := startAuthServer(t, false)
	v := newViolations()
	dial := func() *kvlease.Store {
		nc := natstest.Dial(t, dialAs(s, fleet.RoleReplica, v))
		st, err := kvlease.New(natstest.JetStream(t, nc))
		require.NoError(t, err)
		t.Cleanup(st.Close)
		return st
	}
	a, b := replicaStore(t, dial), replicaStore(t, dial)
	ctx := t.Context()
	job := "buffer-roles"
	base := time.Now().Truncate(time.Minute).Add(time.Hour)
	claim := func(k int, p backend.OverlapPolicy) backend.RunClaim {
		return backend.RunClaim{
			Job: job, Slot: base.Add(time.Duration(k) * time.Minute).UTC(), Token: redteamToken(), Instance: "i" + redteamToken()[:4],
			Lease: time.Minute, Deadline: time.Now().Add(time.Hour), Keep: time.Hour, Overlap: p,
		}
	}
	must := func(st *kvlease.Store, in backend.RunClaim, want backend.ClaimOutcome) backend.ClaimResult {
		t.Helper()
		res, err := st.Claim(ctx, in)
		require.NoError(t, err)
		require.Equal(t, want, res.Outcome, "%+v", res)
		return res
	}
	one := backend.OverlapBufferOne

	first := claim(1, one)
	must(a, first, backend.OutcomeWon)
	second := claim(2, one)
	must(b, second, backend.OutcomeBuffered)
	must(b, second, backend.OutcomeBuffered) // a repeat
	must(a, claim(3, one), backend.OutcomeOverlap)
	active, err := b.Active(ctx, job)
	require.NoError(t, err)
	require.Len(t, active, 2)
	assert.True(t, active[1].Buffered)
	watch, err := b.WatchRun(ctx, job, second.Slot)
	require.NoError(t, err)

	// The viewer and the operator: the buffer key is out of reach.
	key := "$KV." + kvlease.DefaultBucket + ".buffer." + base64.RawURLEncoding.EncodeToString([]byte(job))
	for _, role := range []fleet.Role{fleet.RoleViewer, fleet.RoleOperator} {
		rv := newViolations()
		nc := natstest.Dial(t, dialAs(s, role, rv))
		require.NoError(t, nc.Publish(key, []byte(`{"v":1}`)))
		rv.refused(t, "Publish", key)
		purge := nats.NewMsg(key)
		purge.Header.Set("KV-Operation", "PURGE")
		purge.Header.Set("Nats-Rollup", "sub")
		require.NoError(t, nc.PublishMsg(purge))
		rv.refused(t, "Publish", key)
		get := "$JS.API.DIRECT.GET.KV_" + kvlease.DefaultBucket + "." + key
		_, err := nc.Request(get, nil, 150*time.Millisecond)
		require.Error(t, err)
		rv.refused(t, "Publish", get)
	}
	must(b, second, backend.OutcomeBuffered) // unchanged

	// The run ends; the buffered slot is taken by a takeover-only claim (an
	// adoption), which fires the watch.
	require.NoError(t, a.Finish(ctx, first.Key(), backend.StatusOK))
	adopt := second
	adopt.Token, adopt.TakeoverOnly = redteamToken(), true
	must(a, adopt, backend.OutcomeWon)
	select {
	case <-watch:
	case <-time.After(5 * time.Second):
		require.Fail(t, "the watch of the buffered slot fires once it is claimed")
	}
	// Its attempt fails and stores a retry: the retry holds the job.
	require.NoError(t, a.Retry(ctx, adopt.Key(), time.Hour, time.Hour))
	fourth := claim(4, one)
	must(b, fourth, backend.OutcomeBuffered)
	// Withdrawn by its token.
	require.NoError(t, b.Finish(ctx, fourth.Key(), backend.StatusCancelled))
	res := must(a, claim(4, one), backend.OutcomeDone)
	assert.Equal(t, backend.StatusCancelled, res.Status)

	assert.Empty(t, v.all(), "the replica is refused nothing on the buffer path")
}
