// Package natstest starts embedded nats-servers and connects to them for the
// repository's tests: each function fails the test (it never skips) when the
// server cannot start or the connection cannot be made, and undoes what it did
// when the test ends. Only tests import it.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
)

const (
	// ServerStart bounds Server (embedded.Options.ReadyTimeout, 10s by default,
	// bounds it too).
	ServerStart = 30 * time.Second
	// ClusterStart bounds Cluster (embedded.ClusterOptions.ReadyTimeout, 30s by
	// default, bounds it too).
	ClusterStart = 60 * time.Second
)

// Server starts an embedded nats-server with opts (JetStream unless
// opts.DisableJetStream), within ServerStart, and shuts it down when the test
// ends. A test may shut it down earlier: Shutdown is safe to call twice.
func Server(t testing.TB, opts embedded.Options) *embedded.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ServerStart)
	defer cancel()
	s, err := embedded.Start(ctx, opts)
	require.NoError(t, err, "the embedded nats-server must start")
	t.Cleanup(s.Shutdown)
	return s
}

// Cluster starts an embedded cluster with opts (3 nodes when opts.Nodes is zero),
// within ClusterStart, and shuts it down when the test ends.
func Cluster(t testing.TB, opts embedded.ClusterOptions) *embedded.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ClusterStart)
	defer cancel()
	c, err := embedded.StartCluster(ctx, opts)
	require.NoError(t, err, "the embedded cluster must start")
	t.Cleanup(c.Shutdown)
	return c
}

// Conn opens an in-process connection to s with opts, closed when the test ends.
func Conn(t testing.TB, s *embedded.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return Dial(t, s.Connect, opts...)
}

// Dial connects with dial and opts, and closes the connection when the test ends.
// dial is a Server's or a Cluster's Connect, or a test's own (with a user, an
// inbox prefix, a server of its own).
func Dial(t testing.TB, dial func(...nats.Option) (*nats.Conn, error), opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := dial(opts...)
	require.NoError(t, err, "connect")
	t.Cleanup(nc.Close)
	return nc
}

// URL connects to url (nats.Connect: one URL, or several separated by commas)
// with opts, and closes the connection when the test ends.
func URL(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err, "connect to %s", url)
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on nc.
func JetStream(t testing.TB, nc *nats.Conn) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(nc)
	require.NoError(t, err, "JetStream")
	return js
}
