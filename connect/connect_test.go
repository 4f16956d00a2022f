package connect_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/connect"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// configHome points the package at a fresh, empty configuration directory, the
// way the NATS CLI lays it out: <dir>/nats/context/<name>.json and
// <dir>/nats/context.txt for the selected context.
func configHome(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "nats", "context"), 0o700))
	return dir
}

// writeContext writes a context file as `nats context add` would.
func writeContext(t *testing.T, dir, name string, settings map[string]any) {
	t.Helper()
	data, err := json.Marshal(settings)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context", name+".json"), data, 0o600))
}

func selectContext(t *testing.T, dir, name string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte(name), 0o600))
}

// startAuthServer starts a nats-server that wants a user and password and runs
// JetStream in domain "hub": things only a context file can tell the client.
func startAuthServer(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, Username: "svc", Password: "s3cret",
		JetStream: true, JetStreamDomain: "hub", StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server must start")
	return s.ClientURL()
}

// closedURL is a loopback URL nobody listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "nats://" + addr
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestContextByName(t *testing.T) {
	dir := configHome(t)
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	writeContext(t, dir, "local", map[string]any{"description": "embedded test server", "url": srv.ClientURL()})

	nc, err := connect.Context("local", nats.Name("anarchon-test"))
	require.NoError(t, err)
	defer nc.Close()
	assert.Equal(t, "anarchon-test", nc.Opts.Name, "caller options apply on top of the context")
	assert.Equal(t, srv.ClientURL(), nc.ConnectedUrl())

	js := natstest.JetStream(t, nc)
	ctx := callCtx(t)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	ack, err := js.Publish(ctx, "t.1", []byte("hello"))
	require.NoError(t, err)
	assert.Equal(t, "T", ack.Stream)
	assert.EqualValues(t, 1, ack.Sequence)
}

func TestSelectedContext(t *testing.T) {
	dir := configHome(t)
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	writeContext(t, dir, "elsewhere", map[string]any{"url": closedURL(t)})
	writeContext(t, dir, "local", map[string]any{"url": srv.ClientURL()})
	selectContext(t, dir, "local")

	nc, js, err := connect.ContextJetStream("")
	require.NoError(t, err, "an empty name uses the selected context")
	defer nc.Close()
	assert.Equal(t, srv.ClientURL(), nc.ConnectedUrl())
	_, err = js.AccountInfo(callCtx(t))
	assert.NoError(t, err)
}

func TestNoContextSelected(t *testing.T) {
	dir := configHome(t)
	writeContext(t, dir, "local", map[string]any{"url": closedURL(t)})

	nc, err := connect.Context("")
	require.ErrorIs(t, err, connect.ErrNoContextSelected, "never a silent fall-back to localhost:4222")
	assert.Nil(t, nc)
	assert.Contains(t, err.Error(), "nats context select")
	assert.Contains(t, err.Error(), "local", "the message lists the contexts there are")

	_, _, err = connect.ContextJetStream("")
	assert.ErrorIs(t, err, connect.ErrNoContextSelected)
}

func TestUnknownContext(t *testing.T) {
	dir := configHome(t)
	writeContext(t, dir, "local", map[string]any{"url": closedURL(t)})
	writeContext(t, dir, "prod", map[string]any{"url": closedURL(t)})

	nc, err := connect.Context("staging")
	require.ErrorIs(t, err, connect.ErrContextNotFound)
	assert.Nil(t, nc)
	msg := err.Error()
	assert.Contains(t, msg, `"staging"`)
	assert.Contains(t, msg, filepath.Join(dir, "nats", "context"), "the message says where it looked")
	assert.Contains(t, msg, "local, prod", "the message lists the contexts there are")

	_, _, err = connect.ContextJetStream("staging")
	assert.ErrorIs(t, err, connect.ErrContextNotFound)

	// A selection that points at a deleted context.
	selectContext(t, dir, "gone")
	_, err = connect.Context("")
	assert.ErrorIs(t, err, connect.ErrContextNotFound)
	assert.Contains(t, err.Error(), `"gone"`)
}

func TestInvalidContext(t *testing.T) {
	dir := configHome(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context", "broken.json"), []byte("{not json"), 0o600))
	writeContext(t, dir, "both", map[string]any{"url": closedURL(t), "jetstream_domain": "hub", "jetstream_api_prefix": "$JS.hub.API"})

	cases := []struct {
		name string
		ctx  string
		js   bool
	}{
		{"path traversal", "../../etc/passwd", false},
		{"slash", "a/b", false},
		{"unreadable file", "broken", false},
		{"domain and API prefix", "both", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.js {
				_, _, err = connect.ContextJetStream(tc.ctx)
			} else {
				_, err = connect.Context(tc.ctx)
			}
			assert.ErrorIs(t, err, connect.ErrInvalidContext)
		})
	}
}

// TestCredentialsAndDomainComeFromTheContext: the program passes only a name; the
// user, password and JetStream domain are in the context file.
func TestCredentialsAndDomainComeFromTheContext(t *testing.T) {
	dir := configHome(t)
	url := startAuthServer(t)
	writeContext(t, dir, "hub", map[string]any{"url": url, "user": "svc", "password": "s3cret", "jetstream_domain": "hub"})
	writeContext(t, dir, "hub-prefix", map[string]any{"url": url, "user": "svc", "password": "s3cret", "jetstream_api_prefix": "$JS.hub.API"})
	writeContext(t, dir, "wrong-domain", map[string]any{"url": url, "user": "svc", "password": "s3cret", "jetstream_domain": "elsewhere"})
	writeContext(t, dir, "anonymous", map[string]any{"url": url})

	for _, name := range []string{"hub", "hub-prefix"} {
		t.Run(name, func(t *testing.T) {
			nc, js, err := connect.ContextJetStream(name)
			require.NoError(t, err)
			defer nc.Close()
			ctx := callCtx(t)
			info, err := js.AccountInfo(ctx)
			require.NoError(t, err)
			assert.Equal(t, "hub", info.Domain)
			_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B" + name[len(name)-1:], Storage: jetstream.MemoryStorage})
			assert.NoError(t, err)
		})
	}
	t.Run("the domain is really used", func(t *testing.T) {
		nc, js, err := connect.ContextJetStream("wrong-domain")
		require.NoError(t, err)
		defer nc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		assert.Error(t, err, "no JetStream answers in domain elsewhere")
	})
	t.Run("without the context's credentials the server refuses", func(t *testing.T) {
		_, err := connect.Context("anonymous")
		require.Error(t, err)
		assert.ErrorIs(t, err, nats.ErrAuthorization)
		assert.Contains(t, err.Error(), `"anonymous"`)
	})
}

func TestUnreachableServer(t *testing.T) {
	dir := configHome(t)
	dead := closedURL(t)
	writeContext(t, dir, "down", map[string]any{"url": "nats://svc:s3cret@" + dead[len("nats://"):]})

	start := time.Now()
	nc, err := connect.Context("down")
	require.Error(t, err)
	assert.Nil(t, nc)
	assert.Less(t, time.Since(start), 5*time.Second, "a refused connection fails fast")
	assert.ErrorIs(t, err, nats.ErrNoServers)
	assert.Contains(t, err.Error(), `"down"`)
	assert.Contains(t, err.Error(), "nats://svc:xxx@"+dead[len("nats://"):])
	assert.NotContains(t, err.Error(), "s3cret", "errors never carry the password")

	_, _, err = connect.ContextJetStream("down")
	assert.ErrorIs(t, err, nats.ErrNoServers)
}

// hangingURL is a loopback URL that accepts connections and never answers, the way
// a server behind a stuck proxy looks: nats.go waits for its INFO until its own
// dial timeout. The connections are closed when the test ends.
func hangingURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		for c := range conns {
			_ = c.Close()
		}
	})
	return "nats://" + l.Addr().String()
}

func TestDialHonoursTheContext(t *testing.T) {
	dir := configHome(t)
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	writeContext(t, dir, "local", map[string]any{"url": srv.ClientURL()})
	writeContext(t, dir, "stuck", map[string]any{"url": hangingURL(t)})

	t.Run("connects", func(t *testing.T) {
		nc, js, err := connect.DialJetStream(callCtx(t), "local", nats.Name("anarchon-test"))
		require.NoError(t, err)
		defer nc.Close()
		assert.Equal(t, "anarchon-test", nc.Opts.Name)
		_, err = js.AccountInfo(callCtx(t))
		assert.NoError(t, err)
	})
	t.Run("gives up at the deadline", func(t *testing.T) {
		for _, js := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			start := time.Now()
			var err error
			if js {
				_, _, err = connect.DialJetStream(ctx, "stuck", nats.Timeout(10*time.Second))
			} else {
				_, err = connect.Dial(ctx, "stuck", nats.Timeout(10*time.Second))
			}
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "JetStream %v", js)
			assert.Less(t, time.Since(start), 5*time.Second, "not nats.go's 10s dial timeout")
			assert.Contains(t, err.Error(), `"stuck"`)
		}
	})
	t.Run("an ended context does not dial", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		nc, err := connect.Dial(ctx, "local")
		assert.ErrorIs(t, err, context.Canceled)
		assert.Nil(t, nc)
	})
	t.Run("unknown names are errors before any dial", func(t *testing.T) {
		_, err := connect.Dial(callCtx(t), "nope")
		assert.ErrorIs(t, err, connect.ErrContextNotFound)
	})
}

// TestHugeContextFiles: a context file and a selection file (context.txt) of
// more than a context could be are refused with a short error, read no further
// than the bound.
func TestHugeContextFiles(t *testing.T) {
	dir := configHome(t)
	huge := strings.Repeat("a", 2<<20)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context", "huge.json"),
		[]byte(`{"url":"`+huge+`"}`), 0o600))
	_, err := connect.Load("huge")
	require.ErrorIs(t, err, connect.ErrInvalidContext)
	assert.Less(t, len(err.Error()), 4096, "a short error")

	selectContext(t, dir, huge)
	_, err = connect.Selected()
	require.ErrorIs(t, err, connect.ErrInvalidContext, "no context has so long a name")
	assert.Less(t, len(err.Error()), 4096, "a short error")
	_, err = connect.Load("")
	require.ErrorIs(t, err, connect.ErrInvalidContext)
	assert.Less(t, len(err.Error()), 4096, "a short error")
}
