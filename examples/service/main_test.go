package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/anarchon/anarchon/internal/maintest"

	"github.com/anarchon/anarchon/connect"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// The tests run the service in-process, as main does, against an embedded JetStream
// server reached over TCP, with 1-second jobs so that a few seconds show every job's
// behaviour. Every goroutine the service starts must be gone when run returns.
func TestMain(m *testing.M) {
	maintest.Main(main) // a child of maintest.Run: the program itself
	goleak.VerifyTestMain(m)
}

func TestTwoReplicasRunEachSlotOnce(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	common := []string{
		"-url", srv.ClientURL(), "-interval", "1s", "-cron", "*/2 * * * * *", "-zone", "Europe/Athens",
		"-log-format", "json", "-metrics-addr", "127.0.0.1:0", "-stop-timeout", "300ms", "-history", "30",
		"-extra-jobs", "history", // a job named like a fleet verb is just a job
	}
	a := start(t, append(common, "-instance", "a")...)
	b := start(t, append(common, "-instance", "b")...)
	both := []*replica{a, b}

	// /metrics is served by each replica, on the port it picked.
	addrA := a.waitFor(t, 10*time.Second, msg("serving metrics"))["addr"].(string)
	addrB := b.waitFor(t, 10*time.Second, msg("serving metrics"))["addr"].(string)

	// Run until every job has shown what it does: ticks, a failure of flaky, a
	// skipped slot of compact, a report.
	waitAll(t, 15*time.Second, both, func(lines []logLine) bool {
		return count(lines, finished("tick", "ok")) >= 4 &&
			count(lines, finished("flaky", "error")) >= 1 &&
			count(lines, msg("slot skipped: another run of the job holds its lease")) >= 1 &&
			count(lines, finished("report", "ok")) >= 1 &&
			count(lines, finished("history", "ok")) >= 1
	})
	// Both replicas count their own runs; together they count every tick that ended.
	ticks := 0
	for _, addr := range []string{addrA, addrB} {
		body := scrape(t, addr)
		assert.Contains(t, body, "# TYPE anarchon_runs_total counter")
		assert.Contains(t, body, "go_goroutines ", "the Go collectors are on the service's registry")
		ticks += metricValue(t, body, `anarchon_runs_total{job_name="tick",manual="false",status="ok"}`)
	}
	assert.GreaterOrEqual(t, ticks, 4, "anarchon_runs_total of tick, summed over the replicas")

	// A graceful stop (the context is cancelled, as SIGINT does) returns nil.
	var wg sync.WaitGroup
	for _, r := range both {
		wg.Go(func() { assert.NoError(t, r.stop(t), "%s: graceful stop", r.name) })
	}
	wg.Wait()

	// Each slot was started once, by one replica: no (job, slot, attempt) twice.
	started := map[string][]string{}
	slots := map[string][]time.Time{}
	for _, r := range both {
		for _, l := range r.lines(t) {
			if l["msg"] != "run started" {
				continue
			}
			job, slot, attempt := l["job"].(string), l.slot(t), int(l["attempt"].(float64))
			key := fmt.Sprintf("%s %s attempt %d", job, slot.Format(time.RFC3339Nano), attempt)
			started[key] = append(started[key], r.name)
			if attempt == 1 {
				slots[job] = append(slots[job], slot)
			}
			if job != "compact" && job != "retried" {
				assert.Equal(t, 1, attempt, "%s: only compact runs long enough to be handed over", key)
			}
		}
	}
	for key, who := range started {
		assert.Len(t, who, 1, "%s started on %v", key, who)
	}
	// And no slot of the short jobs was missed between the first and the last.
	for job, every := range map[string]time.Duration{"tick": time.Second, "flaky": time.Second, "report": 2 * time.Second} {
		s := slots[job]
		slices.SortFunc(s, time.Time.Compare)
		require.NotEmpty(t, s, job)
		for i := 1; i < len(s); i++ {
			assert.Equal(t, every, s[i].Sub(s[i-1]), "%s: slots %v and %v are not consecutive", job, s[i-1], s[i])
		}
	}

	// The history, read by another client, agrees: one record per slot, the failures
	// of flaky on exactly the slots that are multiples of 3, compact's skipped slots.
	for _, job := range []string{"tick", "flaky", "report"} {
		seen := map[int64]bool{}
		for _, r := range history(t, srv, job) {
			assert.False(t, seen[r.Slot.UnixMilli()], "%s: slot %v twice in history", job, r.Slot)
			seen[r.Slot.UnixMilli()] = true
			assert.Contains(t, []string{"a", "b"}, r.Instance)
			// A replica that starts just before a slot's deadline records it as late.
			if job == "flaky" && r.Status != scheduler.StatusLate {
				want := scheduler.StatusOK
				if slotNumber(r.Slot, time.Second)%3 == 0 {
					want = scheduler.StatusError
				}
				assert.Equal(t, want, r.Status, "flaky slot %v", r.Slot)
			}
		}
		for _, s := range slots[job] {
			assert.True(t, seen[s.UnixMilli()], "%s: slot %v ran but is not in history", job, s)
		}
	}
	compact := history(t, srv, "compact")
	assert.True(t, slices.ContainsFunc(compact, func(r scheduler.RunRecord) bool { return r.Status == scheduler.StatusSkipped }), "compact has skipped slots: %v", compact)

	// Each replica printed the history on its way out.
	for _, r := range both {
		out := r.stdout.String()
		assert.Contains(t, out, `history of "tick", newest first:`)
		assert.Contains(t, out, "failing on purpose")
	}
}

// TestThreeCopiesPickFreeMetricsPorts: without -metrics-addr, three copies on one
// machine each serve /metrics on a free loopback port of their own and log it.
func TestThreeCopiesPickFreeMetricsPorts(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	common := []string{"-url", srv.ClientURL(), "-interval", "1s", "-log-format", "json", "-stop-timeout", "200ms", "-history", "0"}
	addrs := map[string]bool{}
	var all []*replica
	for _, name := range []string{"a", "b", "c"} {
		r := start(t, append(common, "-instance", name)...)
		all = append(all, r)
		l := r.waitFor(t, 10*time.Second, msg("serving metrics"))
		addr := l["addr"].(string)
		assert.Regexp(t, `^127\.0\.0\.1:\d+$`, addr, name)
		assert.NotEqual(t, "127.0.0.1:0", addr, "the port picked, not the one asked for")
		assert.Equal(t, "http://"+addr+"/metrics", l["url"], name)
		addrs[addr] = true
		assert.Contains(t, scrape(t, addr), "go_goroutines ", "%s serves its metrics at %s", name, addr)
	}
	assert.Len(t, addrs, 3, "three ports: %v", addrs)
	for _, r := range all {
		require.NoError(t, r.stop(t), "%s: graceful stop", r.name)
	}
}

// TestSignalDuringStartUpIsAGracefulStop: a replica told to stop at any step of
// its start-up (a signal while it prepares the buckets, starts the scheduler or
// serves the fleet) stops and returns nil, as a stop after start-up does.
func TestSignalDuringStartUpIsAGracefulStop(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for _, at := range []string{"connected to NATS", "serving metrics", "scheduler started"} {
		t.Run(at, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stderr := &cancelOn{at: `"msg":"` + at + `"`, cancel: cancel}
			args := []string{"-url", srv.ClientURL(), "-instance", "a", "-interval", "1s", "-log-format", "json",
				"-metrics-addr", "127.0.0.1:0", "-stop-timeout", "200ms", "-history", "0", "-web", "127.0.0.1:0"}
			require.NoError(t, run(ctx, args, io.Discard, stderr), "stopped at %q:\n%s", at, stderr)
			assert.True(t, stderr.seen.Load(), "the replica logged %q", at)
			assert.Contains(t, stderr.String(), "shutting down", "the replica says it stopped")
		})
	}
}

// cancelOn is a log that cancels a context, before the line is written, when a
// line contains at: the replica's context ends at that step of its start-up.
type cancelOn struct {
	syncBuffer
	at     string
	cancel context.CancelFunc
	seen   atomic.Bool
}

func (c *cancelOn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(c.at)) {
		c.seen.Store(true)
		c.cancel()
	}
	return c.syncBuffer.Write(p)
}

func TestStopHandsOver(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	common := []string{"-url", srv.ClientURL(), "-interval", "1s", "-log-format", "json", "-metrics-addr", "", "-stop-timeout", "200ms", "-history", "0"}
	a := start(t, append(common, "-instance", "a")...)
	b := start(t, append(common, "-instance", "b")...)

	// Wait for a run of compact (2.5 s long), then stop the replica running it.
	var holder, backup *replica
	var slot time.Time
	waitAll(t, 10*time.Second, []*replica{a, b}, func([]logLine) bool {
		for _, r := range []*replica{a, b} {
			if l, ok := r.find(t, started("compact", 1)); ok {
				holder, slot = r, l.slot(t)
				return true
			}
		}
		return false
	})
	backup = a
	if holder == a {
		backup = b
	}
	stopped := time.Now()
	require.NoError(t, holder.stop(t), "graceful stop of the holder")

	// The holder cancelled its run and released the lease: the backup takes the same
	// slot over at once (attempt 2), not after the 30 s lease expires.
	handedOver := func(l logLine) bool { return started("compact", 2)(l) && l.slot(t).Equal(slot) }
	backup.waitFor(t, 5*time.Second, handedOver)
	assert.Less(t, time.Since(stopped), 5*time.Second)
	_, ok := holder.find(t, func(l logLine) bool {
		return finished("compact", "cancelled")(l) && l.slot(t).Equal(slot)
	})
	assert.True(t, ok, "the holder logs its run of %v as cancelled", slot)
	require.NoError(t, backup.stop(t))

	var attempts []string
	for _, r := range history(t, srv, "compact") {
		if r.Slot.Equal(slot) {
			attempts = append(attempts, fmt.Sprintf("%d:%s", r.Attempt, r.Instance))
		}
	}
	assert.ElementsMatch(t, []string{"1:" + holder.name, "2:" + backup.name}, attempts, "history of compact slot %v", slot)
}

func TestConnectThroughNATSContext(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "nats", "context"), 0o700))
	data, err := json.Marshal(map[string]any{"url": srv.ClientURL(), "description": "anarchon service test"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context", "anarchon-test.json"), data, 0o600))

	var stdout, stderr syncBuffer
	err = run(t.Context(), []string{"-context", "anarchon-test", "-interval", "500ms", "-duration", "1500ms",
		"-log-format", "json", "-metrics-addr", ""}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	lines := parseLines(t, stderr.String())
	assert.Equal(t, 1, count(lines, func(l logLine) bool { return l["msg"] == "connected to NATS" && l["context"] == "anarchon-test" }))
	assert.GreaterOrEqual(t, count(lines, finished("tick", "ok")), 1)
	assert.Contains(t, stdout.String(), `history of "tick"`)

	err = run(t.Context(), []string{"-context", "no-such-context", "-metrics-addr", ""}, io.Discard, io.Discard)
	assert.ErrorIs(t, err, connect.ErrContextNotFound)
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-url", "nats://127.0.0.1:1", "-context", "x"},
		{"-log-format", "xml"},
		{"-log-level", "loud"},
		{"-interval", "1ms"},
		{"-zone", "Nowhere/Special"},
		{"-duration", "-1s"},
		{"-tenant-run", "-1s"},
		{"-retried-run", "-1s"},
		{"extra"},
		{"-nope"},
		{"-web-actions"},
	} {
		assert.Error(t, run(t.Context(), args, io.Discard, io.Discard), "%q", args)
	}
	srv := startServer(t)
	// Bad schedules fail at registration, with the scheduler's error.
	err := run(t.Context(), []string{"-url", srv.ClientURL(), "-metrics-addr", "", "-cron", "61 * * * *"}, io.Discard, io.Discard)
	assert.ErrorIs(t, err, scheduler.ErrInvalidSchedule)
	// Names of -extra-jobs are checked like any job's.
	err = run(t.Context(), []string{"-url", srv.ClientURL(), "-metrics-addr", "", "-extra-jobs", "tick"}, io.Discard, io.Discard)
	assert.ErrorIs(t, err, scheduler.ErrJobExists)
	err = run(t.Context(), []string{"-url", srv.ClientURL(), "-metrics-addr", "", "-extra-jobs", "ok,\x00"}, io.Discard, io.Discard)
	assert.ErrorIs(t, err, scheduler.ErrInvalidJobName)
	// No server: an error, not a hang.
	err = run(t.Context(), []string{"-url", "nats://127.0.0.1:1", "-metrics-addr", ""}, io.Discard, io.Discard)
	assert.ErrorIs(t, err, nats.ErrNoServers)
}

// replica is one run of the service in this process.
type replica struct {
	name           string
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan error
}

func start(t *testing.T, args ...string) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &replica{name: args[len(args)-1], stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx, args, r.stdout, r.stderr) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		if t.Failed() {
			t.Logf("replica %s stderr:\n%s\nstdout:\n%s", r.name, r.stderr, r.stdout)
		}
	})
	return r
}

// stop cancels the replica's context, as a signal does, and returns what run returned.
func (r *replica) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("replica %s did not stop within 20s", r.name)
		return nil
	}
}

func (r *replica) lines(t *testing.T) []logLine { return parseLines(t, r.stderr.String()) }

func (r *replica) find(t *testing.T, match func(logLine) bool) (logLine, bool) {
	for _, l := range r.lines(t) {
		if match(l) {
			return l, true
		}
	}
	return nil, false
}

// waitFor waits for a log line that matches; the service runs in real time, so the
// test polls its log.
func (r *replica) waitFor(t *testing.T, within time.Duration, match func(logLine) bool) logLine {
	t.Helper()
	var found logLine
	waitAll(t, within, []*replica{r}, func([]logLine) bool {
		l, ok := r.find(t, match)
		found = l
		return ok
	})
	return found
}

// waitAll waits until cond holds for the replicas' log lines together.
func waitAll(t *testing.T, within time.Duration, rs []*replica, cond func([]logLine) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var all []logLine
		for _, r := range rs {
			all = append(all, r.lines(t)...)
		}
		if cond(all) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logLine is one JSON log line.
type logLine map[string]any

func (l logLine) slot(t *testing.T) time.Time {
	t.Helper()
	s, ok := l["slot"].(string)
	require.True(t, ok, "no slot in %v", l)
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return ts.UTC()
}

func parseLines(t *testing.T, text string) []logLine {
	t.Helper()
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l logLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "every stderr line is JSON: %s", sc.Text())
		lines = append(lines, l)
	}
	return lines
}

func msg(m string) func(logLine) bool { return func(l logLine) bool { return l["msg"] == m } }

func finished(job string, status scheduler.Status) func(logLine) bool {
	return func(l logLine) bool {
		return l["msg"] == "run finished" && l["job"] == job && l["status"] == string(status)
	}
}

func started(job string, attempt int) func(logLine) bool {
	return func(l logLine) bool {
		return l["msg"] == "run started" && l["job"] == job && l["attempt"] == float64(attempt)
	}
}

func count(lines []logLine, match func(logLine) bool) int {
	n := 0
	for _, l := range lines {
		if match(l) {
			n++
		}
	}
	return n
}

// startServer starts a server on loopback with a store of the test's own.
func startServer(t *testing.T) *embedded.Server {
	t.Helper()
	return natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
}

// history reads a job's history with a client of its own, as any replica would.
func history(t *testing.T, srv *embedded.Server, job string) []scheduler.RunRecord {
	t.Helper()
	b, err := jetstream.New(natstest.JetStream(t, natstest.Conn(t, srv)))
	require.NoError(t, err)
	recs, err := b.History(t.Context(), job, 200)
	require.NoError(t, err)
	return recs
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

func metricValue(t *testing.T, body, series string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "%s in /metrics", series)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// syncBuffer is a bytes.Buffer the service writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestJobsFileReload: on SIGHUP a replica reads its -jobs-file again, registers
// the jobs added and removes the jobs gone, while it runs; a name it refuses
// leaves the others as they are. Not parallel: the signal is the process's.
func TestJobsFileReload(t *testing.T) {
	srv := startServer(t)
	path := filepath.Join(t.TempDir(), "jobs")
	require.NoError(t, os.WriteFile(path, []byte("# extra jobs\nalpha\n"), 0o600))
	r := start(t, "-url", srv.ClientURL(), "-interval", "1s", "-log-format", "json", "-metrics-addr", "",
		"-history", "0", "-jobs-file", path, "-instance", "a")
	r.waitFor(t, 20*time.Second, finished("alpha", scheduler.StatusOK))

	require.NoError(t, os.WriteFile(path, []byte("gamma\ntick\n"), 0o600))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	removed := r.waitFor(t, 10*time.Second, func(l logLine) bool { return l["msg"] == "jobs file: job removed" && l["job"] == "alpha" })
	r.waitFor(t, 10*time.Second, func(l logLine) bool { return l["msg"] == "jobs file: job registered" && l["job"] == "gamma" })
	r.waitFor(t, 10*time.Second, func(l logLine) bool { return l["msg"] == "jobs file: job not registered" && l["job"] == "tick" })
	var gammaRuns int
	waitAll(t, 20*time.Second, []*replica{r}, func(lines []logLine) bool {
		gammaRuns = 0
		for _, l := range lines {
			if finished("gamma", scheduler.StatusOK)(l) {
				gammaRuns++
			}
		}
		return gammaRuns >= 2
	})
	at, err := time.Parse(time.RFC3339Nano, removed["time"].(string))
	require.NoError(t, err)
	for _, l := range r.lines(t) {
		if l["msg"] == "run finished" && l["job"] == "alpha" {
			assert.False(t, l.slot(t).After(at.Add(time.Second)), "a slot of alpha after its removal ran: %v", l)
		}
	}
	require.NoError(t, r.stop(t))
}
