package natsutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	// MaxBytes ends a batch once this many bytes are sent (the server's max pending
	// when zero); the last message's Nats-Num-Pending says what is left.
	MaxBytes int `json:"max_bytes,omitempty"`
}

// ErrNoDirect is returned by DirectReader.Batch when the stream answers no direct gets
// (AllowDirect off): nobody listens on its direct get subject.
var ErrNoDirect = errors.New("natsutil: the stream answers no direct gets")

// DirectReader sends direct get requests for many messages of a stream (a batch from
// a sequence, or the last message of many subjects) on one connection, and collects
// their answers on ONE subscription to a wildcard inbox, dispatched by its last
// token: made at the first read, ended by Close. A read then costs its request and
// nothing else; a subscription of its own would cost the server a SUB and an UNSUB
// each time (nats.go's request mux takes one answer per request, and a batch has
// many). Safe for concurrent use.
type DirectReader struct {
	js jetstream.JetStream

	mu     sync.Mutex
	sub    *nats.Subscription
	prefix string // the inbox prefix, with its trailing dot
	calls  map[string]*directCall
	next   uint64
	closed bool
}

// directCall is the answer of one read so far.
type directCall struct {
	mu    sync.Mutex
	msgs  []*nats.Msg
	ready chan struct{} // signalled (capacity 1) when msgs grew
}

// ErrReaderClosed is returned by DirectReader.Batch after Close.
var ErrReaderClosed = errors.New("natsutil: direct reader closed")

// NewDirectReader returns a reader on js's connection. It does no I/O.
func NewDirectReader(js jetstream.JetStream) *DirectReader {
	return &DirectReader{js: js, calls: make(map[string]*directCall)}
}

// Close ends the reader's subscription; reads fail with ErrReaderClosed afterwards.
func (r *DirectReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
		r.sub = nil
	}
}

// register makes a call and returns its reply subject, subscribing first when needed.
func (r *DirectReader) register() (*directCall, string, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, "", "", ErrReaderClosed
	}
	if r.sub == nil {
		nc := r.js.Conn()
		prefix := nc.NewInbox() + "."
		sub, err := nc.Subscribe(prefix+"*", r.deliver)
		if err != nil {
			return nil, "", "", err
		}
		r.sub, r.prefix = sub, prefix
	}
	r.next++
	token := strconv.FormatUint(r.next, 36)
	c := &directCall{ready: make(chan struct{}, 1)}
	r.calls[token] = c
	return c, token, r.prefix + token, nil
}

func (r *DirectReader) unregister(token string) {
	r.mu.Lock()
	delete(r.calls, token)
	r.mu.Unlock()
}

// deliver hands an answer to its call; answers of calls that ended are dropped.
func (r *DirectReader) deliver(m *nats.Msg) {
	r.mu.Lock()
	c := r.calls[strings.TrimPrefix(m.Subject, r.prefix)]
	r.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// Batch sends one direct get request to stream and collects the answer: the server
// streams the messages and ends with an end-of-batch status. It is one round trip.
// A stream with nothing to send answers an empty slice; a stream that answers no
// direct gets (AllowDirect off), an error matching ErrNoDirect.
//
// Direct gets may be answered by any replica of the stream, a follower a little
// behind the leader included: never decide ownership from them.
func (r *DirectReader) Batch(ctx context.Context, stream string, req GetRequest) ([]*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	c, token, reply, err := r.register()
	if err != nil {
		return nil, err
	}
	defer r.unregister(token)
	if err := r.js.Conn().PublishMsg(&nats.Msg{Subject: APIPrefix(r.js) + "DIRECT.GET." + stream, Reply: reply, Data: body}); err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ready:
		}
		c.mu.Lock()
		got := c.msgs
		c.msgs = nil
		c.mu.Unlock()
		for _, m := range got {
			if len(m.Data) == 0 && m.Header != nil {
				switch st := m.Header.Get("Status"); st {
				case "":
				case "503":
					return nil, fmt.Errorf("%w: %s: %w", ErrNoDirect, stream, nats.ErrNoResponders)
				case "204", "404": // end of batch; nothing (more) to send
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
		if r.Error.ErrorCode == ErrCodeMessageNotFound {
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
