package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
)

// maxShownDays is how many days of each list a calendar's page shows; its JSON
// has them all.
const maxShownDays = 200

// maxFormDays is the longest list of days the change form holds; a change
// keeps a longer one as stored.
const maxFormDays = 1000

// maxCalendarForm bounds a calendar form's body: the most days a calendar
// has, each a range form-encoded with its line end, and the text fields.
const maxCalendarForm = 32*backend.MaxCalendarDays + maxActionBody

// calendarsView is the calendars page: every calendar summed up, and the
// form that creates one.
type calendarsView struct {
	pageBase
	fleet.CalendarsReply
	// ListError says why the calendars could not be listed (a refused create
	// still shows its form).
	ListError string
	Done      string
	Form      calendarFrame
	// Refused is why the create was refused; Existing links the calendar of
	// that name when one is stored.
	Refused  string
	Existing string
}

// calendarView is a calendar's page: its days (the first maxShownDays of each
// list), and the forms that change and remove it.
type calendarView struct {
	pageBase
	fleet.CalendarReply
	Dates, Ranges, Yearly shownDays
	Done                  string
	Form                  calendarFrame
	Remove                string
	// Refused is why the change was refused; the form holds what was typed.
	Refused string
}

// shownDays is what a calendar's page shows of one of its lists.
type shownDays struct {
	Days  []string
	Total int
}

// More counts the days not shown.
func (s shownDays) More() int { return s.Total - len(s.Days) }

func showDays(days []string) shownDays {
	return shownDays{Days: days[:min(len(days), maxShownDays)], Total: len(days)}
}

// calendarForm is the form that creates or changes a calendar, as the page
// fills it: each list one day a line.
type calendarForm struct {
	Name, Zone, Description string
	Dates, Ranges, Yearly   string
	// Weekdays are the lower-case names checked.
	Weekdays []string
	// KeptDates, KeptRanges and KeptYearly count a stored list longer than
	// the form holds (maxFormDays): a change keeps it as stored.
	KeptDates, KeptRanges, KeptYearly int
	Rev                               uint64
}

// calendarFrame is a calendar's form with where it posts: a create (the
// calendars page) or a change (the calendar's page).
type calendarFrame struct {
	calendarForm
	Action string
	Add    bool
}

// weekdayBox is a weekday's checkbox.
type weekdayBox struct {
	Value, Label string
	Checked      bool
}

// WeekdayBoxes are the form's weekday checkboxes, Monday first.
func (f calendarForm) WeekdayBoxes() []weekdayBox {
	out := make([]weekdayBox, 0, 7)
	for i := range 7 {
		d := time.Weekday((i + 1) % 7)
		v := strings.ToLower(d.String())
		checked := false
		for _, w := range f.Weekdays {
			checked = checked || w == v
		}
		out = append(out, weekdayBox{Value: v, Label: d.String(), Checked: checked})
	}
	return out
}

func rangeTexts(rs []fleet.DateRange) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.From + ".." + r.To
	}
	return out
}

// calendarFormOf is the change form filled with c as read.
func calendarFormOf(c fleet.Calendar) calendarForm {
	f := calendarForm{Name: c.Name, Zone: c.Zone, Description: c.Description, Weekdays: c.Weekdays, Rev: c.Revision}
	for _, l := range []struct {
		days []string
		text *string
		kept *int
	}{{c.Dates, &f.Dates, &f.KeptDates}, {rangeTexts(c.Ranges), &f.Ranges, &f.KeptRanges}, {c.Yearly, &f.Yearly, &f.KeptYearly}} {
		if len(l.days) > maxFormDays {
			*l.kept = len(l.days)
			continue
		}
		*l.text = strings.Join(l.days, "\n")
	}
	return f
}

// splitDays reads a list of days: one a line, or separated by commas.
func splitDays(s string) []string {
	var out []string
	for _, d := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// readCalendarForm reads a calendar's form into what was typed (to show again
// if it is refused) and the calendar it asks for. The source checks the days.
func readCalendarForm(w http.ResponseWriter, r *http.Request) (calendarForm, fleet.Calendar, error) {
	var f calendarForm
	var c fleet.Calendar
	r.Body = http.MaxBytesReader(w, r.Body, maxCalendarForm)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return f, c, fmt.Errorf("%w: body over %d bytes (a calendar has at most %d days)", errBadInput, maxCalendarForm, backend.MaxCalendarDays)
		}
		return f, c, fmt.Errorf("%w: form: %w", errBadInput, err)
	}
	p := r.PostForm
	f.Name, f.Zone, f.Description = p.Get("name"), p.Get("zone"), p.Get("description")
	f.Weekdays = p["weekday"]
	// A textarea sends CRLF line ends: the form shows what was typed.
	f.Dates = strings.ReplaceAll(p.Get("dates"), "\r\n", "\n")
	f.Ranges = strings.ReplaceAll(p.Get("ranges"), "\r\n", "\n")
	f.Yearly = strings.ReplaceAll(p.Get("yearly"), "\r\n", "\n")
	for k, vs := range p {
		if len(vs) > 1 && k != "weekday" {
			return f, c, fmt.Errorf("%w: %s given %d times", errBadInput, k, len(vs))
		}
	}
	for _, k := range []struct {
		name string
		out  *int
	}{{"keep_dates", &f.KeptDates}, {"keep_ranges", &f.KeptRanges}, {"keep_yearly", &f.KeptYearly}} {
		if s := p.Get(k.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return f, c, fmt.Errorf("%w: %s=%q: the count of days kept as stored", errBadInput, k.name, s)
			}
			*k.out = n
		}
	}
	if s := p.Get("rev"); s != "" {
		rev, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return f, c, fmt.Errorf("%w: rev=%q: the calendar's revision, a number", errBadInput, s)
		}
		f.Rev = rev
	}
	c = fleet.Calendar{Name: f.Name, Zone: strings.TrimSpace(f.Zone), Description: strings.TrimSpace(f.Description),
		Dates: splitDays(f.Dates), Yearly: splitDays(f.Yearly)}
	for _, s := range splitDays(f.Ranges) {
		from, to, ok := strings.Cut(s, "..")
		if !ok {
			return f, c, fmt.Errorf("%w: range %q: want FROM..TO (2026-08-01..2026-08-15)", errBadInput, s)
		}
		c.Ranges = append(c.Ranges, fleet.DateRange{From: strings.TrimSpace(from), To: strings.TrimSpace(to)})
	}
	if len(f.Weekdays) > 7 {
		return f, c, fmt.Errorf("%w: %d weekdays, at most 7", errBadInput, len(f.Weekdays))
	}
	for _, s := range f.Weekdays {
		d, err := fleet.ParseWeekday(s)
		if err != nil {
			return f, c, fmt.Errorf("%w: %w", errBadInput, err)
		}
		c.Weekdays = append(c.Weekdays, strings.ToLower(d.String()))
	}
	return f, c, nil
}

func (h *Handler) calendarsPage(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	list, err := h.cals.Calendars(ctx)
	if err != nil {
		h.failErr(w, r, "list the calendars", err)
		return
	}
	if list.Calendars == nil {
		list.Calendars = []fleet.CalendarSummary{}
	}
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, list) // as `anarchon calendar ls --json` prints it
		return
	}
	h.render(w, http.StatusOK, "calendars", h.calendarsViewOf(r, list, calendarForm{}))
}

func (h *Handler) calendarsViewOf(r *http.Request, list fleet.CalendarsReply, form calendarForm) calendarsView {
	return calendarsView{pageBase: h.base(r, "calendars"), CalendarsReply: list, Done: doneMessages[r.URL.Query().Get("done")],
		Form: calendarFrame{calendarForm: form, Action: h.cfg.Prefix + "calendars/" + actionAddCalendar, Add: true}}
}

func (h *Handler) calendarPage(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) {
	if err := backend.ValidateCalendarName(rt.calendar); err != nil {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no calendar can have this name: %v", err))
		return
	}
	cr, err := h.cals.Calendar(ctx, rt.calendar)
	if errors.Is(err, fleet.ErrCalendarNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("unknown calendar %q: none of this name is stored (removed, or never created)", rt.calendar))
		return
	}
	if err != nil {
		h.failErr(w, r, fmt.Sprintf("calendar %q", rt.calendar), err)
		return
	}
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, cr) // as `anarchon calendar show NAME --json` prints it
		return
	}
	h.render(w, http.StatusOK, "calendar", h.calendarViewOf(r, cr, calendarFormOf(cr.Calendar)))
}

func (h *Handler) calendarViewOf(r *http.Request, cr fleet.CalendarReply, form calendarForm) calendarView {
	c := cr.Calendar
	action := h.cfg.Prefix + calendarPath(c.Name) + "/"
	return calendarView{pageBase: h.base(r, "calendars"), CalendarReply: cr,
		Dates: showDays(c.Dates), Ranges: showDays(rangeTexts(c.Ranges)), Yearly: showDays(c.Yearly),
		Done: doneMessages[r.URL.Query().Get("done")],
		Form: calendarFrame{calendarForm: form, Action: action + actionUpdate}, Remove: action + actionRemove}
}

// actCalendar creates (calendars/add), changes or removes a calendar: a change
// and a removal on the revision the page showed, so a change made since is
// refused, not undone.
func (h *Handler) actCalendar(w http.ResponseWriter, r *http.Request, rt route) {
	what := fmt.Sprintf("%s calendar %q", rt.action, rt.calendar)
	if rt.action == actionAddCalendar {
		what = "create a calendar"
	}
	by, ok := h.allowAction(w, r, what)
	if !ok {
		return
	}
	if rt.action != actionAddCalendar {
		if err := backend.ValidateCalendarName(rt.calendar); err != nil {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("%s: no calendar can have this name: %v", what, err))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	var (
		reply      any
		back, done string
	)
	if rt.action == actionRemove {
		in, err := readAction(w, r)
		if err == nil && in.Rev == 0 {
			err = fmt.Errorf("%w: a removal needs rev, the revision the page showed", errBadInput)
		}
		if err == nil {
			reply, err = h.cals.DeleteCalendar(ctx, fleet.DeleteCalendarRequest{Name: rt.calendar, Rev: in.Rev, By: by})
		}
		if errors.Is(err, fleet.ErrCalendarConflict) {
			err = fmt.Errorf("%w: the calendar changed since the page was read (revision %d); nothing was removed: reload it to see it as it is", err, in.Rev)
		}
		if err != nil {
			h.failErr(w, r, what, err)
			return
		}
		back, done = "calendars", "calendar-removed"
	} else {
		form, cal, err := readCalendarForm(w, r)
		if err == nil {
			reply, err = h.putCalendar(ctx, rt, form, cal, by)
		}
		if err != nil {
			h.calendarRefused(ctx, w, r, rt, form, what, err)
			return
		}
		back, done = calendarPath(reply.(fleet.CalendarReply).Calendar.Name), "calendar-updated"
		if rt.action == actionAddCalendar {
			done = "calendar-added"
		}
	}
	h.cfg.Logger.Info("web: action", "action", rt.action, "calendar", rt.calendar, "by", by)
	if wantsJSON(r, rt) {
		writeJSON(w, http.StatusOK, reply) // as the CLI's --json prints it
		return
	}
	http.Redirect(w, r, h.cfg.Prefix+back+"?done="+done, http.StatusSeeOther)
}

// putCalendar stores the calendar the form asks for: a create, or a change on
// the form's revision that keeps the lists the form did not hold.
func (h *Handler) putCalendar(ctx context.Context, rt route, form calendarForm, cal fleet.Calendar, by string) (fleet.CalendarReply, error) {
	if rt.action == actionAddCalendar {
		if err := backend.ValidateCalendarName(form.Name); err != nil {
			return fleet.CalendarReply{}, fmt.Errorf("%w: %w", errBadInput, err)
		}
		if form.KeptDates+form.KeptRanges+form.KeptYearly > 0 {
			return fleet.CalendarReply{}, fmt.Errorf("%w: a new calendar keeps no stored days", errBadInput)
		}
		return h.cals.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: cal, By: by})
	}
	if form.Name != "" && form.Name != rt.calendar {
		return fleet.CalendarReply{}, fmt.Errorf("%w: name=%q: a calendar's name does not change (create one with the new name, remove this one)", errBadInput, form.Name)
	}
	if form.Rev == 0 {
		return fleet.CalendarReply{}, fmt.Errorf("%w: a change needs rev, the revision the page showed", errBadInput)
	}
	cal.Name = rt.calendar
	if form.KeptDates+form.KeptRanges+form.KeptYearly > 0 {
		cur, err := h.cals.Calendar(ctx, rt.calendar)
		if err != nil {
			return fleet.CalendarReply{}, err
		}
		if cur.Calendar.Revision != form.Rev {
			return fleet.CalendarReply{}, fleet.ErrCalendarConflict
		}
		if form.KeptDates > 0 {
			cal.Dates = cur.Calendar.Dates
		}
		if form.KeptRanges > 0 {
			cal.Ranges = cur.Calendar.Ranges
		}
		if form.KeptYearly > 0 {
			cal.Yearly = cur.Calendar.Yearly
		}
	}
	return h.cals.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: cal, Rev: form.Rev, By: by})
}

// calendarRefused answers a create or change the source or the form refused:
// bad input and a conflict show the page again with what was typed and why
// (a change's page with the calendar as stored now); anything else is the
// error page.
func (h *Handler) calendarRefused(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route, form calendarForm, what string, err error) {
	status := statusOf(err)
	if wantsJSON(r, rt) || status != http.StatusBadRequest && status != http.StatusConflict {
		h.failErr(w, r, what, err)
		return
	}
	msg := what + ": " + err.Error()
	if rt.action == actionAddCalendar {
		list, lerr := h.cals.Calendars(ctx)
		v := h.calendarsViewOf(r, list, form)
		v.Done = ""
		if lerr != nil {
			v.ListError = lerr.Error()
		}
		if errors.Is(err, fleet.ErrCalendarExists) {
			msg += ": a calendar of this name is stored; open it to change it"
			v.Existing = h.cfg.Prefix + calendarPath(form.Name)
		}
		v.Refused = msg
		h.render(w, status, "calendars", v)
		return
	}
	cur, cerr := h.cals.Calendar(ctx, rt.calendar)
	if cerr != nil {
		h.failErr(w, r, what, err)
		return
	}
	if errors.Is(err, fleet.ErrCalendarConflict) {
		msg += fmt.Sprintf(": the calendar changed since the page was read (revision %d, now %d); nothing was stored. "+
			"The form keeps what you typed; the page shows the calendar as stored now: reload it to change that", form.Rev, cur.Calendar.Revision)
	}
	v := h.calendarViewOf(r, cur, form)
	v.Done, v.Refused = "", msg
	h.render(w, status, "calendar", v)
}
