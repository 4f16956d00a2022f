package kvlease_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
)

// The package's tests share one single server and one 3-node cluster, started on
// first use. A server that cannot start fails the test that needed it.
var (
	singleOnce sync.Once
	single     *embedded.Server
	singleErr  error

	clusterOnce sync.Once
	cluster     *embedded.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if single != nil {
		single.Shutdown()
	}
	if cluster != nil {
		cluster.Shutdown()
	}
	os.Exit(code)
}

func singleServer(tb testing.TB) *embedded.Server {
	tb.Helper()
	singleOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		single, singleErr = embedded.Start(ctx, embedded.Options{})
	})
	require.NoError(tb, singleErr, "start the embedded server")
	return single
}

func testCluster(tb testing.TB) *embedded.Cluster {
	tb.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cluster, clusterErr = embedded.StartCluster(ctx, embedded.ClusterOptions{})
	})
	require.NoError(tb, clusterErr, "start the embedded 3-node cluster")
	return cluster
}

// singleJS returns a JetStream on a new connection to the shared server, closed
// when the test ends.
func singleJS(tb testing.TB) jetstream.JetStream {
	return natstest.JetStream(tb, natstest.Conn(tb, singleServer(tb)))
}

// clusterJS returns a JetStream on a new connection to the shared cluster, closed
// when the test ends.
func clusterJS(tb testing.TB) jetstream.JetStream {
	return natstest.JetStream(tb, natstest.Dial(tb, testCluster(tb).Connect))
}

// newStore returns an initialized store, closed when the test ends.
func newStore(tb testing.TB, js jetstream.JetStream, opts ...kvlease.Option) *kvlease.Store {
	tb.Helper()
	s, err := kvlease.New(js, opts...)
	require.NoError(tb, err, "New")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(tb, s.Init(ctx), "Init")
	tb.Cleanup(s.Close)
	return s
}
