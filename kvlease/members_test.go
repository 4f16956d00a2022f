package kvlease_test

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// memberSets runs s.WatchMembers until the test ends and returns the sets it
// delivers, and its end.
func memberSets(t *testing.T, s *kvlease.Store) (<-chan []backend.Member, <-chan error) {
	sets := make(chan []backend.Member, 256)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- s.WatchMembers(ctx, func(all []backend.Member) { sets <- all }) }()
	t.Cleanup(cancel)
	return sets, done
}

// awaitMembers reads sets until one holds exactly want's instances.
func awaitMembers(t *testing.T, sets <-chan []backend.Member, done <-chan error, want ...string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	var last []string
	for {
		select {
		case all := <-sets:
			last = []string{}
			for _, m := range all {
				last = append(last, m.Instance)
			}
			if slices.Equal(last, want) {
				return
			}
		case err := <-done:
			require.FailNow(t, "the watch ended", "%v", err)
		case <-deadline.C:
			require.FailNow(t, "the watch never showed the members", "want %v, last %v", want, last)
		}
	}
}

// A beat that only extends a member calls nothing; a group change does.
func TestMemberBeatThatExtendsCallsNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket("members_extend"))
	t.Cleanup(func() {
		for _, inst := range []string{"a", "b"} {
			assert.NoError(t, s.Leave(context.Background(), inst))
		}
	})
	sets, done := memberSets(t, s)
	awaitMembers(t, sets, done)
	a := backend.Member{Instance: "a", Group: "g"}
	require.NoError(t, s.Beat(t.Context(), a, time.Minute))
	awaitMembers(t, sets, done, "a")
	for range 5 {
		require.NoError(t, s.Beat(t.Context(), a, time.Minute))
	}
	require.NoError(t, s.Beat(t.Context(), backend.Member{Instance: "b"}, time.Minute))
	awaitMembers(t, sets, done, "a", "b")
	assert.Empty(t, sets, "no set between a's first beat and b's")
	a.Group = "h"
	require.NoError(t, s.Beat(t.Context(), a, time.Minute))
	select {
	case all := <-sets:
		assert.Equal(t, []backend.Member{a, {Instance: "b"}}, all)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no set for the group change")
	}
}

// The server expires a member key by its TTL and leaves a marker that a KV
// watch delivers as a purge (Nats-Marker-Reason MaxAge); the store's watch
// removes the member on it.
func TestMemberExpiresByAServerMarker(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket("members_marker"))
	kv, err := js.KeyValue(t.Context(), "members_marker")
	require.NoError(t, err)
	w, err := kv.WatchFiltered(t.Context(), []string{"member.*"}, jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()

	start := time.Now()
	require.NoError(t, s.Beat(t.Context(), backend.Member{Instance: "short"}, backend.MinMemberTTL))
	var ops []jetstream.KeyValueOp
	timeout := time.After(10 * time.Second)
	for len(ops) < 2 {
		select {
		case e := <-w.Updates():
			if e != nil {
				ops = append(ops, e.Operation())
			}
		case <-timeout:
			require.FailNow(t, "no expiry marker", "ops %v", ops)
		}
	}
	t.Logf("the expiry marker came %v after the beat", time.Since(start))
	assert.Equal(t, []jetstream.KeyValueOp{jetstream.KeyValuePut, jetstream.KeyValuePurge}, ops)
	assert.GreaterOrEqual(t, time.Since(start), backend.MinMemberTTL)
}

// A closed store's watch returns ErrClosed, running or started after.
func TestWatchMembersClosed(t *testing.T) {
	t.Parallel()
	s, err := kvlease.New(singleJS(t), kvlease.WithBucket("members_closed"))
	require.NoError(t, err)
	require.NoError(t, s.Init(t.Context()))
	sets, done := memberSets(t, s)
	awaitMembers(t, sets, done)
	s.Close()
	select {
	case err := <-done:
		require.ErrorIs(t, err, kvlease.ErrClosed)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the watch did not end when the store closed")
	}
	require.ErrorIs(t, s.WatchMembers(t.Context(), func([]backend.Member) {}), kvlease.ErrClosed)
}

// After a server restart the member watch watches again and delivers the
// members as they are now, a Leave missed while it was down included.
func TestWatchMembersAfterRestart(t *testing.T) {
	t.Parallel()
	start := func(dir, listen string) *embedded.Server {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		srv, err := embedded.Start(ctx, embedded.Options{StoreDir: dir, Listen: listen})
		require.NoError(t, err)
		return srv
	}
	dir := t.TempDir()
	srv := start(dir, "127.0.0.1:0")
	u, err := url.Parse(srv.ClientURL())
	require.NoError(t, err)
	dial := func() *kvlease.Store {
		nc := natstest.Dial(t, func(o ...nats.Option) (*nats.Conn, error) {
			return nats.Connect(srv.ClientURL(), append(o, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))...)
		})
		return newStore(t, natstest.JetStream(t, nc))
	}
	watcher, writer := dial(), dial()
	require.NoError(t, writer.Beat(t.Context(), backend.Member{Instance: "a"}, time.Hour))
	sets, done := memberSets(t, watcher)
	awaitMembers(t, sets, done, "a")

	srv.Shutdown()
	srv = start(dir, u.Host)
	t.Cleanup(srv.Shutdown)
	require.Eventually(t, func() bool {
		return writer.Leave(t.Context(), "a") == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, writer.Beat(t.Context(), backend.Member{Instance: "b"}, time.Hour))
	awaitMembers(t, sets, done, "b")
}
