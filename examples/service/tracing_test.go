package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTracingAndMetricsWired: with -otel log every attempt is a span on stderr,
// a job's log line made with its run's context carries that span's trace ID,
// and /metrics has the job's interval, the entries followed and the build.
func TestTracingAndMetricsWired(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	r := start(t, "-url", srv.ClientURL(), "-interval", "1s", "-cron", "* * * * * *", "-log-format", "json",
		"-stop-timeout", "300ms", "-history", "0", "-otel", "log", "-instance", "a")
	addr := r.waitFor(t, 10*time.Second, msg("serving metrics"))["addr"].(string)

	// The report job logs with its run's context; its span is flushed within the
	// batcher's 5 s.
	// Any report line whose span was flushed: the newest one's may not be yet.
	var span logLine
	waitAll(t, 20*time.Second, []*replica{r}, func(lines []logLine) bool {
		traces := map[any]bool{}
		for _, l := range lines {
			if l["msg"] == "report" && l["trace_id"] != nil {
				traces[l["trace_id"]] = true
			}
		}
		for _, l := range lines {
			sc, _ := l["SpanContext"].(map[string]any)
			if l["Name"] == "anarchon.run report" && traces[sc["TraceID"]] {
				span = l
				return true
			}
		}
		return false
	})
	require.NotNil(t, span, "the report line's trace is a span of report's run")
	attrs := map[string]any{}
	for _, a := range span["Attributes"].([]any) {
		kv := a.(map[string]any)
		attrs[kv["Key"].(string)] = kv["Value"].(map[string]any)["Value"]
	}
	assert.Equal(t, "report", attrs["anarchon.job"])
	assert.Equal(t, "a", attrs["anarchon.instance"])
	assert.Equal(t, "ok", attrs["anarchon.outcome"])

	var body string
	require.Eventually(t, func() bool {
		body = scrape(t, addr)
		return strings.Contains(body, `anarchon_job_interval_seconds{job_name="tick"} 1`)
	}, 10*time.Second, 100*time.Millisecond, "tick's interval, from its second slot")
	assert.Contains(t, body, `anarchon_job_interval_seconds{job_name="report"} 1`, "the cron job's gap")
	assert.Contains(t, body, `anarchon_entries{state="followed"} 0`)
	assert.Contains(t, body, `anarchon_build_info{goversion="go`)
	require.NoError(t, r.stop(t))
}
