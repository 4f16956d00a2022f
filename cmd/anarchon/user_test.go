package main

// These tests run the command as a person does: the program itself in a process
// of its own (maintest.Run), with the environment variables the nats CLI reads,
// against a real embedded nats-server; and they paste what it prints into a
// POSIX shell.

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/maintest"
	"github.com/anarchon/anarchon/scheduler"
)

// program runs the program in a process of its own with args; the environment
// is the test's (t.Setenv).
func program(t *testing.T, args ...string) result {
	t.Helper()
	t0 := time.Now()
	code, stdout, stderr := maintest.Run(t, 30*time.Second, args...)
	r := result{code: code, stdout: stdout, stderr: stderr, took: time.Since(t0)}
	t.Logf("anarchon %s → %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	return r
}

func TestTheNATSEnvironmentVariables(t *testing.T) {
	f := startFleet(t, nil, "A")

	t.Setenv("NATS_URL", f.url)
	r := program(t, "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "report")

	// NATS_URL wins over the selected context's url, as in the nats CLI.
	natsContext(t, "elsewhere", closedURL(t), true)
	r = program(t, "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)

	// A selection of a context that is gone says so, and what to do.
	t.Setenv("NATS_URL", "")
	require.NoError(t, os.WriteFile(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "nats", "context.txt"), []byte("gone"), 0o600))
	r = anarchon(t, "jobs")
	oneErrorLine(t, r, `anarchon: NATS context not found: "gone" is not in `)
	assert.Contains(t, r.stderr, "(the selected context); select another with nats context select NAME, or give --no-context")

	// NATS_CONTEXT names a context; --server wins over it.
	t.Setenv("NATS_URL", "")
	natsContext(t, "fleet", f.url, false)
	t.Setenv("NATS_CONTEXT", "fleet")
	r = program(t, "history", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	t.Setenv("NATS_CONTEXT", "nope")
	r = program(t, "jobs")
	oneErrorLine(t, r, `anarchon: NATS context not found: "nope" is not in `)
	assert.Contains(t, r.stderr, "(from NATS_CONTEXT)")
	r = program(t, "--server", f.url, "--no-context", "jobs", "--window", "200ms")
	require.Equal(t, exitOK, r.code, r.stderr)

	t.Setenv("NATS_CONTEXT", "")
	t.Setenv("NATS_TIMEOUT", "soon")
	r = program(t, "--server", f.url, "jobs")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `anarchon: NATS_TIMEOUT="soon": `)
}

func TestUserAndPasswordFromTheEnvironment(t *testing.T) {
	url := startAuthServer(t)
	f := &testFleet{url: url, backend: memory.New()}
	f.startReplicas(t, func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(url, append(opts, nats.UserInfo("replica", "replica"), nats.CustomInboxPrefix(fleet.InboxPrefix(fleet.RoleReplica)))...)
	}, nil, "A")
	t.Setenv("NATS_URL", url)
	t.Setenv("NATS_USER", "viewer")
	t.Setenv("NATS_PASSWORD", "viewer")
	r := program(t, "--inbox-prefix", fleet.InboxPrefix(fleet.RoleViewer), "history", "report")
	require.Equal(t, exitOK, r.code, r.stderr)

	t.Setenv("NATS_PASSWORD", "wrong")
	r = program(t, "--inbox-prefix", fleet.InboxPrefix(fleet.RoleViewer), "history", "report")
	oneErrorLine(t, r, "anarchon: connect to "+url+" (from NATS_URL): Authorization Violation; the server refused the credentials")

	// Flags win over the environment.
	r = program(t, "--user", "operator", "--password", "operator", "--inbox-prefix", fleet.InboxPrefix(fleet.RoleOperator), "trigger", "report", "--wait")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.EqualValues(t, 1, f.manual.Load())
}

// commandPaths lists every command of the tree, as the words after anarchon.
func commandPaths(cmd *cobra.Command) [][]string {
	var out [][]string
	for _, sub := range cmd.Commands() {
		if !sub.IsAvailableCommand() {
			continue
		}
		for _, p := range commandPaths(sub) {
			out = append(out, append([]string{sub.Name()}, p...))
		}
		out = append(out, []string{sub.Name()})
	}
	return out
}

// TestHelpOfEachCommand: `anarchon CMD --help` and `anarchon help CMD` print
// that command's own help, and no line of it is wider than 100 columns.
func TestHelpOfEachCommand(t *testing.T) {
	c := &cli{getenv: os.Getenv}
	root := c.root(func() io.Writer { return io.Discard })
	root.InitDefaultCompletionCmd()
	paths := commandPaths(root)
	require.Greater(t, len(paths), 15, "%q", paths)
	seen := map[string]string{}
	// In a process of its own for one command, in-process for the others.
	r := program(t, "pause", "--help")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Usage:\n  anarchon pause ")
	for _, p := range paths {
		name := strings.Join(p, " ")
		for _, args := range [][]string{append(append([]string{}, p...), "--help"), append([]string{"help"}, p...)} {
			r := anarchon(t, args...)
			require.Equal(t, exitOK, r.code, "%q: %s", args, r.stderr)
			assert.Empty(t, r.stderr, "%q", args)
			assert.Contains(t, r.stdout, "Usage:\n  anarchon "+name, "%q: the command's own usage", args)
			for l := range strings.Lines(r.stdout) {
				assert.LessOrEqual(t, utf8.RuneCountInString(strings.TrimSuffix(l, "\n")), maxWidth, "%q: %q", args, l)
			}
			if prev, ok := seen[name]; ok {
				assert.Equal(t, prev, r.stdout, "%q: the same help both ways", args)
			}
			seen[name] = r.stdout
		}
	}
	assert.NotEqual(t, seen["pause"], seen["schedule"])
	assert.Contains(t, seen["pause"], "--reason string")
	assert.NotContains(t, seen["pause"], "--window", "another command's flag")
	assert.Contains(t, seen["schedule add"], "--cron string")
	assert.Contains(t, seen["history"], "--status strings")

	r = program(t, "jbos")
	assert.Equal(t, exitUsage, r.code)
	assert.Equal(t, "anarchon: unknown command \"jbos\" for anarchon; did you mean \"jobs\"? (anarchon --help lists the commands)\n", r.stderr)
	r = anarchon(t, "schedule", "lss")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, `did you mean "ls"?`)
	r = anarchon(t, "jobs", "--sever", "x")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "did you mean --server?")
}

func TestCompletion(t *testing.T) {
	f := startFleet(t, nil, "A")
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		r := anarchon(t, "completion", shell)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "anarchon", shell)
	}
	// What the scripts ask: the commands, then the jobs the fleet declares.
	r := anarchon(t, "__complete", "hi")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "history\t")
	r = program(t, "--server", f.url, "__complete", "history", "")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, []string{"nightly backup", "report", ":4"}, strings.Split(strings.TrimSpace(r.stdout), "\n"))
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := anarchon(t, args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Regexp(t, `^anarchon devel \(library `+regexp.QuoteMeta(fleet.Version)+`, go\S+ \S+/\S+\)\n$`, r.stdout)
	}
	r := anarchon(t, "version", "--json")
	var v struct{ Version, Library string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	assert.Equal(t, fleet.Version, v.Library)
}

// hostileIDs are ids a shell would run, split, or read as a flag, unquoted.
var hostileIDs = []string{"$(touch pwned)", "-rf", "it's `touch pwned2`", "a b;touch pwned3", "~root", "*"}

// pasted runs a command line the program printed in a POSIX shell, where
// anarchon is a script that writes its arguments one per line, in a directory
// where no file may appear. It returns the arguments the shell passed.
func pasted(t *testing.T, line string) []string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "anarchon"),
		[]byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$ARGS_OUT\"\n"), 0o755))
	work := filepath.Join(dir, "work")
	require.NoError(t, os.Mkdir(work, 0o755))
	out := filepath.Join(dir, "args")
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "ARGS_OUT=" + out, "HOME=" + dir}
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", line, b)
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	assert.Empty(t, left, "the shell made files running %s", line)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// TestPastedCommandLinesAreShellSafe: the next-page line of schedule ls and the
// hints naming a job, with ids a shell would run, split or read as flags, give
// the command back exactly those ids when pasted, and run nothing else.
func TestPastedCommandLinesAreShellSafe(t *testing.T) {
	job := "nightly $(touch pwned-job) 'x'"
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"feeds", 0}, {job, time.Hour}, {"-dash", time.Hour}} }, "A")
	for _, id := range hostileIDs {
		_, err := f.scheds[0].AddEntry(t.Context(), "feeds", id, scheduler.EntrySpec{Every: time.Hour})
		require.NoError(t, err)
	}
	f.followed(t, len(hostileIDs))

	// Page through the entries one at a time by pasting each "more:" line.
	var listed []string
	args := []string{"schedule", "ls", "feeds", "--limit", "1"}
	for range len(hostileIDs) + 1 {
		r := anarchon(t, append([]string{"--server", f.url}, args...)...)
		require.Equal(t, exitOK, r.code, r.stderr)
		ls := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		listed = append(listed, strings.Fields(ls[1])[0])
		more, ok := strings.CutPrefix(ls[len(ls)-1], "more: ")
		if !ok {
			break
		}
		args = pasted(t, more)
		require.Equal(t, "--limit=1", args[len(args)-1], more)
	}
	assert.Len(t, listed, len(hostileIDs), "every entry, once: %q", listed)

	// The hint of a trigger, for a job named like a command and like a flag.
	for _, name := range []string{job, "-dash"} {
		r := anarchon(t, "--server", f.url, "trigger", "--", name)
		require.Equal(t, exitOK, r.code, r.stderr)
		_, hint, ok := strings.Cut(r.stdout, "; ")
		require.True(t, ok, r.stdout)
		hint, ok = strings.CutSuffix(hint, " shows how it ends\n")
		require.True(t, ok, r.stdout)
		got := pasted(t, hint)
		want := []string{"history", name}
		if strings.HasPrefix(name, "-") {
			want = []string{"history", "--", name}
		}
		assert.Equal(t, want, got, hint)
		r = anarchon(t, append([]string{"--server", f.url}, got...)...) // and it runs
		require.Equal(t, exitOK, r.code, r.stderr)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"report":         "report",
		"a b":            "'a b'",
		"$(touch pwned)": "'$(touch pwned)'",
		"it's":           `'it'\''s'`,
		"":               "''",
		"-x":             "-x",
		"~":              "'~'",
		"a\u202eb":       "'a\u202eb'",
	} {
		assert.Equal(t, want, shellQuote(in), in)
	}
	assert.Equal(t, "anarchon schedule ls feeds --after='a b'", cmdline("schedule ls", []string{"feeds"}, "after", "a b"))
	assert.Equal(t, "anarchon history -- -x", cmdline("history", []string{"-x"}))
}

// closedURL is a loopback URL nobody listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "nats://" + addr
}
