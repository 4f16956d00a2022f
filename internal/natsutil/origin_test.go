package natsutil

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
)

// TestJetStreamOrigin: the messages JetStream sends, as nats-server 2.15.3 sends
// them to a push consumer's deliver subject or a request's reply subject, and
// what a client sends.
func TestJetStreamOrigin(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply string
		hdr   nats.Header
		from  bool
	}{
		{"a client's request", "_INBOX.abc.1", nil, false},
		{"a client's request with a header of its own", "_INBOX_viewer.abc", nats.Header{"Traceparent": {"00-x"}}, false},
		{"a request without reply", "", nil, false},
		{"a put delivered, AckNone", "$JS.ACK.KV_reg.jHiT7vNh.1.1.1.1796135184058041958.2", nil, true},
		{"a put delivered, AckExplicit", "$JS.ACK.KV_reg.dGAqNUeu.1.1.1.1796135184058041958.2", nil, true},
		{"a put delivered in a domain", "$JS.ACK.hub.ACCHASH.KV_reg.c.1.1.1.1796135184058041958.2.tok", nil, true},
		{"a purge marker delivered", "$JS.ACK.KV_reg.x.1.3.2.1.1", nats.Header{"KV-Operation": {"PURGE"}, "Nats-Rollup": {"sub"}}, true},
		{"a headers-only delivery", "$JS.ACK.KV_reg.x.1.1.1.1.2", nats.Header{"Nats-Msg-Size": {"12"}}, true},
		{"an idle heartbeat", "", nats.Header{"Status": {"100"}, "Description": {"Idle Heartbeat"}, "Nats-Last-Consumer": {"3"}, "Nats-Last-Stream": {"4"}}, true},
		{"a flow control request", "$JS.FC.KV_reg.x.1", nats.Header{"Status": {"100"}, "Description": {"FlowControl Request"}}, true},
		{"a direct get answer", "", nats.Header{"Nats-Stream": {"KV_reg"}, "Nats-Subject": {"$KV.reg.a"}, "Nats-Sequence": {"1"}, "Nats-Time-Stamp": {"2026-12-01T14:26:24Z"}}, true},
		{"an expiry marker got directly", "", nats.Header{"Nats-Marker-Reason": {"MaxAge"}, "Nats-TTL": {"1m0s"}}, true},
		{"the end of a batch", "", nats.Header{"Status": {"204"}, "Description": {"EOB"}}, true},
	} {
		got := JetStreamOrigin(c.reply, c.hdr)
		assert.Equal(t, c.from, got != "", "%s: %q", c.name, got)
	}
}
