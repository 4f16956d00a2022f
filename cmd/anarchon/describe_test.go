package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestDescribeShowsEveryDeclaredPolicy: describe says each policy and limit the
// replicas declare in the registry, and which replica declares what when they
// differ.
func TestDescribeShowsEveryDeclaredPolicy(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	f := &testFleet{url: srv.ClientURL(), backend: memory.New(), jobOpts: func(id, job string) []scheduler.JobOption {
		timeout := time.Minute
		if id == "C" {
			timeout = 2 * time.Minute
		}
		return []scheduler.JobOption{scheduler.WithLease(20 * time.Second), scheduler.WithOverlap(scheduler.OverlapSkip),
			scheduler.WithCatchUp(scheduler.CatchUpLatest, time.Hour), scheduler.WithMaxLate(time.Minute),
			scheduler.WithJitter(time.Second), scheduler.WithTimeout(timeout), scheduler.WithMaxRuns(7),
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: 2 * time.Second, MaxBackoff: time.Minute}),
			scheduler.WithMaxManualRuns(2), scheduler.WithHistory(40, 72*time.Hour), scheduler.WithPauseAfterFailures(5)}
	}}
	f.startReplicas(t, srv.Connect, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}} })
	r := anarchon(t, "--server", f.url, "describe", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	kv := map[string]string{}
	for l := range strings.Lines(r.stdout) {
		k, v, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "  ")
		kv[k] = strings.TrimSpace(v)
	}
	assert.Equal(t, "report", kv["job"])
	assert.Equal(t, "active (run limit 7)", kv["state"])
	assert.Regexp(t, `^every 1h0m0s \(aligned to UTC\), from \S+$`, kv["schedule"])
	assert.Regexp(t, `^\S+Z \(in \S+\)$`, kv["next"])
	assert.Equal(t, "skip: a slot due while a run is in progress is recorded skipped", kv["overlap"])
	assert.Equal(t, "latest: the newest missed slot runs, within the catch-up window", kv["catch-up"])
	assert.Equal(t, "20s", kv["lease"])
	assert.Equal(t, "1m0s", kv["max lateness"])
	assert.Equal(t, "1s", kv["jitter"])
	assert.Equal(t, "1m0s (A, B); 2m0s (C)  [replicas differ]", kv["timeout"])
	assert.Equal(t, "7 runs, counted fleet-wide", kv["run limit"])
	assert.Equal(t, "1h0m0s", kv["catch-up window"])
	assert.Equal(t, "3 attempts, backoff 2s up to 1m0s", kv["retry"])
	assert.Equal(t, "2 at once per replica", kv["manual runs"])
	assert.Equal(t, "5 failed slots in a row", kv["pause after"])
	assert.Equal(t, "default", kv["buffer cap"])
	assert.Equal(t, "forever", kv["dedupe window"], "the memory backend forgets no slot")
	assert.Equal(t, "40 records for 72h0m0s", kv["retention"])
	assert.NotContains(t, kv, "daylight saving", "an Every job has no DST policy")
	assertFits(t, r.stdout)
	assert.Equal(t, "A ("+fleet.Version+", memory), B ("+fleet.Version+", memory), C ("+fleet.Version+", memory)", kv["replicas"])
	assert.Equal(t, "warning: replicas declare job \"report\" with different timeout: a rolling upgrade, or configurations that differ\n", r.stderr)

	r = anarchon(t, "--server", f.url, "--json", "describe", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	var d Description
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	assert.Equal(t, "report", d.Job.Name)
	require.Len(t, d.Declarations, 3)
	assert.EqualValues(t, 20000, d.Declarations[0].Declaration.LeaseMS)

	// A misspelt job: the one meant.
	r = anarchon(t, "--server", f.url, "describe", "reprot")
	oneErrorLine(t, r, `anarchon: describe job "reprot": no replica declares job "reprot" (replicas up: A, B, C); did you mean "report"?`)
}

// TestDescribeShowsTheDSTPolicy: a cron job's DST policy is in its schedule and
// its own line; replicas that declare different policies differ on both.
func TestDescribeShowsTheDSTPolicy(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	f := &testFleet{url: srv.ClientURL(), backend: memory.New(), more: func(t *testing.T, id string, s *scheduler.Scheduler) {
		p := scheduler.DSTPolicy{Repeated: scheduler.DSTBoth, Missing: scheduler.DSTSkip}
		require.NoError(t, s.Cron("night", "30 1 * * *", func(context.Context, scheduler.Run) error { return nil },
			scheduler.WithLocation(ny), scheduler.WithDST(p)))
		if id == "C" {
			p.Repeated = scheduler.DSTLast
		}
		require.NoError(t, s.Cron("shift", "30 2 * * *", func(context.Context, scheduler.Run) error { return nil },
			scheduler.WithLocation(ny), scheduler.WithDST(p)))
	}}
	f.startReplicas(t, srv.Connect, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}} })
	describe := func(job string) (map[string]string, string) {
		r := anarchon(t, "--server", f.url, "describe", job)
		require.Equal(t, exitOK, r.code, r.stderr)
		kv := map[string]string{}
		for l := range strings.Lines(r.stdout) {
			k, v, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "  ")
			kv[k] = strings.TrimSpace(v)
		}
		return kv, r.stderr
	}
	kv, stderr := describe("night")
	assert.Equal(t, "at 01:30 every day (America/New_York; DST repeated=both missing=skip)", kv["schedule"])
	assert.Equal(t, "repeated both, missing skip: a wall time clocks repeat runs at both occurrences; one they skip does not run", kv["daylight saving"])
	assert.Empty(t, stderr)

	kv, stderr = describe("shift")
	assert.Equal(t, "at 02:30 every day (America/New_York; DST repeated=both missing=skip) (A, B); at 02:30 every day (America/New_York; DST repeated=last missing=skip) (C)  [replicas differ]", kv["schedule"])
	assert.Equal(t, "repeated both, missing skip: a wall time clocks repeat runs at both occurrences; one they skip does not run (A, B); "+
		"repeated last, missing skip: a wall time clocks repeat runs once, at its second occurrence; one they skip does not run (C)  [replicas differ]", kv["daylight saving"])
	assert.Contains(t, stderr, `replicas declare job "shift" with different daylight saving: a rolling upgrade, or configurations that differ`)
}

func TestDescribeAnEntry(t *testing.T) {
	f := feedsFleet(t)
	r := anarchon(t, "--server", f.url, "schedule", "add", "feeds", "eu-west", "--every", "1h", "--payload", "hi", "--by", "ana", "--start", "+1h")
	require.Equal(t, exitOK, r.code, r.stderr)
	f.followed(t, 1)
	r = anarchon(t, "--server", f.url, "describe", "feeds", "eu-west")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^entry +eu-west\n`, r.stdout)
	assert.Regexp(t, `(?m)^job +feeds\n`, r.stdout)
	assert.Regexp(t, `schedule +every 1h0m0s \(aligned to UTC\), from \S+\n`, r.stdout)
	assert.Regexp(t, `(?m)^payload +2 bytes: hi\n`, r.stdout)
	assert.Regexp(t, `(?m)^overlap +allow: runs of the job may overlap \(the job's\)\n`, r.stdout)
	assert.Regexp(t, `(?m)^changed by +ana, through replica [ABC]\n`, r.stdout)
	assert.NotContains(t, r.stdout, "daylight saving", "an entry's DST policy is its own, in its schedule")
	assert.Contains(t, r.stdout, "no runs recorded\n")
	assertFits(t, r.stdout)

	// The entries line counts the job's own entries: report has none.
	r = anarchon(t, "--server", f.url, "describe", "feeds")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^entries +1 active; anarchon schedule ls feeds lists them\n`, r.stdout)
	r = anarchon(t, "--server", f.url, "describe", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "entries")

	r = anarchon(t, "--server", f.url, "describe", "feeds", "nope")
	oneErrorLine(t, r, `anarchon: describe entry "nope" of job "feeds": `)
	assert.Contains(t, r.stderr, "anarchon schedule ls feeds lists the job's entries")
	r = anarchon(t, "--server", f.url, "describe")
	assert.Equal(t, exitUsage, r.code)
}

// TestHistoryFilters: --status, --since and --entry pick runs; a status that is
// none is a usage error naming the statuses.
func TestHistoryFilters(t *testing.T) {
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}, {"feeds", 0}} }, "A")
	for i := range 3 {
		f.failNext.Store(i == 1)
		r := anarchon(t, "--server", f.url, "trigger", "report", "--wait")
		require.Equal(t, []int{exitOK, exitFail, exitOK}[i], r.code, r.stderr)
	}
	r := anarchon(t, "--server", f.url, "history", "report", "--status", "error")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 2, r.stdout)
	assert.Contains(t, ls[1], " error A 1 manual by ")
	r = anarchon(t, "--server", f.url, "history", "report", "--status", "ok,error", "-n", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Len(t, lines(r.stdout), 3)
	r = anarchon(t, "--server", f.url, "history", "report", "--since", "1h")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Len(t, lines(r.stdout), 4)
	r = anarchon(t, "--server", f.url, "history", "report", "--since", time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no runs of \"report\" match\n", r.stdout)
	r = anarchon(t, "--server", f.url, "history", "report", "--status", "failed")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `--status "failed": the statuses are ok, error, timeout,`)
	r = anarchon(t, "--server", f.url, "history", "report", "--since", "yesterday")
	assert.Equal(t, exitUsage, r.code)

	// --entry: the runs of one entry, with an ENTRY column.
	for _, id := range []string{"a", "b"} {
		r = anarchon(t, "--server", f.url, "schedule", "add", "feeds", id, "--at", "+1s")
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	require.Eventually(t, func() bool {
		r = anarchon(t, "--server", f.url, "history", "feeds", "--entry", "b")
		return len(lines(r.stdout)) == 2
	}, 10*time.Second, 100*time.Millisecond, "the entry runs once")
	ls = lines(r.stdout)
	assert.Equal(t, "SLOT ENTRY STATUS INSTANCE ATTEMPT KIND LAG DURATION ERROR", ls[0])
	assert.Regexp(t, `^\S+ b ok A 1 scheduled \S+ \S+$`, ls[1])
	r = anarchon(t, "--server", f.url, "history", "feeds", "--entry", "b", "--status", "error")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no runs of entry \"b\" of \"feeds\" match\n", r.stdout)
	r = anarchon(t, "--server", f.url, "history", "feeds", "--entry", "nope")
	oneErrorLine(t, r, `anarchon: history of entry "nope" of job "feeds": `)
}

// TestBackfillOfAJobOfEntries: the job has no slots of its own: a backfill of
// it says to backfill its entries, and --entry and --all-entries backfill them.
func TestBackfillOfAJobOfEntries(t *testing.T) {
	f := feedsFleet(t)
	for _, id := range []string{"a", "b"} {
		r := anarchon(t, "--server", f.url, "schedule", "add", "feeds", id, "--every", "300ms")
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	f.followed(t, 2)
	r := anarchon(t, "--server", f.url, "backfill", "feeds", "--from", "-1h", "--to", "-1s", "--wait")
	oneErrorLine(t, r, `anarchon: backfill "feeds": invalid option: the job has no schedule of its own: backfill its entries (BackfillEntry, BackfillAllEntries) (replica `)
	r = anarchon(t, "--server", f.url, "backfill", "feeds", "--entry", "a", "--all-entries", "--from", "-1h", "--to", "-1s")
	assert.Equal(t, exitUsage, r.code)

	// The job's pause holds the entries' slots: they are recorded paused, then
	// backfilled.
	r = anarchon(t, "--server", f.url, "pause", "feeds", "--reason", "hold")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Eventually(t, func() bool { all, _ := f.paused("feeds"); return all }, 5*time.Second, 5*time.Millisecond)
	from := time.Now()
	time.Sleep(1500 * time.Millisecond)
	to := time.Now()
	r = anarchon(t, "--server", f.url, "resume", "feeds")
	require.Equal(t, exitOK, r.code, r.stderr)
	rng := []string{"--from", from.UTC().Format(time.RFC3339Nano), "--to", to.UTC().Format(time.RFC3339Nano)}

	r = anarchon(t, append([]string{"--server", f.url, "backfill", "feeds", "--entry", "a", "--wait", "--by", "ana"}, rng...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	assert.Equal(t, "SLOT ENTRY OUTCOME STATUS INSTANCE ATTEMPT ERROR", ls[0])
	for _, l := range ls[1 : len(ls)-1] {
		assert.Regexp(t, `^\S+ a ran ok [ABC] 2$`, l, "attempt 1 was recorded paused")
	}
	assert.Regexp(t, `^backfilled entry "a" of "feeds" on [ABC] \(by ana\): \d+ ran$`, ls[len(ls)-1])
	assertFits(t, r.stdout)

	r = anarchon(t, append([]string{"--server", f.url, "backfill", "feeds", "--all-entries", "--wait"}, rng...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^\S+ +a +already ran +ok`, r.stdout)
	assert.Regexp(t, `(?m)^\S+ +b +ran +ok`, r.stdout)
	assert.Regexp(t, `backfilled the entries of "feeds" on [ABC] \(by \S+\): \d+ already ran, \d+ ran\n$`, r.stdout)

	r = anarchon(t, "--server", f.url, "backfill", "report", "--from", "-1h", "--to", "-1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^no slot of "report" falls in \[\S+, \S+\): nothing to run\n$`, r.stdout, "report starts in an hour")
}
