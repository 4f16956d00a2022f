package natsutil

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// jetStreamHeaders are headers that JetStream itself sets on what it sends: a
// direct get's answer and a stream's republished copy (Nats-Stream,
// Nats-Subject, Nats-Sequence, Nats-Time-Stamp, and in batches
// Nats-Num-Pending and Nats-Last-Sequence), a headers-only delivery
// (Nats-Msg-Size), a status message such as a consumer's heartbeat or flow
// control (Status), and the markers a key-value bucket stores (KV-Operation,
// Nats-Marker-Reason, Nats-Rollup).
var jetStreamHeaders = []string{
	"Status", "Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending",
	"Nats-Last-Sequence", "Nats-Msg-Size", "Nats-Last-Consumer", "Nats-Last-Stream",
	"KV-Operation", "Nats-Marker-Reason", "Nats-Rollup",
}

// JetStreamOrigin says why a message was sent by JetStream rather than by a
// client, or returns "" when nothing says so: a consumer's delivery (its reply
// subject is the acknowledgement subject $JS.ACK.<stream>.<consumer>.…, with any
// ack policy, AckNone included), a flow control request ($JS.FC.…), or a message
// with one of the headers JetStream sets (a heartbeat, a direct get's answer, a
// republished copy, a stored key-value marker).
//
// A push consumer's deliver subject is not checked against its creator's publish
// permissions, and a request's reply subject against nothing: whoever may create a
// consumer, or send a direct get, can have the server send stored messages to any
// subject. A control endpoint acts only on messages for which this returns "".
func JetStreamOrigin(reply string, h nats.Header) string {
	switch {
	case strings.HasPrefix(reply, "$JS.ACK."):
		return "a consumer's delivery (reply " + reply + ")"
	case strings.HasPrefix(reply, "$JS.FC."):
		return "a consumer's flow control (reply " + reply + ")"
	}
	for _, k := range jetStreamHeaders {
		if _, ok := h[k]; ok {
			return "a JetStream header (" + k + ")"
		}
	}
	return ""
}
