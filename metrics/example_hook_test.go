package metrics_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

// The collectors are fed by scheduler events, through Config.OnEvent; with
// scheduler.Chain the same events also reach a log (scheduler.LogEvents, or a hook
// of one's own). Here the events are fed by hand, as a scheduler delivers them.
func ExampleMetrics_OnEvent() {
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	if err != nil {
		panic(err)
	}
	logEvent := func(e scheduler.Event) { fmt.Println("log:", e.Kind, e.Job) }
	onEvent := scheduler.Chain(m.OnEvent, logEvent) // scheduler.Config{OnEvent: onEvent}

	slot := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	onEvent(scheduler.Event{Kind: scheduler.EventLate, Job: "report", Slot: slot, Outcome: scheduler.OutcomeLate, At: slot})
	onEvent(scheduler.Event{Kind: scheduler.EventStarted, Job: "report", Slot: slot.Add(time.Hour), Lag: 300 * time.Millisecond})
	onEvent(scheduler.Event{Kind: scheduler.EventFinished, Job: "report", Slot: slot.Add(time.Hour),
		Status: scheduler.StatusOK, Duration: 2 * time.Second, At: slot.Add(time.Hour + 2*time.Second)})

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families { // the series that are not zero, sorted by name
		if f.GetName() == "anarchon_build_info" {
			continue // its labels are the versions this program was built with
		}
		for _, s := range f.GetMetric() {
			if v := seriesValue(s); v != 0 {
				fmt.Printf("%s%s %v\n", f.GetName(), seriesLabels(s), v)
			}
		}
	}
	// Output:
	// log: late report
	// log: started report
	// log: finished report
	// anarchon_claims_total{job_name="report",outcome="late"} 1
	// anarchon_job_first_seen_timestamp_seconds{job_name="report"} 1.8934992e+09
	// anarchon_last_success_timestamp_seconds{job_name="report"} 1.893502802e+09
	// anarchon_late_slots_total{job_name="report"} 1
	// anarchon_run_duration_seconds{job_name="report"} 1
	// anarchon_runs_total{job_name="report",manual="false",status="ok"} 1
	// anarchon_slot_lag_seconds{job_name="report"} 1
}

// seriesValue is a counter's or gauge's value, or a histogram's number of observations.
func seriesValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

func seriesLabels(m *dto.Metric) string {
	var pairs []string
	for _, l := range m.GetLabel() {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return "{" + strings.Join(pairs, ",") + "}"
}
