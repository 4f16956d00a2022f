package natsutil

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// Publish answers as nats.go's PublishMsg does, against a real server: stored,
// duplicate, a refused compare-and-set (the server's error, with its code), no
// stream.
func TestPublishAnswersAsPublishMsg(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, s)
	js := natstest.JetStream(t, nc)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PUB", Subjects: []string{"pub.>"}, AllowMsgTTL: true})
	require.NoError(t, err)

	msg := func(subj, id string, expect int) *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = []byte("x")
		if id != "" {
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		if expect >= 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.Itoa(expect))
		}
		return m
	}
	for _, tc := range []struct {
		name string
		m    func() *nats.Msg
	}{
		{"stored", func() *nats.Msg { return msg("pub.a", "", -1) }},
		{"stored with an id", func() *nats.Msg { return msg("pub.b", "id-1", -1) }},
		{"duplicate", func() *nats.Msg { return msg("pub.b", "id-1", -1) }},
		{"compare-and-set from nothing, lost", func() *nats.Msg { return msg("pub.a", "", 0) }},
		{"compare-and-set from a wrong revision", func() *nats.Msg { return msg("pub.a", "", 7) }},
		{"no stream", func() *nats.Msg { return msg("nostream.x", "", -1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The same message through both clients, on subjects of their own so
			// that each meets the same stored state.
			ours, err := Publish(ctx, nc, tc.m())
			theirs, terr := js.PublishMsg(ctx, retarget(tc.m()), jetstream.WithRetryAttempts(0))
			if terr != nil {
				require.Error(t, err, "PublishMsg failed with %v", terr)
				assert.Equal(t, errors.Is(terr, jetstream.ErrNoStreamResponse), errors.Is(err, jetstream.ErrNoStreamResponse))
				var a, b *jetstream.APIError
				if errors.As(terr, &b) {
					require.ErrorAs(t, err, &a)
					assert.Equal(t, b.ErrorCode, a.ErrorCode)
					assert.Equal(t, b.Code, a.Code)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, theirs.Stream, ours.Stream)
			assert.Equal(t, theirs.Duplicate, ours.Duplicate)
			assert.NotZero(t, ours.Sequence)
		})
	}

	// The lost compare-and-set names the key's last revision.
	_, err = Publish(ctx, nc, msg("pub.a", "", 0))
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, ErrCodeWrongLastSequence, apiErr.ErrorCode)
	assert.Contains(t, apiErr.Description, "wrong last sequence: 1")
}

// retarget moves m to a twin subject (and id), so that nats.go's publish meets the
// state ours met: the twin of pub.a is pub.t.a, published to by the earlier cases'
// twins as pub.a was by theirs.
func retarget(m *nats.Msg) *nats.Msg {
	if len(m.Subject) > 4 && m.Subject[:4] == "pub." {
		m.Subject = "pub.t." + m.Subject[4:]
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		m.Header.Set(jetstream.MsgIDHeader, "t-"+id)
	}
	return m
}

// The hand-read acknowledgement is the one encoding/json reads, or not taken.
func FuzzParseAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"KV_anarchon_leases","seq":12}`,
		`{"stream":"S","seq":5,"duplicate":true}`,
		`{"stream":"S","domain":"hub","seq":5}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`,
		`{"stream":"a\"b","seq":1}`,
		`{"stream":"S","seq":01}`,
		`{"stream":"S","seq":18446744073709551616}`,
		`{"stream":"","seq":1}`,
		`{"stream":"S","seq":1,"duplicate":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := fastAck(data)
		if !ok {
			return
		}
		var r pubAckResponse
		require.NoError(t, json.Unmarshal(data, &r), "the hand-read path took what encoding/json refuses: %q", data)
		require.Nil(t, r.Error)
		assert.Equal(t, PubAck{Stream: r.Stream, Sequence: r.Sequence, Duplicate: r.Duplicate}, fast, "%q", data)
	})
}
