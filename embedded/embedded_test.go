package embedded

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anarchon/anarchon/scheduler"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts a server and fails the test if it cannot.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(testCtx(t), opts)
	require.NoError(t, err, "embedded server must start")
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, connect func(...nats.Option) (*nats.Conn, error), opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := connect(opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func TestStartInProcessWithJetStream(t *testing.T) {
	ctx := testCtx(t)
	s := startServer(t, Options{})

	assert.Empty(t, s.ClientURL(), "no TCP listener without Listen")
	assert.Nil(t, s.NATS().Addr(), "no TCP listener without Listen")
	assert.True(t, s.NATS().JetStreamEnabled())
	assert.Equal(t, DefaultServerName, s.NATS().Name())
	assert.DirExists(t, filepath.Join(s.StoreDir(), "jetstream"))

	js, err := jetstream.New(connect(t, s.Connect))
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		ack, err := js.Publish(ctx, "orders.new", []byte("o"+strconv.Itoa(i)))
		require.NoError(t, err)
		assert.Equal(t, uint64(i), ack.Sequence)
	}
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), info.State.Msgs)
	msg, err := stream.GetMsg(ctx, 2)
	require.NoError(t, err)
	assert.Equal(t, "o2", string(msg.Data))
}

func TestListenRandomPort(t *testing.T) {
	s := startServer(t, Options{Listen: "127.0.0.1:0"})

	u, err := url.Parse(s.ClientURL())
	require.NoError(t, err)
	assert.Equal(t, "nats", u.Scheme)
	assert.Equal(t, "127.0.0.1", u.Hostname())
	addr, ok := s.NATS().Addr().(*net.TCPAddr)
	require.True(t, ok)
	assert.Equal(t, strconv.Itoa(addr.Port), u.Port(), "ClientURL reports the real port")
	assert.NotEqual(t, "0", u.Port())

	nc := connect(t, func(o ...nats.Option) (*nats.Conn, error) { return nats.Connect(s.ClientURL(), o...) })
	assert.Equal(t, s.ClientURL(), nc.ConnectedUrl())
	sub, err := nc.SubscribeSync("ping")
	require.NoError(t, err)
	require.NoError(t, nc.Flush(), "the server has the subscription")
	// The in-process connection reaches the same server as the TCP one.
	inproc := connect(t, s.Connect)
	require.NoError(t, inproc.Publish("ping", []byte("pong")))
	msg, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "pong", string(msg.Data))
}

func TestListenUnspecifiedHostReportsLoopback(t *testing.T) {
	s := startServer(t, Options{Listen: ":0", DisableJetStream: true})
	u, err := url.Parse(s.ClientURL())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", u.Hostname())
	connect(t, func(o ...nats.Option) (*nats.Conn, error) { return nats.Connect(s.ClientURL(), o...) })
}

func TestShutdownRemovesTempStoreAndIsIdempotent(t *testing.T) {
	s, err := Start(testCtx(t), Options{})
	require.NoError(t, err)
	dir := s.StoreDir()
	require.DirExists(t, dir)
	nc := connect(t, s.Connect)

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(s.Shutdown)
	}
	wg.Wait()
	s.Shutdown()

	assert.NoDirExists(t, dir)
	assert.False(t, s.NATS().Running(), "server must be shut down")
	// The client notices the closed connection on its own read loop.
	assert.Eventually(t, func() bool { return !nc.IsConnected() }, 5*time.Second, 10*time.Millisecond,
		"clients are disconnected")
}

func TestExplicitStoreDirIsKeptAndReused(t *testing.T) {
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "nested", "store")

	s, err := Start(ctx, Options{StoreDir: dir, SyncAlways: true})
	require.NoError(t, err)
	assert.Equal(t, dir, s.StoreDir())
	js, err := jetstream.New(connect(t, s.Connect))
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "keep", []byte("x"))
	require.NoError(t, err)
	s.Shutdown()
	require.DirExists(t, dir, "an explicit StoreDir survives Shutdown")

	s2 := startServer(t, Options{StoreDir: dir})
	js2, err := jetstream.New(connect(t, s2.Connect))
	require.NoError(t, err)
	stream, err := js2.Stream(ctx, "KEEP")
	require.NoError(t, err, "the stream is recovered from the store")
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs)
}

func TestDisableJetStream(t *testing.T) {
	s := startServer(t, Options{DisableJetStream: true})
	assert.False(t, s.NATS().JetStreamEnabled())
	assert.Empty(t, s.StoreDir(), "no store without JetStream")

	js, err := jetstream.New(connect(t, s.Connect))
	require.NoError(t, err)
	_, err = js.AccountInfo(testCtx(t))
	assert.ErrorIs(t, err, jetstream.ErrJetStreamNotEnabled)
}

func TestBadStoreDirFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))

	begin := time.Now()
	s, err := Start(testCtx(t), Options{StoreDir: filepath.Join(file, "store")})
	require.Error(t, err)
	assert.Nil(t, s)
	assert.ErrorIs(t, err, syscall.ENOTDIR)
	assert.Contains(t, err.Error(), "StoreDir")
	assert.Less(t, time.Since(begin), 2*time.Second, "fails fast, no hang")
}

// TestJetStreamFatalReturnsError drives nats-server into its own fatal
// "Can't start JetStream" path, which with its standard logger would exit
// the process: the store dir exists but its "jetstream" folder is a file.
func TestJetStreamFatalReturnsError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "jetstream"), nil, 0o600))

	var logs syncBuffer
	begin := time.Now()
	s, err := Start(testCtx(t), Options{StoreDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.Error(t, err)
	assert.Nil(t, s)
	assert.ErrorIs(t, err, ErrStartFailed)
	assert.Contains(t, err.Error(), "Can't start JetStream")
	assert.Less(t, time.Since(begin), 2*time.Second, "fails fast, no hang")
	assert.Contains(t, logs.String(), "fatal=true")
}

func TestListenPortInUseFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()

	s, err := Start(testCtx(t), Options{Listen: l.Addr().String(), DisableJetStream: true})
	require.Error(t, err)
	assert.Nil(t, s)
	assert.ErrorIs(t, err, ErrStartFailed)
	assert.ErrorIs(t, err, syscall.EADDRINUSE)
}

func TestStartCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s, err := Start(ctx, Options{})
	require.Error(t, err)
	assert.Nil(t, s)
	assert.ErrorIs(t, err, ErrNotReady)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestInvalidOptions(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		field string
	}{
		{"negative ReadyTimeout", Options{ReadyTimeout: -time.Second}, "ReadyTimeout"},
		{"negative JetStreamMaxMemory", Options{JetStreamMaxMemory: -1}, "JetStreamMaxMemory"},
		{"negative JetStreamMaxStore", Options{JetStreamMaxStore: -1}, "JetStreamMaxStore"},
		{"negative SyncInterval", Options{SyncInterval: -time.Second}, "SyncInterval"},
		{"SyncInterval with SyncAlways", Options{SyncInterval: time.Second, SyncAlways: true}, "SyncAlways"},
		{"Listen without port", Options{Listen: "127.0.0.1"}, "Listen"},
		{"Listen with bad port", Options{Listen: "127.0.0.1:http"}, "Listen"},
		{"Listen with port out of range", Options{Listen: "127.0.0.1:70000"}, "Listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Start(testCtx(t), tt.opts)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.ErrorIs(t, err, ErrInvalidOption)
			assert.ErrorIs(t, err, ErrInvalidOptions, "the deprecated name still matches")
			assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "one sentinel for every package's invalid options")
			assert.Contains(t, err.Error(), "embedded: invalid option: ")
			assert.Contains(t, err.Error(), tt.field)
		})
	}

	for _, n := range []int{-1, 1} {
		c, err := StartCluster(testCtx(t), ClusterOptions{Nodes: n})
		require.Error(t, err)
		assert.Nil(t, c)
		assert.ErrorIs(t, err, ErrInvalidOption)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
		assert.Contains(t, err.Error(), "Nodes")
	}
}

func TestLoggerReceivesServerLogs(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := startServer(t, Options{Logger: log, ServerName: "logged"})
	assert.Equal(t, "logged", s.NATS().Name())
	assert.Contains(t, logs.String(), "Starting nats-server")
	assert.Contains(t, logs.String(), "Server is ready")
	assert.NotContains(t, logs.String(), "level=DEBUG", "debug off when the logger is not enabled for it")
}

func TestCluster(t *testing.T) {
	ctx := testCtx(t)
	var logs syncBuffer
	c, err := StartCluster(ctx, ClusterOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err, "cluster must start")
	t.Cleanup(c.Shutdown)

	nodes := c.Nodes()
	require.Len(t, nodes, DefaultClusterNodes)
	urls := c.ClientURLs()
	require.Len(t, urls, DefaultClusterNodes)
	for i, n := range nodes {
		assert.Equal(t, urls[i], n.ClientURL())
		assert.True(t, n.NATS().JetStreamIsClustered())
		assert.Equal(t, fmt.Sprintf("%s-%d", DefaultClusterName, i), n.NATS().Name())
	}
	assert.Contains(t, logs.String(), "node="+DefaultClusterName+"-0")
	_, err = c.Leader()
	require.NoError(t, err)

	nc := connect(t, c.Connect, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events"}, Replicas: 3})
	require.NoError(t, err)
	const perPhase = 5
	for range perPhase {
		_, err := js.Publish(ctx, "events", []byte("before"))
		require.NoError(t, err)
	}

	leader, err := c.StreamLeader("", "EVENTS")
	require.NoError(t, err)
	oldURL := urls[leader]
	require.NoError(t, c.StopNode(leader))
	require.NoError(t, c.StopNode(leader), "stopping a stopped node is a no-op")
	assert.Nil(t, c.Nodes()[leader])

	// A new stream leader is elected among the remaining nodes; publishing
	// works again once it is.
	require.Eventually(t, func() bool {
		i, err := c.StreamLeader("", "EVENTS")
		return err == nil && i != leader
	}, 15*time.Second, 20*time.Millisecond, "new stream leader")
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "events", []byte("during"))
		return err == nil
	}, 15*time.Second, 20*time.Millisecond, "publish after failover")
	for range perPhase - 1 {
		_, err := js.Publish(ctx, "events", []byte("during"))
		require.NoError(t, err)
	}
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	want := info.State.Msgs
	assert.Equal(t, uint64(2*perPhase), want)

	require.NoError(t, c.RestartNode(ctx, leader))
	restarted := c.Nodes()[leader]
	require.NotNil(t, restarted)
	assert.Equal(t, oldURL, restarted.ClientURL(), "restarted on the same client port")

	// The restarted node's own replica catches up.
	assert.Eventually(t, func() bool { return localMsgs(t, restarted.NATS(), "EVENTS") == want },
		10*time.Second, 20*time.Millisecond, "restarted replica catches up to %d messages", want)
	assert.True(t, restarted.NATS().JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, "EVENTS"))

	// A client of only the restarted node's URL works (same port).
	nc2 := connect(t, func(o ...nats.Option) (*nats.Conn, error) { return nats.Connect(oldURL, o...) })
	js2, err := jetstream.New(nc2)
	require.NoError(t, err)
	_, err = js2.Publish(ctx, "events", []byte("after"))
	require.NoError(t, err)

	// A restart whose port was taken meanwhile fails with the bind error
	// (nats-server would have exited the process) and can be retried.
	follower := (leader + 1) % len(nodes)
	require.NoError(t, c.StopNode(follower))
	taken, err := net.Listen("tcp", hostPort(t, urls[follower]))
	require.NoError(t, err)
	err = c.RestartNode(ctx, follower)
	assert.ErrorIs(t, err, ErrStartFailed)
	assert.ErrorIs(t, err, syscall.EADDRINUSE)
	assert.Nil(t, c.Nodes()[follower])
	require.NoError(t, taken.Close())
	require.NoError(t, c.RestartNode(ctx, follower))
	assert.Equal(t, urls[follower], c.Nodes()[follower].ClientURL())

	assert.Error(t, c.StopNode(len(nodes)), "index out of range")
	c.Shutdown()
	c.Shutdown()
	assert.Error(t, c.RestartNode(ctx, 0), "no restart after Shutdown")
	for _, n := range nodes {
		assert.False(t, n.NATS().Running())
	}
}

func hostPort(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	return u.Host
}

// localMsgs returns the message count of stream in the default account as
// stored on ns itself (not as reported by the stream leader).
func localMsgs(t *testing.T, ns *server.Server, stream string) uint64 {
	jsz, err := ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	require.NoError(t, err)
	for _, acc := range jsz.AccountDetails {
		for _, sd := range acc.Streams {
			if sd.Name == stream {
				return sd.State.Msgs
			}
		}
	}
	return 0
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent log calls.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
