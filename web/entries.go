package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// entriesOnlySchedule is the schedule a replica declares for a job of schedule
// entries only (scheduler.Declare): its slots are its entries'.
const entriesOnlySchedule = "entries only"

// entryList is the page of a job's schedule entries the job page shows: what the
// query asked (?after=, ?entries=) and the links to the pages beside it.
type entryList struct {
	// After is the ID the page starts after ("" for the first page).
	After string
	// Limit is the most entries a page holds; Asked the count the URL asked for
	// when it was clamped to Limit ("" otherwise).
	Limit int
	Asked string

	// Show says the page has an entries section: the job has entries, is a job
	// of entries only, the URL pages through them, or they could not be listed.
	Show bool
	// EntriesOnly: the job has no schedule of its own.
	EntriesOnly bool
	// Next links the next page (empty on the last); First the first page (empty
	// on the first).
	Next, First string
}

// readEntryList reads ?after= and the count of entries a page holds (?entries=
// on the job page, ?limit= under api/): absent is DefaultEntriesPage, above
// fleet.MaxEntriesLimit is clamped to it. An after that no entry ID can be is a
// bad request.
func readEntryList(r *http.Request, count string) (entryList, error) {
	l := entryList{After: r.URL.Query().Get("after")}
	if l.After != "" {
		if err := backend.ValidateEntryID(l.After); err != nil {
			return l, fmt.Errorf("%w: after=%q: %w", errBadInput, l.After, err)
		}
	}
	var err error
	l.Limit, l.Asked, err = countParam(r, count, "entries", DefaultEntriesPage, fleet.MaxEntriesLimit)
	return l, err
}

// of completes l for the job page of jv at path: whether it shows the entries,
// and the links to the first and next pages, which keep the URL's counts.
func (l entryList) of(path string, r *http.Request, jv JobView) entryList {
	l.EntriesOnly = jv.Job.Schedule == entriesOnlySchedule
	l.Show = jv.EntriesError != "" ||
		jv.Entries != nil && (len(jv.Entries.Entries) > 0 || l.After != "" || l.EntriesOnly)
	link := func(after string) string {
		q := url.Values{}
		for _, k := range []string{"limit", "entries"} {
			if v := r.URL.Query().Get(k); v != "" {
				q.Set(k, v)
			}
		}
		if after != "" {
			q.Set("after", after)
		}
		if len(q) == 0 {
			return path
		}
		return path + "?" + q.Encode()
	}
	if jv.Entries != nil && jv.Entries.Next != "" {
		l.Next = link(jv.Entries.Next)
	}
	if l.After != "" {
		l.First = link("")
	}
	return l
}

// entriesOf is what the job page shows of a listing of job's entries: the page
// read, or why there is none. A backend without entries is no error: the page
// shows none.
func (h *Handler) entriesOf(job string, r fleet.EntriesReply, err error) (*fleet.EntriesReply, string) {
	switch {
	case err == nil:
		if r.Entries == nil {
			r.Entries = []fleet.EntryView{}
		}
		return &r, ""
	case errors.Is(err, fleet.ErrNotSupported):
		return nil, ""
	case errors.Is(err, fleet.ErrNoReplica):
		// The job is declared (the jobs gather said so), yet no declarer answers
		// on the entries subject.
		return nil, "no replica that declares the job answered for its schedule entries: they run a version without entries, or stopped meanwhile"
	}
	if statusOf(err) >= 500 {
		h.cfg.Logger.Warn("web: entries", "job", job, "err", err)
	}
	return nil, "its schedule entries could not be listed: " + err.Error()
}

// entryView is the entry page: `anarchon schedule show JOB ID`.
type entryView struct {
	pageBase
	fleet.EntryReply
	// Asked is the limit the URL asked for when it was clamped (0 otherwise).
	Asked string
	Limit int
	// Payload is what the page shows of the entry's payload.
	Payload payloadPreview
	// Done is the message of the action that led here.
	Done string
	// Filter is the runs table's status filter; Shown the runs it lets through.
	Filter runFilter
	Shown  shownRuns
	// Form is the change form, filled with the entry as read; Remove where the
	// removal posts.
	Form   formFrame
	Remove string
	// CanRun says the page shows Run now: it may act, and its source runs one
	// entry (EntryTriggerer).
	CanRun bool
}

func (h *Handler) entryPage(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	if err := backend.ValidateEntryID(rt.entry); err != nil {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no entry of job %q can have this ID: %v", rt.job, err))
		return
	}
	limit, asked, err := h.historyLimit(r)
	if err != nil {
		h.failErr(w, r, "history", err)
		return
	}
	filter, err := readRunFilter(r, h.cfg.Prefix+entryPath(rt.job, rt.entry))
	if err != nil {
		h.failErr(w, r, "runs", err)
		return
	}
	er, err := h.cfg.Source.Entry(ctx, rt.job, fleet.EntryRequest{ID: rt.entry, History: limit})
	if errors.Is(err, fleet.ErrEntryNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("unknown entry %q of job %q: the job has no schedule entry with this ID (removed, or never added)", rt.entry, rt.job))
		return
	}
	if err != nil {
		h.failErr(w, r, fmt.Sprintf("entry %q of %q", rt.entry, rt.job), jobErr(err))
		return
	}
	if er.Runs == nil {
		er.Runs = []fleet.Run{}
	}
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, er) // as `anarchon schedule show JOB ID --json` prints it
		return
	}
	base := h.base(r, "")
	_, runs := h.cfg.Source.(EntryTriggerer)
	h.render(w, http.StatusOK, "entry", entryView{pageBase: base, CanRun: base.CanAct && runs, EntryReply: er, Asked: asked, Limit: limit,
		Payload: previewOf(er.Entry.Payload), Done: doneMessages[r.URL.Query().Get("done")], Filter: filter,
		Shown:  shownRuns{Runs: filter.apply(er.Runs), Filter: filter.shownLabel()},
		Form:   formFrame{entryForm: formOf(er.Entry.Entry), Action: h.cfg.Prefix + entryActionPath(rt.job, rt.entry, actionUpdate)},
		Remove: h.cfg.Prefix + entryActionPath(rt.job, rt.entry, actionRemove)})
}

// entryState says whether an entry runs, as the replica that answered sees it.
func entryState(e fleet.EntryView) string {
	switch {
	case e.Paused:
		return "paused"
	case !e.Followed:
		return "not followed"
	case e.Next.IsZero():
		return "ended"
	}
	return "active"
}

// boundsLayout is how a schedule's String writes an instant (scheduler's
// layout), which DescribeSchedule reads back.
const boundsLayout = "2006-01-02T15:04:05.000Z07:00"

// entrySchedule says an entry's schedule in words, as DescribeSchedule says a
// job's: it writes the entry's schedule as a job's String would, bounds
// included, and describes that.
func entrySchedule(e fleet.Entry) string {
	var s string
	switch {
	case e.Every != "":
		s = "every " + e.Every
	case e.Cron != "":
		s = scheduler.CronText(e.Cron, e.Zone, scheduler.DSTPolicy{Repeated: scheduler.DSTRepeated(e.DSTRepeated), Missing: scheduler.DSTMissing(e.DSTMissing)})
	case !e.At.IsZero():
		s = "once at " + e.At.UTC().Format(boundsLayout)
	default:
		return "–"
	}
	if !e.Start.IsZero() {
		s += " from " + e.Start.UTC().Format(boundsLayout)
	}
	if !e.End.IsZero() {
		s += " until " + e.End.UTC().Format(boundsLayout)
	}
	s = scheduler.DescribeSchedule(s)
	if e.Deadline != "" {
		s += ", deadline " + e.Deadline
	}
	return s
}

// maxPreview is how much of a payload the entry page shows; its JSON carries
// the payload whole (base64).
const maxPreview = 512

// payloadPreview is what the entry page shows of a payload.
type payloadPreview struct {
	Size int
	// Text is the payload as text, cut at maxPreview bytes (Cut), every
	// character that is not printable shown as an escape (visible); empty when
	// the payload is not UTF-8 (Binary).
	Text string
	Cut  bool
	// Shown is how many bytes of the payload Text holds.
	Shown  int
	Binary bool
}

func previewOf(p []byte) payloadPreview {
	out := payloadPreview{Size: len(p)}
	if !utf8.Valid(p) {
		out.Binary = true
		return out
	}
	s := string(p)
	if len(s) > maxPreview {
		i := maxPreview
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s, out.Cut = s[:i], true
	}
	out.Text, out.Shown = visible(s), len(s)
	return out
}

// visible shows s with every rune that is not printed as a character (a
// control, a bidi override, a line separator) written as its Go escape, so an
// entry ID or a payload shows what it holds: html/template makes it text, this
// makes the text honest. Tabs and newlines stay.
func visible(s string) string {
	if strings.IndexFunc(s, hidden) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !hidden(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToASCII(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

func hidden(r rune) bool {
	return r != '\n' && r != '\t' && !unicode.IsGraphic(r)
}
