package web

import (
	"context"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/anarchon/anarchon/fleet"
)

// Handler serves the status pages, their JSON and the actions under
// Config.Prefix. It holds no state between requests and is safe for concurrent
// use.
type Handler struct {
	cfg   Config
	pages *template.Template
	cop   *http.CrossOriginProtection
	hosts hostSet // Config.Hosts
	// cals is the Source as a CalendarSource; nil: no calendars page.
	cals CalendarSource
}

// New returns the handler that serves cfg.Source's fleet, or an error wrapping
// ErrInvalidConfig that names the field at fault.
func New(cfg Config) (*Handler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hosts, err := parseHosts(cfg.Hosts)
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, cop: http.NewCrossOriginProtection(), hosts: hosts}
	h.cals, _ = cfg.Source.(CalendarSource)
	h.pages = parsePages(h.funcs())
	h.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "cross-site request refused: actions are accepted from this page's own origin only")
	}))
	return h, nil
}

// A route is what a request's path names, below the prefix.
type route struct {
	page     string // "jobs", "fleet", "job", "entry", "attempt", "search", "calendars", "calendar", "style" or "" (none)
	job      string // for the job, entry and attempt pages and the actions
	entry    string // for the entry page and its actions: the entry's ID
	token    string // for the attempt page: the attempt's token
	calendar string // for the calendar page and its actions: the calendar's name
	action   string // "run", "pause", "resume", "add-entry" on a job; "run", "pause", "resume", "update", "remove" on an entry or a calendar; "add" on calendars
	api      bool   // under api/: always JSON
}

// calendarRoute reports whether rt is a calendars page or one of their actions.
func (rt route) calendarRoute() bool { return rt.page == "calendars" || rt.page == "calendar" }

// Action names in paths: <prefix>job/<name>/<action>,
// <prefix>job/<name>/entry/<id>/<action>.
const (
	actionRun      = "run"
	actionPause    = "pause"
	actionResume   = "resume"
	actionAddEntry = "add-entry"
	actionUpdate   = "update"
	actionRemove   = "remove"
	// actionAddCalendar is the calendars page's create: <prefix>calendars/add.
	actionAddCalendar = "add"
)

// runSegment names an attempt in paths: <prefix>job/<name>/run/<token>,
// <prefix>job/<name>/entry/<id>/run/<token>.
const runSegment = "run"

// parseRoute reads the path below the prefix (escaped form, so a job name with
// a slash, escaped as %2F, stays one segment).
func parseRoute(rest string) (route, bool) {
	var rt route
	if after, ok := strings.CutPrefix(rest, "api/"); ok {
		rt.api, rest = true, after
	}
	switch rest {
	case "":
		if rt.api {
			return rt, false
		}
		rt.page = "jobs"
		return rt, true
	case "jobs":
		rt.page = "jobs"
		return rt, rt.api // the page itself is the prefix
	case "fleet":
		rt.page = "fleet"
		return rt, true
	case "style.css":
		rt.page = "style"
		return rt, !rt.api
	case "search":
		rt.page = "search"
		return rt, !rt.api
	case "calendars":
		rt.page = "calendars"
		return rt, true
	case "calendars/" + actionAddCalendar:
		rt.page, rt.action = "calendars", actionAddCalendar
		return rt, true
	}
	if after, ok := strings.CutPrefix(rest, "calendar/"); ok {
		return rt.calendarOf(after)
	}
	after, ok := strings.CutPrefix(rest, "job/")
	if !ok {
		return rt, false
	}
	segs := strings.Split(after, "/")
	if len(segs) > 5 || segs[0] == "" {
		return rt, false
	}
	name, err := url.PathUnescape(segs[0])
	if err != nil || name == "" {
		return rt, false
	}
	rt.page, rt.job = "job", name
	segs = segs[1:]
	// job/<name>/run/<token>: an attempt of the job's own.
	if len(segs) == 2 && segs[0] == runSegment {
		return rt.attempt(segs[1])
	}
	switch len(segs) {
	case 0:
	case 1:
		switch segs[0] {
		case actionRun, actionPause, actionResume, actionAddEntry:
			rt.action = segs[0]
		case "history", "active", "entries":
			if !rt.api {
				return rt, false
			}
			rt.page = segs[0]
		default:
			return rt, false
		}
	default: // job/<name>/entry/<id>, its actions and its attempts
		id, err := url.PathUnescape(segs[1])
		if segs[0] != "entry" || err != nil || id == "" {
			return rt, false
		}
		rt.page, rt.entry = "entry", id
		switch {
		case len(segs) == 3 && (segs[2] == actionPause || segs[2] == actionResume || segs[2] == actionUpdate || segs[2] == actionRemove ||
			segs[2] == actionRun):
			rt.action = segs[2]
		case len(segs) == 4 && segs[2] == runSegment:
			return rt.attempt(segs[3])
		case len(segs) != 2:
			return rt, false
		}
	}
	return rt, true
}

// calendarOf completes rt as calendar <name>[/<action>], the escaped rest of
// a path.
func (rt route) calendarOf(rest string) (route, bool) {
	seg, action, _ := strings.Cut(rest, "/")
	name, err := url.PathUnescape(seg)
	if err != nil || name == "" {
		return rt, false
	}
	rt.page, rt.calendar = "calendar", name
	switch action {
	case "":
		return rt, !strings.HasSuffix(rest, "/")
	case actionUpdate, actionRemove:
		rt.action = action
		return rt, true
	}
	return rt, false
}

// askedAt is the context key of when the request came: the pages show times
// relative to it, the moment their reads began, not to the end of the reads (a
// jobs page waits the source's gather window, and a next slot read at its start
// would otherwise show as past).
type askedAt struct{}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), askedAt{}, h.cfg.Now()))
	setSecurityHeaders(w)
	if !h.checkHost(w, r, false) {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), h.cfg.Prefix)
	if !ok {
		// The prefix without its slash: the address people type.
		if r.URL.EscapedPath()+"/" == h.cfg.Prefix && isRead(r.Method) {
			http.Redirect(w, r, h.cfg.Prefix, http.StatusMovedPermanently)
			return
		}
		h.fail(w, r, http.StatusNotFound, "no such page: the status pages are under "+h.cfg.Prefix)
		return
	}
	rt, ok := parseRoute(rest)
	if !ok {
		h.fail(w, r, http.StatusNotFound, "no such page")
		return
	}
	if rt.calendarRoute() && h.cals == nil {
		h.fail(w, r, http.StatusNotFound, "no such page: the status page's source keeps no calendars (web.CalendarSource)")
		return
	}
	if rt.action != "" {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			h.fail(w, r, http.StatusMethodNotAllowed, "an action is a POST (the buttons on the job, entry and calendar pages)")
			return
		}
		h.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.act(w, r, rt)
		})).ServeHTTP(w, r)
		return
	}
	if !isRead(r.Method) {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, http.StatusMethodNotAllowed, "this page is read with GET; actions are POSTs to job/<name>/run, pause, resume or add-entry, job/<name>/entry/<id>/run, pause, resume, update or remove, calendars/add, and calendar/<name>/update or remove")
		return
	}
	if rt.page == "style" {
		serveStyle(w, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	switch rt.page {
	case "jobs":
		h.jobsPage(ctx, w, r, rt)
	case "fleet":
		h.fleetPage(ctx, w, r, rt)
	case "job":
		h.jobPage(ctx, w, r, rt)
	case "entry":
		h.entryPage(ctx, w, r, rt)
	case "history", "active", "entries":
		h.jobAPI(ctx, w, r, rt)
	case "attempt":
		h.attemptPage(ctx, w, r, rt)
	case "search":
		h.searchPage(ctx, w, r)
	case "calendars":
		h.calendarsPage(ctx, w, r, rt)
	case "calendar":
		h.calendarPage(ctx, w, r, rt)
	}
}

func isRead(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// setSecurityHeaders: the pages run no script and load nothing from elsewhere;
// the policy says so, so an injected script or image would not run or load.
func setSecurityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
}

// attempt completes rt as the page of the attempt whose token is the escaped seg.
func (rt route) attempt(seg string) (route, bool) {
	token, err := url.PathUnescape(seg)
	if err != nil || token == "" || len(token) > maxText {
		return rt, false
	}
	rt.page, rt.token = "attempt", token
	return rt, true
}

// jobPath is the escaped path of a job's page below the prefix.
func jobPath(job string) string { return "job/" + pathSegment(job) }

// entryPath is the escaped path of an entry's page below the prefix.
func entryPath(job, id string) string { return jobPath(job) + "/entry/" + pathSegment(id) }

// calendarPath is the escaped path of a calendar's page below the prefix.
func calendarPath(name string) string { return "calendar/" + pathSegment(name) }

// attemptPath is the escaped path of a run's attempt page below the prefix:
// under its entry's page for a run of an entry. Empty for a run without a
// token (none has a page).
func attemptPath(r fleet.Run) string {
	if r.Token == "" {
		return ""
	}
	base := jobPath(r.Job)
	if r.Entry != "" {
		base = entryPath(r.Job, r.Entry)
	}
	return base + "/" + runSegment + "/" + pathSegment(r.Token)
}

// pathSegment escapes a job name or an entry ID as one path segment: a slash is
// %2F, and a name "." or ".." has its dots escaped, so a mux that cleans paths
// does not take it for a relative path.
func pathSegment(name string) string {
	if name == "." || name == ".." {
		return strings.ReplaceAll(name, ".", "%2E")
	}
	return url.PathEscape(name)
}
