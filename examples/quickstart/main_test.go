package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-duration", "4s", "-store", t.TempDir()}, &out), out.String())
	text := out.String()
	t.Log(text)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`^quickstart: (\d+) slots, (\d+) runs, (\d+) duplicates, (\d+) missed$`).FindStringSubmatch(last)
	require.NotNil(t, m, "the last line is the summary: %q", last)
	slots, _ := strconv.Atoi(m[1])
	runs, _ := strconv.Atoi(m[2])
	assert.GreaterOrEqual(t, slots, 2)
	assert.Equal(t, slots, runs, "every slot ran once")
	assert.Equal(t, "0", m[3], "duplicates")
	assert.Equal(t, "0", m[4], "missed")
	// The summary counts what was printed, the partial first and last slots included.
	ran := regexp.MustCompile(`(?m)^slot (\S+) ran on `).FindAllStringSubmatch(text, -1)
	distinct := map[string]bool{}
	for _, r := range ran {
		distinct[r[1]] = true
	}
	assert.Equal(t, len(ran), runs, "runs = the \"ran on\" lines printed")
	assert.Equal(t, len(distinct), slots, "slots = the slots those lines name (none missed)")
	assert.Contains(t, text, "history of \"quickstart-tick\"")
	assert.Regexp(t, `ran on instance-[abc] \(attempt 1\)`, text)
	assert.Equal(t, 1, strings.Count(text, "quickstart: "+m[1]+" slots"), "exactly one summary line")
}

func TestQuickstartFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-duration", "1s"},
		{"-url", "nats://127.0.0.1:1", "-store", "/tmp/x"},
		{"extra"},
		{"-nope"},
	} {
		var out bytes.Buffer
		assert.Error(t, run(t.Context(), args, &out), "%v", args)
	}
}

func TestQuickstartMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(t.Context(), []string{"-duration", "4s", "-metrics-addr", addr}, &out) }()
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return regexp.MustCompile(`(?m)^anarchon_runs_total\{[^}]*status="ok"[^}]*\} [1-9]`).MatchString(body)
	}, 4*time.Second, 100*time.Millisecond, "anarchon_runs_total is served with a non-zero count while it runs")
	require.NoError(t, <-done)
	assert.Contains(t, body, "anarchon_claims_total")
}

// TestQuickstartFleet reads the printed anarchon command and asks the fleet service
// at that URL while the quickstart runs: the job is listed on the three instances.
func TestQuickstartFleet(t *testing.T) {
	out := &syncWriter{w: &bytes.Buffer{}}
	read := func() string {
		out.mu.Lock()
		defer out.mu.Unlock()
		return out.w.(*bytes.Buffer).String()
	}
	done := make(chan error, 1)
	go func() { done <- run(t.Context(), []string{"-duration", "4s"}, out) }()
	re := regexp.MustCompile(`go run ./cmd/anarchon --server (nats://127\.0\.0\.1:\d+) jobs\n`)
	var url string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(read())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 4*time.Second, 20*time.Millisecond, "the command to point the CLI at the server is printed")
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	c, err := fleet.NewClient(nc)
	require.NoError(t, err)
	f, err := c.Jobs(t.Context())
	require.NoError(t, err)
	require.Len(t, f.Jobs, 1)
	assert.Equal(t, "quickstart-tick", f.Jobs[0].Name)
	assert.Equal(t, []string{"instance-a", "instance-b", "instance-c"}, f.Jobs[0].Replicas)
	r, err := c.Trigger(t.Context(), "quickstart-tick", fleet.TriggerRequest{By: "test", Wait: true})
	require.NoError(t, err)
	assert.Equal(t, "ok", string(r.Run.Status))
	require.NoError(t, <-done)
	assert.Regexp(t, `ran on instance-[abc] \(attempt 1, manual\)`, read())
}
