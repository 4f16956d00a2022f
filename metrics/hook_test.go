package metrics_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 10, 0, time.UTC) // Unix 1704067210

func finished(job string, status scheduler.Status, manual bool, d time.Duration) scheduler.Event {
	return scheduler.Event{Kind: scheduler.EventFinished, Job: job, Slot: t0, At: t0.Add(d), Status: status, Duration: d, Manual: manual}
}

// value returns the value of the one series of the named family with exactly these
// label pairs (counters, gauges), failing the test when there is none.
func value(t *testing.T, g prometheus.Gatherer, name string, labelPairs ...string) float64 {
	t.Helper()
	m := find(t, g, name, labelPairs...)
	require.NotNil(t, m, "no series %s%v", name, labelPairs)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s is neither a counter nor a gauge", name)
	return 0
}

func find(t *testing.T, g prometheus.Gatherer, name string, labelPairs ...string) *dto.Metric {
	t.Helper()
	require.Zero(t, len(labelPairs)%2)
	want := map[string]string{}
	for i := 0; i < len(labelPairs); i += 2 {
		want[labelPairs[i]] = labelPairs[i+1]
	}
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

// TestSyntheticEvents feeds one of every event a job can see and checks every metric.
func TestSyntheticEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg, metrics.WithRunDurationBuckets(1, 10), metrics.WithSlotLagBuckets(0.5, 5))
	require.NoError(t, err)

	job := "sync"
	ev := func(k scheduler.EventKind) scheduler.Event {
		return scheduler.Event{Kind: k, Job: job, Slot: t0, At: t0, Instance: "i-1", Token: "tok"}
	}
	with := func(e scheduler.Event, f func(*scheduler.Event)) scheduler.Event { f(&e); return e }
	events := []scheduler.Event{
		with(ev(scheduler.EventScheduled), func(e *scheduler.Event) { e.Next = t0.Add(1500 * time.Millisecond) }),
		// won and ran ok
		with(ev(scheduler.EventClaimed), func(e *scheduler.Event) { e.Outcome = scheduler.OutcomeWon }),
		with(ev(scheduler.EventStarted), func(e *scheduler.Event) { e.Lag = 250 * time.Millisecond }),
		with(ev(scheduler.EventFinished), func(e *scheduler.Event) {
			e.Status, e.Duration, e.At = scheduler.StatusOK, 2*time.Second, t0.Add(2500*time.Millisecond)
		}),
		// other slots: lost, stood by, late, missed (a record of three), skipped
		with(ev(scheduler.EventLost), func(e *scheduler.Event) { e.Outcome = scheduler.OutcomeDone }),
		with(ev(scheduler.EventMissed), func(e *scheduler.Event) {
			e.Outcome, e.Status, e.Count = scheduler.OutcomeLate, scheduler.StatusMissed, 3
		}),
		with(ev(scheduler.EventStandby), func(e *scheduler.Event) { e.Outcome = scheduler.OutcomeRunning }),
		with(ev(scheduler.EventLate), func(e *scheduler.Event) { e.Outcome = scheduler.OutcomeLate }),
		with(ev(scheduler.EventSkipped), func(e *scheduler.Event) { e.Outcome = scheduler.OutcomeOverlap }),
		// a takeover that then lost its lease
		with(ev(scheduler.EventClaimed), func(e *scheduler.Event) { e.Outcome, e.Attempt = scheduler.OutcomeWon, 2 }),
		with(ev(scheduler.EventTakeover), func(e *scheduler.Event) { e.Outcome, e.Attempt = scheduler.OutcomeWon, 2 }),
		with(ev(scheduler.EventStarted), func(e *scheduler.Event) { e.Lag = 3 * time.Second }),
		ev(scheduler.EventLeaseLost),
		with(ev(scheduler.EventFinished), func(e *scheduler.Event) { e.Status, e.Duration = scheduler.StatusLost, time.Second }),
		// a manual run that failed: counted, timed, but no slot lag
		with(ev(scheduler.EventStarted), func(e *scheduler.Event) { e.Manual, e.Lag = true, 40*time.Second }),
		with(ev(scheduler.EventFinished), func(e *scheduler.Event) {
			e.Manual, e.Status, e.Duration = true, scheduler.StatusError, 500*time.Millisecond
		}),
		// a slot retried twice, then failed for good
		with(ev(scheduler.EventRetry), func(e *scheduler.Event) { e.Attempt = 1 }),
		with(ev(scheduler.EventRetry), func(e *scheduler.Event) { e.Attempt = 2 }),
		with(ev(scheduler.EventFailed), func(e *scheduler.Event) { e.Attempt = 3 }),
		// a run a later slot asked to end
		ev(scheduler.EventCancelRequested),
		// backend errors
		with(ev(scheduler.EventBackendError), func(e *scheduler.Event) { e.Op = "claim" }),
		with(ev(scheduler.EventBackendError), func(e *scheduler.Event) { e.Op = "heartbeat" }),
		// replicas that declare the job differently, said by the fleet registry: set,
		// cleared, set again
		{Kind: scheduler.EventJobConflict, Job: job, Conflict: "schedule: every 1m on a; every 2m on b"},
		{Kind: scheduler.EventJobConflict, Job: job},
		{Kind: scheduler.EventJobConflict, Job: job, Conflict: "overlap: skip on a; allow on b"},
		// a job only scheduled so far: its main series exist at zero
		{Kind: scheduler.EventScheduled, Job: "idle", Next: t0.Add(time.Minute)},
		// ignored: an unknown kind, and an event without a job
		{Kind: "future_kind", Job: job},
		{Kind: scheduler.EventFinished, Status: scheduler.StatusOK},
	}
	for _, e := range events {
		m.OnEvent(e)
	}

	expected := `
# HELP anarchon_backend_errors_total Failed backend and run-store calls, by operation.
# TYPE anarchon_backend_errors_total counter
anarchon_backend_errors_total{job_name="idle",op="claim"} 0
anarchon_backend_errors_total{job_name="idle",op="save_result"} 0
anarchon_backend_errors_total{job_name="sync",op="claim"} 1
anarchon_backend_errors_total{job_name="sync",op="heartbeat"} 1
anarchon_backend_errors_total{job_name="sync",op="save_result"} 0
# HELP anarchon_cancel_requests_total Runs on this instance that a later slot of their job asked to end (overlap policy cancel-other); their handlers' contexts were cancelled.
# TYPE anarchon_cancel_requests_total counter
anarchon_cancel_requests_total{job_name="idle"} 0
anarchon_cancel_requests_total{job_name="sync"} 1
# HELP anarchon_claims_total Slots this instance tried to claim, by claim outcome (won, running, done, overlap, late, none, retry, other).
# TYPE anarchon_claims_total counter
anarchon_claims_total{job_name="sync",outcome="done"} 1
anarchon_claims_total{job_name="sync",outcome="late"} 2
anarchon_claims_total{job_name="sync",outcome="overlap"} 1
anarchon_claims_total{job_name="sync",outcome="running"} 1
anarchon_claims_total{job_name="sync",outcome="won"} 2
# HELP anarchon_failed_slots_total Slots whose attempt on this instance failed (error or timeout) with no retry to follow: final failures, once per slot across the fleet.
# TYPE anarchon_failed_slots_total counter
anarchon_failed_slots_total{job_name="idle"} 0
anarchon_failed_slots_total{job_name="sync"} 1
# HELP anarchon_job_conflict 1 while the replicas that declare the job declare it differently (schedule or options), as this instance's fleet registry watch says; else 0.
# TYPE anarchon_job_conflict gauge
anarchon_job_conflict{job_name="idle"} 0
anarchon_job_conflict{job_name="sync"} 1
# HELP anarchon_job_first_seen_timestamp_seconds Unix time this instance first reported an event of the job (at Start, or at the job's registration after it).
# TYPE anarchon_job_first_seen_timestamp_seconds gauge
anarchon_job_first_seen_timestamp_seconds{job_name="sync"} 1.70406721e+09
# HELP anarchon_job_paused 1 while the job is paused (on its own or with all jobs), as this instance's watch of the stored pauses says; else 0.
# TYPE anarchon_job_paused gauge
anarchon_job_paused{job_name="idle"} 0
anarchon_job_paused{job_name="sync"} 0
# HELP anarchon_last_success_timestamp_seconds Unix time at which a run of the job last finished with status ok on this instance.
# TYPE anarchon_last_success_timestamp_seconds gauge
anarchon_last_success_timestamp_seconds{job_name="sync"} 1.7040672125e+09
# HELP anarchon_late_slots_total Slots this instance did not start because their start deadline (slot + max lateness) had passed.
# TYPE anarchon_late_slots_total counter
anarchon_late_slots_total{job_name="idle"} 0
anarchon_late_slots_total{job_name="sync"} 1
# HELP anarchon_lease_losses_total Runs on this instance whose lease was lost while the handler ran (its context was cancelled).
# TYPE anarchon_lease_losses_total counter
anarchon_lease_losses_total{job_name="idle"} 0
anarchon_lease_losses_total{job_name="sync"} 1
# HELP anarchon_missed_slots_total Slots this instance recorded missed: due while no instance could claim them (every one down, paused or cut off from the run store).
# TYPE anarchon_missed_slots_total counter
anarchon_missed_slots_total{job_name="idle"} 0
anarchon_missed_slots_total{job_name="sync"} 3
# HELP anarchon_next_slot_timestamp_seconds Unix time of the job's next slot, as this instance's scheduler computed it.
# TYPE anarchon_next_slot_timestamp_seconds gauge
anarchon_next_slot_timestamp_seconds{job_name="idle"} 1.70406727e+09
anarchon_next_slot_timestamp_seconds{job_name="sync"} 1.7040672115e+09
# HELP anarchon_paused_slots_total Slots that fell while their job was paused, recorded paused by this instance (once per slot across the fleet).
# TYPE anarchon_paused_slots_total counter
anarchon_paused_slots_total{job_name="idle"} 0
anarchon_paused_slots_total{job_name="sync"} 0
# HELP anarchon_retries_total Failed attempts on this instance whose slot is tried again (WithRetry): the retry was stored, or planned in this process without leases.
# TYPE anarchon_retries_total counter
anarchon_retries_total{job_name="idle"} 0
anarchon_retries_total{job_name="sync"} 2
# HELP anarchon_run_duration_seconds How long handlers ran on this instance, scheduled and manual runs.
# TYPE anarchon_run_duration_seconds histogram
anarchon_run_duration_seconds_bucket{job_name="sync",le="1"} 2
anarchon_run_duration_seconds_bucket{job_name="sync",le="10"} 3
anarchon_run_duration_seconds_bucket{job_name="sync",le="+Inf"} 3
anarchon_run_duration_seconds_sum{job_name="sync"} 3.5
anarchon_run_duration_seconds_count{job_name="sync"} 3
# HELP anarchon_running_handlers Handlers of the job running on this instance now.
# TYPE anarchon_running_handlers gauge
anarchon_running_handlers{job_name="idle"} 0
anarchon_running_handlers{job_name="sync"} 0
# HELP anarchon_runs_total Handler runs on this instance that ended, by status and by whether RunNow started them.
# TYPE anarchon_runs_total counter
anarchon_runs_total{job_name="idle",manual="false",status="error"} 0
anarchon_runs_total{job_name="idle",manual="false",status="ok"} 0
anarchon_runs_total{job_name="sync",manual="false",status="error"} 0
anarchon_runs_total{job_name="sync",manual="false",status="lost"} 1
anarchon_runs_total{job_name="sync",manual="false",status="ok"} 1
anarchon_runs_total{job_name="sync",manual="true",status="error"} 1
# HELP anarchon_skipped_slots_total Slots skipped because an earlier slot still held its lease and the job forbids overlap.
# TYPE anarchon_skipped_slots_total counter
anarchon_skipped_slots_total{job_name="idle"} 0
anarchon_skipped_slots_total{job_name="sync"} 1
# HELP anarchon_slot_lag_seconds Start time minus slot time of scheduled runs on this instance (jitter included).
# TYPE anarchon_slot_lag_seconds histogram
anarchon_slot_lag_seconds_bucket{job_name="sync",le="0.5"} 1
anarchon_slot_lag_seconds_bucket{job_name="sync",le="5"} 2
anarchon_slot_lag_seconds_bucket{job_name="sync",le="+Inf"} 2
anarchon_slot_lag_seconds_sum{job_name="sync"} 3.25
anarchon_slot_lag_seconds_count{job_name="sync"} 2
# HELP anarchon_takeovers_total Runs this instance took over from a holder whose lease expired or was released.
# TYPE anarchon_takeovers_total counter
anarchon_takeovers_total{job_name="idle"} 0
anarchon_takeovers_total{job_name="sync"} 1
`
	// Every metric but build_info, whose labels are this build's versions.
	var names []string
	for line := range strings.Lines(expected) {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names = append(names, strings.Fields(rest)[0])
		}
	}
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected), names...))
	// The same through the collector itself, and with ToFloat64 on a single series.
	assert.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(expected), names...))
	assert.Equal(t, 15, testutil.CollectAndCount(m, "anarchon_runs_total", "anarchon_backend_errors_total",
		"anarchon_late_slots_total", "anarchon_skipped_slots_total"))
}

func TestRunningHandlersGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	start := scheduler.Event{Kind: scheduler.EventStarted, Job: "j", Slot: t0}
	m.OnEvent(start)
	m.OnEvent(start)
	m.OnEvent(scheduler.Event{Kind: scheduler.EventStarted, Job: "j", Manual: true})
	assert.Equal(t, 3.0, value(t, reg, "anarchon_running_handlers", "job_name", "j"))
	m.OnEvent(finished("j", scheduler.StatusTimeout, false, time.Second))
	assert.Equal(t, 2.0, value(t, reg, "anarchon_running_handlers", "job_name", "j"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_runs_total", "job_name", "j", "status", "timeout", "manual", "false"))
	assert.Nil(t, find(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "j"), "a timeout is not a success")
}

func TestLastSuccessIncludesManualRuns(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	m.OnEvent(finished("j", scheduler.StatusOK, false, time.Second))
	assert.Equal(t, float64(t0.Unix()+1), value(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "j"))
	m.OnEvent(finished("j", scheduler.StatusOK, true, 3*time.Second))
	assert.Equal(t, float64(t0.Unix()+3), value(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "j"))
	m.OnEvent(finished("j", scheduler.StatusSuperseded, false, 9*time.Second))
	assert.Equal(t, float64(t0.Unix()+3), value(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "j"),
		"a superseded result is not a success")
}

// TestLabelValuesStayBounded: values from outside this version's vocabulary (a newer
// run store's outcome, an unknown status, a malformed op) collapse into "other", and
// an event without an outcome gets its kind's own.
func TestLabelValuesStayBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	m.OnEvent(scheduler.Event{Kind: scheduler.EventLost, Job: "j", Outcome: "paused"})
	m.OnEvent(scheduler.Event{Kind: scheduler.EventLost, Job: "j", Outcome: "none"})
	m.OnEvent(scheduler.Event{Kind: scheduler.EventClaimed, Job: "j"})
	m.OnEvent(scheduler.Event{Kind: scheduler.EventStandby, Job: "j"})
	m.OnEvent(scheduler.Event{Kind: scheduler.EventLost, Job: "j", Outcome: scheduler.OutcomeLimit})
	m.OnEvent(finished("j", "exploded", false, 0))
	for _, op := range []string{"", "Claim", "save result", "9lives", strings.Repeat("x", 33), "claim\n"} {
		m.OnEvent(scheduler.Event{Kind: scheduler.EventBackendError, Job: "j", Op: op})
	}
	m.OnEvent(scheduler.Event{Kind: scheduler.EventBackendError, Job: "j", Op: "watch_v2"})

	assert.Equal(t, 1.0, value(t, reg, "anarchon_claims_total", "job_name", "j", "outcome", "other"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_claims_total", "job_name", "j", "outcome", "none"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_claims_total", "job_name", "j", "outcome", "won"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_claims_total", "job_name", "j", "outcome", "running"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_claims_total", "job_name", "j", "outcome", "limit"), "a slot stored limit")
	assert.Equal(t, 1.0, value(t, reg, "anarchon_runs_total", "job_name", "j", "status", "other", "manual", "false"))
	assert.Equal(t, 6.0, value(t, reg, "anarchon_backend_errors_total", "job_name", "j", "op", "other"))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_backend_errors_total", "job_name", "j", "op", "watch_v2"), "a well-formed new op keeps its name")
}

// TestLabelCardinality feeds many slots, tokens, attempts and instances and checks
// that only bounded labels exist and that the number of series does not grow with
// the number of slots.
func TestLabelCardinality(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	feed := func(slots int) {
		for i := range slots {
			slot := t0.Add(time.Duration(i) * time.Second)
			for _, k := range []scheduler.EventKind{
				scheduler.EventScheduled, scheduler.EventClaimed, scheduler.EventLost, scheduler.EventLate,
				scheduler.EventSkipped, scheduler.EventStarted, scheduler.EventFinished, scheduler.EventTakeover,
				scheduler.EventStandby, scheduler.EventLeaseLost, scheduler.EventBackendError,
			} {
				m.OnEvent(scheduler.Event{
					Kind: k, Job: "j", Slot: slot, At: slot, Next: slot.Add(time.Second),
					Instance: fmt.Sprintf("instance-%d", i), Token: fmt.Sprintf("token-%d", i), Attempt: i + 1,
					Status: scheduler.StatusOK, Op: "claim", Err: fmt.Errorf("error %d", i),
				})
			}
		}
	}
	count := func() int {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	feed(2) // the second slot gives the job's interval
	one := count()
	feed(100)
	assert.Equal(t, one, count(), "series must not grow with slots, tokens or instances")

	// Exactly these labels: never slot, token, attempt or instance (unbounded, and
	// Prometheus adds instance itself), and never "job" or "instance", which
	// Prometheus would rename to exported_job/exported_instance at scrape time.
	allowed := map[string][]string{
		"anarchon_claims_total":                     {"job_name", "outcome"},
		"anarchon_runs_total":                       {"job_name", "manual", "status"},
		"anarchon_run_duration_seconds":             {"job_name"},
		"anarchon_slot_lag_seconds":                 {"job_name"},
		"anarchon_late_slots_total":                 {"job_name"},
		"anarchon_skipped_slots_total":              {"job_name"},
		"anarchon_takeovers_total":                  {"job_name"},
		"anarchon_lease_losses_total":               {"job_name"},
		"anarchon_backend_errors_total":             {"job_name", "op"},
		"anarchon_last_success_timestamp_seconds":   {"job_name"},
		"anarchon_next_slot_timestamp_seconds":      {"job_name"},
		"anarchon_running_handlers":                 {"job_name"},
		"anarchon_paused_slots_total":               {"job_name"},
		"anarchon_excluded_slots_total":             {"job_name"},
		"anarchon_missed_slots_total":               {"job_name"},
		"anarchon_deadline_missed_total":            {"job_name"},
		"anarchon_job_paused":                       {"job_name"},
		"anarchon_job_conflict":                     {"job_name"},
		"anarchon_retries_total":                    {"job_name"},
		"anarchon_failed_slots_total":               {"job_name"},
		"anarchon_cancel_requests_total":            {"job_name"},
		"anarchon_job_interval_seconds":             {"job_name"},
		"anarchon_job_first_seen_timestamp_seconds": {"job_name"},
		"anarchon_build_info":                       {"goversion", "version"},
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, mf := range mfs {
		want, ok := allowed[mf.GetName()]
		if !assert.True(t, ok, "unexpected metric family %s", mf.GetName()) {
			continue
		}
		seen[mf.GetName()] = true
		for _, s := range mf.GetMetric() {
			var names []string
			for _, l := range s.GetLabel() {
				names = append(names, l.GetName())
				assert.NotContains(t, l.GetValue(), "token-", "%s carries a token", mf.GetName())
				assert.NotContains(t, l.GetValue(), "instance-", "%s carries an instance", mf.GetName())
			}
			slices.Sort(names)
			assert.Equal(t, want, names, "labels of %s", mf.GetName())
		}
	}
	assert.Len(t, seen, len(allowed), "every metric family is exposed: %v", seen)
}

func TestOnEventOnNilMetrics(t *testing.T) {
	var m *metrics.Metrics
	assert.NotPanics(t, func() { m.OnEvent(finished("j", scheduler.StatusOK, false, 0)) })
}

func TestChain(t *testing.T) {
	t.Run("calls every hook in order and skips nil", func(t *testing.T) {
		var got []string
		h := metrics.Chain(nil, func(e scheduler.Event) { got = append(got, "a:"+e.Job) }, nil,
			func(e scheduler.Event) { got = append(got, "b:"+e.Job) })
		h(scheduler.Event{Job: "x"})
		assert.Equal(t, []string{"a:x", "b:x"}, got)
	})
	t.Run("no hooks", func(t *testing.T) {
		for _, h := range []func(scheduler.Event){metrics.Chain(), metrics.Chain(nil, nil)} {
			require.NotNil(t, h)
			assert.NotPanics(t, func() { h(scheduler.Event{}) })
		}
	})
	t.Run("a panicking hook does not starve the others", func(t *testing.T) {
		var calls []string
		h := metrics.Chain(
			func(scheduler.Event) { calls = append(calls, "a"); panic("first") },
			func(scheduler.Event) { calls = append(calls, "b"); panic("second") },
			func(scheduler.Event) { calls = append(calls, "c") },
		)
		assert.PanicsWithValue(t, "first", func() { h(scheduler.Event{}) }, "the first panic is passed on for the scheduler to log")
		assert.Equal(t, []string{"a", "b", "c"}, calls)
	})
	t.Run("feeds metrics", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := metrics.Wire(reg)
		require.NoError(t, err)
		n := 0
		h := metrics.Chain(m.OnEvent, func(scheduler.Event) { n++ })
		h(finished("j", scheduler.StatusOK, false, 0))
		assert.Equal(t, 1, n)
		assert.Equal(t, 1.0, value(t, reg, "anarchon_runs_total", "job_name", "j", "status", "ok", "manual", "false"))
	})
}

func TestPauseMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	m.OnEvent(scheduler.Event{Kind: scheduler.EventScheduled, Job: "a", Next: t0})
	m.OnEvent(scheduler.Event{Kind: scheduler.EventScheduled, Job: "b", Next: t0})
	assert.Equal(t, 0.0, value(t, reg, "anarchon_job_paused", "job_name", "a"))

	p := &scheduler.Pause{Job: "a", Reason: "r"}
	m.OnEvent(scheduler.Event{Kind: scheduler.EventPauseChanged, Job: "a", Pause: p})
	assert.Equal(t, 1.0, value(t, reg, "anarchon_job_paused", "job_name", "a"))
	assert.Equal(t, 0.0, value(t, reg, "anarchon_job_paused", "job_name", "b"))
	m.OnEvent(scheduler.Event{Kind: scheduler.EventPaused, Job: "a", Slot: t0})
	m.OnEvent(scheduler.Event{Kind: scheduler.EventPaused, Job: "a", Slot: t0.Add(time.Second)})
	assert.Equal(t, 2.0, value(t, reg, "anarchon_paused_slots_total", "job_name", "a"))

	all := &scheduler.Pause{Reason: "freeze"}
	m.OnEvent(scheduler.Event{Kind: scheduler.EventPauseChanged, Job: "", Pause: all})
	assert.Equal(t, 1.0, value(t, reg, "anarchon_job_paused", "job_name", "b"), "the all-jobs pause pauses b")
	m.OnEvent(scheduler.Event{Kind: scheduler.EventPauseChanged, Job: "a"})
	assert.Equal(t, 1.0, value(t, reg, "anarchon_job_paused", "job_name", "a"), "a resumed on its own, still under the all-jobs pause")
	m.OnEvent(scheduler.Event{Kind: scheduler.EventPauseChanged, Job: ""})
	assert.Equal(t, 0.0, value(t, reg, "anarchon_job_paused", "job_name", "a"))
	assert.Equal(t, 0.0, value(t, reg, "anarchon_job_paused", "job_name", "b"))
	m.OnEvent(finished("a", scheduler.StatusPaused, false, 0))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_runs_total", "job_name", "a", "status", "paused", "manual", "false"))
}

// An excluded slot is counted as a paused one is, and excluded is a status
// label of its own.
func TestExcludedMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	m.OnEvent(scheduler.Event{Kind: scheduler.EventScheduled, Job: "a", Next: t0})
	assert.Equal(t, 0.0, value(t, reg, "anarchon_excluded_slots_total", "job_name", "a"), "initialised with the job")
	m.OnEvent(scheduler.Event{Kind: scheduler.EventExcluded, Job: "a", Slot: t0, Status: scheduler.StatusExcluded})
	m.OnEvent(scheduler.Event{Kind: scheduler.EventExcluded, Job: "a", Entry: "acme", Slot: t0, Status: scheduler.StatusExcluded})
	assert.Equal(t, 2.0, value(t, reg, "anarchon_excluded_slots_total", "job_name", "a"))
	assert.Equal(t, 0.0, value(t, reg, "anarchon_paused_slots_total", "job_name", "a"))
	m.OnEvent(finished("a", scheduler.StatusExcluded, false, 0))
	assert.Equal(t, 1.0, value(t, reg, "anarchon_runs_total", "job_name", "a", "status", "excluded", "manual", "false"))
	m.OnEvent(scheduler.Event{Kind: scheduler.EventCalendarsChanged})
	assert.Equal(t, 2.0, value(t, reg, "anarchon_excluded_slots_total", "job_name", "a"), "a change of calendars counts nothing")
}
