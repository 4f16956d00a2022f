package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startServer starts a nats-server with o on loopback; it fails, never skips,
// when the server cannot start.
func startServer(t *testing.T, o *server.Options) string {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(o)
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server must start")
	return s.ClientURL()
}

// connected asserts the command reached the server: it got as far as asking
// the fleet, where no replica serves.
func connected(t *testing.T, r result) {
	t.Helper()
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, "no replica is up", "connected, then found no replica")
	assert.NotContains(t, r.stderr, "connect to")
}

func refused(t *testing.T, r result) {
	t.Helper()
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, "anarchon: connect to ")
}

func TestNkeyAndTokenFlags(t *testing.T) {
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))

	url := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	connected(t, anarchon(t, "--server", url, "--nkey", seedFile, "jobs", "--window", "100ms"))
	refused(t, anarchon(t, "--server", url, "jobs"))
	t.Setenv("NATS_NKEY", seedFile)
	connected(t, anarchon(t, "--server", url, "jobs", "--window", "100ms"))
	t.Setenv("NATS_NKEY", "")

	// A user without a password is a token, as in the nats CLI.
	url = startServer(t, &server.Options{Authorization: "t0ken"})
	connected(t, anarchon(t, "--server", url, "--user", "t0ken", "jobs", "--window", "100ms"))
	refused(t, anarchon(t, "--server", url, "--user", "wrong", "jobs"))
}

// TestCredsFlag: a server in operator mode, a user's credentials file as nsc
// writes it, given by --creds and by NATS_CREDS, and over a context's user.
func TestCredsFlag(t *testing.T) {
	op, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opPub, err := op.PublicKey()
	require.NoError(t, err)
	opClaims := jwt.NewOperatorClaims(opPub)
	opJWT, err := opClaims.Encode(op)
	require.NoError(t, err)
	opClaims, err = jwt.DecodeOperatorClaims(opJWT)
	require.NoError(t, err)

	acc, err := nkeys.CreateAccount()
	require.NoError(t, err)
	accPub, err := acc.PublicKey()
	require.NoError(t, err)
	accJWT, err := jwt.NewAccountClaims(accPub).Encode(op)
	require.NoError(t, err)

	usr, err := nkeys.CreateUser()
	require.NoError(t, err)
	usrPub, err := usr.PublicKey()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(usrPub)
	uc.IssuerAccount = accPub
	usrJWT, err := uc.Encode(acc)
	require.NoError(t, err)
	usrSeed, err := usr.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(usrJWT, usrSeed)
	require.NoError(t, err)
	credsFile := filepath.Join(t.TempDir(), "ops.creds")
	require.NoError(t, os.WriteFile(credsFile, creds, 0o600))

	resolver := &server.MemAccResolver{}
	require.NoError(t, resolver.Store(accPub, accJWT))
	url := startServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{opClaims}, AccountResolver: resolver})

	connected(t, anarchon(t, "--server", url, "--creds", credsFile, "jobs", "--window", "100ms"))
	refused(t, anarchon(t, "--server", url, "jobs"))
	t.Setenv("NATS_CREDS", credsFile)
	connected(t, anarchon(t, "--server", url, "jobs", "--window", "100ms"))
	t.Setenv("NATS_CREDS", "")

	// A context with a user and password: --creds replaces its credentials.
	natsContext(t, "ops", url, true)
	dir := os.Getenv("XDG_CONFIG_HOME")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context", "ops.json"),
		[]byte(`{"url": "`+url+`", "user": "someone", "password": "else"}`), 0o600))
	refused(t, anarchon(t, "jobs"))
	connected(t, anarchon(t, "--creds", credsFile, "jobs", "--window", "100ms"))
}

// TestTLSFlags: a server that wants TLS first and a client certificate signed
// by its authority: --tlsca, --tlscert, --tlskey and --tlsfirst.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "anarchon test CA", true)
	srvCert, srvKey := newCert(t, ca, caKey, "127.0.0.1", false)
	cliCert, cliKey := newCert(t, ca, caKey, "operator", false)
	write := func(name string, der []byte, kind string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
		return p
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		require.NoError(t, err)
		return b
	}
	caFile := write("ca.pem", ca.Raw, "CERTIFICATE")
	cliFile, cliKeyFile := write("client.pem", cliCert.Raw, "CERTIFICATE"), write("client-key.pem", keyDER(cliKey), "EC PRIVATE KEY")

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	tc := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12,
	}
	url := startServer(t, &server.Options{TLSConfig: tc, TLS: true, TLSVerify: true, TLSTimeout: 2, TLSHandshakeFirst: true})

	tlsArgs := []string{"--server", url, "--tlsca", caFile, "--tlscert", cliFile, "--tlskey", cliKeyFile, "--tlsfirst", "--timeout", "2s"}
	connected(t, anarchon(t, append(tlsArgs, "jobs", "--window", "100ms")...))
	refused(t, anarchon(t, append(tlsArgs[:len(tlsArgs)-3], "--timeout", "2s", "jobs")...)) // without --tlsfirst
	r := anarchon(t, "--server", url, "--tlsca", caFile, "--tlsfirst", "--timeout", "2s", "jobs")
	refused(t, r)
	assert.Contains(t, r.stderr, "certificate required; the TLS handshake failed: check --tlsca, --tlscert and --tlskey")
	r = anarchon(t, "--server", url, "--tlscert", cliFile, "jobs")
	assert.Equal(t, exitUsage, r.code, "a certificate without its key")
	t.Setenv("NATS_CA", caFile)
	t.Setenv("NATS_CERT", cliFile)
	t.Setenv("NATS_KEY", cliKeyFile)
	connected(t, anarchon(t, "--server", url, "--tlsfirst", "jobs", "--window", "100ms"))
}

// newCert makes a certificate signed by parent (self-signed when parent is nil).
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}
