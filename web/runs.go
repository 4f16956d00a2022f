package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// policyCancelText is in the stored error of a run a later slot of its job
// cancelled (scheduler.ErrOverlapCancelled): the cancel-other policy's normal
// ending, no failure.
var policyCancelText = scheduler.ErrOverlapCancelled.Error()

// cancelledByPolicy reports whether r was cancelled by a later slot of its job.
// The run store keeps no flag for it: the stored error says so when the
// handler returned its context's error, as handlers do.
func cancelledByPolicy(r fleet.Run) bool {
	return r.Status == scheduler.StatusCancelled && strings.Contains(r.Error, policyCancelText)
}

// runClass is the CSS class of a run (a fleet.Run or *fleet.Run, as the
// templates have them): statusClass's, or "policy" for a run a later slot
// cancelled.
func runClass(v any) string {
	r := asRun(v)
	if cancelledByPolicy(r) {
		return "policy"
	}
	return statusClass(r.Status)
}

// statusText is how the pages name a run's outcome: its status, or "cancelled
// by a later slot".
func statusText(v any) string {
	r := asRun(v)
	if cancelledByPolicy(r) {
		return "cancelled by a later slot"
	}
	return string(r.Status)
}

func asRun(v any) fleet.Run {
	switch r := v.(type) {
	case fleet.Run:
		return r
	case *fleet.Run:
		if r != nil {
			return *r
		}
	}
	return fleet.Run{}
}

// Filters of the runs tables (?status=): every run, the failures, or runs of
// some statuses.
var statusFilters = []struct{ Name, Label string }{
	{"", "All"},
	{"failed", "Failed"},
	{"ok", "OK"},
	{"cancelled", "Cancelled"},
	{"not-run", "Not run"},
	{"running", "Running"},
}

// matchStatus reports whether r passes the filter f.
func matchStatus(f string, r fleet.Run) bool {
	switch f {
	case "":
		return true
	case "failed":
		return failed(&r)
	case "not-run":
		return r.Status.NotRun()
	}
	return string(r.Status) == f
}

// runFilter is a runs table's status filter: what the URL asked, and the links
// to the others.
type runFilter struct {
	Status string // "" for all
	Label  string
	Links  []filterLink
}

type filterLink struct {
	Label, Href string
	Current     bool
}

// readRunFilter reads ?status= for the page at path; the links keep the URL's
// other parameters.
func readRunFilter(r *http.Request, path string) (runFilter, error) {
	f := runFilter{Status: r.URL.Query().Get("status")}
	i := slices.IndexFunc(statusFilters, func(s struct{ Name, Label string }) bool { return s.Name == f.Status })
	if i < 0 {
		names := make([]string, 0, len(statusFilters))
		for _, s := range statusFilters[1:] {
			names = append(names, s.Name)
		}
		return f, fmt.Errorf("%w: status=%q: one of %s, or none for every run", errBadInput, f.Status, strings.Join(names, ", "))
	}
	f.Label = statusFilters[i].Label
	for _, s := range statusFilters {
		q := r.URL.Query()
		q.Del("status")
		q.Del("done")
		if s.Name != "" {
			q.Set("status", s.Name)
		}
		href := path
		if len(q) > 0 {
			href += "?" + q.Encode()
		}
		f.Links = append(f.Links, filterLink{Label: s.Label, Href: href, Current: s.Name == f.Status})
	}
	return f, nil
}

// shownLabel names the filter in a sentence: "" for every run.
func (f runFilter) shownLabel() string {
	if f.Status == "" {
		return ""
	}
	return strings.ToLower(f.Label)
}

// apply returns the runs f lets through.
func (f runFilter) apply(runs []fleet.Run) []fleet.Run {
	if f.Status == "" {
		return runs
	}
	out := []fleet.Run{}
	for _, r := range runs {
		if matchStatus(f.Status, r) {
			out = append(out, r)
		}
	}
	return out
}

// maxRowError is how much of a run's error a runs table shows; the attempt's
// page has it whole.
const maxRowError = 300

// rowError is a run's error as a runs table shows it, and whether it was cut.
func rowError(r fleet.Run) (string, bool) {
	if len(r.Error) <= maxRowError {
		return r.Error, false
	}
	return backend.TruncateText(r.Error, maxRowError), true
}

// attemptView is the page of one attempt: its run whole, its timings, and its
// entry's payload for a run of an entry.
type attemptView struct {
	pageBase
	Job   string
	Entry string // the entry's ID, for a run of an entry
	Run   fleet.Run
	// ReadBy is the replica that read the run; Among how many runs it was found.
	ReadBy string
	Among  int
	// Payload is the entry's payload as stored now (runs keep none of their own).
	Payload *payloadPreview
	// Trace is the attempt's trace ID and a link to it, when Config.Trace knows
	// them.
	Trace, TraceLink string
	Timings          []timing
	// Why is what was decided for the attempt's slot (nil: the Source cannot say).
	Why *whySection
}

// timing is a line of the attempt's timings.
type timing struct {
	Name string
	At   time.Time
	// Since is how long after the line before (zero for the first), and Of
	// names what that span is.
	Since time.Duration
	Of    string
}

// timingsOf are r's instants in order, each with the span since the one before.
func timingsOf(r fleet.Run) []timing {
	var out []timing
	add := func(name string, at time.Time, of string) {
		if at.IsZero() {
			return
		}
		t := timing{Name: name, At: at}
		if n := len(out); n > 0 {
			t.Since, t.Of = at.Sub(out[n-1].At), of
		}
		out = append(out, t)
	}
	add("Slot", r.Slot, "")
	add("Claimed", r.ClaimedAt, "claim lag")
	add("Started", r.StartedAt, "until the handler started")
	add("Finished", r.FinishedAt, "the handler's run")
	return out
}

// attemptPage shows one attempt, found by its token among the job's (or the
// entry's) last fleet.MaxHistoryLimit runs.
func (h *Handler) attemptPage(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	var (
		runs    []fleet.Run
		readBy  string
		payload *payloadPreview
	)
	what := fmt.Sprintf("attempt %q of %q", rt.token, rt.job)
	if rt.entry != "" {
		if err := backend.ValidateEntryID(rt.entry); err != nil {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no entry of job %q can have this ID: %v", rt.job, err))
			return
		}
		what = fmt.Sprintf("attempt %q of entry %q of %q", rt.token, rt.entry, rt.job)
		er, err := h.cfg.Source.Entry(ctx, rt.job, fleet.EntryRequest{ID: rt.entry, History: fleet.MaxEntryHistory})
		if errors.Is(err, fleet.ErrEntryNotFound) {
			h.fail(w, r, http.StatusNotFound, what+": the job has no schedule entry with this ID (removed, or never added)")
			return
		}
		if err != nil {
			h.failErr(w, r, what, jobErr(err))
			return
		}
		runs, readBy = er.Runs, er.Instance
		p := previewOf(er.Entry.Payload)
		payload = &p
	} else {
		hist, err := h.cfg.Source.History(ctx, rt.job, fleet.MaxHistoryLimit)
		if err != nil {
			h.failErr(w, r, what, jobErr(err))
			return
		}
		runs, readBy = hist.Runs, hist.Instance
	}
	i := slices.IndexFunc(runs, func(run fleet.Run) bool { return run.Token == rt.token })
	if i < 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("%s: no such attempt among the last %d runs (%s read them): history keeps the newest runs only", what, len(runs), readBy))
		return
	}
	run := runs[i]
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, run) // one run as `anarchon history --json` prints it
		return
	}
	v := attemptView{pageBase: h.base(r, ""), Job: rt.job, Entry: rt.entry, Run: run, ReadBy: readBy, Among: len(runs),
		Payload: payload, Timings: timingsOf(run), Why: h.whyOf(ctx, rt.job, rt.entry, run)}
	if h.cfg.Trace != nil {
		v.Trace, v.TraceLink = h.cfg.Trace(run)
		if u, err := url.Parse(v.TraceLink); err != nil || (u.Scheme != "https" && u.Scheme != "http") {
			v.TraceLink = "" // only a web address is a link
		}
	}
	h.render(w, http.StatusOK, "attempt", v)
}
