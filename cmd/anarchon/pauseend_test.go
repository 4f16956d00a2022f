package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPauseEndGivenMustBeInTheFuture: --for 0s used to pause for ever (0 read as
// "not given"). A --for or --until that was given must end the pause in the
// future; else the command exits 2 with one line saying why, before any request:
// pointed at a server nobody listens on, it never gets as far as connecting, and
// against a fleet nothing is stored.
func TestPauseEndGivenMustBeInTheFuture(t *testing.T) {
	f := startFleet(t, nil, "A")
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--for", "0s"}, "--for 0s is not positive (a pause without --for or --until has no end)"},
		{[]string{"--for=0"}, "--for 0s is not positive"},
		{[]string{"--for", "-1m"}, "--for -1m0s is not positive"},
		{[]string{"--until", past}, "--until " + past + " is in the past (this machine's clock says "},
		{[]string{"--until", ""}, `--until "" is not an RFC 3339 time`},
		{[]string{"--for", "0s", "--until", soon}, "give --for or --until, not both"},
		{[]string{"--until", soon, "--for", "1h"}, "give --for or --until, not both"},
	} {
		for _, server := range []string{"nats://127.0.0.1:1", f.url} {
			for _, job := range [][]string{{"report"}, {"--all"}} {
				args := append(append([]string{"--server", server, "pause"}, job...), append([]string{"--reason", "r"}, c.args...)...)
				r := anarchon(t, args...)
				assert.Equal(t, exitUsage, r.code, "%q", args)
				assert.Empty(t, r.stdout)
				assert.Equal(t, "anarchon: ", r.stderr[:min(len(r.stderr), 10)])
				assert.Contains(t, r.stderr, c.want, "%q", args)
				assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q", args)
			}
		}
	}
	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pauses, "nothing stored")
	_, any := f.paused("report")
	assert.False(t, any)

	// A --for or --until that ends in the future pauses until then (a --for far
	// enough ahead that it is still ahead when the replica stores it).
	r := anarchon(t, "--server", f.url, "pause", "report", "--reason", "r", "--for", "1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = anarchon(t, "--server", f.url, "--json", "pause", "report", "--reason", "r", "--until", soon)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"until": "`+soon+`"`)
}
