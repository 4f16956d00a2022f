package fleet_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// A replica under its role's permissions on a real server beats, watches and
// leaves the members of Config.Turns, refused nothing; a viewer cannot beat.
func TestMembersUnderTheReplicaRole(t *testing.T) {
	s := startAuthServer(t, false)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	storeAs := func(role fleet.Role, v *violations) *kvlease.Store {
		st, err := kvlease.New(natstest.JetStream(t, natstest.Dial(t, dialAs(s, role, v))))
		require.NoError(t, err)
		t.Cleanup(st.Close)
		return st
	}
	replica := newViolations()
	st := storeAs(fleet.RoleReplica, replica)
	require.NoError(t, st.Init(ctx))

	seen := make(chan []backend.Member, 16)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = st.WatchMembers(wctx, func(m []backend.Member) { seen <- m }) }()
	require.NoError(t, st.Beat(ctx, backend.Member{Instance: "a.b >", Group: "g"}, backend.MinMemberTTL*3))
	waitMembers := func(want func([]backend.Member) bool) {
		t.Helper()
		for {
			select {
			case m := <-seen:
				if want(m) {
					return
				}
			case <-ctx.Done():
				t.Fatal("the watch never saw the change")
			}
		}
	}
	has := func(m []backend.Member) bool {
		return slices.ContainsFunc(m, func(x backend.Member) bool { return x.Instance == "a.b >" })
	}
	waitMembers(has)
	require.NoError(t, st.Leave(ctx, "a.b >"))
	waitMembers(func(m []backend.Member) bool { return !has(m) })
	assert.Empty(t, replica.all(), "the replica role is refused nothing")

	viewer := storeAs(fleet.RoleViewer, newViolations())
	vctx, vcancel := context.WithTimeout(ctx, 3*time.Second)
	defer vcancel()
	assert.Error(t, viewer.Beat(vctx, backend.Member{Instance: "intruder"}, backend.MinMemberTTL), "a viewer cannot beat")
}
