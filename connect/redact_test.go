package connect

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedactURLs(t *testing.T) {
	cases := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:pass@host:4222", "nats://user:xxx@host:4222"},
		{"tls://token@host:4222", "tls://xxx@host:4222"},
		{"user:pass@host:4222", "user:xxx@host:4222"},
		{"nats://a:b@h1:4222, nats://h2:4222,nats://c:d@e@h3:4222", "nats://a:xxx@h1:4222,nats://h2:4222,nats://c:xxx@h3:4222"},
		{"", ""},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, RedactURLs(tc.in), tc.in)
	}
}
