package natsutil

import (
	"strconv"
	"time"
)

// TTL rounds d up to the whole seconds that nats-server keeps a message with a
// per-message TTL for, and to one second at least, the server's minimum. The server
// truncates a TTL to whole seconds, so a lease of 1.5s would otherwise live 1s.
func TTL(d time.Duration) time.Duration {
	if d <= time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// TTLHeader is TTL(d) as the Nats-TTL header writes it ("90s").
func TTLHeader(d time.Duration) string {
	return strconv.FormatInt(int64(TTL(d)/time.Second), 10) + "s"
}
