package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Calendar is a stored calendar on the wire (scheduler.Calendar): the days on
// which the slots of the jobs and entries that name it are recorded excluded.
type Calendar struct {
	Name string `json:"name"`
	// Zone is the IANA zone its days are counted in; empty: the zone of the
	// schedule that names it.
	Zone string `json:"zone,omitempty"`
	// Dates are single days, "2006-01-02"; Ranges runs of days, both ends
	// included; Yearly days of every year, "01-02".
	Dates  []string    `json:"dates,omitempty"`
	Ranges []DateRange `json:"ranges,omitempty"`
	Yearly []string    `json:"yearly,omitempty"`
	// Weekdays are days of every week, lower-case English names ("saturday");
	// a request may also give the first three letters, in any case.
	Weekdays    []string `json:"weekdays,omitempty"`
	Description string   `json:"description,omitempty"`
	// By is who stored this revision (see PutCalendarRequest.By), At when, by
	// the clock of the replica that stored it.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at,omitzero"`
	// Revision is the stored revision: the base of an update or removal.
	Revision uint64 `json:"revision,omitempty"`
}

// DateRange is a run of days of a Calendar, "2006-01-02" to "2006-01-02".
type DateRange = scheduler.DateRange

func calendarOf(c scheduler.Calendar) Calendar {
	out := Calendar{Name: c.Name, Zone: c.Zone, Dates: c.Dates, Ranges: c.Ranges, Yearly: c.Yearly,
		Description: c.Description, By: c.By, At: c.At, Revision: c.Revision}
	for _, w := range c.Weekdays {
		out.Weekdays = append(out.Weekdays, strings.ToLower(w.String()))
	}
	return out
}

// ParseWeekday reads a day of the week: its English name or its first three
// letters, in any case.
func ParseWeekday(s string) (time.Weekday, error) {
	for d := time.Sunday; d <= time.Saturday; d++ {
		name := d.String()
		if strings.EqualFold(s, name) || strings.EqualFold(s, name[:3]) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("weekday %q: want sunday to saturday, or sun to sat", oneLine(s))
}

// calendar is c as the scheduler takes it; a weekday that is none is a bad
// request. The scheduler checks the rest.
func (c Calendar) calendar() (scheduler.Calendar, error) {
	out := scheduler.Calendar{Name: c.Name, Zone: c.Zone, Dates: c.Dates, Ranges: c.Ranges, Yearly: c.Yearly,
		Description: c.Description, By: c.By}
	if len(c.Weekdays) > 7 {
		return out, badRequest("%d weekdays, at most 7", len(c.Weekdays))
	}
	for _, s := range c.Weekdays {
		d, err := ParseWeekday(s)
		if err != nil {
			return out, badRequest("%v", err)
		}
		out.Weekdays = append(out.Weekdays, d)
	}
	return out, nil
}

// CalendarSummary is a calendar in a list: what it is, its weekdays, and how
// many dates, ranges and yearly days it has (a calendar request has them).
type CalendarSummary struct {
	Name        string    `json:"name"`
	Zone        string    `json:"zone,omitempty"`
	Dates       int       `json:"dates"`
	Ranges      int       `json:"ranges"`
	Yearly      int       `json:"yearly"`
	Weekdays    []string  `json:"weekdays,omitempty"`
	Description string    `json:"description,omitempty"`
	By          string    `json:"by,omitempty"`
	At          time.Time `json:"at,omitzero"`
	Revision    uint64    `json:"revision"`
}

func calendarSummaryOf(c scheduler.Calendar) CalendarSummary {
	w := calendarOf(c)
	return CalendarSummary{Name: c.Name, Zone: c.Zone, Dates: len(c.Dates), Ranges: len(c.Ranges), Yearly: len(c.Yearly),
		Weekdays: w.Weekdays, Description: c.Description, By: c.By, At: c.At, Revision: c.Revision}
}

// CalendarsRequest is the body of <prefix>.CALENDARS.LIST: every stored
// calendar, ordered by name.
type CalendarsRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
}

// CalendarsReply answers a calendars request with every calendar summed up, in
// parts (see HistoryReply.Part) when they do not fit in one message.
type CalendarsReply struct {
	Instance  string            `json:"instance"`
	Calendars []CalendarSummary `json:"calendars"`
	Part      int               `json:"part,omitempty"`
	Parts     int               `json:"parts,omitempty"`
}

// CalendarRequest is the body of <prefix>.CALENDARS.GET: one calendar, whole.
type CalendarRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V    int    `json:"v"`
	Name string `json:"name"`
}

// CalendarReply answers a calendar request, or a change: the calendar as
// stored.
type CalendarReply struct {
	Instance string   `json:"instance"`
	Calendar Calendar `json:"calendar"`
}

// PutCalendarRequest is the body of <prefix>.CALENDARS.PUT: store the
// calendar (scheduler.PutCalendar). Rev 0 creates it, and an existing one is
// an error matching ErrCalendarExists; another Rev replaces the one stored
// with that revision (ErrCalendarConflict when another writer changed it
// first). The calendar's By, At and Revision are the replica's to set.
type PutCalendarRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V        int      `json:"v"`
	Calendar Calendar `json:"calendar"`
	Rev      uint64   `json:"rev,omitempty"`
	// By names who asked, at most scheduler.MaxPauseText bytes. The calendar
	// stores it, with the NATS user the server named for the request when the
	// replica is served WithRequestInfo: "ana (NATS user ops)".
	By string `json:"by,omitempty"`
}

// DeleteCalendarRequest is the body of <prefix>.CALENDARS.DELETE: remove the
// calendar if its stored revision is Rev, whatever its revision when Rev is 0.
type DeleteCalendarRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V    int    `json:"v"`
	Name string `json:"name"`
	Rev  uint64 `json:"rev,omitempty"`
	By   string `json:"by,omitempty"`
}

// DeleteCalendarReply answers a removal.
type DeleteCalendarReply struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	By       string `json:"by,omitempty"`
}

// checkCalendarName refuses a name no calendar can have, before any backend
// call.
func checkCalendarName(name string) error {
	if err := backend.ValidateCalendarName(name); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// calendarBy is who a change is recorded by: the request's by and the NATS
// user the server named, at most backend.MaxCalendarText bytes.
func calendarBy(ctx context.Context, by string) string {
	user := userOf(ctx)
	switch {
	case user == "":
	case by == "":
		by = "NATS user " + user
	default:
		by += " (NATS user " + user + ")"
	}
	return backend.TruncateText(by, backend.MaxCalendarText)
}

func (f *Service) calendars(ctx context.Context, data []byte) (any, error) {
	var in CalendarsRequest
	if err := decode(data, &in); err != nil {
		return nil, err
	}
	all, err := f.s.Calendars(ctx)
	if err != nil {
		return nil, err
	}
	sums := make([]CalendarSummary, len(all))
	for i, c := range all {
		sums[i] = calendarSummaryOf(c)
	}
	items, err := marshalEach(sums)
	if err != nil {
		return nil, err
	}
	out := CalendarsReply{Instance: f.s.Instance()}
	return parted{items: items, field: "calendars", envelope: func(part, parts int) any {
		out := out
		out.Part, out.Parts = part, parts
		return struct {
			CalendarsReply
			Calendars []CalendarSummary `json:"calendars,omitempty"`
		}{CalendarsReply: out}
	}}, nil
}

func (f *Service) calendar(ctx context.Context, data []byte) (any, error) {
	var in CalendarRequest
	if err := decode(data, &in); err != nil {
		return nil, err
	}
	if err := checkCalendarName(in.Name); err != nil {
		return nil, err
	}
	c, err := f.s.GetCalendar(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	return f.fits(CalendarReply{Instance: f.s.Instance(), Calendar: calendarOf(c)})
}

// widest is c with the longest At and Revision a store may give it.
func widest(c scheduler.Calendar) scheduler.Calendar {
	c.At = time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
	c.Revision = math.MaxUint64
	return c
}

// fits is out if it fits in one message, else an error saying so.
func (f *Service) fits(out CalendarReply) (any, error) {
	data, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	if len(data) > f.budget() {
		return nil, fmt.Errorf("fleet: calendar %q is %d bytes, more than a message holds (%d)", out.Calendar.Name, len(data), f.budget())
	}
	return json.RawMessage(data), nil
}

func (f *Service) putCalendar(ctx context.Context, data []byte) (any, error) {
	var in PutCalendarRequest
	if err := decode(data, &in); err != nil {
		return nil, err
	}
	if err := checkCalendarName(in.Calendar.Name); err != nil {
		return nil, err
	}
	if err := checkText("by", in.By); err != nil {
		return nil, err
	}
	c, err := in.Calendar.calendar()
	if err != nil {
		return nil, err
	}
	c.By = calendarBy(ctx, in.By)
	if err := c.Check(); err != nil {
		return nil, badRequest("%v", err)
	}
	// The reply holds the calendar as stored: refuse, before storing, one
	// whose reply would not fit, so that an error never hides a stored change.
	if _, err := f.fits(CalendarReply{Instance: f.s.Instance(), Calendar: calendarOf(widest(c))}); err != nil {
		return nil, badRequest("%v", err)
	}
	stored, err := f.s.PutCalendar(ctx, c, in.Rev)
	if err != nil {
		return nil, err
	}
	f.log.Info("fleet calendar stored", "calendar", c.Name, "by", in.By, "user", userOf(ctx), "from_rev", in.Rev, "rev", stored.Revision)
	return f.fits(CalendarReply{Instance: f.s.Instance(), Calendar: calendarOf(stored)})
}

func (f *Service) deleteCalendar(ctx context.Context, data []byte) (any, error) {
	var in DeleteCalendarRequest
	if err := decode(data, &in); err != nil {
		return nil, err
	}
	if err := checkCalendarName(in.Name); err != nil {
		return nil, err
	}
	if err := checkText("by", in.By); err != nil {
		return nil, err
	}
	if err := f.s.DeleteCalendar(ctx, in.Name, in.Rev); err != nil {
		return nil, err
	}
	f.log.Info("fleet calendar deleted", "calendar", in.Name, "by", in.By, "user", userOf(ctx), "rev", in.Rev)
	return DeleteCalendarReply{Instance: f.s.Instance(), Name: in.Name, By: in.By}, nil
}

// calendarRequest is c.request for a calendar endpoint: 410, 412 and 422
// then match the calendar's sentinels.
func (c *Client) calendarRequest(ctx context.Context, op string, in, out any) error {
	return asCalendarError(c.request(ctx, endpoint{subject: c.subj.calendar(op)}, in, out))
}

func asCalendarError(err error) error {
	var se *ServiceError
	if errors.As(err, &se) {
		se.calendar = true
	}
	return err
}

// Calendars returns every stored calendar summed up, ordered by name, from one
// replica.
func (c *Client) Calendars(ctx context.Context) (CalendarsReply, error) {
	out, err := gatherParts(ctx, c, endpoint{subject: c.subj.calendar(opList)}, CalendarsRequest{V: RequestVersion},
		func(r *CalendarsReply) (int, int, *[]CalendarSummary) { return r.Part, r.Parts, &r.Calendars })
	out.Part, out.Parts = 0, 0
	return out, asCalendarError(err)
}

// Calendar returns one stored calendar whole; none of that name is an error
// matching ErrCalendarNotFound.
func (c *Client) Calendar(ctx context.Context, name string) (CalendarReply, error) {
	var out CalendarReply
	return out, c.calendarRequest(ctx, opGet, CalendarRequest{V: RequestVersion, Name: name}, &out)
}

// PutCalendar stores a calendar through one replica: in.Rev 0 creates it
// (ErrCalendarExists if one of that name is stored), another in.Rev replaces
// the one stored with that revision (ErrCalendarConflict if another writer
// changed it first, ErrCalendarNotFound if none is stored). A calendar the
// replica refuses (a bad name, zone or day, too many days) matches
// ErrBadRequest, and nothing is stored.
func (c *Client) PutCalendar(ctx context.Context, in PutCalendarRequest) (CalendarReply, error) {
	var out CalendarReply
	in.V = versioned(in.V)
	return out, c.calendarRequest(ctx, opPut, in, &out)
}

// DeleteCalendar removes the calendar in.Name if its stored revision is in.Rev
// (whatever it is when in.Rev is 0); ErrCalendarConflict and
// ErrCalendarNotFound as PutCalendar.
func (c *Client) DeleteCalendar(ctx context.Context, in DeleteCalendarRequest) (DeleteCalendarReply, error) {
	var out DeleteCalendarReply
	in.V = versioned(in.V)
	return out, c.calendarRequest(ctx, opDelete, in, &out)
}
