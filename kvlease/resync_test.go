package kvlease_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// After a server restart the entry watch says Resync and reads the entries again
// at once (then Synced), and follows the changes made right after the restart
// within a second or two (nats.go's ordered consumer alone noticed its loss only
// at its 10 s activity check).
func TestWatchEntriesResyncsAfterRestart(t *testing.T) {
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
	job := "resync"
	entry := func(id string) backend.Entry {
		return backend.Entry{Job: job, ID: id, EntrySpec: backend.EntrySpec{Every: time.Minute}}
	}
	_, err = writer.CreateEntry(t.Context(), entry("a"))
	require.NoError(t, err)

	events := make(chan backend.EntryChange, 64)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- watcher.WatchEntries(ctx, func(c backend.EntryChange) { events <- c }) }()
	t.Cleanup(func() { cancel(); <-done })
	next := func(within time.Duration) backend.EntryChange {
		t.Helper()
		select {
		case c := <-events:
			return c
		case <-time.After(within):
			require.FailNow(t, "no event", "within %v", within)
		}
		return backend.EntryChange{}
	}
	assert.Equal(t, "a", next(5*time.Second).Entry.ID)
	assert.True(t, next(5*time.Second).Synced)

	srv.Shutdown()
	srv = start(dir, u.Host)
	t.Cleanup(srv.Shutdown)
	require.Eventually(t, func() bool {
		return writer.DeleteEntry(t.Context(), job, "a", 0) == nil
	}, 10*time.Second, 20*time.Millisecond)
	_, err = writer.CreateEntry(t.Context(), entry("b"))
	require.NoError(t, err)

	got := map[string]bool{}
	resync := false
	for !got["removed a"] || !got["b"] || !got["synced"] {
		c := next(3 * time.Second)
		switch {
		case c.Resync:
			resync = true
		case c.Synced:
			got["synced"] = true
		case c.Removed:
			got["removed "+c.Entry.ID] = true
		default:
			got[c.Entry.ID] = true
		}
	}
	assert.True(t, resync, "the view may have been stale: said before Synced")
	assert.True(t, got["synced"], "the entries were read again: %v", got)
}
