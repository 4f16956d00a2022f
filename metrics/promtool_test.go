package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

// The tests of this file run Prometheus's own rule engine on alerts.yml through
// promtool: $ANARCHON_PROMTOOL, or the one on the PATH (Debian's prometheus
// package, which .ci/deps installs). They fail when there is none.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ANARCHON_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is needed (apt-get install prometheus, or set ANARCHON_PROMTOOL)")
	return p
}

// promtool check rules accepts alerts.yml.
func TestPromtoolChecksTheRules(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", alertsFile).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "SUCCESS: 10 rules found")
}

// The rules, run by promtool's rule engine on the metrics a real scheduler
// exported for two jobs of different intervals: fast every 10 s, slow every
// minute, both succeeding for 2 minutes and failing from then on. The same rule
// fires for fast 3 × 10 s after its last success (plus its for: 5m), and for
// slow only 3 minutes after its own: each job's threshold is its own interval.
// Both jobs' failed slots fire AnarchonSlotFailed at once.
func TestPromtoolRunsTheRulesOnLiveMetrics(t *testing.T) {
	const scrape = 15 * time.Second
	var (
		start   time.Time
		samples []map[string]float64 // by series, at each scrape
	)
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := metrics.Wire(reg)
		require.NoError(t, err)
		s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "replica-1", OnEvent: m.OnEvent})
		require.NoError(t, err)
		start = time.Now()
		failFrom := start.Add(2 * time.Minute)
		handler := func(_ context.Context, run scheduler.Run) error {
			if !run.Slot.Before(failFrom) {
				return errors.New("upstream unavailable")
			}
			return nil
		}
		require.NoError(t, s.Every("fast", 10*time.Second, handler))
		require.NoError(t, s.Every("slow", time.Minute, handler))
		require.NoError(t, s.Start(t.Context()))
		for range 57 { // 0 to 14 minutes
			synctest.Wait()
			samples = append(samples, scrapeOnce(t, reg))
			time.Sleep(scrape)
		}
		require.NoError(t, s.Stop(t.Context()))
	})

	series := seriesOf(samples, start)
	notSucceeding := func(job, since string) map[string]any { // since: as humanizeDuration writes it
		return map[string]any{
			"exp_labels": map[string]string{"job_name": job, "severity": "critical"},
			"exp_annotations": map[string]string{
				"summary":     "Job " + job + " has not succeeded for 3 of its intervals",
				"description": "No replica has recorded a successful run of " + job + " for " + since + " (since its last success, or since the replicas up now started).",
				"runbook_url": "https://github.com/anarchon/anarchon/blob/main/docs/operating.md#anarchonjobnotsucceeding",
			},
		}
	}
	slotFailed := func(job string) map[string]any {
		return map[string]any{
			"exp_labels": map[string]string{"job_name": job, "severity": "warning"},
			"exp_annotations": map[string]string{
				"summary":     "A slot of " + job + " failed after its last attempt",
				"runbook_url": "https://github.com/anarchon/anarchon/blob/main/docs/operating.md#anarchonslotfailed",
			},
		}
	}
	at := func(d time.Duration, alert string, exp ...map[string]any) map[string]any {
		if exp == nil {
			exp = []map[string]any{}
		}
		return map[string]any{"eval_time": d.String(), "alertname": alert, "exp_alerts": exp}
	}
	runPromtool(t, scrape, series, len(samples), []map[string]any{
		at(time.Minute+45*time.Second, "AnarchonJobNotSucceeding"),
		at(time.Minute+45*time.Second, "AnarchonSlotFailed"),
		at(3*time.Minute, "AnarchonSlotFailed", slotFailed("fast"), slotFailed("slow")),
		// fast: last success 1m50s; 30 s later the rule holds, 5 m
		// later it fires. slow: last success 1m; it holds from 4m.
		at(7*time.Minute, "AnarchonJobNotSucceeding"),
		at(8*time.Minute, "AnarchonJobNotSucceeding", notSucceeding("fast", "6m 10s")),
		at(8*time.Minute+45*time.Second, "AnarchonJobNotSucceeding", notSucceeding("fast", "6m 55s")),
		at(9*time.Minute+15*time.Second, "AnarchonJobNotSucceeding",
			notSucceeding("fast", "7m 25s"), notSucceeding("slow", "8m 15s")),
		// No other rule fires on these jobs.
		at(10*time.Minute, "AnarchonBackendErrors"),
		at(10*time.Minute, "AnarchonLateSlots"),
		at(10*time.Minute, "AnarchonMissedSlots"),
		at(10*time.Minute, "AnarchonDeadlineMissed"),
		at(10*time.Minute, "AnarchonLeaseLost"),
		at(10*time.Minute, "AnarchonSlotLagHigh"),
		at(10*time.Minute, "AnarchonJobDeclaredDifferently"),
		at(10*time.Minute, "AnarchonJobPausedLong"),
	})
}

// at is an alert_rule_test of promtool: at d, alert fires with exp (none: it does not fire).
func at(d time.Duration, alert string, exp ...map[string]any) map[string]any {
	if exp == nil {
		exp = []map[string]any{}
	}
	return map[string]any{"eval_time": d.String(), "alertname": alert, "exp_alerts": exp}
}

// seriesOf is samples, scraped every interval from start, as promtool's input
// series: each series with the labels a scrape adds.
func seriesOf(samples []map[string]float64, start time.Time) []map[string]string {
	names := map[string]bool{}
	for _, s := range samples {
		for k := range s {
			names[k] = true
		}
	}
	var series []map[string]string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range names {
			if !yield(k) {
				return
			}
		}
	}) {
		vals := make([]string, len(samples))
		for i, s := range samples {
			v, ok := s[name]
			if !ok {
				vals[i] = "_"
				continue
			}
			if metric, _, _ := strings.Cut(name, "{"); strings.HasSuffix(metric, "_timestamp_seconds") {
				// promtool's clock starts at 0: times are given from the start.
				v -= float64(start.Unix())
			}
			vals[i] = strconv.FormatFloat(v, 'f', -1, 64)
		}
		series = append(series, map[string]string{"series": name, "values": strings.Join(vals, " ")})
	}
	return series
}

// runPromtool runs promtool's rule tests of alerts.yml on series, scraped every
// scrape (scrapes of them), with tests.
func runPromtool(t *testing.T, scrape time.Duration, series []map[string]string, scrapes int, tests []map[string]any) {
	t.Helper()
	abs, err := filepath.Abs(alertsFile)
	require.NoError(t, err)
	file := map[string]any{
		"rule_files":          []string{abs},
		"evaluation_interval": scrape.String(),
		"tests": []map[string]any{{
			"interval":        scrape.String(),
			"input_series":    series,
			"alert_rule_test": tests,
		}},
	}
	data, err := yaml.Marshal(file)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "alerts_test.yml")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	out, err := exec.Command(promtool(t), "test", "rules", path).CombinedOutput()
	if err != nil && os.Getenv("ANARCHON_PROMTOOL_DUMP") != "" {
		t.Logf("the test file:\n%s", data)
	}
	require.NoError(t, err, "promtool test rules:\n%s", out)
	t.Logf("promtool: %s (%d series, %d scrapes)", strings.TrimSpace(string(out)), len(series), scrapes)
}

// A replica that starts after every replica was down for two minutes records
// the slots of a job every 10 s that fell meanwhile missed: AnarchonMissedSlots
// fires on its metrics, with their count.
func TestPromtoolFiresMissedSlots(t *testing.T) {
	const scrape = 15 * time.Second
	var (
		start   time.Time
		samples []map[string]float64
		nMissed int
	)
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		ok := func(context.Context, scheduler.Run) error { return nil }
		first, err := scheduler.New(scheduler.Config{Backend: b, Instance: "replica-0"})
		require.NoError(t, err)
		require.NoError(t, first.Every("fast", 10*time.Second, ok))
		require.NoError(t, first.Start(t.Context()))
		time.Sleep(55 * time.Second) // 0:00 … 0:50 run
		require.NoError(t, first.Stop(t.Context()))
		time.Sleep(2*time.Minute + 5*time.Second) // 1:00 … 2:50 fall with no replica up; 3:00 is the loop's

		reg := prometheus.NewRegistry()
		m, err := metrics.Wire(reg)
		require.NoError(t, err)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "replica-1", OnEvent: m.OnEvent})
		require.NoError(t, err)
		require.NoError(t, s.Every("fast", 10*time.Second, ok))
		start = time.Now()
		samples = append(samples, scrapeOnce(t, reg))
		require.NoError(t, s.Start(t.Context()))
		for range 12 {
			time.Sleep(scrape)
			synctest.Wait()
			samples = append(samples, scrapeOnce(t, reg))
		}
		require.NoError(t, s.Stop(t.Context()))
		hist, err := s.History(t.Context(), "fast", 100)
		require.NoError(t, err)
		for _, r := range hist {
			if r.Status == scheduler.StatusMissed {
				nMissed++
			}
		}
	})
	require.Equal(t, 12, nMissed)
	missed := func(value string) map[string]any {
		return map[string]any{
			"exp_labels": map[string]string{"job_name": "fast", "severity": "critical"},
			"exp_annotations": map[string]string{
				"summary":     "Slots of fast were missed: no replica could claim them",
				"description": value + " slots of fast were recorded missed in the last 30 minutes.",
				"runbook_url": "https://github.com/anarchon/anarchon/blob/main/docs/operating.md#anarchonmissedslots",
			},
		}
	}
	runPromtool(t, scrape, seriesOf(samples, start), len(samples), []map[string]any{
		at(0, "AnarchonMissedSlots"),
		at(2*time.Minute, "AnarchonMissedSlots", missed("12")),
	})
}

// A job every 10 s whose slots from 0:40 on run 30 s, past their 20 s
// deadline: AnarchonDeadlineMissed fires once the first is judged, with the
// count of slots judged so far, and not before.
func TestPromtoolFiresDeadlineMissed(t *testing.T) {
	const scrape = 15 * time.Second
	var (
		start   time.Time
		samples []map[string]float64
	)
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := metrics.Wire(reg)
		require.NoError(t, err)
		s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "replica-1", OnEvent: m.OnEvent})
		require.NoError(t, err)
		start = time.Now()
		require.NoError(t, s.Every("slow", 10*time.Second, func(ctx context.Context, r scheduler.Run) error {
			if !r.Slot.Before(start.Add(40 * time.Second)) {
				time.Sleep(30 * time.Second)
			}
			return nil
		}, scheduler.WithDeadline(20*time.Second), scheduler.WithMaxLate(5*time.Second)))
		samples = append(samples, scrapeOnce(t, reg))
		require.NoError(t, s.Start(t.Context()))
		for range 8 {
			time.Sleep(scrape)
			synctest.Wait()
			samples = append(samples, scrapeOnce(t, reg))
		}
		require.NoError(t, s.Stop(t.Context()))
	})
	late := func(value string) map[string]any {
		return map[string]any{
			"exp_labels": map[string]string{"job_name": "slow", "severity": "critical"},
			"exp_annotations": map[string]string{
				"summary":     "Slots of slow had not ended ok by their deadline",
				"description": value + " slots of slow were recorded past their deadline in the last 30 minutes.",
				"runbook_url": "https://github.com/anarchon/anarchon/blob/main/docs/operating.md#anarchondeadlinemissed",
			},
		}
	}
	// 0:40's deadline is 1:00, judged at 1:02; 0:50's at 1:12; by the scrape
	// at 1:45, 0:40 … 1:20 are judged.
	runPromtool(t, scrape, seriesOf(samples, start), len(samples), []map[string]any{
		at(time.Minute, "AnarchonDeadlineMissed"),
		at(time.Minute+15*time.Second, "AnarchonDeadlineMissed", late("2")),
		at(time.Minute+45*time.Second, "AnarchonDeadlineMissed", late("5")),
	})
}

// scrapeOnce is reg's series as a scrape of instance replica-1 of the scrape
// job svc reads them: each series in the text format's name{labels} form.
func scrapeOnce(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := []string{`instance="replica-1"`, `job="svc"`}
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := func(suffix string, extra ...string) string {
				return mf.GetName() + suffix + "{" + strings.Join(append(slices.Clone(labels), extra...), ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[name("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out[name("_bucket", fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'f', -1, 64)))] = float64(b.GetCumulativeCount())
				}
				out[name("_bucket", `le="+Inf"`)] = float64(h.GetSampleCount())
				out[name("_sum")] = h.GetSampleSum()
				out[name("_count")] = float64(h.GetSampleCount())
			}
		}
	}
	return out
}
