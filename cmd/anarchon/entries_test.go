package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
)

// hostileID is an entry ID an operator may choose: a bidi override and shell
// text (an ID holds no control character).
const (
	hostileID      = "acme\u202egpj.exe $(touch pwned-1)"
	hostileIDShown = `acme\u202egpj.exe $(touch pwned-1)`
)

// TestEntriesInEveryLine: one entry is triggered, shown, watched and listed in
// history by its ID; who changed it is shown; every line is inert, and every
// command line printed quotes the ID for a shell.
func TestEntriesInEveryLine(t *testing.T) {
	f := feedsFleet(t)
	srv := []string{"--server", f.url}
	cmd := func(args ...string) result {
		t.Helper()
		r := anarchon(t, append(srv, args...)...)
		assertInert(t, r.stdout)
		assertInert(t, r.stderr)
		return r
	}
	r := cmd("schedule", "add", "feeds", hostileID, "--every", "1h", "--start", "+1h", "--payload", "p", "--by", "ana"+hostile)
	require.Equal(t, exitOK, r.code, r.stderr)
	f.followed(t, 1)

	r = cmd("schedule", "show", "feeds", hostileID)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^changed by +ana`+regexp.QuoteMeta(hostileShown)+`, through replica [ABC]$`, r.stdout)

	r = cmd("trigger", "feeds", "--entry", hostileID, "--wait", "--by", "bo")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^entry "acme\\u202egpj\.exe \$\(touch pwned-1\)" of "feeds" ran on [ABC] \(by bo\): ok in \S+\n$`, r.stdout)
	r = cmd("trigger", "feeds", "--entry", hostileID)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `; anarchon history feeds --entry='`+hostileIDShown+`' shows how it ends`, "the ID quoted for a shell")
	r = cmd("trigger", "feeds", "--entry", "nobody")
	oneErrorLine(t, r, `anarchon: trigger entry "nobody" of "feeds": `)

	require.Eventually(t, func() bool {
		r = cmd("history", "feeds", "--entry", hostileID, "-o", "wide")
		return len(lines(r.stdout)) == 3
	}, 5*time.Second, 50*time.Millisecond, "two manual runs of the entry")
	ls := lines(r.stdout)
	assert.Equal(t, "SLOT ENTRY STATUS INSTANCE ATTEMPT KIND LAG DURATION ERROR", ls[0])
	assert.Contains(t, ls[1], " "+hostileIDShown+" ok ")
	assert.Contains(t, r.stdout, " manual by bo ")
	r = cmd("history", "feeds")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "no runs of \"feeds\" recorded\n", r.stdout, "the job's own history holds none of its entries' runs")

	// watch: an entry's events name it; --entry keeps its events only.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(wctx, append(srv, "watch", "feeds", "--entry", hostileID), os.Getenv, &out, &errb)
	}()
	require.Eventually(t, func() bool {
		_, err := f.scheds[0].RunEntryNow(context.Background(), "feeds", hostileID)
		require.NoError(t, err)
		_, err = f.scheds[0].RunNow(context.Background(), "feeds")
		require.NoError(t, err)
		return strings.Contains(out.String(), " finished ")
	}, 10*time.Second, 50*time.Millisecond, "watch shows the entry's run")
	wcancel()
	require.Equal(t, exitOK, <-done)
	assertInert(t, out.String())
	for l := range strings.Lines(out.String()) {
		assert.Contains(t, l, "  feeds entry "+hostileIDShown+"  ", "only the entry's events, each naming it")
	}
	r = cmd("watch", "--entry", "x")
	assert.Equal(t, exitUsage, r.code)
}

// TestJobsRowOfAJobOfEntries: the row of a job of entries counts its entries by
// state, shows the newest run of any of them, and the failing ones.
func TestJobsRowOfAJobOfEntries(t *testing.T) {
	f := feedsFleet(t)
	f.failEntry.Store(new("broken" + "\u202e"))
	for _, e := range [][]string{{"broken\u202e", "--every", "300ms"}, {"fine", "--every", "500ms"}, {"held", "--every", "1h", "--paused"}} {
		r := anarchon(t, append([]string{"--server", f.url, "schedule", "add", "feeds"}, e...)...)
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	var r result
	require.Eventually(t, func() bool {
		r = anarchon(t, "--server", f.url, "jobs", "--window", "300ms")
		return r.code == exitOK && strings.Contains(r.stdout, "1 entry")
	}, 10*time.Second, 100*time.Millisecond)
	assertInert(t, r.stdout)
	assertFits(t, r.stdout)
	ls := lines(r.stdout)
	require.GreaterOrEqual(t, len(ls), 3)
	assert.Equal(t, "JOB STATE SCHEDULE NEXT LAST RUN FAILED RUNNING", ls[0])
	assert.Regexp(t, `^feeds active entries: 2 active, 1 paused \S+( \S+)? (ok|error) \S+( ago)? \((broken\\u202e|fine)\) 1 entry -$`, ls[1])

	r = anarchon(t, "--server", f.url, "jobs", "--window", "300ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assertInert(t, r.stdout)
	assert.Contains(t, r.stdout, "its schedule entries: 2 active, 1 paused")
	assert.Regexp(t, `error \(entry broken\\u202e\): disk full; failing: broken\\u202e`, r.stdout)

	r = anarchon(t, "--server", f.url, "describe", "feeds")
	require.Equal(t, exitOK, r.code, r.stderr)
	assertInert(t, r.stdout)
	assert.Regexp(t, `(?m)^entries +2 active, 1 paused; anarchon schedule ls feeds lists them$`, r.stdout)
	assert.Regexp(t, `(?m)^failing entries +broken\\u202e$`, r.stdout)
}

// TestHistoryFiltersWithAnOlderReplica: a replica of an earlier version refuses
// the filters' fields; the command then reads the newest runs and filters them
// itself, saying so.
func TestHistoryFiltersWithAnOlderReplica(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	nc := natstest.Dial(t, srv.Connect)
	now := time.Now().UTC().Truncate(time.Second)
	runs := []fleet.Run{
		{Job: "report", Slot: now, Instance: "old", Attempt: 1, Status: "ok"},
		{Job: "report", Slot: now.Add(-time.Minute), Instance: "old", Attempt: 1, Status: "error", Error: "disk full"},
	}
	sub, err := nc.Subscribe("anarchon.HISTORY."+fleet.JobToken("report"), func(m *nats.Msg) {
		var in map[string]any
		_ = json.Unmarshal(m.Data, &in)
		for k := range in {
			if k != "v" && k != "limit" {
				_ = m.RespondMsg(&nats.Msg{Data: []byte(`{"code":400}`), Header: nats.Header{
					"Nats-Service-Error-Code": {"400"},
					"Nats-Service-Error":      {fmt.Sprintf(`bad request: invalid JSON: json: unknown field %q`, k)}}})
				return
			}
		}
		data, _ := json.Marshal(fleet.HistoryReply{Job: "report", Instance: "old", Limit: 1000, Runs: runs})
		_ = m.Respond(data)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())

	r := anarchon(t, "--server", srv.ClientURL(), "history", "report", "--status", "error")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 2, r.stdout)
	assert.Contains(t, ls[1], " error old 1 scheduled ")
	assert.Equal(t, "warning: the replica that answered predates filters on the replica: the newest 1000 runs were read and filtered here\n", r.stderr)
}
