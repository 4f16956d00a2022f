package natsutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PubAck is the part of a JetStream publish acknowledgement the backends read.
type PubAck struct {
	Stream    string
	Sequence  uint64
	Duplicate bool
}

// Publish sends m to JetStream as one request on nc and returns the server's
// acknowledgement. It answers as jetstream.JetStream.PublishMsg with
// WithRetryAttempts(0) does: jetstream.ErrNoStreamResponse when nothing answered,
// the server's *jetstream.APIError when the publish was refused,
// jetstream.ErrInvalidJSAck for an answer that is not an acknowledgement.
//
// It is the publish of the hot paths (a claim, a lease write). The difference from
// PublishMsg is the cost: no options to apply, and the common acknowledgement
// ({"stream":…,"seq":…} with an optional "duplicate":true) read without
// encoding/json, whose reflection was the largest cost of a claim left in the
// client; anything else is decoded by encoding/json exactly as nats.go does.
func Publish(ctx context.Context, nc *nats.Conn, m *nats.Msg) (PubAck, error) {
	resp, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return PubAck{}, jetstream.ErrNoStreamResponse
		}
		return PubAck{}, err
	}
	return parseAck(resp.Data)
}

// PublishRetry is Publish sent again after no responders, up to attempts more
// times, wait apart, as PublishMsg does by default (2 more, 250 ms apart): a stream
// whose leader is being elected has no responder for a moment.
func PublishRetry(ctx context.Context, nc *nats.Conn, m *nats.Msg, attempts int, wait time.Duration) (PubAck, error) {
	ack, err := Publish(ctx, nc, m)
	for r := 0; r < attempts && errors.Is(err, jetstream.ErrNoStreamResponse); r++ {
		if Sleep(ctx, wait) != nil {
			return PubAck{}, err
		}
		ack, err = Publish(ctx, nc, m)
	}
	return ack, err
}

// pubAckResponse is the acknowledgement as nats.go decodes it.
type pubAckResponse struct {
	Error     *jetstream.APIError `json:"error,omitempty"`
	Stream    string              `json:"stream"`
	Sequence  uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate,omitempty"`
}

// parseAck reads an acknowledgement: by hand when it is exactly
// {"stream":"<name>","seq":<n>} or {"stream":"<name>","seq":<n>,"duplicate":true}
// (with or without a space before true)
// (the server's encoding of a plain acknowledgement, the name printable ASCII),
// else with encoding/json.
func parseAck(data []byte) (PubAck, error) {
	if ack, ok := fastAck(data); ok {
		return ack, nil
	}
	var r pubAckResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return PubAck{}, r.Error
	}
	if r.Stream == "" {
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	return PubAck{Stream: r.Stream, Sequence: r.Sequence, Duplicate: r.Duplicate}, nil
}

var (
	ackStream = []byte(`{"stream":"`)
	ackSeq    = []byte(`","seq":`)
	ackDup    = []byte(`,"duplicate":true}`)
	// ackDupSp is how nats-server 2.15 writes a duplicate's acknowledgement.
	ackDupSp = []byte(`,"duplicate": true}`)
)

// fastAck is parseAck's hand-read path; ok is false for anything else.
func fastAck(data []byte) (PubAck, bool) {
	rest, ok := bytes.CutPrefix(data, ackStream)
	if !ok {
		return PubAck{}, false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return PubAck{}, false
	}
	name := rest[:end]
	for _, c := range name {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return PubAck{}, false // an escape, a control byte or UTF-8: encoding/json reads it
		}
	}
	rest, ok = bytes.CutPrefix(rest[end:], ackSeq)
	if !ok {
		return PubAck{}, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 1 && rest[0] == '0' {
		return PubAck{}, false
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return PubAck{}, false
	}
	ack := PubAck{Stream: string(name), Sequence: seq}
	switch tail := rest[n:]; {
	case len(tail) == 1 && tail[0] == '}':
	case bytes.Equal(tail, ackDup), bytes.Equal(tail, ackDupSp):
		ack.Duplicate = true
	default:
		return PubAck{}, false
	}
	return ack, true
}
