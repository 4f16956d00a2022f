package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/fleet"
)

// pageBase is what every page's frame needs.
type pageBase struct {
	Title  string
	Prefix string
	Nav    string // the current page in the navigation: "jobs", "fleet", "search", "calendars" or ""
	CanAct bool   // Authorize allows this request: show the action controls
	// HasCalendars: the source keeps calendars, and the navigation links them.
	HasCalendars bool
	Now          time.Time
	JSON         string // this page's JSON (under api/)
	// Refresh is how often the page reloads itself, in seconds (0: never).
	Refresh int
}

func (p pageBase) base() pageBase { return p }

func (h *Handler) base(r *http.Request, nav string) pageBase {
	now, ok := r.Context().Value(askedAt{}).(time.Time)
	if !ok {
		now = h.cfg.Now()
	}
	json := h.cfg.Prefix + "api/jobs"
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), h.cfg.Prefix); ok && rest != "" && !strings.HasPrefix(rest, "api/") {
		json = h.cfg.Prefix + "api/" + rest
	}
	return pageBase{
		Title: h.cfg.Title, Prefix: h.cfg.Prefix, Nav: nav, Now: now, JSON: json,
		CanAct:       h.cfg.Authorize != nil && h.hostMayAct(r) && h.cfg.Authorize(r),
		HasCalendars: h.cals != nil,
	}
}

// Filters of the jobs page (?show=).
const (
	showAll     = ""
	showFailing = "failing"
	showPaused  = "paused"
)

// jobsView is the jobs page.
type jobsView struct {
	pageBase
	Fleet *fleet.Fleet
	Rows  []jobRow
	Show  string
	// All, Failing and Paused count the jobs of each filter.
	All, Failing, Paused int
	// Links are the page's links to itself: its filters (keeping the URL's
	// refresh) and the refresh's switch (keeping the filter).
	Links jobsLinks
}

type jobsLinks struct {
	All, Failing, Paused string
	// Refresh turns the reloads off when the page reloads, on (every Every
	// seconds) when it does not.
	Refresh string
	Every   int
}

// jobsRefresh reads ?refresh=: absent is Config.Refresh; 0 is none; N is every N
// seconds. It returns the interval in seconds (0: none) and the query's own
// value, kept in the page's links.
func (h *Handler) jobsRefresh(r *http.Request) (secs int, asked string, err error) {
	asked = r.URL.Query().Get("refresh")
	if asked == "" {
		return int(max(h.cfg.Refresh, 0) / time.Second), "", nil
	}
	n, err := strconv.Atoi(asked)
	if err != nil || n < 0 || n > int(MaxRefresh/time.Second) {
		return 0, "", fmt.Errorf("%w: refresh=%q: seconds from 1 to %d, or 0 for none", errBadInput, asked, int(MaxRefresh/time.Second))
	}
	return n, asked, nil
}

// newJobsLinks are the jobs page's links to itself, under prefix.
func newJobsLinks(prefix, show, refresh string, reloads bool, defaultSecs int) jobsLinks {
	link := func(show, refresh string) string {
		q := url.Values{}
		if show != "" {
			q.Set("show", show)
		}
		if refresh != "" {
			q.Set("refresh", refresh)
		}
		if len(q) == 0 {
			return prefix
		}
		return prefix + "?" + q.Encode()
	}
	l := jobsLinks{All: link("", refresh), Failing: link(showFailing, refresh), Paused: link(showPaused, refresh)}
	switch {
	case reloads:
		l.Refresh = link(show, "0")
	case defaultSecs > 0:
		l.Refresh, l.Every = link(show, ""), defaultSecs // the configured reloads
	default:
		l.Every = int(DefaultRefresh / time.Second)
		l.Refresh = link(show, strconv.Itoa(l.Every))
	}
	return l
}

// jobRow is a job of the jobs page.
type jobRow struct {
	fleet.JobSummary
	// Failing: the job's last run ended in a failure, or one of its entries
	// fails.
	Failing bool
}

// failed reports whether a run's status is a failure (as fleet's LastFailure
// counts them), but for a run a later slot cancelled: the cancel-other policy's
// normal ending.
func failed(r *fleet.Run) bool {
	if r == nil || cancelledByPolicy(*r) {
		return false
	}
	switch r.Status {
	case "error", "timeout", "cancelled", "lost", "superseded":
		return true
	}
	return false
}

func (h *Handler) jobsPage(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	show := r.URL.Query().Get("show")
	if show != showAll && show != showFailing && show != showPaused {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("show=%q: failing, paused, or none for every job", show))
		return
	}
	refresh, asked, err := h.jobsRefresh(r)
	if err != nil {
		h.failErr(w, r, "jobs", err)
		return
	}
	f, err := h.cfg.Source.Jobs(ctx)
	if err != nil {
		h.failErr(w, r, "list the jobs", err)
		return
	}
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, f) // as `anarchon jobs --json` prints it
		return
	}
	v := jobsView{pageBase: h.base(r, "jobs"), Fleet: f, Show: show, All: len(f.Jobs),
		Links: newJobsLinks(h.cfg.Prefix, show, asked, refresh > 0, int(max(h.cfg.Refresh, 0)/time.Second))}
	v.Refresh = refresh
	for _, j := range f.Jobs {
		row := jobRow{JobSummary: j, Failing: failed(j.LastRun) || failingEntries(j.Entries) != ""}
		if row.Failing {
			v.Failing++
		}
		if j.State == fleet.JobPaused {
			v.Paused++
		}
		if show == showFailing && !row.Failing || show == showPaused && j.State != fleet.JobPaused {
			continue
		}
		v.Rows = append(v.Rows, row)
	}
	h.render(w, http.StatusOK, "jobs", v)
}

// fleetView is the fleet page: the replicas, what each declares and holds.
type fleetView struct {
	pageBase
	Fleet    *fleet.Fleet
	Replicas []replicaRow
}

type replicaRow struct {
	fleet.Replica
	// Holds are the live leases the replica holds now.
	Holds []fleet.ActiveRun
}

func (h *Handler) fleetPage(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	f, err := h.cfg.Source.Jobs(ctx)
	if err != nil {
		h.failErr(w, r, "list the replicas", err)
		return
	}
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, f)
		return
	}
	v := fleetView{pageBase: h.base(r, "fleet"), Fleet: f}
	for _, rep := range f.Replicas {
		row := replicaRow{Replica: rep}
		for _, j := range f.Jobs {
			for _, a := range j.Running {
				if a.Live && a.Instance == rep.Instance {
					row.Holds = append(row.Holds, a)
				}
			}
		}
		v.Replicas = append(v.Replicas, row)
	}
	h.render(w, http.StatusOK, "fleet", v)
}

// JobView is the job page's data, and its JSON (api/job/<name>, or the page
// asked with Accept: application/json): the job as the jobs page shows it, its
// recent runs as `anarchon history --json` prints them, and its unfinished runs
// as `anarchon active JOB --json` does.
type JobView struct {
	Job     fleet.JobSummary   `json:"job"`
	History fleet.HistoryReply `json:"history"`
	Active  fleet.ActiveReply  `json:"active"`
	// Entries is a page of the job's schedule entries (?after=, ?entries=), as
	// `anarchon schedule ls JOB --json` prints it: absent when the backend stores
	// no entries or they could not be listed, and EntriesError then says why.
	Entries      *fleet.EntriesReply `json:"entries,omitempty"`
	EntriesError string              `json:"entries_error,omitempty"`
}

// jobView is the job page.
type jobView struct {
	pageBase
	JobView
	// Asked is the limit the URL asked for when it was clamped (0 otherwise).
	Asked string
	Limit int
	// Done is the message of the action that led here.
	Done string
	// Chart draws the last runs (nil without any).
	Chart *runChart
	// EntryList is the page of entries shown, and its links.
	EntryList entryList
	// Filter is the runs table's status filter; Shown the runs it lets through.
	Filter runFilter
	Shown  shownRuns
	// AddEntry says the page offers the form that adds an entry (the backend
	// keeps entries, and the request may act); AddForm is that form.
	AddEntry bool
	AddForm  formFrame
}

// doneMessages are the messages an action's redirect may ask for (?done=): a
// fixed set, so the URL cannot put text of its own on the page.
var doneMessages = map[string]string{
	"finished": "The manual run finished: it is the newest manual run below.",
	"started":  "The manual run started and goes on: reload to see how it ends.",
	"buffered": "The manual run waits for the run in progress and starts once it ends: reload to see it.",
	"paused":   "Paused: every replica follows within a second.",
	"resumed":  "Resumed: every replica follows within a second.",
	// A resume whose replica found no pause of the job in force.
	"not-paused": "The job had no pause of its own: nothing to resume.",
	// The entry page's.
	"entry-paused":    "Paused: every replica follows within a second; no slot of the entry runs until it is resumed.",
	"entry-resumed":   "Resumed: every replica follows within a second; the entry's slots run again from now on.",
	"entry-unchanged": "The entry was already so: nothing changed.",
	"entry-added":     "Added: every replica that declares the job follows it within a second.",
	"entry-updated":   "Changed: every replica follows the new revision within a second.",
	"entry-removed":   "The entry was removed: no replica runs it any more.",
	// The calendars pages'.
	"calendar-added":   "Created: every replica follows it within a second, for the slots claimed from then on.",
	"calendar-updated": "Changed: every replica follows the new revision within a second, for the slots claimed from then on.",
	"calendar-removed": "The calendar was removed: the jobs and entries that name it exclude nothing by it.",
}

// historyLimit reads ?limit=, the number of runs: absent is the configured
// default, and countParam says the rest.
func (h *Handler) historyLimit(r *http.Request) (limit int, clampedFrom string, err error) {
	return countParam(r, "limit", "runs", h.cfg.HistoryLimit, fleet.MaxHistoryLimit)
}

// countParam reads a count of what from the query's param: absent is def; a
// number above maxN (even one too large for an int) is clamped to it, and the
// page says so (clampedFrom is the value asked); anything else (not a number,
// zero, negative) is a bad request.
func countParam(r *http.Request, param, what string, def, maxN int) (n int, clampedFrom string, err error) {
	s := r.URL.Query().Get(param)
	if s == "" {
		return def, "", nil
	}
	n, err = strconv.Atoi(s)
	switch {
	case errors.Is(err, strconv.ErrRange) && s[0] != '-':
		return maxN, s, nil
	case err != nil || n <= 0:
		return 0, "", fmt.Errorf("%w: %s=%q: a number of %s from 1 to %d", errBadInput, param, s, what, maxN)
	case n > maxN:
		return maxN, s, nil
	}
	return n, "", nil
}

func (h *Handler) jobPage(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	limit, asked, err := h.historyLimit(r)
	if err != nil {
		h.failErr(w, r, "history", err)
		return
	}
	ep, err := readEntryList(r, "entries")
	if err != nil {
		h.failErr(w, r, "entries", err)
		return
	}
	filter, err := readRunFilter(r, h.cfg.Prefix+jobPath(rt.job))
	if err != nil {
		h.failErr(w, r, "runs", err)
		return
	}
	// The four reads run together: the page costs the slowest, the jobs gather.
	var (
		wg                               sync.WaitGroup
		f                                *fleet.Fleet
		hist                             fleet.HistoryReply
		act                              fleet.ActiveReply
		ents                             fleet.EntriesReply
		jobsErr, histErr, actErr, entErr error
	)
	wg.Go(func() { f, jobsErr = h.cfg.Source.Jobs(ctx) })
	wg.Go(func() { hist, histErr = h.cfg.Source.History(ctx, rt.job, limit) })
	wg.Go(func() { act, actErr = h.cfg.Source.Active(ctx, rt.job) })
	wg.Go(func() {
		ents, entErr = h.cfg.Source.Entries(ctx, rt.job, fleet.EntriesRequest{After: ep.After, Limit: ep.Limit})
	})
	wg.Wait()
	if jobsErr != nil {
		h.failErr(w, r, "list the jobs", jobsErr)
		return
	}
	i := slices.IndexFunc(f.Jobs, func(j fleet.JobSummary) bool { return j.Name == rt.job })
	if i < 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("unknown job %q: no replica that answered declares it", rt.job))
		return
	}
	if histErr != nil {
		h.failErr(w, r, fmt.Sprintf("history of %q", rt.job), jobErr(histErr))
		return
	}
	if actErr != nil {
		h.failErr(w, r, fmt.Sprintf("unfinished runs of %q", rt.job), jobErr(actErr))
		return
	}
	jv := JobView{Job: f.Jobs[i], History: hist, Active: act}
	if jv.History.Runs == nil {
		jv.History.Runs = []fleet.Run{}
	}
	if jv.Active.Runs == nil {
		jv.Active.Runs = []fleet.ActiveRun{}
	}
	jv.Entries, jv.EntriesError = h.entriesOf(rt.job, ents, entErr)
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, jv)
		return
	}
	base := h.base(r, "")
	h.render(w, http.StatusOK, "job", jobView{pageBase: base, JobView: jv, Asked: asked, Limit: limit,
		Done: doneMessages[r.URL.Query().Get("done")], Chart: chartOf(jv.History.Runs, base.Now),
		EntryList: ep.of(h.cfg.Prefix+jobPath(rt.job), r, jv), Filter: filter,
		Shown:    shownRuns{Runs: filter.apply(jv.History.Runs), Filter: filter.shownLabel()},
		AddEntry: base.CanAct && jv.Entries != nil,
		AddForm:  formFrame{Action: h.cfg.Prefix + entryActionPath(rt.job, "", actionAddEntry), Add: true}})
}

// jobAPI answers api/job/<name>/history, api/job/<name>/active and
// api/job/<name>/entries with exactly what `anarchon history JOB --json`,
// `anarchon active JOB --json` and `anarchon schedule ls JOB --json` print.
func (h *Handler) jobAPI(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	var v any
	var err error
	switch rt.page {
	case "history":
		var limit int
		if limit, _, err = h.historyLimit(r); err == nil {
			v, err = h.cfg.Source.History(ctx, rt.job, limit)
		}
	case "active":
		v, err = h.cfg.Source.Active(ctx, rt.job)
	case "entries":
		var ep entryList
		if ep, err = readEntryList(r, "limit"); err == nil {
			v, err = h.cfg.Source.Entries(ctx, rt.job, fleet.EntriesRequest{After: ep.After, Limit: ep.Limit})
		}
	}
	if err != nil {
		h.failErr(w, r, fmt.Sprintf("%s of %q", rt.page, rt.job), jobErr(err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// jobErr: a request about one job that no replica answers means no running
// replica declares it: an unknown job (404) when replicas are up, or when the
// source cannot tell who is up; no replica up at all is 503.
func jobErr(err error) error {
	var nre *fleet.NoReplicaError
	if errors.As(err, &nre) && nre.Checked {
		return err // it matches fleet.ErrUnknownJob when replicas are up
	}
	if errors.Is(err, fleet.ErrNoReplica) {
		return fmt.Errorf("%w: %w", fleet.ErrUnknownJob, err)
	}
	return err
}
