package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
)

// startAccountsServer starts a nats-server whose replicas are in account REPL
// and whose operators are in account OPS, which imports the fleet's entry
// subjects with share: true: the server then tells the replica which OPS user
// sent each request. It fails, never skips, when it cannot start.
func startAccountsServer(t *testing.T) *server.Server {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf(`
listen: "127.0.0.1:-1"
jetstream: {store_dir: %q}
accounts: {
  REPL: {
    jetstream: enabled
    users: [{user: replica, password: replica}, {user: insider, password: insider}]
    exports: [{service: "anarchon.ENTRIES.>", response_type: stream}]
  }
  OPS: {
    users: [{user: ops-1, password: ops}]
    imports: [{service: {account: REPL, subject: "anarchon.ENTRIES.>"}, share: true}]
  }
}
`, filepath.Join(dir, "js"))
	path := filepath.Join(dir, "server.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "the nats-server with accounts must start")
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func dialUser(s *server.Server, user, password string) func(...nats.Option) (*nats.Conn, error) {
	return func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(s.ClientURL(), append([]nats.Option{nats.UserInfo(user, password)}, opts...)...)
	}
}

// A replica served WithRequestInfo stores with an entry the NATS user the server
// named for a request that came through the OPS account's import, whatever that
// user wrote in the header itself; one served without it trusts no header, and
// a request from inside the replicas' account names no user.
func TestRequestInfoNamesTheUserAcrossAccounts(t *testing.T) {
	s := startAccountsServer(t)
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds, instances: []string{"A"},
		dial: dialUser(s, "replica", "replica"), serve: []fleet.Option{fleet.WithRequestInfo()}})
	ctx := requestCtx(t)
	ops, err := fleet.NewClient(natstest.Dial(t, dialUser(s, "ops-1", "ops")))
	require.NoError(t, err)

	added, err := ops.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "acme", By: "ana", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.NoError(t, err, "a request through the import is answered on the server's reply subject")
	assert.Equal(t, "ana", added.Entry.By)
	assert.Equal(t, "ops-1 (account OPS)", added.Entry.User)
	got, err := f.client.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "acme"})
	require.NoError(t, err)
	assert.Equal(t, "ops-1 (account OPS)", got.Entry.User, "stored with the entry")

	// An OPS user that writes the header itself: the server replaces it.
	forged, err := json.Marshal(map[string]string{"acc": "REPL", "user": "admin"})
	require.NoError(t, err)
	liar, err := fleet.NewClient(natstest.Dial(t, dialUser(s, "ops-1", "ops")),
		fleet.WithRequestHeaders(func(_ context.Context, h nats.Header) { h.Set(fleet.RequestInfoHeader, string(forged)) }))
	require.NoError(t, err)
	up, err := liar.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "acme", Rev: added.Entry.Revision, EntrySpec: fleet.EntrySpec{Every: "2h"}})
	require.NoError(t, err)
	assert.Equal(t, "ops-1 (account OPS)", up.Entry.User, "the server's word, not the sender's")

	// Inside the replicas' account the server sets no header: a request names no
	// user. (One that writes its own is believed: hence the option's warning.)
	insider, err := fleet.NewClient(natstest.Dial(t, dialUser(s, "insider", "insider")))
	require.NoError(t, err)
	in, err := insider.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "acme", Rev: up.Entry.Revision, EntrySpec: fleet.EntrySpec{Every: "3h"}})
	require.NoError(t, err)
	assert.Empty(t, in.Entry.User)
}

// Without WithRequestInfo a replica trusts no header, and answers no request
// that came through an import (its reply subject is no inbox): nothing is
// stored for it.
func TestRequestInfoIgnoredWithoutTheOption(t *testing.T) {
	s := startAccountsServer(t)
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds, instances: []string{"A"}, dial: dialUser(s, "replica", "replica")})
	ctx := requestCtx(t)
	forged, err := json.Marshal(map[string]string{"acc": "OPS", "user": "admin"})
	require.NoError(t, err)
	liar, err := fleet.NewClient(natstest.Dial(t, dialUser(s, "insider", "insider")),
		fleet.WithRequestHeaders(func(_ context.Context, h nats.Header) { h.Set(fleet.RequestInfoHeader, string(forged)) }))
	require.NoError(t, err)
	added, err := liar.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "acme", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.NoError(t, err)
	assert.Empty(t, added.Entry.User, "a header a client wrote is not believed")

	ops, err := fleet.NewClient(natstest.Dial(t, dialUser(s, "ops-1", "ops")))
	require.NoError(t, err)
	_, err = ops.AddEntry(short(t), jobFeeds, fleet.AddEntryRequest{ID: "from-ops", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.Error(t, err, "not answered")
	_, err = f.client.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "from-ops"})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound, "and not stored")
}
