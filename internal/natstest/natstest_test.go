package natstest_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// A server's connections, in-process and over TCP, reach JetStream, and are
// closed when the test ends, before the server shuts down.
func TestServerAndConnections(t *testing.T) {
	var conns []*nats.Conn
	t.Run("connect", func(t *testing.T) {
		s := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
		conns = []*nats.Conn{
			natstest.Conn(t, s, nats.Name("inproc")),
			natstest.Dial(t, s.Connect),
			natstest.URL(t, s.ClientURL()),
		}
		for _, nc := range conns {
			_, err := natstest.JetStream(t, nc).AccountInfo(t.Context())
			require.NoError(t, err)
		}
		assert.Equal(t, "inproc", conns[0].Opts.Name)
	})
	for _, nc := range conns {
		assert.True(t, nc.IsClosed(), "closed when the test ended")
	}
}
