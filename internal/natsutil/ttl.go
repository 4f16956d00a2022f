package natsutil

import (
	"strconv"
	"time"
)

// MaxTTL is the longest per-message TTL anarchon asks for: a century. nats-server
// (2.15.3) accepts any Nats-TTL of a second or more, then keeps the message's
// expiry as its Unix time in nanoseconds plus the TTL, an int64 that overflows
// past the year 2262: a longer TTL expires the message at once (measured: a pause
// until 2300 stored with its TTL was gone within a second). A century is far
// inside that limit, and past anything a lease, a claim or a history asks for.
const MaxTTL = 100 * 365 * 24 * time.Hour

// TTL rounds d up to the whole seconds that nats-server keeps a message with a
// per-message TTL for, and to one second at least, the server's minimum; it
// saturates at MaxTTL (d up to the largest time.Duration, without overflow). The
// server truncates a TTL to whole seconds, so a lease of 1.5s would otherwise live
// 1s.
func TTL(d time.Duration) time.Duration {
	switch {
	case d <= time.Second:
		return time.Second
	case d >= MaxTTL:
		return MaxTTL
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// TTLHeader is TTL(d) as the Nats-TTL header writes it ("90s").
func TTLHeader(d time.Duration) string {
	return strconv.FormatInt(int64(TTL(d)/time.Second), 10) + "s"
}
