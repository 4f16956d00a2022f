package main

import (
	"context"
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

// TestTablesFitByDefault: with a job, a replica, an entry and an error of
// hundreds of characters, every table fits 100 columns by default, one row a
// line; -o wide prints them whole.
func TestTablesFitByDefault(t *testing.T) {
	long := "billing-" + strings.Repeat("reconcile-", 30)
	instance := "replica-" + strings.Repeat("x", 120)
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{long, time.Hour}, {"feeds", 0}} }, instance)
	f.failWith.Store(new("upstream said: " + strings.Repeat("timeout while reading the ledger; ", 20)))
	f.failNext.Store(true)
	r := anarchon(t, "--server", f.url, "trigger", long, "--wait", "--by", "operator-"+strings.Repeat("y", 100))
	require.Equal(t, exitFail, r.code)
	r = anarchon(t, "--server", f.url, "pause", long, "--reason", strings.Repeat("because ", 40))
	require.Equal(t, exitOK, r.code, r.stderr)
	id := "tenant-" + strings.Repeat("z", 150)
	_, err := f.scheds[0].AddEntry(t.Context(), "feeds", id, scheduler.EntrySpec{Cron: "0 9 * * MON-FRI", Zone: "America/Argentina/Buenos_Aires"})
	require.NoError(t, err)
	f.followed(t, 1)
	_, err = f.backend.Runs().Claim(context.Background(), backend.RunClaim{Job: long, Slot: time.Now().Truncate(time.Hour),
		Token: backendtest.Token(), Instance: instance, Lease: time.Hour})
	require.NoError(t, err)

	for _, args := range [][]string{
		{"jobs", "--window", "200ms"},
		{"history", long},
		{"active"},
		{"active", long},
		{"schedule", "ls", "feeds"},
	} {
		r := anarchon(t, append([]string{"--server", f.url}, args...)...)
		require.Equal(t, exitOK, r.code, "%q: %s", args, r.stderr)
		assertFits(t, r.stdout)
		assert.Contains(t, r.stdout, "…", "%q: something was cut", args)
		header := strings.SplitN(r.stdout, "\n", 2)[0]
		rows := strings.Count(r.stdout, "\n")

		r = anarchon(t, append([]string{"--server", f.url, "-o", "wide"}, args...)...)
		require.Equal(t, exitOK, r.code, "%q: %s", args, r.stderr)
		assert.NotContains(t, r.stdout, "…", "%q: nothing cut", args)
		assert.Equal(t, rows, strings.Count(r.stdout, "\n"), "%q: the same rows", args)
		assert.NotEqual(t, header, "", "%q", args)
		switch args[0] {
		case "schedule":
			assert.Contains(t, r.stdout, id)
		case "history":
			assert.Contains(t, r.stdout, instance)
			assert.Contains(t, r.stdout, strings.TrimSpace(*f.failWith.Load()))
		default:
			assert.Contains(t, r.stdout, long)
		}
	}
}

// TestTableCutsTheErrorFirst: a row too wide loses the end of its error before
// any other cell is cut, down to firstMin; then the widest cell that may shrink.
func TestTableCutsTheErrorFirst(t *testing.T) {
	tb := newTable(fixed("SLOT"), cut("KIND"), cutFirst("ERROR"))
	tb.add(strings.Repeat("s", 20), "manual by someone@somewhere", strings.Repeat("e", 80))
	var b strings.Builder
	require.NoError(t, tb.write(&b, maxWidth))
	row := strings.Split(b.String(), "\n")[1]
	assert.Equal(t, maxWidth, utf8.RuneCountInString(row))
	assert.Contains(t, row, "manual by someone@somewhere", "not cut while the error could be")

	tb.add("s", strings.Repeat("k", 90), "e")
	b.Reset()
	require.NoError(t, tb.write(&b, maxWidth))
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), maxWidth, l)
	}
	assert.Contains(t, b.String(), strings.Repeat("e", firstMin-1)+"…", "the error down to firstMin")
}

func TestOneTimeFormat(t *testing.T) {
	at := time.Date(2026, 12, 5, 20, 39, 50, 0, time.FixedZone("x", 3600))
	assert.Equal(t, "2026-12-05T19:39:50Z", stamp(at), "UTC, no fraction for a whole second")
	assert.Equal(t, "2026-12-05T19:39:50.110Z", stamp(at.Add(110*time.Millisecond)), "three digits, always")
	assert.Equal(t, "2026-12-05T19:39:50Z", stamp(at.Add(500*time.Microsecond)), "milliseconds, not finer")
	assert.Equal(t, "-", stamp(time.Time{}))
	for d, want := range map[time.Duration]string{
		0: "now", 500 * time.Millisecond: "now", 42 * time.Second: "in 42s", -42 * time.Second: "42s ago",
		3*time.Minute + 12*time.Second: "in 3m12s", -5 * time.Minute: "5m ago", 5*time.Hour + 3*time.Minute: "in 5h3m",
		-50 * time.Hour: "2d2h ago", 72 * time.Hour: "in 3d",
	} {
		assert.Equal(t, want, ago(at.Add(d), at), d)
	}
	assert.Equal(t, "2026-12-05T19:40:32Z (in 42s)", stampAgo(at.Add(42*time.Second), at))
}
