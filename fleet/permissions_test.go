package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
)

// viewerPermissions is the viewer role as fleet/doc.go and the README document it:
// reads (jobs, history, active, events, micro's $SRV subjects, the registry) and
// nothing else.
var viewerPermissions = &server.Permissions{
	Publish: &server.SubjectPermission{Allow: append([]string{"anarchon.JOBS", "anarchon.HISTORY.*", "anarchon.ACTIVE.*", "$SRV.>", "_INBOX.>"},
		registryReader...)},
	Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "anarchon.EVENTS.*"}},
}

// registryReader is what reading the registry (Client.Registry) publishes: batched
// direct gets of the bucket's stream.
var registryReader = []string{"$JS.API.DIRECT.GET.KV_anarchon_registry"}

// startAuthServer starts a nats-server with two users: viewer (viewerPermissions)
// and operator (everything). embedded.Options has no users or accounts, so this
// test starts nats-server itself; it fails, never skips, when it cannot.
func startAuthServer(t testing.TB, listen bool) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "fleet-auth", Host: "127.0.0.1", Port: -1, DontListen: !listen, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "viewer", Password: "v", Permissions: viewerPermissions},
			{Username: "operator", Password: "o"},
		},
	}
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "the nats-server with users must start")
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func dialAs(s *server.Server, user, password string) func(...nats.Option) (*nats.Conn, error) {
	return func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect("", append([]nats.Option{nats.InProcessServer(s), nats.UserInfo(user, password)}, opts...)...)
	}
}

func TestViewerCannotPause(t *testing.T) {
	s := startAuthServer(t, false)
	f := startFleet(t, fleetSetup{dial: dialAs(s, "operator", "o")})

	violations := make(chan error, 10)
	viewer := connect(t, dialAs(s, "viewer", "v"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		violations <- err
	}))
	c, err := fleet.NewClient(viewer)
	require.NoError(t, err)
	refused := func() context.Context { // a refused request is never answered
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	ctx := requestCtx(t)

	// Reading works.
	fl, err := c.Jobs(ctx)
	require.NoError(t, err)
	assert.Len(t, fl.Replicas, 3)
	assert.Len(t, fl.Registered, 3, "the viewer reads the registry")
	assert.Empty(t, fl.Warnings)
	_, err = c.History(ctx, jobReport, 5)
	require.NoError(t, err)

	// Changing is refused by the server: the request never reaches a replica.
	_, err = c.Pause(refused(), jobReport, fleet.PauseRequest{Reason: "viewer tries", By: "eve"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	select {
	case v := <-violations:
		assert.ErrorIs(t, v, nats.ErrPermissionViolation)
		assert.Contains(t, v.Error(), "anarchon.PAUSE."+fleet.JobToken(jobReport))
	case <-time.After(5 * time.Second):
		t.Fatal("no permissions violation reported")
	}
	_, err = c.PauseAll(refused(), fleet.PauseRequest{Reason: "viewer tries"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = c.Trigger(refused(), jobReport, fleet.TriggerRequest{Wait: true})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = c.Resume(refused(), jobReport, fleet.ResumeRequest{})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pauses, "nothing stored")
	for _, r := range f.replicas {
		_, ok := r.s.Paused(jobReport)
		assert.False(t, ok, r.s.Instance())
	}
	assert.Zero(t, f.manualRuns(), "nothing ran")

	// The operator may.
	op, err := fleet.NewClient(f.nc)
	require.NoError(t, err)
	_, err = op.Pause(ctx, jobReport, fleet.PauseRequest{Reason: "operator", By: "ana"})
	require.NoError(t, err)
}
