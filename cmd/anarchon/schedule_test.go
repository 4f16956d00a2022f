package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// feedsFleet is three replicas that declare "feeds", a job of schedule entries,
// and report.
func feedsFleet(t *testing.T) *testFleet {
	t.Helper()
	return startFleet(t, func(string) []fleetJob { return []fleetJob{{"feeds", 0}, {"report", time.Hour}} })
}

// followed waits until every replica follows n entries.
func (f *testFleet) followed(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range f.scheds {
			if got, _ := s.EntryCounts(); got != n {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond)
}

func (f *testFleet) stored(t *testing.T, id string) (backend.Entry, error) {
	t.Helper()
	return f.backend.GetEntry(context.Background(), "feeds", id)
}

func TestScheduleAddShowSetRemove(t *testing.T) {
	f := feedsFleet(t)
	srv := []string{"--server", f.url}
	r := anarchon(t, append(srv, "schedule", "add", "feeds", "eu-west", "--cron", "0 9 * * *", "--zone", "Europe/Athens",
		"--payload", `{"r":1}`, "--by", "ana", "--start", "+1h")...) // no slot runs during the test
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^added entry "eu-west" of "feeds" on [ABC]: at 09:00 every day \(Europe/Athens\), from \S+, revision \d+; every replica follows within a second\n$`, r.stdout)
	first, err := f.stored(t, "eu-west")
	require.NoError(t, err)
	assert.Equal(t, []byte(`{"r":1}`), first.Payload)

	r = anarchon(t, append(srv, "schedule", "add", "feeds", "eu-west", "--every", "1h")...)
	oneErrorLine(t, r, `anarchon: schedule add "feeds" "eu-west": `)
	assert.Equal(t, `anarchon: schedule add "feeds" "eu-west": a schedule entry with that ID exists (replica `, r.stderr[:strings.Index(r.stderr, "(replica ")+len("(replica ")])
	assert.Equal(t, 1, strings.Count(r.stderr, "eu-west"), "the entry named once: %s", r.stderr)

	f.followed(t, 1)
	r = anarchon(t, append(srv, "schedule", "ls", "feeds")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 2, r.stdout)
	assert.Equal(t, "ID SCHEDULE STATE NEXT LAST RUN FAILED REV", ls[0])
	assert.Regexp(t, `^eu-west at 09:00 every day \(Europe/Athens\) active in \S+ - - `+strconv.FormatUint(first.Revision, 10)+`$`, ls[1])
	r = anarchon(t, append(srv, "schedule", "ls", "feeds", "-o", "wide")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	ls = lines(r.stdout)
	assert.Equal(t, "ID SCHEDULE STATE NEXT LAST RUN LAST SUCCESS LAST FAILURE PAYLOAD REV BY", ls[0])
	assert.Regexp(t, `^eu-west at 09:00 every day \(Europe/Athens\), from \S+ active \S+ \(in \S+\) - - - 7B `+strconv.FormatUint(first.Revision, 10)+` ana$`, ls[1], "BY is who asked")

	r = anarchon(t, append(srv, "schedule", "show", "feeds", "eu-west")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "entry         eu-west of feeds\n")
	assert.Contains(t, r.stdout, `payload       7 bytes: {"r":1}`)
	assert.Contains(t, r.stdout, "state         active\n")
	assert.Regexp(t, `(?m)^changed by    ana, through replica [ABC]$`, r.stdout)
	assert.Contains(t, r.stdout, "no runs recorded\n")

	// set changes what it is given on the entry as read.
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "eu-west", "--paused")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^updated entry "eu-west" of "feeds" on [ABC]: at 09:00 every day \(Europe/Athens\), from \S+ \(paused\), revision \d+;`, r.stdout)
	second, err := f.stored(t, "eu-west")
	require.NoError(t, err)
	assert.True(t, second.Paused)
	assert.Equal(t, first.Cron, second.Cron)
	assert.Equal(t, first.Payload, second.Payload, "the payload kept")

	// A new cron expression keeps the entry's zone.
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "eu-west", "--cron", "0 10 * * *")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	recron, err := f.stored(t, "eu-west")
	require.NoError(t, err)
	assert.Equal(t, "0 10 * * *", recron.Cron)
	assert.Equal(t, "Europe/Athens", recron.Zone, "the zone kept")
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "eu-west", "--cron", "0 9 * * *")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	second, err = f.stored(t, "eu-west")
	require.NoError(t, err)

	// A change based on the first revision is refused: nothing stored.
	rev := strconv.FormatUint(first.Revision, 10)
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "eu-west", "--every", "1h", "--rev", rev)...)
	oneErrorLine(t, r, `anarchon: schedule set "feeds" "eu-west": `)
	assert.Contains(t, r.stderr, "changed by another writer")
	r = anarchon(t, append(srv, "schedule", "rm", "feeds", "eu-west", "--rev", rev)...)
	oneErrorLine(t, r, "changed by another writer")
	now, err := f.stored(t, "eu-west")
	require.NoError(t, err)
	assert.Equal(t, second, now)

	r = anarchon(t, append(srv, "--json", "schedule", "ls", "feeds")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var page fleet.EntriesReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Entries, 1)
	assert.True(t, page.Entries[0].Paused)
	assert.Equal(t, second.Revision, page.Entries[0].Revision)

	r = anarchon(t, append(srv, "schedule", "rm", "feeds", "eu-west")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^removed entry "eu-west" of "feeds" on [ABC];`, r.stdout)
	_, err = f.stored(t, "eu-west")
	require.ErrorIs(t, err, backend.ErrEntryNotFound)
	r = anarchon(t, append(srv, "schedule", "show", "feeds", "eu-west")...)
	oneErrorLine(t, r, `anarchon: schedule show "feeds" "eu-west": no schedule entry of job "feeds" has that ID (replica `)
	assert.Equal(t, 1, strings.Count(r.stderr, "eu-west"), "the entry named once: %s", r.stderr)
	r = anarchon(t, append(srv, "schedule", "ls", "feeds")...)
	assert.Equal(t, "no entries of \"feeds\"\n", r.stdout)
}

// TestScheduleListPages: ls shows a page and the command for the next.
func TestScheduleListPages(t *testing.T) {
	f := feedsFleet(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		_, err := f.scheds[0].AddEntry(ctx, "feeds", id, scheduler.EntrySpec{Every: time.Hour})
		require.NoError(t, err)
	}
	r := anarchon(t, "--server", f.url, "schedule", "ls", "feeds", "--limit", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 4, r.stdout)
	assert.Regexp(t, `^a every 1h active `, ls[1])
	assert.Regexp(t, `^b `, ls[2])
	assert.Equal(t, `more: anarchon schedule ls feeds --after=b --limit=2`, ls[3])
	r = anarchon(t, "--server", f.url, "schedule", "ls", "feeds", "--after", "b")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls = lines(r.stdout)
	require.Len(t, ls, 2, r.stdout)
	assert.Regexp(t, `^c `, ls[1])
}

// TestScheduleOfAnUndeclaredJob: a job no replica declares gets a clear word on
// what happens to its stored entries.
func TestScheduleOfAnUndeclaredJob(t *testing.T) {
	f := feedsFleet(t)
	_, err := f.backend.CreateEntry(context.Background(), backend.Entry{Job: "ghost", ID: "a", EntrySpec: backend.EntrySpec{Every: time.Hour}})
	require.NoError(t, err)
	r := anarchon(t, "--server", f.url, "schedule", "ls", "ghost")
	oneErrorLine(t, r, `anarchon: schedule ls "ghost": no replica declares job "ghost" (replicas up: A, B, C); the entries of a job no replica declares stay stored and never run`)
}

func TestScheduleBadInput(t *testing.T) {
	f := feedsFleet(t)
	srv := []string{"--server", f.url}
	big := filepath.Join(t.TempDir(), "big")
	require.NoError(t, os.WriteFile(big, make([]byte, backend.MaxEntryPayload+1), 0o600))
	for _, args := range [][]string{
		{"schedule"},
		{"schedule", "frob", "feeds"},
		{"schedule", "ls"},
		{"schedule", "ls", "feeds", "x"},
		{"schedule", "show", "feeds"},
		{"schedule", "add", "feeds", "x"},
		{"schedule", "add", "feeds", "x", "--every", "1h", "--cron", "* * * * *"},
		{"schedule", "add", "feeds", "x", "--every", "1h", "--payload", "a", "--payload-file", big},
		{"schedule", "add", "feeds", "x", "--every", "1h", "--payload", strings.Repeat("p", backend.MaxEntryPayload+1)},
		{"schedule", "add", "feeds", "x", "--at", "tomorrow"},
		{"schedule", "add", "feeds", "", "--every", "1h"},
		{"schedule", "add", "feeds", "x", "--every", "1h", "--rev", "3"},
		{"schedule", "ls", "feeds", "--rev", "3"},
		{"schedule", "ls", "feeds", "--limit", "-1"},
		{"schedule", "rm", "feeds", "x", "--every", "1h"},
		{"schedule", "set", "feeds", "x"},
		{"schedule", "set", "feeds", "x", "--rev", "2"},
		{"schedule", "add", "feeds", "x", "--every", "1h", "--deadline", "soon"},
		{"schedule", "add", "feeds", "x", "--every", "1h", "--deadline", "-5m"},
	} {
		r := anarchon(t, append(srv, args...)...)
		assert.Equal(t, exitUsage, r.code, "%q", args)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q: one line", args)
		assert.Regexp(t, `\(anarchon [^)]+\)\n$`, r.stderr, "%q: what to do", args)
	}
	// A schedule given twice is a conflict, not a missing schedule.
	r := anarchon(t, append(srv, "schedule", "add", "feeds", "x", "--cron", "* * * * *", "--at", "+1h")...)
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "anarchon: --cron and --at conflict: an entry has one schedule, give one of --every, --cron and --at (anarchon schedule add --help shows the usage)\n", r.stderr)
	r = anarchon(t, append(srv, "schedule", "add", "feeds", "x", "--every", "1h", "--payload-file", big)...)
	oneErrorLine(t, r, "--payload-file: more than 16384 bytes")

	// What the replica refuses: 400, nothing stored.
	r = anarchon(t, append(srv, "schedule", "add", "feeds", "x", "--cron", "61 * * * *")...)
	oneErrorLine(t, r, `anarchon: schedule add "feeds" "x": invalid schedule entry: entry "x" of job "feeds": invalid schedule: cron "61 * * * *"`)
	assert.NotContains(t, r.stderr, "scheduler: ", "no stutter")
	assert.Regexp(t, `\(replica [ABC]\)\n$`, r.stderr)
	r = anarchon(t, append(srv, "schedule", "add", "feeds", "x", "--at", time.Now().Add(-time.Hour).Format(time.RFC3339))...)
	oneErrorLine(t, r, "no slot after now")
	list, err := f.backend.ListEntries(context.Background(), "feeds", "feeds", "", 10)
	require.NoError(t, err)
	assert.Empty(t, list)

	// A payload from a file, and a one-time entry an hour from now.
	file := filepath.Join(t.TempDir(), "p")
	require.NoError(t, os.WriteFile(file, []byte("from a file"), 0o600))
	r = anarchon(t, append(srv, "schedule", "add", "feeds", "once", "--at", "+1h", "--payload-file", file)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `: once at \S+, revision`, r.stdout)
	e, err := f.stored(t, "once")
	require.NoError(t, err)
	assert.Equal(t, "from a file", string(e.Payload))
	assert.WithinDuration(t, time.Now().Add(time.Hour), e.At, time.Minute)

	// A deadline of its own; the replica refuses one its history cannot judge.
	r = anarchon(t, append(srv, "schedule", "add", "feeds", "daily", "--cron", "0 9 * * *", "--deadline", "30m")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "at 09:00 every day (UTC), deadline 30m0s, revision")
	e, err = f.stored(t, "daily")
	require.NoError(t, err)
	assert.Equal(t, 30*time.Minute, e.Deadline)
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "daily", "--deadline", "")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	e, err = f.stored(t, "daily")
	require.NoError(t, err)
	assert.Zero(t, e.Deadline, "an empty --deadline: the job's")
	r = anarchon(t, append(srv, "schedule", "add", "feeds", "fast", "--every", "1s", "--deadline", "1h")...)
	oneErrorLine(t, r, "the job's history must keep at least")

	r = anarchon(t, "help", "schedule", "add")
	assert.Contains(t, r.stdout, "anarchon schedule add JOB ID (--every D | --cron E [--zone Z] [--dst-…] | --at T)")
}

// TestScheduleDST: an entry's DST policy is stored, shown in its schedule, kept
// by a change that does not name it, and refused when it is no policy.
func TestScheduleDST(t *testing.T) {
	f := feedsFleet(t)
	srv := []string{"--server", f.url}
	dst := func(id string) scheduler.DSTPolicy {
		t.Helper()
		e, err := f.stored(t, id)
		require.NoError(t, err)
		return e.DST
	}
	r := anarchon(t, append(srv, "schedule", "add", "feeds", "ny", "--cron", "30 1 * * *", "--zone", "America/New_York",
		"--dst-repeated", "both", "--dst-missing", "skip")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, ": at 01:30 every day (America/New_York; DST repeated=both missing=skip), revision")
	assert.Equal(t, scheduler.DSTPolicy{Repeated: scheduler.DSTBoth, Missing: scheduler.DSTSkip}, dst("ny"))

	f.followed(t, 1)
	r = anarchon(t, append(srv, "schedule", "ls", "feeds", "-o", "wide")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 2, r.stdout)
	assert.True(t, strings.HasPrefix(ls[1], "ny at 01:30 every day (America/New_York; DST repeated=both missing=skip) active "), ls[1])
	r = anarchon(t, append(srv, "schedule", "show", "feeds", "ny")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "schedule      at 01:30 every day (America/New_York; DST repeated=both missing=skip)\n")
	r = anarchon(t, append(srv, "describe", "feeds", "ny")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^schedule +at 01:30 every day \(America/New_York; DST repeated=both missing=skip\)$`, r.stdout)

	// A change that does not name the policy keeps it: a pause, a new expression.
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "ny", "--paused")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "ny", "--cron", "30 2 * * *")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, scheduler.DSTPolicy{Repeated: scheduler.DSTBoth, Missing: scheduler.DSTSkip}, dst("ny"))
	// An empty value returns to the default; one given changes it.
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "ny", "--dst-missing", "", "--dst-repeated", "last")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "(America/New_York; DST repeated=last) (paused)")
	assert.Equal(t, scheduler.DSTPolicy{Repeated: scheduler.DSTLast}, dst("ny"))
	// A schedule that is no cron drops it.
	r = anarchon(t, append(srv, "schedule", "set", "feeds", "ny", "--every", "1h")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Zero(t, dst("ny"))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "add", "feeds", "x", "--cron", "30 1 * * *", "--zone", "America/New_York", "--dst-repeated", "twice"},
			`anarchon: --dst-repeated "twice": want first, last or both (anarchon schedule add --help shows the usage)`},
		{[]string{"schedule", "add", "feeds", "x", "--cron", "30 1 * * *", "--zone", "America/New_York", "--dst-missing", "later"},
			`anarchon: --dst-missing "later": want shift or skip (anarchon schedule add --help shows the usage)`},
		{[]string{"schedule", "add", "feeds", "x", "--every", "1h", "--dst-missing", "skip"},
			`anarchon: --dst-missing is the daylight saving time policy of --cron; give --cron too (anarchon schedule add --help shows the usage)`},
		{[]string{"schedule", "set", "feeds", "ny", "--at", "+1h", "--dst-repeated", "both"},
			`anarchon: --dst-repeated is the daylight saving time policy of --cron; give --cron too (anarchon schedule set --help shows the usage)`},
	} {
		r := anarchon(t, append(srv, tc.args...)...)
		assert.Equal(t, exitUsage, r.code, "%q", tc.args)
		assert.Equal(t, tc.want+"\n", r.stderr, "%q", tc.args)
	}
	// What the replica refuses: a policy in a zone that never changes its clocks.
	r = anarchon(t, append(srv, "schedule", "add", "feeds", "x", "--cron", "30 1 * * *", "--dst-repeated", "both")...)
	oneErrorLine(t, r, `anarchon: schedule add "feeds" "x": invalid schedule entry: entry "x" of job "feeds": invalid schedule: cron "30 1 * * *": invalid option: zone UTC never changes its clocks`)
	_, err := f.stored(t, "x")
	assert.ErrorIs(t, err, backend.ErrEntryNotFound)
}
