package natsutil

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Published is the answer to one message of PublishAll.
type Published struct {
	Ack PubAck
	Err error // as Publish returns it; ctx's error when no answer came in time
}

// PublishAll sends msgs as JetStream publishes, in order, on the reader's
// connection, without waiting for one answer before sending the next, and collects
// every answer: one round trip for all of them. The server takes a connection's
// messages in the order sent, so a message may make its write depend on the one
// before it (Nats-Expected-Last-Msg-Id); each is still stored or refused on its own.
// The answers come on the reader's one subscription, as direct gets do. Each msg's
// Reply is set; a message whose answer did not come before ctx ended has ctx's
// error (it may have been stored).
func (r *DirectReader) PublishAll(ctx context.Context, msgs []*nats.Msg) []Published {
	out := make([]Published, len(msgs))
	type pending struct {
		c     *directCall
		token string
	}
	calls := make([]pending, len(msgs))
	for i, m := range msgs {
		c, token, reply, err := r.register()
		if err != nil {
			out[i].Err = err
			continue
		}
		calls[i] = pending{c, token}
		m.Reply = reply
	}
	defer func() {
		for _, p := range calls {
			if p.c != nil {
				r.unregister(p.token)
			}
		}
	}()
	nc := r.js.Conn()
	for i, m := range msgs {
		if calls[i].c == nil {
			continue
		}
		if err := nc.PublishMsg(m); err != nil {
			out[i].Err = err
			calls[i].c = nil
			r.unregister(calls[i].token)
		}
	}
	for i, p := range calls {
		if p.c == nil {
			continue
		}
		out[i].Err = ctx.Err()
		for out[i].Err == nil {
			p.c.mu.Lock()
			var got *nats.Msg
			if len(p.c.msgs) > 0 {
				got = p.c.msgs[0]
			}
			p.c.mu.Unlock()
			if got != nil {
				out[i] = answer(got)
				break
			}
			select {
			case <-ctx.Done():
				out[i].Err = ctx.Err()
			case <-p.c.ready:
			}
		}
	}
	return out
}

// answer reads a publish's answer: an acknowledgement, the server's error, or no
// responders (a status message without a body).
func answer(m *nats.Msg) Published {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return Published{Err: jetstream.ErrNoStreamResponse}
	}
	ack, err := parseAck(m.Data)
	return Published{Ack: ack, Err: err}
}
