package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestShortDurations(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	assert.Equal(t, "in 3s", rel(now.Add(3*time.Second), now))
	assert.Equal(t, "1m5s ago", rel(now.Add(-65*time.Second), now))
	assert.Equal(t, "in 2h", rel(now.Add(2*time.Hour), now))
	assert.Equal(t, "3d ago", rel(now.Add(-80*time.Hour), now))
	assert.Equal(t, "12:00:03Z", clock(now.Add(3*time.Second), now))
	assert.Equal(t, "12:00:03.250Z", clock(now.Add(3250*time.Millisecond), now))
	assert.Equal(t, "2026-11-29 12:00:00Z", clock(now.Add(-24*time.Hour), now))
	assert.Equal(t, "–", clock(time.Time{}, now))
	assert.Equal(t, "23µs", msText(0.023))
	assert.Equal(t, "1.5s", msText(1500))
	assert.Equal(t, "–", msText(0))
}

func TestAllowLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000":    true,
		"[::1]:5000":        true,
		"10.0.0.7:5000":     false,
		"[2001:db8::1]:443": false,
		"garbage":           false,
		"":                  false,
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		assert.Equal(t, want, AllowLoopback(r), addr)
	}
}
