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

// why says what was decided for a slot, as a replica reads it: a manual run
// with who asked, a failed one with its error; --json prints the reply with
// the steps' kinds and records; a slot still to come and an instant before the
// start bound are said so; an entry's slot is its own.
func TestWhyCommand(t *testing.T) {
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}, {"tenants", 0}} }, "A")
	r := anarchon(t, "--server", f.url, "--json", "trigger", "report", "--wait", "--by", "ana")
	require.Equal(t, exitOK, r.code, r.stderr)
	var tr fleet.TriggerReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tr))
	slot := stamp(tr.Slot)

	r = anarchon(t, "--server", f.url, "why", "report", slot)
	require.Equal(t, exitOK, r.code, r.stderr)
	ls := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, ls, 2, r.stdout)
	assert.Regexp(t, `^slot `+slot+` of job "report" \((\S+ ago|now)\), as replica A reads it:$`, ls[0])
	assert.Regexp(t, `^1\. manual run requested by ana: ran on A as attempt 1: ended ok( in \S+)?$`, ls[1])

	r = anarchon(t, "--server", f.url, "--json", "why", "report", slot)
	require.Equal(t, exitOK, r.code, r.stderr)
	var w fleet.WhyReply
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &w))
	require.Len(t, w.Steps, 1)
	assert.Equal(t, string(scheduler.WhyManual), w.Steps[0].Kind)
	require.NotNil(t, w.Steps[0].Run)
	assert.Equal(t, tr.Token, w.Steps[0].Run.Token)

	f.failNext.Store(true)
	r = anarchon(t, "--server", f.url, "--json", "trigger", "report", "--wait")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tr))
	r = anarchon(t, "--server", f.url, "why", "report", stamp(tr.Slot))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `\n1\. manual run requested by \S+: ran on A as attempt 1: failed: disk full\n$`, r.stdout)

	first := f.start.Truncate(time.Hour)
	if first.Before(f.start) {
		first = first.Add(time.Hour)
	}
	r = anarchon(t, "--server", f.url, "why", "report", stamp(first))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "\n1. not due yet: due at "+stamp(first))
	r = anarchon(t, "--server", f.url, "why", "report", stamp(first.Add(-90*time.Minute)))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "\n1. this instant is not a slot of job \"report\", and no manual run has it; the nearest slot is "+stamp(first)+" (the start bound ")

	r = anarchon(t, "--server", f.url, "schedule", "add", "tenants", "acme", "--every", "30m")
	require.Equal(t, exitOK, r.code, r.stderr)
	next := time.Now().Truncate(30 * time.Minute).Add(time.Hour)
	r = anarchon(t, "--server", f.url, "why", "tenants", "--entry", "acme", stamp(next))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `^slot `+stamp(next)+` of entry "acme" of job "tenants" \(in \S+\), as replica A reads it:\n1\. not due yet: `, r.stdout)
}

// Bad arguments are usage errors before anything is asked; a job or entry
// nobody has is the fleet's error.
func TestWhyCommandRefuses(t *testing.T) {
	f := startFleet(t, func(string) []fleetJob { return []fleetJob{{"report", time.Hour}, {"tenants", 0}} }, "A")
	slot := stamp(time.Now().Truncate(time.Hour))
	for _, args := range [][]string{
		{"why"},
		{"why", "report"},
		{"why", "report", slot, "x"},
		{"why", "report", "yesterday"},
		{"why", "report", "2026-10-24T09:00:00.0001Z"},
	} {
		r := anarchon(t, append([]string{"--server", f.url}, args...)...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
	r := anarchon(t, "--server", f.url, "why", "nope", slot)
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, `no replica declares job "nope"`)
	r = anarchon(t, "--server", f.url, "why", "tenants", "--entry", "nope", slot)
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.stderr, `why of entry "nope" of job "tenants"`)
}
