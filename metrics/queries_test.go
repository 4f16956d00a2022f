package metrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

// The dashboard and the rules that ship beside the collectors.
const (
	dashboardFile = "grafana-dashboard.json"
	alertsFile    = "alerts.yml"
)

// exported lists the series names the collectors export, each with its label
// names, read from a registry after Wire and one event of each kind. A
// histogram's series are its _bucket (with le), _sum and _count.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.Wire(reg)
	require.NoError(t, err)
	at := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	for _, e := range []scheduler.Event{
		{Kind: scheduler.EventScheduled, Next: at},
		{Kind: scheduler.EventClaimed, Outcome: scheduler.OutcomeWon},
		{Kind: scheduler.EventLost, Outcome: scheduler.OutcomeDone},
		{Kind: scheduler.EventStandby, Outcome: scheduler.OutcomeRunning},
		{Kind: scheduler.EventLate, Outcome: scheduler.OutcomeLate},
		{Kind: scheduler.EventSkipped, Outcome: scheduler.OutcomeOverlap},
		{Kind: scheduler.EventStarted, Lag: time.Second},
		{Kind: scheduler.EventFinished, Status: scheduler.StatusOK, Duration: time.Second},
		{Kind: scheduler.EventTakeover},
		{Kind: scheduler.EventLeaseLost},
		{Kind: scheduler.EventBackendError, Op: "claim"},
		{Kind: scheduler.EventPaused},
		{Kind: scheduler.EventPauseChanged, Pause: &scheduler.Pause{Job: "job", Reason: "r"}},
		{Kind: scheduler.EventJobConflict, Conflict: "schedules differ"},
		{Kind: scheduler.EventScheduled, Next: at.Add(time.Minute)},
		{Kind: scheduler.EventRetry},
		{Kind: scheduler.EventFailed, Status: scheduler.StatusError},
		{Kind: scheduler.EventCancelRequested},
		{Kind: scheduler.EventFinished, Entry: "e", Status: scheduler.StatusOK},
	} {
		e.Job, e.At = "job", at
		m.OnEvent(e)
	}
	m.CountEntries(entryStates{entryCounts{followed: 3}})
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string][]string{}
	for _, f := range families {
		require.NotEmpty(t, f.GetMetric(), "%s has a series after one event of each kind", f.GetName())
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[f.GetName()+"_bucket"] = append(slices.Clone(labels), "le")
			out[f.GetName()+"_sum"] = labels
			out[f.GetName()+"_count"] = labels
			continue
		}
		out[f.GetName()] = labels
	}
	return out
}

// entryCounts is an EntryCounter.
type entryCounts struct{ followed, orphaned int }

func (c entryCounts) EntryCounts() (followed, orphaned int) { return c.followed, c.orphaned }

// entryStates is an EntryCounter and an EntryStater.
type entryStates struct{ entryCounts }

func (c entryStates) EntryStates() map[string]scheduler.EntryStateCounts {
	return map[string]scheduler.EntryStateCounts{"tenants": {Active: c.followed}}
}

// The collectors export the 27 metrics the package documents.
func TestExportedMetrics(t *testing.T) {
	names := exported(t)
	assert.Len(t, names, 26+3+3, "26 counters and gauges, 2 histograms of 3 series each")
	assert.ElementsMatch(t, []string{"job_name", "state"}, names["anarchon_job_entries"])
	assert.ElementsMatch(t, []string{"job_name", "status", "manual"}, names["anarchon_runs_total"])
	assert.ElementsMatch(t, []string{"job_name", "le"}, names["anarchon_slot_lag_seconds_bucket"])
}

// Every query of the Grafana dashboard (each panel's expr, and the job
// variable's label_values) names only metrics the collectors export, with
// labels they have.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	names := exported(t)
	data, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dash), "the dashboard is JSON")
	assert.Equal(t, "anarchon", dash.UID)

	ids := map[int]bool{}
	queries := 0
	for _, p := range dash.Panels {
		assert.NotEmpty(t, p.Title, "panel %d has a title", p.ID)
		assert.False(t, ids[p.ID], "panel ids are unique: %d", p.ID)
		ids[p.ID] = true
		assert.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "%q fits the grid", p.Title)
		if p.Type == "row" {
			continue
		}
		require.NotNil(t, p.Datasource, "%q names its data source", p.Title)
		assert.Equal(t, "${datasource}", p.Datasource.UID, "%q reads the dashboard's data source variable", p.Title)
		require.NotEmpty(t, p.Targets, "%q has a query", p.Title)
		for _, tg := range p.Targets {
			queries++
			assert.NoError(t, checkQuery(tg.Expr, names), "panel %q, query %s", p.Title, tg.RefID)
		}
	}
	assert.GreaterOrEqual(t, queries, 20)

	var variables int
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		variables++
		var q struct {
			Query string `json:"query"`
		}
		require.NoError(t, json.Unmarshal(v.Query, &q))
		assert.NoError(t, checkLabelValues(q.Query, names), "variable %s", v.Name)
	}
	assert.Equal(t, 1, variables, "the job variable")
}

// alertRules is a Prometheus rule file.
type alertRules struct {
	Groups []struct {
		Name  string      `yaml:"name"`
		Rules []alertRule `yaml:"rules"`
	} `yaml:"groups"`
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// checkRule checks one alert rule's names, its for and its severity.
func checkRule(t *testing.T, where string, r alertRule, names map[string][]string) {
	t.Helper()
	assert.NotEmpty(t, r.Alert, "%s: every rule is an alert", where)
	if r.For != "" {
		_, err := time.ParseDuration(r.For)
		assert.NoError(t, err, "%s: %s: for", where, r.Alert)
	}
	assert.NoError(t, checkQuery(r.Expr, names), "%s: %s", where, r.Alert)
	assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: %s has a severity", where, r.Alert)
}

func checkRules(t *testing.T, where string, data []byte, names map[string][]string) []alertRule {
	t.Helper()
	var rules alertRules
	require.NoError(t, yaml.Unmarshal(data, &rules), "%s is YAML", where)
	var all []alertRule
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			checkRule(t, where, r, names)
			all = append(all, r)
		}
	}
	return all
}

// Every alert rule's expr names only metrics the collectors export, with labels
// they have, and holds for every job (no job's name or interval in it); every
// alert has a severity and a runbook that docs/operating.md has. The package
// documentation and docs/operating.md show rules of alerts.yml as they are.
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	names := exported(t)
	file, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	rules := checkRules(t, alertsFile, file, names)
	assert.Len(t, rules, 10)
	byName := map[string]alertRule{}
	guide, err := os.ReadFile("../docs/operating.md")
	require.NoError(t, err)
	for _, r := range rules {
		byName[r.Alert] = r
		assert.NotContains(t, r.Expr, "job_name=", "%s holds for every job", r.Alert)
		assert.NotContains(t, r.Expr, "600", "%s has no job's interval in it", r.Alert)
		anchor := strings.ToLower(r.Alert)
		assert.Equal(t, "https://github.com/anarchon/anarchon/blob/main/docs/operating.md#"+anchor, r.Annotations["runbook_url"], r.Alert)
		assert.Contains(t, string(guide), "\n#### "+r.Alert+"\n", "docs/operating.md has the runbook of %s", r.Alert)
		assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
	}

	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var shown alertRules
	require.NoError(t, yaml.Unmarshal([]byte(docBlock(t, string(doc), "began following the job:\n//\n")), &shown))
	require.Len(t, shown.Groups, 1)
	require.Len(t, shown.Groups[0].Rules, 1)
	for _, r := range shown.Groups[0].Rules {
		checkRule(t, "doc.go", r, names)
		assert.Equal(t, byName[r.Alert].Expr, r.Expr, "the package documentation shows %s as alerts.yml has it", r.Alert)
		assert.Equal(t, byName[r.Alert].For, r.For, r.Alert)
		assert.Equal(t, byName[r.Alert].Labels, r.Labels, r.Alert)
	}

	_, after, ok := strings.Cut(string(guide), "## Metrics and alerts")
	require.True(t, ok)
	_, yml, ok := strings.Cut(after, "```yaml\n")
	require.True(t, ok, "docs/operating.md has example rules")
	yml, _, _ = strings.Cut(yml, "```")
	example := checkRules(t, "docs/operating.md", []byte(yml), names)
	assert.Len(t, example, 2)
	for _, r := range example {
		assert.Equal(t, byName[r.Alert].Expr, r.Expr, "docs/operating.md shows %s as alerts.yml has it", r.Alert)
	}
	assert.True(t, strings.Contains(after, "](../metrics/"+alertsFile+")"), "the guide links the rule file")
	assert.True(t, strings.Contains(after, "](../metrics/"+dashboardFile+")"), "the guide links the dashboard")
}

// docBlock is the code block of a Go doc comment after the line intro.
func docBlock(t *testing.T, doc, intro string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, intro)
	require.True(t, ok, "doc.go has %q", intro)
	var b strings.Builder
	for _, line := range strings.SplitAfter(rest, "\n") {
		switch {
		case strings.HasPrefix(line, "//\t"):
			b.WriteString(strings.TrimPrefix(line, "//\t"))
		case line == "//\n":
			b.WriteString("\n")
		default:
			return strings.TrimRight(b.String(), "\n") + "\n"
		}
	}
	return b.String()
}

// The check itself finds what it is meant to find.
func TestCheckQueryFindsMistakes(t *testing.T) {
	names := exported(t)
	for _, tc := range []struct {
		expr, want string // want: in the error; "" for none
	}{
		{`sum by (job_name, status) (rate(anarchon_runs_total{job_name=~"$job"}[$__rate_interval]))`, ""},
		{`histogram_quantile(0.99, sum(rate(anarchon_slot_lag_seconds_bucket[5m])) by (le))`, ""},
		{`time() - max by (job_name) (anarchon_last_success_timestamp_seconds) > 3 * 600 # a comment`, ""},
		{`count(max by (job_name) (anarchon_job_paused) == 1) or vector(0)`, ""},
		{`max(anarchon_next_slot_timestamp_seconds offset 5m) unless on (job_name) anarchon_job_conflict`, ""},
		{`rate(anarchon_runs_totl[5m])`, "anarchon_runs_totl"},
		{`rate(anarchon_run_duration_seconds[5m])`, "anarchon_run_duration_seconds"},
		{`sum by (job_name) (rate(anarchon_runs_total{job="report"}[5m]))`, `label "job"`},
		{`sum by (jobname) (rate(anarchon_runs_total[5m]))`, `"jobname"`},
		{`up == 0`, `"up"`},
		{`vector(1)`, "no metric"},
		{`{__name__=~"anarchon_.*"}`, "without a metric name"},
	} {
		err := checkQuery(tc.expr, names)
		if tc.want == "" {
			assert.NoError(t, err, tc.expr)
			continue
		}
		if assert.Error(t, err, tc.expr) {
			assert.Contains(t, err.Error(), tc.want, tc.expr)
		}
	}
	assert.NoError(t, checkLabelValues("label_values(anarchon_runs_total, job_name)", names))
	assert.Error(t, checkLabelValues("label_values(anarchon_runs_total, job)", names))
	assert.Error(t, checkLabelValues("label_values(anarchon_run_total, job_name)", names))
}

// Labels every scraped series has besides its own: Prometheus's target labels.
// Its job label (the scrape job's) is left out: in these files it can only be
// the mistake of job_name, the label of the job's name.
var targetLabels = []string{"instance"}

// checkQuery checks that a PromQL expression names at least one metric, and only
// metrics of names (with their labels in its selectors, and in its by, without,
// on and ignoring clauses only labels those metrics have).
func checkQuery(expr string, names map[string][]string) error {
	q, err := scanQuery(expr)
	if err != nil {
		return err
	}
	if len(q.selectors) == 0 {
		return fmt.Errorf("%q names no metric", expr)
	}
	have := slices.Clone(targetLabels)
	for _, s := range q.selectors {
		labels, ok := names[s.metric]
		if !ok {
			return fmt.Errorf("%q: %q is not a metric the collectors export", expr, s.metric)
		}
		have = append(have, labels...)
		for _, l := range s.labels {
			if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
				return fmt.Errorf("%q: %s has no label %q (it has %v)", expr, s.metric, l, labels)
			}
		}
	}
	for _, l := range q.grouping {
		if !slices.Contains(have, l) {
			return fmt.Errorf("%q: groups by %q, which none of its metrics has", expr, l)
		}
	}
	return nil
}

var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// checkLabelValues checks a Grafana variable's label_values(metric, label).
func checkLabelValues(query string, names map[string][]string) error {
	m := labelValues.FindStringSubmatch(query)
	if m == nil {
		return fmt.Errorf("%q is not label_values(metric, label)", query)
	}
	return checkQuery(m[1]+"{"+m[2]+`=""}`, names)
}

// A query as scanQuery reads it: the metrics it selects, with the labels their
// matchers name, and the labels of its grouping clauses.
type query struct {
	selectors []selector
	grouping  []string
}

type selector struct {
	metric string
	labels []string
}

// PromQL's words that are not metric names: aggregations (which may be followed
// by a grouping clause before their parenthesis), binary and set operators,
// modifiers. Functions are told by the parenthesis that follows them.
var keywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true,
	"limit_ratio": true, "and": true, "or": true, "unless": true, "atan2": true, "bool": true,
	"offset": true, "start": true, "end": true, "inf": true, "nan": true, "group_left": true, "group_right": true,
}

var groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// scanQuery reads the metric selectors and grouping labels of a PromQL
// expression, enough to check its names: strings, ranges ([5m], [$__range]),
// numbers, durations, comments and Grafana's $variables are skipped.
func scanQuery(expr string) (query, error) {
	var q query
	s := expr
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	ident := func() string {
		i := 0
		for i < len(s) && isIdent(s[i]) {
			i++
		}
		w := s[:i]
		s = s[i:]
		return w
	}
	skipSpace := func() { s = strings.TrimLeft(s, " \t\r\n") }
	skipString := func() error {
		quote := s[0]
		for i := 1; i < len(s); i++ {
			switch {
			case s[i] == '\\' && quote != '`':
				i++
			case s[i] == quote:
				s = s[i+1:]
				return nil
			}
		}
		return fmt.Errorf("%q: an unterminated string", expr)
	}
	// labelList reads "(a, b)" after a grouping word.
	labelList := func() ([]string, error) {
		skipSpace()
		if !strings.HasPrefix(s, "(") {
			return nil, nil // group_left without labels
		}
		inside, rest, ok := strings.Cut(s[1:], ")")
		if !ok {
			return nil, fmt.Errorf("%q: an unclosed label list", expr)
		}
		s = rest
		var labels []string
		for l := range strings.SplitSeq(inside, ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		return labels, nil
	}
	// matchers reads "{a="x", b!~"y"}" and returns the label names.
	matchers := func() ([]string, error) {
		s = s[1:]
		var labels []string
		for {
			skipSpace()
			switch {
			case s == "":
				return nil, fmt.Errorf("%q: an unclosed selector", expr)
			case s[0] == '}':
				s = s[1:]
				return labels, nil
			case s[0] == ',':
				s = s[1:]
			case s[0] == '"' || s[0] == '\'' || s[0] == '`':
				if err := skipString(); err != nil {
					return nil, err
				}
			case isIdentStart(s[0]):
				labels = append(labels, ident())
			default:
				s = s[1:] // =, !=, =~, !~
			}
		}
	}
	for {
		skipSpace()
		if s == "" {
			return q, nil
		}
		c := s[0]
		switch {
		case c == '#':
			_, s, _ = strings.Cut(s, "\n")
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return q, err
			}
		case c == '[':
			_, rest, ok := strings.Cut(s, "]")
			if !ok {
				return q, fmt.Errorf("%q: an unclosed range", expr)
			}
			s = rest
		case c == '$':
			s = s[1:]
			if strings.HasPrefix(s, "{") {
				_, s, _ = strings.Cut(s, "}")
			} else {
				ident()
			}
		case c >= '0' && c <= '9' || c == '.':
			for s != "" && (isIdent(s[0]) || s[0] == '.') {
				s = s[1:]
			}
		case c == '{':
			return q, fmt.Errorf("%q: a selector without a metric name", expr)
		case isIdentStart(c):
			w := ident()
			skipSpace()
			switch {
			case groupingWords[w]:
				labels, err := labelList()
				if err != nil {
					return q, err
				}
				q.grouping = append(q.grouping, labels...)
			case keywords[w], strings.HasPrefix(s, "("):
				// an aggregation, an operator or a function
			default:
				sel := selector{metric: w}
				if strings.HasPrefix(s, "{") {
					labels, err := matchers()
					if err != nil {
						return q, err
					}
					sel.labels = labels
				}
				q.selectors = append(q.selectors, sel)
			}
		default:
			s = s[1:]
		}
	}
}
