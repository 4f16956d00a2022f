package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/fleet"
)

// startAuthServer starts a nats-server from a configuration file whose users'
// permissions are what `anarchon permissions ROLE` prints, one user per role (the
// user name and password are the role), as an operator of the fleet would write
// it. It returns the URL without credentials. It fails, never skips, when the
// server cannot start.
func startAuthServer(t *testing.T) string {
	t.Helper()
	var users []string
	for _, role := range fleet.Roles {
		r := anarchon(t, "permissions", string(role))
		require.Equal(t, exitOK, r.code, r.stderr)
		users = append(users, fmt.Sprintf("{user: %s, password: %s\n%s}", role, role, r.stdout))
	}
	dir := t.TempDir()
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\nserver_name: anarchon-auth\njetstream: {store_dir: %q}\nauthorization: {users: [\n%s\n]}\n",
		filepath.Join(dir, "js"), strings.Join(users, ",\n"))
	path := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err, "the printed permissions are a valid configuration:\n%s", conf)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second), "the nats-server with users must start")
	return s.ClientURL()
}

func withUser(url, user, password string) string {
	return strings.Replace(url, "nats://", "nats://"+user+":"+password+"@", 1)
}

func TestPermissionsCommand(t *testing.T) {
	r := anarchon(t, "permissions", "viewer")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, `# anarchon viewer: connect with the inbox prefix _INBOX_viewer
permissions: {
  publish: { allow: ["anarchon.JOBS", "anarchon.HISTORY.*", "anarchon.ACTIVE.*", "anarchon.PREVIEW.*", "anarchon.WHY.*", "anarchon.ENTRIES.*.LIST", "anarchon.ENTRIES.*.GET", "anarchon.CALENDARS.LIST", "anarchon.CALENDARS.GET", "$JS.API.DIRECT.GET.KV_anarchon_registry"] }
  subscribe: { allow: ["_INBOX_viewer.>", "anarchon.EVENTS.*"] }
}
`, r.stdout)

	r = anarchon(t, "--json", "--prefix", "ops.billing", "--inbox-prefix", "_INBOX_ana", "permissions", "operator")
	require.Equal(t, exitOK, r.code, r.stderr)
	var p fleet.RolePermissions
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	want, err := fleet.Permissions(fleet.RoleOperator, fleet.PermissionsConfig{Prefix: "ops.billing", InboxPrefix: "_INBOX_ana"})
	require.NoError(t, err)
	assert.Equal(t, want, p)
	assert.Contains(t, r.stdout, `"_INBOX_ana.>"`, "no HTML escapes in subjects")

	r = anarchon(t, "permissions", "replica", "--lease-bucket", "leases", "--subject-prefix", "jobs.prod")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"$KV.leases.>"`)
	assert.Contains(t, r.stdout, `"jobs.prod.*.result"`)
	assert.Contains(t, r.stdout, `allow_responses: { max: -1, expires: "1h0m0s" }`)

	for _, args := range [][]string{
		{"permissions"}, {"permissions", "admin"}, {"permissions", "viewer", "operator"},
		{"permissions", "replica", "--lease-bucket", "a.b"}, {"--inbox-prefix", "_INBOX.>", "permissions", "viewer"},
		{"--inbox-prefix", "replies.ana", "permissions", "viewer"}, {"--inbox-prefix", "replies.ana", "jobs"},
	} {
		r := anarchon(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
}

// TestRolesThroughTheCommand: on a server configured from `anarchon permissions`,
// the command used as a viewer reads and is refused every change at once, as an
// operator changes, and each with its own inbox prefix (the default _INBOX is
// refused to both).
func TestRolesThroughTheCommand(t *testing.T) {
	url := startAuthServer(t)
	f := &testFleet{url: url, backend: memory.New()}
	f.startReplicas(t, func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(url, append(opts, nats.UserInfo("replica", "replica"), nats.CustomInboxPrefix(fleet.InboxPrefix(fleet.RoleReplica)))...)
	}, nil)
	viewer := []string{"--server", withUser(url, "viewer", "viewer"), "--inbox-prefix", fleet.InboxPrefix(fleet.RoleViewer)}
	operator := []string{"--server", withUser(url, "operator", "operator"), "--inbox-prefix", fleet.InboxPrefix(fleet.RoleOperator)}

	r := anarchon(t, append(viewer, "jobs", "--window", "200ms")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "report")
	assert.Empty(t, r.stderr, "every registered replica answered")
	r = anarchon(t, append(viewer, "history", "report")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = anarchon(t, append(viewer, "active", "report")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	wctx, wcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	var wout, werr strings.Builder
	assert.Equal(t, exitOK, run(wctx, append(viewer, "watch"), os.Getenv, &wout, &werr), "a viewer may watch: %s", werr.String())
	wcancel()

	for _, args := range [][]string{
		{"pause", "report", "--reason", "viewer tries"},
		{"pause", "--all", "--reason", "viewer tries"},
		{"resume", "report"},
		{"trigger", "report", "--wait"},
	} {
		r := anarchon(t, append(append(viewer, "--timeout", "10s"), args...)...)
		oneErrorLine(t, r, "(permissions violation): this user's role may not do it (anarchon permissions operator prints an operator's permissions)")
		assert.Regexp(t, `: the server refused this user (sending the (pause|resume|trigger) request of job "report"|publishing to "anarchon.PAUSEALL")`, r.stderr)
		assert.NotContains(t, r.stderr, fleet.JobToken("report"), "the job, not its token")
		assert.Less(t, r.took, 5*time.Second, "refused at once, not at the timeout")
		assert.NotContains(t, r.stderr, ":viewer@", "no password in the message")
	}
	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pauses, "nothing stored")
	assert.Zero(t, f.manual.Load(), "nothing ran")

	// Without its inbox prefix, a role cannot even read its replies.
	r = anarchon(t, "--server", withUser(url, "viewer", "viewer"), "--timeout", "10s", "history", "report")
	oneErrorLine(t, r, `the server refused this user a subscription to "_INBOX.`)
	assert.Contains(t, r.stderr, "connect with the inbox prefix its permissions allow")

	r = anarchon(t, append(operator, "pause", "report", "--reason", "operator")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Eventually(t, func() bool { all, _ := f.paused("report"); return all }, 5*time.Second, 5*time.Millisecond)
	r = anarchon(t, append(operator, "trigger", "report", "--wait")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.EqualValues(t, 1, f.manual.Load())

	r = anarchon(t, "--server", withUser(url, "viewer", "wrong"), "jobs")
	oneErrorLine(t, r, "connect to nats://viewer:xxx@")
}

// TestEntryRolesThroughTheCommand: on a server configured from `anarchon
// permissions`, a viewer is refused triggering and backfilling an entry at
// once, and nothing runs; an operator does both.
func TestEntryRolesThroughTheCommand(t *testing.T) {
	url := startAuthServer(t)
	f := &testFleet{url: url, backend: memory.New()}
	f.startReplicas(t, func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(url, append(opts, nats.UserInfo("replica", "replica"), nats.CustomInboxPrefix(fleet.InboxPrefix(fleet.RoleReplica)))...)
	}, func(string) []fleetJob { return []fleetJob{{"feeds", 0}} })
	viewer := []string{"--server", withUser(url, "viewer", "viewer"), "--inbox-prefix", fleet.InboxPrefix(fleet.RoleViewer), "--timeout", "10s"}
	operator := []string{"--server", withUser(url, "operator", "operator"), "--inbox-prefix", fleet.InboxPrefix(fleet.RoleOperator)}
	r := anarchon(t, append(operator, "schedule", "add", "feeds", "acme", "--every", "1h", "--start", "+1h", "--by", "ana")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	f.followed(t, 1)
	for _, args := range [][]string{
		{"trigger", "feeds", "--entry", "acme", "--wait"},
		{"backfill", "feeds", "--entry", "acme", "--from", "-1h", "--to", "-1s"},
		{"backfill", "feeds", "--all-entries", "--from", "-1h", "--to", "-1s"},
	} {
		r := anarchon(t, append(viewer, args...)...)
		oneErrorLine(t, r, "(permissions violation): this user's role may not do it")
		assert.NotContains(t, r.stderr, fleet.JobToken("feeds"), "the job, not its token")
		assert.Less(t, r.took, 5*time.Second, "refused at once, not at the timeout")
	}
	assert.Zero(t, f.manual.Load(), "nothing ran")
	r = anarchon(t, append(operator, "trigger", "feeds", "--entry", "acme", "--wait")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.EqualValues(t, 1, f.manual.Load())
	r = anarchon(t, append(operator, "backfill", "feeds", "--all-entries", "--from", "-1h", "--to", "-1s")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, `no slot of the entries of "feeds" falls in [`), r.stdout)
}
