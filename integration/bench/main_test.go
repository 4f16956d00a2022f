package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQuick runs the command in -quick mode with tiny numbers: every section must
// run and the table must hold them all, and anarchon must never run a slot twice.
// It asserts no timing: the machine is shared. The load runs on the leased backend
// only (-plain=false), which keeps the test under 30s with -race.
func TestQuick(t *testing.T) {
	var out bytes.Buffer
	rep, err := run(t.Context(), []string{"-quick", "-jobs", "10", "-duration", "3s", "-samples", "50", "-scale", "10,20", "-plain=false", "-fleet-jobs", "20"}, &out, io.Discard)
	text := out.String()
	t.Log("\n" + text)
	require.NoError(t, err)
	require.NotNil(t, rep)

	for _, h := range []string{headClaims, headLoad, headScale, headTakeover, headPeer, headFleet, headGoals} {
		assert.Equal(t, 1, strings.Count(text, h), "section %q appears once", h)
	}
	assert.Contains(t, text, "- command: `go run -C integration/bench . -quick -jobs 10 -duration 3s")
	assert.Contains(t, text, "- machine: ")

	require.NotNil(t, rep.claims, "claims measured")
	assert.Len(t, rep.claims.win.lat, 50)
	assert.Len(t, rep.claims.lose.lat, 50)
	assert.Len(t, rep.claims.history, 2, "history reads of 10 and 100 records")
	// Request counts are not timings: they hold on any machine.
	assert.Equal(t, 1.0, rep.claims.win.roundTrips(), "a plain claim won is one request")
	assert.Equal(t, 1.0, rep.claims.lose.roundTrips(), "a plain claim lost is one request")
	assert.Equal(t, 2.0, rep.claims.leasedFleet.roundTrips(), "a leased claim won: the lease key and the run record (chained), no read")
	// A backup's lost claim: its two chained writes lose, and its shared watcher has
	// delivered the holder's lease (a read only when the watcher is 250 ms late).
	assert.GreaterOrEqual(t, rep.claims.lloseRun.roundTrips(), 2.0, "a leased claim lost to a running holder")
	assert.LessOrEqual(t, rep.claims.lloseRun.roundTrips(), 2.5, "a leased claim lost to a running holder: no read as a rule")
	assert.Equal(t, 1.0, rep.claims.fin.roundTrips(), "finish: the run record; the purge asks for no answer")
	assert.LessOrEqual(t, rep.claims.history[1].roundTrips(), 3.0, "History(job, 100) in at most 3 requests")
	require.NotNil(t, rep.claims.lastRuns)

	require.NotNil(t, rep.fleet, "larger fleet measured")
	assert.Equal(t, 20*2, rep.fleet.slotsDue, "20 jobs × 2 slots of 2s in 4s")
	assert.Zero(t, rep.fleet.dups, "the larger fleet ran no slot twice")

	require.Len(t, rep.loads, 1, "load measured on the leased backend")
	require.Same(t, rep.loads[0], rep.load, "the goals judge the leased run")
	assert.Contains(t, rep.load.name, "kvlease")
	assert.Contains(t, text, "| duplicates (must be 0) | 0 ✅ |")
	for _, l := range rep.loads {
		assert.Equal(t, 10*3, l.slotsDue, "%s: 10 jobs × 3 slots", l.name)
		assert.Zero(t, l.dups, "%s ran no slot twice", l.name)
		assert.Equal(t, l.runs, l.slotsDue-l.missed, "%s: every slot that ran, ran once", l.name)
	}

	require.NotNil(t, rep.peer, "peer measured")
	assert.Equal(t, 10*3, rep.peer.slotsDue)
	assert.Contains(t, text, "gocron v2.21.2 + NATS KV Locker")

	require.Len(t, rep.takeover, 1)
	assert.NotEmpty(t, rep.takeover[0].backup, "a backup took the killed holder's run over")
	assert.NotEqual(t, rep.takeover[0].holder, rep.takeover[0].backup)
	assert.GreaterOrEqual(t, rep.takeover[0].attempt, 2)

	require.NotNil(t, rep.scale)
	require.Len(t, rep.scale.rows, 2)
	for _, r := range rep.scale.rows {
		assert.Empty(t, r.err, "%d jobs", r.jobs)
		assert.Empty(t, r.skipped, "%d jobs", r.jobs)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-jobs", "0"},
		{"-duration", "1s"},
		{"-duration", "2500ms"},
		{"-samples", "5"},
		{"-scale", "10,x"},
		{"-jitter", "1s"},
		{"extra"},
		{"-nope"},
	} {
		_, err := parseFlags(args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
	c, err := parseFlags([]string{"-quick", "-jobs", "7"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 7, c.jobs, "an explicit flag wins over -quick")
	assert.Equal(t, quickDefaults.duration, c.duration)
	assert.Equal(t, quickDefaults.scale, c.scale)
	c, err = parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1000, c.jobs)
	assert.Equal(t, fullDefaults.duration, c.duration)
}
