package connect_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/connect"
)

// The files in testdata/nats were written by jsm.go's natscontext, the package
// the nats CLI saves its contexts with (`nats context add`, `nats context
// select`): every key, empty ones included, indented, and context.txt without a
// newline.
func useTestdata(t *testing.T) {
	t.Helper()
	dir, err := filepath.Abs("testdata")
	require.NoError(t, err)
	t.Setenv("XDG_CONFIG_HOME", dir)
}

// apply applies options to nats.go's defaults, to read what they set.
func apply(t *testing.T, opts []nats.Option) nats.Options {
	t.Helper()
	o := nats.GetDefaultOptions()
	for _, opt := range opts {
		require.NoError(t, opt(&o))
	}
	return o
}

func TestReadsTheFilesTheNATSCLIWrites(t *testing.T) {
	useTestdata(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("CERTS", "/srv/certs")

	names, err := connect.Names()
	require.NoError(t, err)
	assert.Equal(t, []string{"creds", "nkey", "token", "userpass"}, names)
	selected, err := connect.Selected()
	require.NoError(t, err)
	assert.Equal(t, "userpass", selected)

	s, err := connect.Load("")
	require.NoError(t, err, "the selected context")
	assert.Equal(t, "userpass", s.Name)
	assert.Equal(t, "user and password", s.Description)
	assert.Equal(t, "nats://127.0.0.1:4222", s.ServerURL())
	o := apply(t, must(s.Options(nats.Name("x"))))
	assert.Equal(t, "svc", o.User)
	assert.Equal(t, "s3cret", o.Password)
	assert.Equal(t, "_INBOX_viewer", o.InboxPrefix)
	assert.Equal(t, "x", o.Name, "the caller's options come last")
	assert.Equal(t, "hub", s.JSDomain)

	s, err = connect.Load("creds")
	require.NoError(t, err)
	assert.Equal(t, "nats://a:4222,nats://b:4222", s.ServerURL())
	assert.Equal(t, filepath.Join(home, ".nkeys", "ops.creds"), s.Creds, "~ is the home directory")
	assert.Equal(t, "/srv/certs/ca.pem", s.CA, "$VARIABLES are expanded")
	assert.Equal(t, "/etc/nats/client.pem", s.Cert)
	assert.True(t, s.TLSFirst)
	assert.Equal(t, "$JS.hub.API", s.JSAPIPrefix, "only paths are expanded")

	s, err = connect.Load("token")
	require.NoError(t, err)
	o = apply(t, must(s.Options()))
	assert.Equal(t, "t0ken", o.Token)
	assert.Equal(t, "tls://nats.example.com:4222", s.ServerURL())

	s, err = connect.Load("nkey")
	require.NoError(t, err)
	assert.Equal(t, "/keys/user.nk", s.NKey)
	assert.Equal(t, "dark", s.ColorScheme, "read, and of no use to a connection")
	_, err = s.Options()
	assert.ErrorIs(t, err, connect.ErrInvalidContext, "a seed file that is not there")
	assert.Contains(t, err.Error(), `"nkey"`)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestOptionsOfEachSetting(t *testing.T) {
	dir := t.TempDir()
	seed := func(kp nkeys.KeyPair) []byte { s, err := kp.Seed(); require.NoError(t, err); return s }
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	seedFile := filepath.Join(dir, "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed(user), 0o600))
	pub, err := user.PublicKey()
	require.NoError(t, err)
	t.Setenv("ANARCHON_TEST_SECRET", "from-env")

	t.Run("env and data references", func(t *testing.T) {
		s := &connect.Settings{User: "svc", Password: "env://ANARCHON_TEST_SECRET", Token: "data:;base64," + base64.StdEncoding.EncodeToString([]byte("tok"))}
		o := apply(t, must(s.Options()))
		assert.Equal(t, "from-env", o.Password)
		assert.Equal(t, "tok", o.Token)
	})
	t.Run("a password that only looks like a URI is a password", func(t *testing.T) {
		o := apply(t, must((&connect.Settings{User: "svc", Password: "ab:cd//x"}).Options()))
		assert.Equal(t, "ab:cd//x", o.Password)
	})
	t.Run("nkey from a file and inline", func(t *testing.T) {
		for _, ref := range []string{seedFile, "file://" + seedFile, "data:;base64," + base64.StdEncoding.EncodeToString(seed(user))} {
			o := apply(t, must((&connect.Settings{NKey: ref}).Options()))
			assert.Equal(t, pub, o.Nkey, ref)
			assert.NotNil(t, o.SignatureCB)
		}
	})
	t.Run("user before creds before nkey, as the nats CLI", func(t *testing.T) {
		o := apply(t, must((&connect.Settings{User: "u", Password: "p", NKey: seedFile}).Options()))
		assert.Equal(t, "u", o.User)
		assert.Empty(t, o.Nkey)
	})
	t.Run("TLS", func(t *testing.T) {
		o := apply(t, must((&connect.Settings{TLSFirst: true}).Options()))
		assert.True(t, o.TLSHandshakeFirst)
		_, err := (&connect.Settings{Cert: "/c.pem"}).Options()
		assert.ErrorContains(t, err, "cert and key go together")
	})
	refused := map[string]connect.Settings{
		"nsc":                   {NSC: "nsc://op/acct/user"},
		"socks_proxy":           {SocksProxy: "127.0.0.1:1080"},
		"windows_cert_store":    {WinCertStore: "user"},
		"op:// password":        {User: "u", Password: "op://vault/item/password"},
		"nsc:// creds":          {Creds: "nsc://op/acct/user"},
		"env:// unset":          {Token: "env://ANARCHON_TEST_UNSET"},
		"data: not base64":      {Token: "data:,plain"},
		"a CA that is no file":  {CA: "env://ANARCHON_TEST_SECRET"},
		"creds that are no JWT": {Creds: "env://ANARCHON_TEST_SECRET"},
	}
	for name, s := range refused {
		t.Run("refused: "+name, func(t *testing.T) {
			s.Name = "ctx"
			_, err := s.Options()
			require.ErrorIs(t, err, connect.ErrInvalidContext)
			assert.Contains(t, err.Error(), `"ctx"`, "the context is named")
			assert.NotContains(t, err.Error(), "from-env", "no secret in the error")
		})
	}
}

// TestNkeyAndTokenAgainstAServer: a server that wants an nkey, and one that wants
// a token, each reached through a context file alone.
func TestNkeyAndTokenAgainstAServer(t *testing.T) {
	dir := configHome(t)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(dir, "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))

	start := func(o *server.Options) string {
		o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
		s, err := server.NewServer(o)
		require.NoError(t, err)
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		require.True(t, s.ReadyForConnections(10*time.Second), "nats-server must start")
		return s.ClientURL()
	}
	nkeyURL := start(&server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	tokenURL := start(&server.Options{Authorization: "t0ken"})
	writeContext(t, dir, "nk", map[string]any{"url": nkeyURL, "nkey": seedFile})
	writeContext(t, dir, "tok", map[string]any{"url": tokenURL, "token": "t0ken"})
	writeContext(t, dir, "badtok", map[string]any{"url": tokenURL, "token": "wrong"})

	for _, name := range []string{"nk", "tok"} {
		nc, err := connect.Dial(callCtx(t), name)
		require.NoError(t, err, name)
		assert.True(t, nc.IsConnected())
		nc.Close()
	}
	_, err = connect.Dial(callCtx(t), "badtok")
	assert.ErrorIs(t, err, nats.ErrAuthorization)
}
