package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// startAuthServer starts a nats-server on loopback with a viewer, who may publish on
// the fleet's read subjects only, and an operator, who may do anything. It returns
// the URL without credentials. embedded.Options has no users or accounts, so the
// test starts nats-server itself; it fails, never skips, when it cannot.
func startAuthServer(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName: "anarchon-auth", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "viewer", Password: "v", Permissions: &server.Permissions{
				// The viewer role as fleet/doc.go documents it.
				Publish: &server.SubjectPermission{Allow: []string{"anarchon.JOBS", "anarchon.HISTORY.*", "anarchon.ACTIVE.*", "$SRV.>", "_INBOX.>",
					"$JS.API.DIRECT.GET.KV_anarchon_registry"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "anarchon.EVENTS.*"}},
			}},
			{Username: "operator", Password: "o"},
		},
	})
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second), "the nats-server with users must start")
	return s.ClientURL()
}

func withUser(url, user, password string) string {
	return strings.Replace(url, "nats://", "nats://"+user+":"+password+"@", 1)
}

func TestViewerIsRefused(t *testing.T) {
	url := startAuthServer(t)
	f := &testFleet{url: url, backend: scheduler.NewMemoryBackend()}
	f.startReplicas(t, func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(url, append(opts, nats.UserInfo("operator", "o"))...)
	}, nil)
	viewer := withUser(url, "viewer", "v")

	r := anarchon(t, "--server", viewer, "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "report")
	r = anarchon(t, "--server", viewer, "history", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = anarchon(t, "--server", viewer, "active", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	wctx, wcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	var wout, werr strings.Builder
	assert.Equal(t, exitOK, run(wctx, []string{"--server", viewer, "watch"}, &wout, &werr), "a viewer may watch: %s", werr.String())
	wcancel()

	for _, args := range [][]string{
		{"pause", "report", "--reason", "viewer tries"},
		{"pause", "--all", "--reason", "viewer tries"},
		{"resume", "report"},
		{"trigger", "report", "--wait"},
	} {
		r := anarchon(t, append([]string{"--server", viewer, "--timeout", "10s"}, args...)...)
		oneErrorLine(t, r, "permissions violation")
		assert.Contains(t, r.stderr, "Permissions Violation for Publish to")
		assert.Less(t, r.took, 5*time.Second, "refused at once, not at the timeout")
		assert.NotContains(t, r.stderr, ":v@", "no password in the message")
	}
	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pauses, "nothing stored")
	_, any := f.paused("report")
	assert.False(t, any)
	assert.Zero(t, f.manual.Load(), "nothing ran")

	r = anarchon(t, "--server", withUser(url, "operator", "o"), "pause", "report", "--reason", "operator")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Eventually(t, func() bool { all, _ := f.paused("report"); return all }, 5*time.Second, 5*time.Millisecond)

	r = anarchon(t, "--server", withUser(url, "viewer", "wrong"), "jobs")
	oneErrorLine(t, r, "connect to nats://viewer:xxx@")
}
