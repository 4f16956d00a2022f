package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// lines returns out's lines with runs of spaces collapsed, to compare table rows.
func lines(out string) []string {
	var ls []string
	for l := range strings.Lines(out) {
		ls = append(ls, strings.Join(strings.Fields(l), " "))
	}
	return ls
}

// oneErrorLine asserts a failure: exit 1, nothing on stdout, one line on stderr.
func oneErrorLine(t *testing.T, r result, want string) {
	t.Helper()
	assert.Equal(t, exitFail, r.code)
	assert.Empty(t, r.stdout)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	assert.True(t, strings.HasPrefix(r.stderr, "anarchon: "), r.stderr)
	assert.Contains(t, r.stderr, want)
}

func TestJobsTableAndJSON(t *testing.T) {
	f := startFleet(t, nil)
	r := anarchon(t, "--server", f.url, "pause", "report", "--reason", "migrating the table", "--by", "ana", "--for", "1h")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^paused "report": migrating the table \(by ana, until \S+\); every replica follows within a second\n$`, r.stdout)
	require.Eventually(t, func() bool { all, _ := f.paused("report"); return all }, 5*time.Second, 5*time.Millisecond)

	r = anarchon(t, "jobs", "--server", f.url, "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr, "no warnings")
	ls := lines(r.stdout)
	require.Len(t, ls, 8)
	assert.Equal(t, "JOB STATE SCHEDULE NEXT LAST RUN FAILED RUNNING", ls[0])
	// Narrow: the pause's reason, the schedule without its bounds, the next slot
	// from now.
	assert.Regexp(t, `^nightly backup active every 24h in \d+h(\d+m)? - - -$`, ls[1])
	assert.Regexp(t, `^report paused: migrating the table every 1h in (\d+h)?\d+m - - -$`, ls[2])
	assert.Equal(t, "", ls[3])
	assert.Equal(t, "REPLICA VERSION BACKEND PAUSES JOBS", ls[4])
	assert.Equal(t, "A "+fleet.Version+" memory yes 2", ls[5])
	assert.Equal(t, "C "+fleet.Version+" memory yes 2", ls[7])

	r = anarchon(t, "jobs", "--server", f.url, "--window", "200ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls = lines(r.stdout)
	require.Len(t, ls, 8)
	assert.Equal(t, "JOB STATE SCHEDULE NEXT LAST RUN LAST SUCCESS LAST FAILURE RUNNING REPLICAS", ls[0])
	from := regexp.QuoteMeta(", from " + f.startText())
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`
	assert.Regexp(t, `^nightly backup active every 24h0m0s \(aligned to UTC\)`+from+` `+stamp+` \(in \S+\) - - - - A,B,C$`, ls[1])
	assert.Regexp(t, `^report paused: migrating the table \(by ana, until `+stamp+`\) every 1h0m0s \(aligned to UTC\)`+from+` `+stamp+` \(in \S+\) - - - - A,B,C$`, ls[2])

	r = anarchon(t, "--server", f.url, "--json", "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	var fl fleet.Fleet
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fl))
	require.Len(t, fl.Replicas, 3)
	require.Len(t, fl.Jobs, 2)
	assert.Equal(t, "report", fl.Jobs[1].Name)
	assert.Equal(t, "every 1h0m0s from "+f.startText(), fl.Jobs[1].Schedule)
	assert.Equal(t, "every 1h0m0s (aligned to UTC), from "+f.startText(), fl.Jobs[1].ScheduleText, "the words of the table and the status page")
	assert.Equal(t, []string{"A", "B", "C"}, fl.Jobs[1].PausedOn)
	assert.Equal(t, "ana", fl.Jobs[1].Pause.By)
	assert.WithinDuration(t, time.Now().Add(time.Hour), fl.Jobs[1].Pause.Until, time.Minute)
	assert.Nil(t, fl.Jobs[0].Pause)
}

func TestJobsWarnsWhenReplicasDisagree(t *testing.T) {
	f := startFleet(t, func(id string) []fleetJob {
		if id == "C" {
			return []fleetJob{{"report", 2 * time.Hour}}
		}
		return []fleetJob{{"report", time.Hour}}
	})
	r := anarchon(t, "--server", f.url, "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code)
	assert.Regexp(t, `^report active \(replicas differ\) in \S+ - - -$`, lines(r.stdout)[1])
	from := " from " + f.startText()
	assert.Equal(t, `warning: job "report": replicas disagree on the schedule: every 1h0m0s`+from+` (A, B); every 2h0m0s`+from+` (C)`+"\n", r.stderr)

	r = anarchon(t, "--server", f.url, "jobs", "--window", "200ms", "--json")
	var fl fleet.Fleet
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fl))
	assert.Equal(t, []string{"replicas disagree on the schedule: every 1h0m0s" + from + " (A, B); every 2h0m0s" + from + " (C)"}, fl.Jobs[0].Warnings)
}

// TestJobsFailsOnANewerRegistryEntry: a replica of a newer version registered in
// a format this command cannot read: the table shows what it could read, then one
// line says what is missing and the command exits 1.
func TestJobsFailsOnANewerRegistryEntry(t *testing.T) {
	f := startFleet(t, nil)
	js := natstest.JetStream(t, natstest.URL(t, f.url))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, fleet.DefaultRegistryBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, fleet.JobToken(fleet.DefaultPrefix)+"."+fleet.JobToken("next"),
		[]byte(`{"format":3,"instance":"next","version":"2.0.0"}`))
	require.NoError(t, err)

	r := anarchon(t, "--server", f.url, "jobs", "--window", "200ms")
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stdout, "report")
	assert.Equal(t, `anarchon: jobs: registry entry of a newer format: replica "next" (version 2.0.0) wrote format 3; this version (`+
		fleet.Version+`) reads format 2: upgrade it`+"\n", r.stderr)
}

func TestTriggerAndHistory(t *testing.T) {
	f := startFleet(t, nil)
	r := anarchon(t, "--server", f.url, "trigger", "nightly backup", "--wait", "--by", "ana")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^"nightly backup" ran on [ABC] \(by ana\): ok in \S+\n$`, r.stdout)
	assert.EqualValues(t, 1, f.manual.Load(), "once across three replicas")

	r = anarchon(t, "--server", f.url, "--json", "trigger", "nightly backup", "--by", "bo")
	require.Equal(t, exitOK, r.code, r.stderr)
	var tr fleet.TriggerReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tr))
	assert.Equal(t, fleet.StateAccepted, tr.State)
	assert.Equal(t, "bo", tr.By)
	require.Eventually(t, func() bool { return f.manual.Load() == 2 }, 5*time.Second, 5*time.Millisecond)

	f.failNext.Store(true)
	r = anarchon(t, "--server", f.url, "trigger", "nightly backup", "--wait")
	assert.Equal(t, exitFail, r.code, "a run that failed fails the command")
	assert.Regexp(t, `ran on [ABC] \(by \S+\): error in`, r.stdout)
	assert.Regexp(t, `^anarchon: trigger "nightly backup": the run on [ABC] ended error: disk full\n$`, r.stderr)

	r = anarchon(t, "--server", f.url, "history", "nightly backup", "-n", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 3, "the header and two runs")
	assert.Equal(t, "SLOT STATUS INSTANCE ATTEMPT KIND LAG DURATION ERROR", ls[0])
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z error [ABC] 1 manual by \S+@\S+ \S+ \S+ disk full$`, ls[1])
	assert.Regexp(t, ` ok [ABC] 1 manual by bo \S+ \S+$`, ls[2])

	r = anarchon(t, "--server", f.url, "--json", "history", "nightly backup")
	require.Equal(t, exitOK, r.code, r.stderr)
	var h fleet.HistoryReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &h))
	assert.Equal(t, fleet.DefaultHistoryLimit, h.Limit)
	require.Len(t, h.Runs, 3)
	assert.Equal(t, scheduler.StatusError, h.Runs[0].Status)
	assert.Equal(t, "ana", h.Runs[2].RequestedBy, "who asked is recorded with the run")

	r = anarchon(t, "--server", f.url, "history", "report")
	assert.Equal(t, "no runs of \"report\" recorded\n", r.stdout)
}

func TestPauseResumeAndAll(t *testing.T) {
	f := startFleet(t, nil)
	r := anarchon(t, "--server", f.url, "pause", "--all", "--reason", "freeze", "--by", "ops")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "paused every job: freeze (by ops, all jobs); every replica follows within a second\n", r.stdout)
	require.Eventually(t, func() bool { all, _ := f.paused("report"); return all }, 5*time.Second, 5*time.Millisecond)

	r = anarchon(t, "--server", f.url, "resume", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "\"report\" has no pause of its own: nothing to resume\n", r.stdout)
	assert.Equal(t, "warning: \"report\" is still paused by the all-jobs pause: freeze (by ops, all jobs); anarchon resume --all ends it\n", r.stderr)

	r = anarchon(t, "--server", f.url, "resume", "--all")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "resumed every job (the pauses of single jobs stay)\n", r.stdout)
	require.Eventually(t, func() bool { _, any := f.paused("report"); return !any }, 5*time.Second, 5*time.Millisecond)

	// Nothing to resume: said, and not an error.
	r = anarchon(t, "--server", f.url, "resume", "--all")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no all-jobs pause is in force: nothing to resume (the pauses of single jobs stay)\n", r.stdout)
	r = anarchon(t, "--server", f.url, "resume", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "\"report\" is not paused: nothing to resume\n", r.stdout)
	assert.Empty(t, r.stderr)
	r = anarchon(t, "--server", f.url, "--json", "resume", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"not_paused": true`)

	until := time.Now().Add(500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	r = anarchon(t, "--server", f.url, "pause", "report", "--reason", "short", "--until", until)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Eventually(t, func() bool { all, _ := f.paused("report"); return all }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { _, any := f.paused("report"); return !any }, 5*time.Second, 10*time.Millisecond, "the pause ends by itself")

	r = anarchon(t, "--server", f.url, "pause", "report", "--reason", "r", "--for", "1h")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = anarchon(t, "--server", f.url, "--json", "resume", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	var res fleet.ResumeReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.Equal(t, "report", res.Job)
	assert.False(t, res.NotPaused, "its pause was in force")
	assert.NotContains(t, r.stdout, "not_paused")
	require.Eventually(t, func() bool { _, any := f.paused("report"); return !any }, 5*time.Second, 5*time.Millisecond)

	// A pause that ended by itself leaves nothing to resume.
	end := time.Now().Add(500 * time.Millisecond)
	r = anarchon(t, "--server", f.url, "pause", "report", "--reason", "short", "--until", end.UTC().Format(time.RFC3339Nano))
	require.Equal(t, exitOK, r.code, r.stderr)
	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	require.Len(t, pauses, 1, "stored")
	require.Eventually(t, func() bool { _, any := f.paused("report"); return time.Now().After(end) && !any }, 5*time.Second, 10*time.Millisecond)
	r = anarchon(t, "--server", f.url, "resume", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "\"report\" is not paused: nothing to resume\n", r.stdout)
	require.Eventually(t, func() bool { _, any := f.paused("report"); return !any }, 5*time.Second, 5*time.Millisecond)
}

func TestBadInput(t *testing.T) {
	f := startFleet(t, nil)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)

	r := anarchon(t, "--server", f.url, "pause", "report", "--reason", strings.Repeat("r", scheduler.MaxPauseText+1))
	oneErrorLine(t, r, `anarchon: pause "report": reason must be valid UTF-8 of at most 1024 bytes`)
	assert.Regexp(t, `\(replica [ABC]\)\n$`, r.stderr)

	r = anarchon(t, "--server", f.url, "trigger", "nobody declares this", "--timeout", "10s")
	oneErrorLine(t, r, `anarchon: trigger "nobody declares this": no replica declares job "nobody declares this" (replicas up: A, B, C); anarchon jobs lists the jobs`)
	assert.Less(t, r.took, 2*time.Second, "no responders at once, not the timeout")

	r = anarchon(t, "--server", f.url, "resume", "nope")
	oneErrorLine(t, r, `no replica declares job "nope" (replicas up: A, B, C)`)

	_, any := f.paused("report")
	assert.False(t, any, "nothing paused")
	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pauses)
	assert.Zero(t, f.manual.Load(), "nothing ran")

	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"history"},
		{"history", "a", "b"},
		{"trigger"},
		{"pause", "report"},
		{"pause", "report", "--reason", "r", "--for", "1h", "--until", past},
		{"pause", "report", "--reason", "r", "--until", "tomorrow"},
		{"pause", "report", "--reason", "r", "--for", "soon"},
		{"pause", "report", "--all", "--reason", "r"},
		{"resume"},
		{"jobs", "extra"},
		{"history", "report", "-n", "-1"},
		{"jobs", "--timeout", "0s"},
		{"jobs", "--nope"},
	} {
		r := anarchon(t, append([]string{"--server", f.url}, args...)...)
		assert.Equal(t, exitUsage, r.code, "%q", args)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q: one line", args)
		assert.Regexp(t, `\(anarchon [^)]+\)\n$`, r.stderr, "%q: what to do", args)
		assert.NotContains(t, r.stderr, "anarchon: anarchon", "%q: no stutter", args)
	}
	r = anarchon(t, "help")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "pause       Pause a job, or every job, on every replica")
	r = anarchon(t, "history", "-h")
	assert.Equal(t, exitOK, r.code)
	r = anarchon(t, "version")
	assert.Equal(t, "anarchon devel (library "+fleet.Version+", "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+")\n", r.stdout)

	// --server and --context together: the server given, the context's
	// credentials, as the nats CLI; a context that is not there says so.
	r = anarchon(t, "--server", f.url, "--context", "x", "jobs")
	oneErrorLine(t, r, `anarchon: NATS context not found: "x" is not in `)
}

func TestJobNamedLikeAFlag(t *testing.T) {
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"-weird", time.Hour}} }, "A")
	r := anarchon(t, "--server", f.url, "trigger", "--wait", "--", "-weird")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.EqualValues(t, 1, f.manual.Load())
}

// natsContext writes a NATS CLI context named name pointing at url, as `nats context
// add` would, under a fresh XDG_CONFIG_HOME.
func natsContext(t *testing.T, name, url string, selected bool) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "nats", "context"), 0o700))
	data, err := json.Marshal(map[string]string{"url": url})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context", name+".json"), data, 0o600))
	if selected {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte(name), 0o600))
	}
}

func TestConnectThroughAContext(t *testing.T) {
	f := startFleet(t, nil, "A")
	natsContext(t, "fleet", f.url, false)
	r := anarchon(t, "--context", "fleet", "jobs", "--window", "100ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "report")

	r = anarchon(t, "jobs", "--timeout", "1s")
	oneErrorLine(t, r, "anarchon: connect to nats://127.0.0.1:4222 (the default: no --server, NATS_URL or NATS context): ")

	natsContext(t, "fleet", f.url, true)
	r = anarchon(t, "jobs", "--window", "100ms")
	require.Equal(t, exitOK, r.code, "the selected context: %s", r.stderr)

	r = anarchon(t, "--context", "elsewhere", "jobs")
	oneErrorLine(t, r, "NATS context not found")
}

// TestNoReplicaUp: on a server where no replica serves, a command about a job says
// that no replica is up, not that the job is unknown.
func TestNoReplicaUp(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	for _, args := range [][]string{{"trigger", "report"}, {"history", "report"}, {"resume", "report"}} {
		r := anarchon(t, append([]string{"--server", srv.ClientURL()}, args...)...)
		oneErrorLine(t, r, `: no replica is up: nothing answers under prefix "anarchon"; start one (fleet.Serve), or check --prefix and --server`)
		assert.NotContains(t, r.stderr, "declares")
		assert.NotContains(t, r.stderr, fleet.JobToken("report"), "the job's name, not its subject token")
	}
	r := anarchon(t, "--server", srv.ClientURL(), "jobs")
	oneErrorLine(t, r, `anarchon: jobs: no replica is up: nothing answers under prefix "anarchon"`)
}

// TestTriggerRefusedSaysNothingRan: a trigger beyond the replica's bound of manual
// runs (scheduler.DefaultMaxManualRuns in progress) fails with the replica's words
// and that nothing ran.
func TestTriggerRefusedSaysNothingRan(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	block := make(chan struct{})
	f := &testFleet{url: srv.ClientURL(), backend: memory.New(), block: block}
	f.startReplicas(t, srv.Connect,
		func(string) []fleetJob { return []fleetJob{{"busy", time.Hour}} }, "B")
	t.Cleanup(func() { close(block) }) // before the replicas stop
	for range scheduler.DefaultMaxManualRuns {
		r := anarchon(t, "--server", f.url, "trigger", "busy")
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	r := anarchon(t, "--server", f.url, "trigger", "busy", "--wait")
	oneErrorLine(t, r, `anarchon: trigger "busy": nothing ran: run "busy" now: too many manual runs of the job in progress: 4 in progress on B, at most 4 (WithMaxManualRuns) (replica B); trigger it again once one of them ends`)
	assert.EqualValues(t, scheduler.DefaultMaxManualRuns, f.manual.Load())
}

func TestJobsShowsRuns(t *testing.T) {
	f := startFleet(t, nil, "A")
	r := anarchon(t, "--server", f.url, "trigger", "report", "--wait")
	require.Equal(t, exitOK, r.code, r.stderr)
	f.failNext.Store(true)
	r = anarchon(t, "--server", f.url, "trigger", "report", "--wait")
	require.Equal(t, exitFail, r.code)

	r = anarchon(t, "--server", f.url, "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	assert.Regexp(t, `^report active every 1h in \S+ error (now|\d+s ago) \(manual\) (now|\d+s ago) -$`, ls[2])
	r = anarchon(t, "--server", f.url, "jobs", "--window", "200ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls = lines(r.stdout)
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`
	assert.Regexp(t, `^report active every 1h0m0s \(aligned to UTC\)`+regexp.QuoteMeta(", from "+f.startText())+` `+stamp+` \(in \S+\) `+
		stamp+` \((now|\d+s ago)\) error on A, lag \S+, took \S+, manual `+stamp+` \(\S+( ago)?\) `+stamp+` \(\S+( ago)?\) error: disk full - A$`, ls[2])

	r = anarchon(t, "--server", f.url, "--json", "jobs", "--window", "200ms")
	var fl fleet.Fleet
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fl))
	rep := fl.Jobs[1]
	require.NotNil(t, rep.LastRun)
	require.NotNil(t, rep.LastSuccess)
	require.NotNil(t, rep.LastFailure)
	assert.Equal(t, scheduler.StatusError, rep.LastRun.Status)
	assert.Equal(t, scheduler.StatusOK, rep.LastSuccess.Status)
	assert.Equal(t, "disk full", rep.LastFailure.Error)
	assert.Equal(t, fleet.JobActive, rep.State)
	assert.False(t, rep.Next.IsZero())
}

func TestActiveCommand(t *testing.T) {
	f := startFleet(t, nil, "A")
	r := anarchon(t, "--server", f.url, "active")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no unfinished run\n", r.stdout)
	r = anarchon(t, "--server", f.url, "active", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no unfinished run of \"report\"\n", r.stdout)
	r = anarchon(t, "--server", f.url, "--json", "active", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	var a fleet.ActiveReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &a))
	assert.Equal(t, "report", a.Job)
	assert.Equal(t, "A", a.Instance)
	assert.Empty(t, a.Runs)
	r = anarchon(t, "--server", f.url, "active", "nobody")
	oneErrorLine(t, r, `no replica declares job "nobody" (replicas up: A)`)
	r = anarchon(t, "--server", f.url, "active", "a", "b")
	assert.Equal(t, exitUsage, r.code)
}

// A slot whose attempt failed and stored its retry shows when the retry comes, in
// active and in jobs.
func TestActiveShowsAStoredRetry(t *testing.T) {
	f := startFleet(t, nil, "A")
	ctx := t.Context()
	slot := time.Now().Truncate(time.Hour).Add(-time.Hour)
	runs := f.backend.Runs()
	in := backend.RunClaim{Job: "report", Slot: slot, Token: "tok-1", Instance: "B", Lease: time.Minute, Deadline: time.Now().Add(time.Hour)}
	res, err := runs.Claim(ctx, in)
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeWon, res.Outcome)
	require.NoError(t, runs.(backend.Retrier).Retry(ctx, in.Key(), time.Hour, time.Minute))

	r := anarchon(t, "--server", f.url, "active", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `report\s+\S+\s+B\s+1\s+retry in \S+\s+-\n`, r.stdout, "the failed attempt, when its retry comes, no lease")
	r = anarchon(t, "--server", f.url, "active", "report", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `report\s+\S+\s+B\s+1\s+\d+\s+retry at \S+ \(in \S+\)\s+-\n`, r.stdout, "with the fence and the time")
	r = anarchon(t, "--server", f.url, "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `\nreport .* 1\n`, r.stdout, "one run in progress")
	r = anarchon(t, "--server", f.url, "jobs", "--window", "200ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "B#1 (failed, retry at ")
}

// TestWatch runs watch with a context that ends, while runs are triggered.
func TestWatch(t *testing.T) {
	f := startFleet(t, nil, "A", "B")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"--server", f.url, "watch", "report"}, os.Getenv, &out, &errb) }()
	for ctx.Err() == nil {
		_, err := f.scheds[0].RunNow(context.Background(), "report", scheduler.RequestedBy("test"))
		require.NoError(t, err)
		_, err = f.scheds[1].RunNow(context.Background(), "nightly backup")
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond)
	}
	code := <-done
	t.Logf("watch → %d\n%s%s", code, out.String(), errb.String())
	assert.Equal(t, exitOK, code, "an interrupt ends watch normally")
	assert.Contains(t, errb.String(), `watching "report"`)
	assert.Regexp(t, `(?m)^\S+Z  A  report  started  slot \S+  attempt 1  manual  lag \S+$`, out.String())
	assert.Regexp(t, `(?m)^\S+Z  A  report  finished  slot \S+  attempt 1  manual  ok  took \S+$`, out.String())
	assert.NotContains(t, out.String(), "nightly backup", "only the job asked for")
}

// syncBuffer is a bytes.Buffer safe for the watch goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestActiveSaysWhatTheViewLeftOut: a job with more runs in progress than the
// jobs view lists shows the count of the others in jobs, and active (of every
// job) warns that active JOB lists them all.
func TestActiveSaysWhatTheViewLeftOut(t *testing.T) {
	f := startFleet(t, nil, "A")
	for i := range fleet.MaxViewRunning + 2 {
		slot := time.Now().Truncate(time.Hour).Add(-time.Duration(i+1) * time.Minute)
		res, err := f.backend.Runs().Claim(context.Background(), backend.RunClaim{Job: "report", Slot: slot,
			Token: "t" + string(rune('a'+i)), Instance: "A", Lease: time.Hour, Deadline: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, scheduler.OutcomeWon, res.Outcome)
	}
	r := anarchon(t, "--server", f.url, "jobs", "--window", "200ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "A#1,+2")
	r = anarchon(t, "--server", f.url, "active")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Len(t, lines(r.stdout), 1+fleet.MaxViewRunning)
	assert.Equal(t, "warning: 2 more unfinished runs of \"report\" than listed: anarchon active report lists them all\n", r.stderr)
	r = anarchon(t, "--server", f.url, "active", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Len(t, lines(r.stdout), 1+fleet.MaxViewRunning+2)
}

func TestBackfill(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	f := &testFleet{url: srv.ClientURL(), backend: memory.New(), past: true}
	f.startReplicas(t, srv.Connect, nil)
	// The three hourly slots before now; the newest may have run already, or run
	// beside the backfill, when the replicas started in the first minute of its hour.
	r := anarchon(t, "--server", f.url, "backfill", "report", "--from", "-3h", "--to", "-1s", "--wait", "--by", "ana", "--timeout", "20s")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 5, "the header, three hourly slots and the summary: %q", r.stdout)
	assert.Equal(t, "SLOT OUTCOME STATUS INSTANCE ATTEMPT ERROR", ls[0])
	ran := 0
	for i, l := range ls[1:4] {
		if i == 2 && !strings.Contains(l, "Z ran ok ") {
			assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:00:00Z (already ran|elsewhere) \S+ [ABC] 1$`, l, "the slot due at start")
			continue
		}
		assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:00:00Z ran ok [ABC] 1$`, l)
		ran++
	}
	assert.Regexp(t, fmt.Sprintf(`^backfilled "report" on [ABC] \(by ana\): (1 \S+( \S+)?, )?%d ran$`, ran), ls[4])

	r = anarchon(t, "--server", f.url, "--json", "backfill", "report", "--from", "-3h", "--to", "-1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	var br fleet.BackfillReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &br))
	assert.Equal(t, fleet.StateAccepted, br.State)
	assert.Equal(t, map[string]int{"already_ran": 3}, br.Counts, "a second backfill takes nothing")

	r = anarchon(t, "--server", f.url, "history", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, ran, strings.Count(r.stdout, " backfill "), "history's KIND says backfill: %s", r.stdout)

	r = anarchon(t, "--server", f.url, "backfill", "report", "--from", "-3h", "--to", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	oneErrorLine(t, r, `anarchon: backfill "report": invalid option: to (`)
	assert.Equal(t, 1, strings.Count(r.stderr, `backfill "report"`), "said once: %s", r.stderr)

	for _, args := range [][]string{
		{"backfill", "report"},
		{"backfill", "report", "--from", "-1h"},
		{"backfill", "report", "--from", "yesterday", "--to", "-1s"},
		{"backfill", "report", "--from", "-1h", "--to", "-2h"},
		{"backfill", "--from", "-1h", "--to", "-1s"},
	} {
		r := anarchon(t, append([]string{"--server", f.url}, args...)...)
		assert.Equal(t, exitUsage, r.code, "%q", args)
		assert.Regexp(t, `\(anarchon [^)]+\)\n$`, r.stderr, "%q: what to do", args)
	}
	assert.Zero(t, f.manual.Load(), "a backfill is not a manual run")
}

// A run a later slot asked to end shows which slot asked, in active and jobs.
func TestActiveShowsACancelRequest(t *testing.T) {
	f := startFleet(t, nil, "A")
	first := time.Now().Truncate(time.Hour).Add(-2 * time.Minute)
	for i, tok := range []string{"holder", "asker"} {
		res, err := f.backend.Runs().Claim(context.Background(), backend.RunClaim{Job: "report", Slot: first.Add(time.Duration(i) * time.Minute),
			Token: tok, Instance: "B", Lease: time.Hour, Deadline: time.Now().Add(time.Hour), Overlap: backend.OverlapCancelOther})
		require.NoError(t, err)
		require.Equal(t, []scheduler.ClaimOutcome{scheduler.OutcomeWon, scheduler.OutcomeRunning}[i], res.Outcome)
	}
	asked := first.Add(time.Minute).UTC().Format("2006-01-02T15:04:05Z")
	r := anarchon(t, "--server", f.url, "active", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "cancelling (asked by B)")
	r = anarchon(t, "--server", f.url, "active", "report", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "cancelling for "+asked+" (asked by B)")
	r = anarchon(t, "--server", f.url, "jobs", "--window", "200ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "B#1 (cancelling for "+asked+")")
}

func TestActiveShowsABufferedSlot(t *testing.T) {
	f := startFleet(t, nil, "A")
	first := time.Now().Truncate(time.Hour).Add(-2 * time.Minute)
	for i, tok := range []string{"holder", "waiter"} {
		res, err := f.backend.Runs().Claim(context.Background(), backend.RunClaim{Job: "report", Slot: first.Add(time.Duration(i) * time.Minute),
			Token: tok, Instance: "B", Lease: time.Hour, Deadline: time.Now().Add(time.Hour), Overlap: backend.OverlapBufferOne})
		require.NoError(t, err)
		require.Equal(t, []scheduler.ClaimOutcome{scheduler.OutcomeWon, scheduler.OutcomeBuffered}[i], res.Outcome)
	}
	buffered := first.Add(time.Minute).UTC().Format("2006-01-02T15:04:05Z")
	r := anarchon(t, "--server", f.url, "active", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, buffered+` +B +0 +buffered +-`, r.stdout)
	r = anarchon(t, "--server", f.url, "active", "report", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, buffered+` +B +0 +0 +buffered \(runs when the run before it ends\) +-`, r.stdout)
	r = anarchon(t, "--server", f.url, "jobs", "--window", "200ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "B#1,buffered "+buffered)
}

// TestNoAnswerNamesTheJob: a request that something receives and never answers
// times out with the job's name and what to do, never its subject token.
func TestNoAnswerNamesTheJob(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	nc := natstest.URL(t, srv.ClientURL())
	sub, err := nc.Subscribe(fleet.DefaultPrefix+".TRIGGER.>", func(*nats.Msg) {}) // hears, never answers
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())
	r := anarchon(t, "--server", srv.ClientURL(), "--timeout", "300ms", "trigger", "refresh")
	oneErrorLine(t, r, `anarchon: trigger "refresh": no answer within --timeout 300ms; give a longer --timeout, or see whether the replicas are up with anarchon jobs`)
	assert.NotContains(t, r.stderr, fleet.JobToken("refresh"))
}
