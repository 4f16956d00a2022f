package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

// A job's interval is the gap between its own successive slots; its first-seen
// time is its first event's. A cron job's gap follows its schedule; a job
// registered again (a slot not after the last) keeps the interval it had.
func TestJobInterval(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	sched := func(job string, next time.Time) {
		m.OnEvent(scheduler.Event{Kind: scheduler.EventScheduled, Job: job, Next: next, At: next.Add(-time.Second)})
	}
	sched("fast", t0.Add(10*time.Second))
	assert.Nil(t, find(t, reg, "anarchon_job_interval_seconds", "job_name", "fast"), "one slot gives no interval")
	assert.Equal(t, unix(t0.Add(9*time.Second)), value(t, reg, "anarchon_job_first_seen_timestamp_seconds", "job_name", "fast"))
	sched("fast", t0.Add(20*time.Second))
	assert.Equal(t, 10.0, value(t, reg, "anarchon_job_interval_seconds", "job_name", "fast"))
	assert.Equal(t, unix(t0.Add(9*time.Second)), value(t, reg, "anarchon_job_first_seen_timestamp_seconds", "job_name", "fast"), "first seen stays")
	sched("fast", t0.Add(20*time.Second))
	assert.Equal(t, 10.0, value(t, reg, "anarchon_job_interval_seconds", "job_name", "fast"), "the same slot again changes nothing")

	// A weekday cron: Friday's gap is 3 days, then 1 day again.
	fri := time.Date(2030, 1, 4, 9, 0, 0, 0, time.UTC)
	for _, next := range []time.Time{fri.AddDate(0, 0, -1), fri, fri.AddDate(0, 0, 3)} {
		sched("weekdays", next)
	}
	assert.Equal(t, (72 * time.Hour).Seconds(), value(t, reg, "anarchon_job_interval_seconds", "job_name", "weekdays"))
	sched("weekdays", fri.AddDate(0, 0, 4))
	assert.Equal(t, (24 * time.Hour).Seconds(), value(t, reg, "anarchon_job_interval_seconds", "job_name", "weekdays"))

	// The run limit ends the job's loop: no next slot, no interval.
	m.OnEvent(scheduler.Event{Kind: scheduler.EventLimitReached, Job: "fast", At: t0.Add(20 * time.Second)})
	assert.Nil(t, find(t, reg, "anarchon_job_interval_seconds", "job_name", "fast"))
	assert.Nil(t, find(t, reg, "anarchon_next_slot_timestamp_seconds", "job_name", "fast"))
	assert.NotNil(t, find(t, reg, "anarchon_job_interval_seconds", "job_name", "weekdays"), "other jobs keep theirs")
}

// An entry's slots and runs are not the job's own: they leave the job's next
// slot, interval and last success alone, and count under the job's name in the
// entry series (and in runs_total and failed_slots_total), with no series per
// entry.
func TestEntriesAreNotTheJobsOwn(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	own := func(k scheduler.EventKind, f func(*scheduler.Event)) {
		e := scheduler.Event{Kind: k, Job: "tenants", Slot: t0, At: t0}
		f(&e)
		m.OnEvent(e)
	}
	own(scheduler.EventScheduled, func(e *scheduler.Event) { e.Next = t0.Add(time.Minute) })
	own(scheduler.EventScheduled, func(e *scheduler.Event) { e.Next = t0.Add(2 * time.Minute) })
	own(scheduler.EventFinished, func(e *scheduler.Event) { e.Status, e.At = scheduler.StatusOK, t0.Add(time.Second) })
	for i, id := range []string{"acme", "globex", "initech"} {
		entry := func(k scheduler.EventKind, f func(*scheduler.Event)) {
			own(k, func(e *scheduler.Event) { e.Entry = id; f(e) })
		}
		entry(scheduler.EventScheduled, func(e *scheduler.Event) { e.Next = t0.Add(time.Duration(i+1) * time.Second) })
		entry(scheduler.EventScheduled, func(e *scheduler.Event) { e.Next = t0.Add(time.Hour) })
		entry(scheduler.EventFinished, func(e *scheduler.Event) { e.Status, e.At = scheduler.StatusOK, t0.Add(time.Hour) })
		entry(scheduler.EventFinished, func(e *scheduler.Event) { e.Status = scheduler.StatusError })
		entry(scheduler.EventFailed, func(e *scheduler.Event) { e.Status = scheduler.StatusError })
	}

	assert.Equal(t, unix(t0.Add(2*time.Minute)), value(t, reg, "anarchon_next_slot_timestamp_seconds", "job_name", "tenants"))
	assert.Equal(t, 60.0, value(t, reg, "anarchon_job_interval_seconds", "job_name", "tenants"))
	assert.Equal(t, unix(t0.Add(time.Second)), value(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "tenants"))
	assert.Equal(t, 3.0, value(t, reg, "anarchon_entry_runs_total", "job_name", "tenants", "status", "ok"))
	assert.Equal(t, 3.0, value(t, reg, "anarchon_entry_runs_total", "job_name", "tenants", "status", "error"))
	assert.Equal(t, 3.0, value(t, reg, "anarchon_entry_failed_slots_total", "job_name", "tenants"))
	assert.Equal(t, 3.0, value(t, reg, "anarchon_failed_slots_total", "job_name", "tenants"))
	assert.Equal(t, 4.0, value(t, reg, "anarchon_runs_total", "job_name", "tenants", "status", "ok", "manual", "false"))

	// A job of entries only: entry series, no next slot or interval of its own.
	m.OnEvent(scheduler.Event{Kind: scheduler.EventScheduled, Job: "only", Entry: "a", Next: t0.Add(time.Second), At: t0})
	assert.Equal(t, 0.0, value(t, reg, "anarchon_entry_runs_total", "job_name", "only", "status", "ok"), "created at zero")
	assert.Nil(t, find(t, reg, "anarchon_next_slot_timestamp_seconds", "job_name", "only"))
	assert.NotNil(t, find(t, reg, "anarchon_job_first_seen_timestamp_seconds", "job_name", "only"))
}

// CountEntries reads the schedulers' entry counts at each scrape, added up.
func TestCountEntries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	assert.Nil(t, find(t, reg, "anarchon_entries", "state", "followed"), "nothing without CountEntries")
	a := &entryCounts{followed: 2, orphaned: 1}
	m.CountEntries(a)
	m.CountEntries(nil)
	m.CountEntries(entryCounts{followed: 5})
	assert.Equal(t, 7.0, value(t, reg, "anarchon_entries", "state", "followed"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_entries", "state", "orphaned"))
	a.followed = 10
	assert.Equal(t, 15.0, value(t, reg, "anarchon_entries", "state", "followed"), "read at each scrape")
}

// build_info is 1 and names the Go version; tests of this module see the
// module itself, so its version is (devel).
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := metrics.Wire(reg)
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "anarchon_build_info" {
			continue
		}
		require.Len(t, mf.GetMetric(), 1)
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		assert.Equal(t, 1.0, mf.GetMetric()[0].GetGauge().GetValue())
		assert.Regexp(t, `^go1\.`, labels["goversion"])
		assert.NotEmpty(t, labels["version"])
		return
	}
	t.Fatal("no anarchon_build_info")
}

// A scheduler given to CountEntries exports its entries by job and state: one
// series per job and state, none per entry.
func TestCountEntriesByJobAndState(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "A", OnEvent: m.OnEvent})
	require.NoError(t, err)
	noop := func(context.Context, scheduler.Run) error { return nil }
	require.NoError(t, s.Declare("tenants", noop))
	require.NoError(t, s.Declare("feeds", noop))
	require.NoError(t, s.Start(t.Context()))
	defer func() { require.NoError(t, s.Stop(context.Background())) }()
	m.CountEntries(s)
	for i := range 5 {
		_, err := s.AddEntry(t.Context(), "tenants", fmt.Sprint("t", i), scheduler.EntrySpec{Every: time.Hour, Paused: i == 4})
		require.NoError(t, err)
	}
	_, err = s.AddEntry(t.Context(), "feeds", "f", scheduler.EntrySpec{Every: time.Hour})
	require.NoError(t, err)
	require.Eventually(t, func() bool { n, _ := s.EntryCounts(); return n == 6 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 4.0, value(t, reg, "anarchon_job_entries", "job_name", "tenants", "state", "active"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_job_entries", "job_name", "tenants", "state", "paused"))
	assert.Equal(t, 0.0, value(t, reg, "anarchon_job_entries", "job_name", "tenants", "state", "ended"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_job_entries", "job_name", "feeds", "state", "active"))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			for _, l := range metric.GetLabel() {
				assert.NotEqual(t, "entry", l.GetName(), "%s has a series per entry", mf.GetName())
			}
		}
		if mf.GetName() == "anarchon_job_entries" {
			assert.Len(t, mf.GetMetric(), 6, "two jobs, three states")
		}
	}
}

// turn_members is the number of instances a scheduler given to CountEntries
// takes turns with, and absent without turns.
func TestTurnMembers(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	m.CountEntries(memberCounts{})
	assert.Nil(t, find(t, reg, "anarchon_turn_members"), "absent without turns")
	m.CountEntries(memberCounts{members: []string{"a", "b", "c"}})
	assert.Equal(t, 3.0, value(t, reg, "anarchon_turn_members"))
}

// memberCounts is an EntryCounter and a Memberer.
type memberCounts struct {
	entryCounts
	members []string
}

func (c memberCounts) Members() []string { return c.members }
