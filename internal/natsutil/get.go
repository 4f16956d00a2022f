package natsutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// APIPrefix is the subject prefix of js's JetStream API, with its trailing dot:
// "$JS.API." by default, "$JS.<domain>.API." with a domain, or the prefix js was
// made with.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix
		}
		return o.APIPrefix + "."
	}
	return jetstream.DefaultAPIPrefix
}

// GetRequest is a direct get request (nats-server ≥ 2.11 for batches and
// multi_last): the fields of the server's JSApiMsgGetRequest that anarchon uses.
type GetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	// Batch asks for up to Batch messages from Seq on (matching NextFor).
	Batch int `json:"batch,omitempty"`
	// MultiLast asks for the last message of each subject matching any of these.
	MultiLast []string `json:"multi_last,omitempty"`
	// UpToSeq bounds a batch or multi_last read.
	UpToSeq uint64 `json:"up_to_seq,omitempty"`
}

// ErrNoDirect is returned by DirectBatch when the stream answers no direct gets
// (AllowDirect off): nobody listens on its direct get subject.
var ErrNoDirect = errors.New("natsutil: the stream answers no direct gets")

// DirectBatch sends one direct get request for many messages of stream (a batch
// from a sequence, or the last message of many subjects) and collects the answer:
// the server streams the messages and ends with an end-of-batch status. It is one
// round trip. A stream with nothing to send answers an empty slice; a stream without
// AllowDirect, ErrNoDirect.
//
// Direct gets may be answered by any replica of the stream, a follower a little
// behind the leader included: never decide ownership from them.
func DirectBatch(ctx context.Context, js jetstream.JetStream, stream string, req GetRequest) ([]*jetstream.RawStreamMsg, error) {
	nc := js.Conn()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// A synchronous subscription: its pending limits (nats.go's defaults, 512k
	// messages) hold a whole batch; a channel subscription drops what does not fit.
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishMsg(&nats.Msg{Subject: APIPrefix(js) + "DIRECT.GET." + stream, Reply: sub.Subject, Data: body}); err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w: %s: %w", ErrNoDirect, stream, err)
		}
		if err != nil {
			return nil, err
		}
		{
			if len(m.Data) == 0 && m.Header != nil {
				switch st := m.Header.Get("Status"); st {
				case "":
				case "503":
					return nil, fmt.Errorf("%w: %s: %w", ErrNoDirect, stream, nats.ErrNoResponders)
				case "204": // end of batch
					return out, nil
				case "404": // nothing (more) to send
					return out, nil
				default:
					return nil, fmt.Errorf("natsutil: direct get from %s: status %s %s", stream, st, m.Header.Get("Description"))
				}
			}
			rm, err := rawMsg(m)
			if err != nil {
				return nil, fmt.Errorf("natsutil: direct get from %s: %w", stream, err)
			}
			out = append(out, rm)
			if req.Batch == 0 && len(req.MultiLast) == 0 {
				return out, nil // a single message: no end-of-batch marker follows
			}
		}
	}
}

// rawMsg reads a direct get answer's headers into a stored message.
func rawMsg(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("sequence header %q: %w", m.Header.Get(jetstream.SequenceHeader), err)
	}
	ts, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("timestamp header: %w", err)
	}
	subj := m.Header.Get(jetstream.SubjectHeader)
	if subj == "" {
		return nil, errors.New("no subject header")
	}
	return &jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Header: m.Header, Data: m.Data, Time: ts}, nil
}

// storedMsg is the message in a STREAM.MSG.GET answer.
type storedMsg struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs,omitempty"`
	Data     []byte    `json:"data,omitempty"`
	Time     time.Time `json:"time"`
}

// LeaderGet reads the message at seq (or, with subject set, the next one from seq
// on that subject filter) through the STREAM.MSG.GET API, which only the stream
// leader answers, whatever the stream's AllowDirect says: every acknowledged write
// is visible to it. nats.go's Stream.GetMsg turns into a direct get (any replica)
// when the stream allows them; reads that decide ownership use this instead. A
// missing message is jetstream.ErrMsgNotFound.
func LeaderGet(ctx context.Context, js jetstream.JetStream, stream string, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(GetRequest{Seq: seq, NextFor: subject})
	if err != nil {
		return nil, err
	}
	resp, err := js.Conn().RequestWithContext(ctx, APIPrefix(js)+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *storedMsg          `json:"message,omitempty"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("natsutil: message get from %s: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, r.Error
	}
	if r.Message == nil {
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	var hdr nats.Header
	if len(r.Message.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, err
		}
	}
	return &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Sequence, Header: hdr, Data: r.Message.Data, Time: r.Message.Time}, nil
}
