package natsutil_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/internal/natsutil"
)

func TestTTL(t *testing.T) {
	for _, c := range []struct {
		in, want time.Duration
		header   string
	}{
		{-time.Hour, time.Second, "1s"},
		{0, time.Second, "1s"},
		{1500 * time.Millisecond, 2 * time.Second, "2s"},
		{90 * time.Second, 90 * time.Second, "90s"},
		{natsutil.MaxTTL - time.Nanosecond, natsutil.MaxTTL, "3153600000s"},
		{natsutil.MaxTTL, natsutil.MaxTTL, "3153600000s"},
		{time.Until(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)), natsutil.MaxTTL, "3153600000s"},
		{math.MaxInt64, natsutil.MaxTTL, "3153600000s"}, // time.Until of 9999: it used to overflow
	} {
		assert.Equal(t, c.want, natsutil.TTL(c.in), "%v", c.in)
		assert.Equal(t, c.header, natsutil.TTLHeader(c.in), "%v", c.in)
	}
}

// TestMaxTTLIsKept: the server keeps a message with the longest TTL anarchon sends,
// and drops at once one whose TTL runs past 2262 (its expiry, Unix nanoseconds plus
// the TTL, overflows int64) — why TTL saturates at MaxTTL. Once the server has
// dropped the overflowing one, its expiry sweep has run past the other: still there.
func TestMaxTTLIsKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	js := natstest.JetStream(t, nc)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ttl", Subjects: []string{"ttl.>"}, AllowMsgTTL: true})
	require.NoError(t, err)

	publish := func(subject, ttl string) {
		m := nats.NewMsg(subject)
		m.Header.Set(jetstream.MsgTTLHeader, ttl)
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err, "Nats-TTL %s is accepted", ttl)
	}
	publish("ttl.max", natsutil.TTLHeader(math.MaxInt64))
	publish("ttl.2300", strconv.FormatInt(int64(time.Until(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC))/time.Second), 10)+"s")

	require.Eventually(t, func() bool {
		_, err := s.GetLastMsgForSubject(ctx, "ttl.2300")
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "a TTL past 2262 expires at once")
	m, err := s.GetLastMsgForSubject(ctx, "ttl.max")
	require.NoError(t, err, "a TTL of MaxTTL is kept")
	assert.Equal(t, "3153600000s", m.Header.Get(jetstream.MsgTTLHeader))
}
