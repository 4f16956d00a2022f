package web

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// funcs are the templates' functions.
func (h *Handler) funcs() template.FuncMap {
	return template.FuncMap{
		"jobURL":      func(job string) string { return h.cfg.Prefix + jobPath(job) },
		"apiJobURL":   func(job string) string { return h.cfg.Prefix + "api/" + jobPath(job) },
		"page":        frameOf,
		"clock":       clock,
		"rel":         rel,
		"iso":         func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"ms":          msText,
		"secs":        func(n int) string { return short(time.Duration(n) * time.Second) },
		"status":      statusClass,
		"failed":      failed,
		"sched":       scheduler.DescribeSchedule,
		"join":        strings.Join,
		"holding":     holding,
		"entryURL":    func(job, id string) string { return h.cfg.Prefix + entryPath(job, id) },
		"calendarURL": func(name string) string { return h.cfg.Prefix + calendarPath(name) },
		"entrySched":  entrySchedule,
		"entryState":  entryState,
		"visible":     visible,
		"runClass":    runClass,
		"statusText":  statusText,
		"runURL": func(r fleet.Run) string {
			if p := attemptPath(r); p != "" {
				return h.cfg.Prefix + p
			}
			return ""
		},
		"rowError": func(r fleet.Run) rowErr {
			text, cut := rowError(r)
			return rowErr{Text: text, Cut: cut}
		},
		"policy":         func(v any) bool { return cancelledByPolicy(asRun(v)) },
		"dur":            short,
		"maxSearchJobs":  func() int { return maxSearchJobs },
		"entryCounts":    entryCounts,
		"failingEntries": failingEntries,
	}
}

// entryCounts says a job's entries by state (EntriesState.Counts), "" for none.
func entryCounts(e *fleet.EntriesState) string {
	if e == nil {
		return ""
	}
	return e.Counts()
}

// failingEntries names a job's failing entries, "" when none.
func failingEntries(e *fleet.EntriesState) string {
	if e == nil || len(e.Failing) == 0 && e.FailingMore == 0 {
		return ""
	}
	ids := make([]string, len(e.Failing))
	for i, id := range e.Failing {
		ids[i] = visible(id)
	}
	s := strings.Join(ids, ", ")
	if e.FailingMore > 0 {
		s += fmt.Sprintf(" and %d more", e.FailingMore)
	}
	if e.Unchecked {
		s += " (not all checked)"
	}
	return s
}

// shownRuns are the runs a table shows after its status filter.
type shownRuns struct {
	Runs   []fleet.Run
	Filter string // the filter's label in lower case; "" for all
}

// rowErr is a run's error as a runs table shows it.
type rowErr struct {
	Text string
	Cut  bool
}

// frame is what a shared template ("head", "run", "pause", "runrows") gets: the
// page's frame and one item.
type frame struct {
	pageBase
	Page string      // "head": the page's name in the title
	Run  *fleet.Run  // "run"
	Runs []fleet.Run // "runrows"
	// Filter names the runs table's status filter ("runrows"; "" for all).
	Filter string
	Form   *formFrame // "entryform"
	*fleet.PauseInfo
}

// frameOf is the templates' page function: {{template "run" page $ .LastRun}}.
func frameOf(p interface{ base() pageBase }, item any) (frame, error) {
	f := frame{pageBase: p.base()}
	switch x := item.(type) {
	case string:
		f.Page = x
	case *fleet.Run:
		f.Run = x
	case *fleet.PauseInfo:
		f.PauseInfo = x
	case []fleet.Run:
		f.Runs = x
	case shownRuns:
		f.Runs, f.Filter = x.Runs, x.Filter
	case formFrame:
		f.Form = &x
	default:
		return f, fmt.Errorf("web: page: %T", item)
	}
	return f, nil
}

// clock shows t in UTC: the time of day when it is on now's UTC date, the date
// too otherwise; millisecond precision only when t has some (manual runs' slots).
func clock(t, now time.Time) string {
	if t.IsZero() {
		return "–"
	}
	t = t.UTC()
	layout := "15:04:05Z"
	if t.Nanosecond()%int(time.Second) != 0 {
		layout = "15:04:05.000Z"
	}
	if y, m, d := t.Date(); y != now.UTC().Year() || m != now.UTC().Month() || d != now.UTC().Day() {
		layout = "2006-01-02 " + layout
	}
	return t.Format(layout)
}

// rel says how far t is from now: "in 3s", "2m ago".
func rel(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d >= 0 {
		return "in " + short(d)
	}
	return short(-d) + " ago"
}

// short rounds a duration to what a person reads: two significant units at most.
func short(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		s := strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// msText shows a millisecond figure (fleet.Run's lag and duration) as a duration.
func msText(ms float64) string {
	if ms == 0 {
		return "–"
	}
	return short(time.Duration(ms * float64(time.Millisecond)))
}

// statusClass is the CSS class of a run status: ok, bad, warn or run.
func statusClass(s any) string {
	switch fmt.Sprint(s) {
	case "ok":
		return "ok"
	case "running":
		return "run"
	case "error", "timeout", "cancelled", "lost", "superseded":
		return "bad"
	}
	return "warn" // skipped, late, paused, and what a newer version adds
}

// holding counts the live leases among runs.
func holding(runs []fleet.ActiveRun) int {
	n := 0
	for _, r := range runs {
		if r.Live {
			n++
		}
	}
	return n
}
