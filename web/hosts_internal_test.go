package web

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8080": true, "LocalHost.": true, "app.localhost:1": true, "a.b.localhost": true,
		"127.0.0.1": true, "127.0.0.1:80": true, "127.255.255.254:1": true, "[::1]:8080": true, "[::1]": true, "::1": true,
		"[::ffff:127.0.0.1]:80": true, "[0:0:0:0:0:0:0:1]:80": true,

		"": false, ":80": false, "attacker.example": false, "localhost.attacker.example": false, "mylocalhost": false,
		"127.0.0.1.nip.io": false, "0.0.0.0": false, "[::]": false, "10.0.0.1": false, "2130706433": false,
		"127.1": false, "0x7f.0.0.1": false, "[127.0.0.1]:80": false, "[localhost]:80": false, "localhost:": false,
		"localhost:http": false, "localhost:80:80": false, "[::1]:80]": false, "[fe80::1%25lo]:80": false,
	} {
		assert.Equal(t, want, loopbackHost(host), "%q", host)
	}
}

func TestHostSet(t *testing.T) {
	s, err := parseHosts([]string{"Status.Example.com.", "10.0.0.7:8443", "[::1]", "0:0::2"})
	require.NoError(t, err)
	for host, want := range map[string]bool{
		"status.example.com": true, "STATUS.EXAMPLE.COM:443": true, "status.example.com.:1": true,
		"10.0.0.7:8443": true, "[::1]:9": true, "::1": true, "[::2]": true,

		"": false, "example.com": false, "x.status.example.com": false, "status.example.com.x": false,
		"10.0.0.7": false, "10.0.0.7:8080": false, "localhost": false, "127.0.0.1": false, "status.example.com:": false,
	} {
		assert.Equal(t, want, s.allows(host), "%q", host)
	}
	empty, err := parseHosts(nil)
	require.NoError(t, err)
	assert.True(t, empty.empty())
	assert.False(t, empty.allows("localhost"))
}
