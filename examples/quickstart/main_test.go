package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-duration", "4s", "-store", t.TempDir()}, &out), out.String())
	text := out.String()
	t.Log(text)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`^quickstart: (\d+) slots, (\d+) runs, (\d+) duplicates, (\d+) missed, (\d+) paused$`).FindStringSubmatch(last)
	require.NotNil(t, m, "the last line is the summary: %q", last)
	slots, _ := strconv.Atoi(m[1])
	runs, _ := strconv.Atoi(m[2])
	assert.GreaterOrEqual(t, slots, 2)
	assert.Equal(t, slots, runs, "every slot ran once")
	assert.Equal(t, "0", m[3], "duplicates")
	assert.Equal(t, "0", m[4], "missed")
	assert.Equal(t, "0", m[5], "paused")
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
	// Where to look comes first, then the runs.
	assert.True(t, strings.HasPrefix(lines[0], "quickstart: status page at "), lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "quickstart: fleet service up; in another terminal: anarchon --server "), lines[1])
	assert.Equal(t, `quickstart: 3 instances share job "quickstart-tick" every 1s, for 4s`, lines[3])
	assert.True(t, strings.HasPrefix(lines[4], "slot "), lines[4])
}

// TestQuickstartUntilInterrupted: by default the quickstart runs until it is
// interrupted, and prints where to look (the page, the anarchon command) before
// any run.
func TestQuickstartUntilInterrupted(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, cfg.duration, "no -duration: until interrupted")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &syncWriter{w: &bytes.Buffer{}}
	read := func() string {
		out.mu.Lock()
		defer out.mu.Unlock()
		return out.w.(*bytes.Buffer).String()
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-store", t.TempDir()}, out) }()
	ran := regexp.MustCompile(`(?m)^slot \S+ ran on `)
	require.Eventually(t, func() bool { return len(ran.FindAllString(read(), -1)) >= 3 }, 10*time.Second, 20*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("returned before it was interrupted: %v\n%s", err, read())
	default:
	}
	cancel() // as Ctrl-C does
	select {
	case err := <-done:
		require.NoError(t, err, "an interrupt is the way it ends")
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop within 10s of the interrupt")
	}
	lines := strings.Split(read(), "\n")
	require.Greater(t, len(lines), 5)
	assert.Regexp(t, `^quickstart: status page at http://127\.0\.0\.1:\d+/anarchon/$`, lines[0])
	assert.Regexp(t, `^quickstart: fleet service up; in another terminal: anarchon --server nats://127\.0\.0\.1:\d+ jobs \(install it: go install -C cmd/anarchon \.\)$`, lines[1])
	assert.Regexp(t, `^quickstart: embedded JetStream server at nats://127\.0\.0\.1:\d+, store `, lines[2])
	assert.Equal(t, `quickstart: 3 instances share job "quickstart-tick" every 1s, until interrupted (Ctrl-C)`, lines[3])
	assert.Regexp(t, `^slot \S+ ran on instance-[abc] \(attempt 1\)$`, lines[4], "then the runs")
	assert.Regexp(t, `(?m)^quickstart: \d+ slots, \d+ runs, 0 duplicates, 0 missed, 0 paused$`, read())
}

func TestQuickstartFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-duration", "1s"},
		{"-url", "nats://127.0.0.1:1", "-store", "/tmp/x"},
		{"extra"},
		{"-nope"},
		{"-web", "256.0.0.1:0"},
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
	re := regexp.MustCompile(`anarchon --server (nats://127\.0\.0\.1:\d+) jobs \(install it`)
	var url string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(read())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 4*time.Second, 20*time.Millisecond, "the command to point the CLI at the server is printed")
	c, err := fleet.NewClient(natstest.URL(t, url))
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

// runAsync starts the quickstart with args and returns a reader of its output so
// far and the channel of its end.
func runAsync(t *testing.T, args ...string) (func() string, <-chan error) {
	out := &syncWriter{w: &bytes.Buffer{}}
	done := make(chan error, 1)
	go func() { done <- run(t.Context(), args, out) }()
	return func() string {
		out.mu.Lock()
		defer out.mu.Unlock()
		return out.w.(*bytes.Buffer).String()
	}, done
}

// TestQuickstartStatusPage opens the printed status page while the quickstart
// runs, pauses the job through it, and checks that the summary counts the
// paused slots as paused, not missed.
func TestQuickstartStatusPage(t *testing.T) {
	read, done := runAsync(t, "-duration", "6s")
	re := regexp.MustCompile(`quickstart: status page at (http://127\.0\.0\.1:\d+/anarchon/)\n`)
	var page string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(read())
		if m != nil {
			page = m[1]
		}
		return m != nil
	}, 4*time.Second, 20*time.Millisecond, "the status page's URL is printed")

	resp, err := http.Get(page)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `<a href="/anarchon/job/quickstart-tick">quickstart-tick</a>`)
	assert.Contains(t, string(body), "instance-a, instance-b, instance-c")
	assert.Contains(t, string(body), `aria-label="Run quickstart-tick now"`, "actions are allowed from this machine")

	// A page of another site whose name resolves to 127.0.0.1 (DNS rebinding)
	// posts same-origin from this machine: refused, its Host is not a loopback name.
	u, err := url.Parse(page)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, page+"job/quickstart-tick/pause", strings.NewReader("reason=pwned"))
	require.NoError(t, err)
	req.Host = "attacker.example:" + u.Port()
	req.Header.Set("Origin", "http://"+req.Host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a rebound name may not act")

	// Pause for two seconds through the page (a form post from this machine).
	resp, err = http.PostForm(page+"job/quickstart-tick/pause", url.Values{"reason": {"test"}, "for": {"2s"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "redirected to the job page")
	assert.Equal(t, "/anarchon/job/quickstart-tick", resp.Request.URL.Path)

	require.NoError(t, <-done)
	text := read()
	t.Log(text)
	m := regexp.MustCompile(`(?m)^quickstart: \d+ slots, \d+ runs, 0 duplicates, (\d+) missed, (\d+) paused$`).FindStringSubmatch(text)
	require.NotNil(t, m, "the summary line")
	assert.Equal(t, "0", m[1], "paused slots are not missed")
	paused, _ := strconv.Atoi(m[2])
	assert.GreaterOrEqual(t, paused, 1, "the slots inside the 2s pause are counted as paused")
}
