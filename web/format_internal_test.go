package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestScheduleWords(t *testing.T) {
	for in, want := range map[string]string{
		"every 10s":                             "every 10s (aligned to UTC)",
		"CRON_TZ=Europe/Athens 0 9 * * MON-FRI": "at 09:00 on MON-FRI (Europe/Athens)",
		"CRON_TZ=UTC 30 2 * * *":                "at 02:30 every day (UTC)",
		"CRON_TZ=UTC */10 * * * * *":            "every 10 seconds every day (UTC)",
		"CRON_TZ=America/New_York 15 * * * *":   "every hour at :15 every day (America/New_York)",
		"CRON_TZ=UTC */5 * * * *":               "every 5 minutes every day (UTC)",
		"CRON_TZ=UTC 0 3 1 * *":                 "at 03:00 on day 1 of the month (UTC)",
		"CRON_TZ=UTC 0 0 1 1 *":                 "cron 0 0 1 1 * (UTC)",
		"CRON_TZ=UTC 0 */2 * * *":               "cron 0 */2 * * * (UTC)",
		"TZ=Asia/Tokyo @daily":                  "every day at 00:00 (Asia/Tokyo)",
		"CRON_TZ=UTC @every 90s":                "every 90s (UTC)",
		"CRON_TZ=UTC 5 30 9 * * *":              "at 09:30:05 every day (UTC)",
		"":                                      "–",
		"CRON_TZ=UTC <b>":                       "cron <b> (UTC)", // escaped by the template
	} {
		assert.Equal(t, want, scheduleWords(in), in)
	}
}

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
