package main

import (
	"bytes"
	"io"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/anarchon/anarchon/internal/maintest"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// Every goroutine the program starts, the embedded server's included, must be gone
// when run returns.
func TestMain(m *testing.M) {
	maintest.Main(main) // a child of maintest.Run: the program itself
	goleak.VerifyTestMain(m)
}

// TestRestartKeepsHistory runs the program twice on one store, the way a single-node
// setup is restarted: the second run sees the first run's history, and no slot runs
// twice, although the second run starts within the first run's last slots' deadlines
// and catches up.
func TestRestartKeepsHistory(t *testing.T) {
	store := t.TempDir()
	args := []string{"-store", store, "-interval", "1s", "-cron", "*/2 * * * * *", "-duration", "3s", "-history", "100"}

	var first, second bytes.Buffer
	require.NoError(t, run(t.Context(), append(args, "-instance", "first"), &first), first.String())
	t.Logf("first run:\n%s", first.String())
	require.NoError(t, run(t.Context(), append(args, "-instance", "second", "-listen", "127.0.0.1:0"), &second), second.String())
	t.Logf("second run:\n%s", second.String())

	ran1, ran2 := ranSlots(t, first.String()), ranSlots(t, second.String())
	require.NotEmpty(t, ran1["cleanup"], "the first run ran cleanups")
	require.NotEmpty(t, ran2["cleanup"], "the second run ran cleanups")
	assert.Regexp(t, `NATS clients can connect to nats://127\.0\.0\.1:\d+`, second.String())

	// The second run found the first run's records on the store when it started.
	before := regexp.MustCompile(`(?s)history kept on the store from earlier runs:\nhistory of "cleanup", newest first \((\d+)\):`).FindStringSubmatch(second.String())
	require.NotNil(t, before, "the second run prints the history it found")
	assert.NotEqual(t, "0", before[1])

	// Read the store a third time, as another client would: every run of both is in
	// the history, each slot once, and no slot ran in both runs.
	srv := natstest.Server(t, embedded.Options{StoreDir: store})
	b, err := jetstream.New(natstest.JetStream(t, natstest.Conn(t, srv)))
	require.NoError(t, err)

	for _, job := range jobs {
		recs, err := b.History(t.Context(), job, 0)
		require.NoError(t, err)
		inHistory := map[int64]scheduler.RunRecord{}
		for _, r := range recs {
			_, twice := inHistory[r.Slot.UnixMilli()]
			assert.False(t, twice, "%s: slot %v appears twice in history", job, r.Slot)
			inHistory[r.Slot.UnixMilli()] = r
		}
		for instance, ran := range map[string]map[int64]bool{"first": ran1[job], "second": ran2[job]} {
			for slot := range ran {
				r, ok := inHistory[slot]
				if assert.True(t, ok, "%s: slot %v (run by %s) is in history", job, time.UnixMilli(slot).UTC(), instance) {
					assert.Equal(t, instance, r.Instance)
					assert.Equal(t, scheduler.StatusOK, r.Status)
				}
			}
		}
		for slot := range ran2[job] {
			assert.False(t, ran1[job][slot], "%s: slot %v ran again after the restart", job, time.UnixMilli(slot).UTC())
		}
	}
}

// ranSlots reads the "ran <job> slot <time> on ..." lines of one run.
func ranSlots(t *testing.T, out string) map[string]map[int64]bool {
	t.Helper()
	ran := map[string]map[int64]bool{}
	for _, m := range regexp.MustCompile(`(?m)^ran (\S+) slot (\S+) on \S+ \(attempt (\d+)\): (\S+)`).FindAllStringSubmatch(out, -1) {
		slot, err := time.Parse(time.RFC3339Nano, m[2])
		require.NoError(t, err)
		assert.Equal(t, "1", m[3], "attempt of %s %s", m[1], m[2])
		assert.Equal(t, "ok", m[4], "status of %s %s", m[1], m[2])
		if ran[m[1]] == nil {
			ran[m[1]] = map[int64]bool{}
		}
		assert.False(t, ran[m[1]][slot.UnixMilli()], "%s: slot %s ran twice in one run", m[1], m[2])
		ran[m[1]][slot.UnixMilli()] = true
	}
	return ran
}

func TestInvalidFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-store", ""},
		{"-duration", "-1s"},
		{"-history", "-1"},
		{"extra"},
		{"-nope"},
	} {
		assert.Error(t, run(t.Context(), args, io.Discard), "%q", args)
	}
	// Bad schedules fail at registration, with the scheduler's error, after the
	// server started (and before anything ran).
	err := run(t.Context(), []string{"-store", t.TempDir(), "-cron", "61 * * * *"}, io.Discard)
	assert.ErrorIs(t, err, scheduler.ErrInvalidSchedule)
	err = run(t.Context(), []string{"-store", t.TempDir(), "-interval", "0s"}, io.Discard)
	assert.ErrorIs(t, err, scheduler.ErrInvalidSchedule)
}
