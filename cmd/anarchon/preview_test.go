package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// preview lists a job's next slots with what each meets, as a replica
// previews them: the start bound, a pause with its end, who and why; --json
// prints the reply; -n and --from say which slots; an entry's own.
func TestPreviewCommand(t *testing.T) {
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}, {"tenants", 0}} }, "A")
	first := f.start.Truncate(time.Hour)
	if first.Before(f.start) {
		first = first.Add(time.Hour)
	}
	r := anarchon(t, "--server", f.url, "preview", "report", "-n", "3", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, "a header and three slots")
	assert.Regexp(t, `^SLOT\s+IN\s+RUNS\s+NOTES$`, lines[0])
	assert.Regexp(t, `^`+stamp(first)+`\s+in \S+\s+yes\s+the first slot: the start bound \S+ leaves none before it$`, lines[1])
	assert.Regexp(t, `^`+stamp(first.Add(time.Hour))+`\s+in \S+\s+yes$`, lines[2])

	r = anarchon(t, "--server", f.url, "pause", "report", "--reason", "quarter close", "--by", "ana", "--until", first.Add(90*time.Minute).UTC().Format(time.RFC3339))
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Eventually(t, func() bool { all, _ := f.paused("report"); return all }, 5*time.Second, 10*time.Millisecond)
	r = anarchon(t, "--server", f.url, "--json", "preview", "report", "-n", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	var p fleet.PreviewReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	assert.Equal(t, "report", p.Job)
	require.Len(t, p.Slots, 3)
	assert.False(t, p.Slots[1].Runs, "paused until 90 minutes after the first slot")
	assert.Equal(t, string(scheduler.PreviewPaused), p.Slots[1].Notes[0].Kind)
	assert.True(t, p.Slots[2].Runs)

	r = anarchon(t, "--server", f.url, "preview", "report", "-n", "1", "--from", stamp(first.Add(time.Hour)), "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `\n`+stamp(first.Add(time.Hour))+`\s+in \S+\s+no\s+recorded paused, not run: job paused by ana until \S+: quarter close\n$`, r.stdout)

	r = anarchon(t, "--server", f.url, "schedule", "add", "tenants", "acme", "--every", "30m")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = anarchon(t, "--server", f.url, "preview", "tenants", "acme", "-n", "2", "--from", "2h")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 3, "an entry's slots")
}

// Bad arguments are usage errors before anything is asked; a job or entry
// nobody has is the fleet's error.
func TestPreviewCommandRefuses(t *testing.T) {
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}, {"tenants", 0}} }, "A")
	for _, args := range [][]string{
		{"preview"},
		{"preview", "report", "x", "y"},
		{"preview", "report", "-n", "-1"},
		{"preview", "report", "-n", "1001"},
		{"preview", "report", "--from", "tomorrow"},
	} {
		r := anarchon(t, append([]string{"--server", f.url}, args...)...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
	r := anarchon(t, "--server", f.url, "preview", "nope")
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, `no replica declares job "nope"`)
	r = anarchon(t, "--server", f.url, "preview", "tenants", "nope")
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, `preview of entry "nope" of job "tenants"`)
	r = anarchon(t, "--server", f.url, "preview", "tenants")
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, "has no schedule of its own")
}

func TestPreviewFrom(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"", time.Time{}},
		{"2h", now.Add(2 * time.Hour)},
		{"-90m", now.Add(-90 * time.Minute)},
		{"2026-10-24T00:00:00+03:00", time.Date(2026, 10, 23, 21, 0, 0, 0, time.UTC)},
	} {
		got, err := previewFrom(c.in, now)
		require.NoError(t, err, c.in)
		assert.True(t, c.want.Equal(got), "%q: %v", c.in, got)
	}
	for _, bad := range []string{"tomorrow", "2h later", "10000-01-01T00:00:00Z"} {
		_, err := previewFrom(bad, now)
		assert.Error(t, err, bad)
	}
}
