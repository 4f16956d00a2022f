package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// hostile is a text a replica stores and the command prints: an OSC 52 (set the
// clipboard), an OSC 0 (set the window title), a clear screen, a C1 CSI (U+009B),
// a right-to-left override, and a tab, a newline and a carriage return that would
// break a table row.
const hostile = "\x1b]52;c;cGF5bG9hZA==\x07\x1b]0;pwned\x07\x1b[2J\u009b31m\u202eexe.txt\tcell\nrow\rback"

// hostileShown is hostile as the command prints it.
const hostileShown = `\x1b]52;c;cGF5bG9hZA==\x07\x1b]0;pwned\x07\x1b[2J\u009b31m\u202eexe.txt\tcell\nrow\rback`

// assertInert asserts that out holds nothing a terminal acts on: no C0 control but
// the line ends (and no tab: the tables pad with spaces), no DEL, no C1 control, no
// bidi control, no bad UTF-8.
func assertInert(t *testing.T, out string) {
	t.Helper()
	assert.True(t, utf8.ValidString(out), "valid UTF-8: %q", out)
	for _, r := range out {
		if r != '\n' && unsafeRune(r) {
			assert.Failf(t, "a control reached the output", "%U in %q", r, out)
			return
		}
	}
}

func TestVisible(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"disk full", "disk full"},
		{"", ""},
		{`C:\temp\new`, `C:\temp\new`},
		{"é ✓ 日本語 \uFFFD 👩‍👩‍👧", "é ✓ 日本語 \uFFFD 👩‍👩‍👧"},
		{hostile, hostileShown},
		{"\x00\x01\x1f\x7f", `\x00\x01\x1f\x7f`},
		{"\u0080\u0085\u009b\u009f\u00a0", `\u0080\u0085\u009b\u009f` + "\u00a0"},
		{"\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
			`\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069`},
		{"line\u2028para\u2029", `line\u2028para\u2029`},
		{"bad \xff\xc2 bytes \xe2\x80", `bad \xff\xc2 bytes \xe2\x80`},
		{"\xc2\x9b raw C1 in UTF-8", `\u009b raw C1 in UTF-8`},
	} {
		got := visible(c.in)
		assert.Equal(t, c.want, got, "%q", c.in)
		assert.Equal(t, got, visible(got), "idempotent: %q", c.in)
		assertInert(t, got)
		assert.NotContains(t, got, "\n")
	}
}

func FuzzVisible(f *testing.F) {
	for _, s := range []string{"disk full", hostile, "\xff\xc2", "\u202e\u2069", `\x1b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := visible(s)
		if !utf8.ValidString(got) {
			t.Fatalf("visible(%q) = %q: not UTF-8", s, got)
		}
		for _, r := range got {
			if unsafeRune(r) {
				t.Fatalf("visible(%q) = %q holds %U", s, got, r)
			}
		}
		if again := visible(got); again != got {
			t.Fatalf("visible is not idempotent on %q: %q then %q", s, got, again)
		}
		if safeText(s) && got != s {
			t.Fatalf("visible changed the safe text %q to %q", s, got)
		}
	})
}

// TestTerminalSafeWriter: whatever a print forgot, the writer lets no control
// through; a rune cut between two writes is kept whole; JSON stays JSON that decodes
// to the same values.
func TestTerminalSafeWriter(t *testing.T) {
	var out bytes.Buffer
	w := newTerminalSafe(&out, false)
	text := "row 1\tcell " + hostile + " é✓\n"
	for i := range len(text) {
		_, err := w.Write([]byte(text[i : i+1])) // byte by byte: every rune is cut
		require.NoError(t, err)
	}
	require.NoError(t, w.Flush())
	assert.Equal(t, "row 1\tcell "+strings.NewReplacer(`\t`, "\t", `\n`, "\n").Replace(hostileShown)+" é✓\n", out.String(),
		"the layout's tabs and newlines pass, everything else is escaped")
	assertInert(t, strings.ReplaceAll(out.String(), "\t", " "))

	out.Reset()
	_, err := w.Write([]byte("cut \xe2\x80"))
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	assert.Equal(t, `cut \xe2\x80`, out.String(), "a rune no write completed is written as bad bytes")

	out.Reset()
	w = newTerminalSafe(&out, true)
	in := map[string]string{"error": hostile + "\x7f\u2066", "reason": "é ✓"}
	require.NoError(t, json.NewEncoder(w).Encode(in))
	assertInert(t, out.String())
	assert.Contains(t, out.String(), `\u009b31m\u202eexe.txt`)
	var back map[string]string
	require.NoError(t, json.Unmarshal(out.Bytes(), &back))
	assert.Equal(t, in, back, "the JSON decodes to the texts stored")
}

func TestMakeVisible(t *testing.T) {
	type inner struct {
		Status scheduler.Status
		At     time.Time
		Any    any
	}
	type reply struct {
		Name   string
		Tags   []string
		By     map[string][]string
		Inner  *inner
		Runs   []inner
		Raw    []byte
		hidden string
	}
	at := time.Date(2026, 3, 1, 18, 0, 0, 0, time.UTC)
	r := reply{
		Name: hostile, Tags: []string{"ok", "\x1b[2J"}, By: map[string][]string{"\u202ekey": {"\x07"}},
		Inner: &inner{Status: scheduler.Status("ok\x1b]0;t\x07"), At: at, Any: "\u009b"},
		Runs:  []inner{{Status: "\r"}}, Raw: []byte("\x1b"), hidden: "\x1b",
	}
	makeVisible(&r)
	assert.Equal(t, hostileShown, r.Name)
	assert.Equal(t, []string{"ok", `\x1b[2J`}, r.Tags)
	assert.Equal(t, map[string][]string{`\u202ekey`: {`\x07`}}, r.By)
	assert.Equal(t, scheduler.Status(`ok\x1b]0;t\x07`), r.Inner.Status)
	assert.Equal(t, at, r.Inner.At)
	assert.Equal(t, `\u009b`, r.Inner.Any)
	assert.Equal(t, scheduler.Status(`\r`), r.Runs[0].Status)
	assert.Equal(t, []byte("\x1b"), r.Raw, "bytes are not text")
	assert.Equal(t, "\x1b", r.hidden, "unexported fields are not the reply's")

	var e struct{ P *inner }
	makeVisible(&e) // nil pointers are skipped
	assert.Panics(t, func() { makeVisible(e) })
}

// TestHostileTextIsShownNotObeyed: a replica named with escapes, a pause reason and
// a handler's error made of them, a job name with a bidi override: every command
// prints them as visible escapes, one line per row, and nothing a terminal acts on
// reaches stdout or stderr. --json keeps the texts as stored.
func TestHostileTextIsShownNotObeyed(t *testing.T) {
	const bidiJob = "report\u202egpj.exe"
	instance := "A" + hostile
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}, {bidiJob, time.Hour}} }, instance)
	f.failWith.Store(new(hostile))
	srv := []string{"--server", f.url}
	cmd := func(args ...string) result {
		t.Helper()
		r := anarchon(t, append(srv, args...)...)
		assertInert(t, r.stdout)
		assertInert(t, r.stderr)
		return r
	}

	// trigger: the reply names the replica; the run's error fails the command.
	f.failNext.Store(true)
	r := cmd("trigger", "report", "--wait", "--by", "ana"+hostile)
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stdout, `ran on A`+hostileShown+` (by ana`+hostileShown+`): error in `)
	assert.Equal(t, 1, strings.Count(r.stdout, "\n"))
	assert.Contains(t, r.stderr, `ended error: `+hostileShown+"\n")
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"))

	// history: the error, the instance and who asked, in one row: cut to fit
	// 100 columns, whole with -o wide.
	r = cmd("history", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := lines(r.stdout)
	require.Len(t, ls, 2, "the header and one row")
	assertFits(t, r.stdout)
	r = cmd("history", "report", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls = lines(r.stdout)
	require.Len(t, ls, 2, "the header and one row")
	assert.Contains(t, ls[1], " error A"+hostileShown+" 1 manual by ana"+hostileShown+" ")
	assert.True(t, strings.HasSuffix(ls[1], " "+hostileShown), ls[1])

	r = cmd("--json", "history", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	var h struct {
		Runs []struct{ Error, Instance string }
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &h))
	require.Len(t, h.Runs, 1)
	assert.Equal(t, hostile, h.Runs[0].Error, "--json carries the text as stored")
	assert.Equal(t, instance, h.Runs[0].Instance)

	// pause: the reply repeats the reason and who.
	r = cmd("pause", "report", "--reason", "why"+hostile, "--by", "bo"+hostile, "--for", "1h")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `paused "report": why`+hostileShown+` (by bo`+hostileShown+`, until `)
	assert.Equal(t, 1, strings.Count(r.stdout, "\n"))

	// jobs: the pause, the last failure, the replica, the bidi job name; one row each.
	r = cmd("jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Len(t, lines(r.stdout), 6, "a header, two jobs, a blank line, a header, one replica")
	assertFits(t, r.stdout)
	r = cmd("jobs", "--window", "200ms", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	ls = lines(r.stdout)
	require.Len(t, ls, 6, "a header, two jobs, a blank line, a header, one replica")
	assert.Contains(t, ls[1], `report paused: why`+hostileShown+` (by bo`+hostileShown+`, until `)
	assert.Contains(t, ls[1], ` error: `+hostileShown+" ", "the last failure")
	assert.True(t, strings.HasSuffix(ls[1], " A"+hostileShown), ls[1])
	assert.True(t, strings.HasPrefix(ls[2], `report\u202egpj.exe active `), ls[2])
	assert.True(t, strings.HasPrefix(ls[5], "A"+hostileShown+" "), ls[5])

	// resume: the all-jobs pause that still holds the job is quoted on stderr.
	r = cmd("resume", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = cmd("pause", "--all", "--reason", "freeze"+hostile)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "paused every job: freeze"+hostileShown)
	require.Eventually(t, func() bool { p, ok := f.scheds[0].Paused("report"); return ok && p.Job == "" }, 5*time.Second, 5*time.Millisecond)
	r = cmd("resume", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, `still paused by the all-jobs pause: freeze`+hostileShown+` (by `)
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"))
	r = cmd("resume", "--all")
	require.Equal(t, exitOK, r.code, r.stderr)

	// A replica's refusal names the replica.
	r = cmd("pause", "report", "--reason", strings.Repeat("x", scheduler.MaxPauseText+1))
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, `(replica A`+visible(oneLine(hostile))+")\n", "on one line")

	// The command line's own text, quoted back in errors, is shown the same way.
	r = cmd("trigger", "nobody"+hostile)
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, `nobody\x1b]52;c;`)
	r = cmd("jobs", "--nope"+hostile)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `-nope\x1b]52;c;`)

	// active: a run whose lease holder is named with escapes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot := time.Now().Truncate(time.Hour)
	_, err := f.backend.Runs().Claim(ctx, backend.RunClaim{Job: "report", Slot: slot, Token: backendtest.Token(),
		Instance: "B" + hostile, Lease: time.Hour})
	require.NoError(t, err)
	for _, args := range [][]string{{"active", "-o", "wide"}, {"active", "report", "-o", "wide"}} {
		r = cmd(args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		ls = lines(r.stdout)
		require.Len(t, ls, 2, "%q: the header and one row", args)
		assert.Contains(t, ls[1], " B"+hostileShown+" 1 ", args)
	}

	// watch: the events of a failing run, one line each.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(wctx, append(srv, "watch", bidiJob), os.Getenv, &out, &errb) }()
	require.Eventually(t, func() bool {
		f.failNext.Store(true)
		_, err := f.scheds[0].RunNow(context.Background(), bidiJob)
		require.NoError(t, err)
		return strings.Contains(out.String(), " finished ")
	}, 10*time.Second, 50*time.Millisecond, "watch shows the run")
	wcancel()
	require.Equal(t, exitOK, <-done)
	assertInert(t, out.String())
	assertInert(t, errb.String())
	assert.Regexp(t, `(?m)^\S+Z  A\\x1b\]52;c;\S+  report\\u202egpj\.exe  finished  .*  error: \\x1b\]52;c;cGF5bG9hZA==\\x07.*row back$`, out.String())
	assert.Contains(t, errb.String(), `watching "report\u202egpj.exe"`, "the job named on the command line, quoted with %q")
}

// assertFits checks a table printed by default: no line wider than 100 columns.
func assertFits(t *testing.T, out string) {
	t.Helper()
	for l := range strings.Lines(out) {
		l = strings.TrimSuffix(l, "\n")
		assert.LessOrEqual(t, utf8.RuneCountInString(l), maxWidth, "wider than %d columns: %q", maxWidth, l)
	}
}
