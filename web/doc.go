// Package web serves a fleet's status pages from the service itself: an
// http.Handler to mount on the service's own mux, with no other process, no
// JavaScript and nothing fetched from elsewhere (server-rendered html/template,
// the stylesheet embedded). It shows what the fleet service (package fleet)
// answers, the same data `anarchon jobs`, `history` and `active` print, and as
// JSON the very structs their --json prints.
//
//	nc, err := nats.Connect(url)
//	client, err := fleet.NewClient(nc)
//	h, err := web.New(web.Config{Source: client, Prefix: "/anarchon/"})
//	mux.Handle("/anarchon/", h)
//
// # Pages
//
// Under the prefix:
//
//	GET  /                       the jobs: state (active, or paused with reason and
//	                             until), last run (slot, start lag, duration,
//	                             outcome, replica), next slot, schedule in words with
//	                             its zone, last success, last failure, runs in
//	                             progress, replicas; ?show=failing or ?show=paused
//	                             filters them (another value: 400); it reloads
//	                             itself every Config.Refresh (a meta refresh),
//	                             ?refresh=0 never, ?refresh=N every N seconds
//	GET  job/<name>              one job: its facts, its live leases, a chart of its
//	                             last runs (start lag and duration, coloured by
//	                             outcome; the newest MaxChartRuns) and the runs
//	                             (slot, status, instance, attempt, manual and by
//	                             whom, lag, duration, error, fence); ?limit=N runs,
//	                             default Config.HistoryLimit; a limit that is not a
//	                             number from 1 up is 400, one above
//	                             fleet.MaxHistoryLimit is clamped to it and the page
//	                             says so; a job no replica declares is 404. With
//	                             schedule entries (or none yet, for a job of
//	                             entries only): a page of them in order of ID
//	                             (state, last run, next slot, schedule in words,
//	                             last failure, payload size, revision), ?entries=N
//	                             a page (DefaultEntriesPage; clamped to
//	                             fleet.MaxEntriesLimit as limit is), ?after=ID the
//	                             page after that ID (the next page's link)
//	GET  job/<name>/entry/<id>   one schedule entry: its schedule, state, next
//	                             slot, last run, success and failure, payload (its
//	                             size, and the first 512 bytes when it is text),
//	                             revision, when and by whom written, and its own
//	                             runs (?limit=N as the job's); an unknown entry is
//	                             404
//	GET  fleet                   the replicas: what each declares, the leases it
//	                             holds now, its version and backend
//	POST job/<name>/run          run now (a manual run); pause (form fields reason,
//	POST job/<name>/pause        required, and for, a Go duration, optional);
//	POST job/<name>/resume       resume
//	POST job/<name>/entry/<id>/pause   pause or resume one schedule entry (form
//	POST job/<name>/entry/<id>/resume  field rev, the revision the page showed:
//	                             the entry as read, Paused changed, stored on rev)
//	GET  calendars               the calendars, when the Source is a CalendarSource
//	                             (the navigation links them then): name, zone, how
//	                             many dates, ranges and yearly days, weekdays,
//	                             description, who wrote it, when, revision
//	GET  calendar/<name>         one calendar: its facts and its days (the first 200
//	                             of each list; the JSON has them all)
//	POST calendars/add           create a calendar; change or remove one (form field
//	POST calendar/<name>/update  rev, the revision the page showed): the lists are
//	POST calendar/<name>/remove  one day a line or separated by commas, ranges
//	                             FROM..TO, weekdays checkboxes
//	GET  style.css               the embedded stylesheet
//
// <name> and <id> are path-escaped (a slash is %2F, "." and ".." are %2E). A
// page asked with
// Accept: application/json (and not text/html), or under api/, answers JSON
// instead:
//
//	api/jobs, api/fleet          *fleet.Fleet, as `anarchon jobs --json` prints it
//	api/job/<name>               JobView: the job's summary, history, leases and
//	                             a page of its entries
//	api/job/<name>/history       fleet.HistoryReply (`anarchon history JOB --json`)
//	api/job/<name>/active        fleet.ActiveReply (`anarchon active JOB --json`)
//	api/job/<name>/entries       fleet.EntriesReply (`anarchon schedule ls JOB
//	                             --json`; ?after=ID, ?limit=N)
//	api/job/<name>/entry/<id>    fleet.EntryReply (`anarchon schedule show JOB ID
//	                             --json`), the payload whole
//	api/job/<name>/run|pause|resume (POST)  the fleet reply, as the CLI's --json
//	                             (form fields, or a JSON body {"reason","for"})
//	api/job/<name>/entry/<id>/pause|resume (POST)  fleet.EntryChangeReply (form
//	                             field rev, or a JSON body {"rev"})
//	api/calendars                fleet.CalendarsReply (`anarchon calendar ls --json`)
//	api/calendar/<name>          fleet.CalendarReply (`anarchon calendar show NAME
//	                             --json`), every day
//
// An error is the error page, or fleet.ErrorBody {"code","error"} as JSON, with
// the status: 400 bad input, 403 action refused, 404 unknown page, job or entry, 405
// wrong method, 409 a run of the job is in progress and the job forbids overlap
// (run) or the entry changed since the page showed it (an entry's pause), 421 a Host Config.Hosts does not list, 429 the replica runs as many
// manual runs of the job as it may (run), 501 the backend cannot (pause), 503 no
// replica answers or the replica is unavailable, 504 the source took longer than
// Config.Timeout, 502 another failure of the source.
//
// # Actions
//
// Actions are off unless the service sets Config.Authorize: without it every
// action is refused with 403 and the pages show no buttons. With it, the pages
// show the buttons to requests it allows, and every action asks it again
// (AllowLoopback allows this machine only, for a developer's page). Actions
// are POST only, pass Go's http.CrossOriginProtection (a form posted from another
// site is refused with 403 before Authorize is asked), then the Host check, and
// redirect back to the job's or entry's page (post, redirect, get). An entry's
// pause and resume are compare-and-set on the revision the page showed: a
// change another writer made since is refused (409), never undone; so are an
// entry's and a calendar's change and removal. A calendar's form refused for its
// input (400) or for a change made since (409) is shown again with what was
// typed and, above it, the reason the fleet gave.
//
// The Host check stops DNS rebinding, a page of another site whose name is
// re-pointed at this machine: to the browser it is same-origin, its request comes
// from loopback, but its Host is the other site's name. With Config.Hosts set,
// every request for a Host not listed is refused with 421 before anything else;
// without, the pages answer any Host and an action is refused with 403 unless
// its Host is a loopback name (localhost, *.localhost, 127.0.0.0/8, [::1]). Who asked is Config.Who(r) (default "web@"
// and the remote IP), recorded with the manual run or the pause. Run now waits
// up to Config.TriggerWait for the run to end, then says it goes on.
//
// # Cost
//
// A jobs or fleet page is one Source.Jobs: with *fleet.Client, one
// scatter-gather that waits its gather window (fleet.DefaultGatherWindow unless
// the client was built WithGatherWindow) while each replica reads every job's
// last runs and leases. A job page is that and the job's History, Active and
// a page of its Entries, asked in parallel; entries that cannot be listed are
// said on the page, which shows the rest. An entry page is one Source.Entry. Rendering itself is cheap next to those reads: see
// BenchmarkJobsPage.
//
// # Screen and markup
//
// Tables are tables (caption, th with scope), controls have labels, and the
// pages set a Content-Security-Policy that allows no script and nothing from
// another origin. The job page's chart is an inline SVG drawn on the server, with
// no script and no inline style (its colours are the stylesheet's), a title and a
// description, each run's mark titled with its numbers, which the table below
// also has. Below 720 px wide the jobs table keeps its key columns (job,
// state, last run, run now) and hides the rest, which the job's page shows, so
// nothing scrolls sideways at 375 px.
//
// # Guides
//
// [Status page] shows the pages and how to mount them; [Security] says what is
// trusted.
//
// [Status page]: https://github.com/anarchon/anarchon/blob/main/docs/operating.md#status-page
// [Security]: https://github.com/anarchon/anarchon/blob/main/docs/guarantees.md#security
package web
