package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Errors of the calendar store, matched with errors.Is.
var (
	// ErrCalendarsNotSupported: a calendar call on a backend without CalendarStore.
	ErrCalendarsNotSupported = errors.New("scheduler: the backend cannot store calendars")
	// ErrCalendarExists: PutCalendar with revision 0 found a calendar of that name.
	ErrCalendarExists = errors.New("scheduler: calendar exists")
	// ErrCalendarNotFound: no calendar of that name is stored.
	ErrCalendarNotFound = errors.New("scheduler: calendar not found")
	// ErrCalendarConflict: the calendar's stored revision is not the one the
	// change was based on: another writer changed it first.
	ErrCalendarConflict = errors.New("scheduler: calendar changed by another writer")
	// ErrInvalidCalendar: a calendar Check refuses.
	ErrInvalidCalendar = errors.New("scheduler: invalid calendar")
)

// Limits of calendars.
const (
	// MaxCalendarNameLen is the longest calendar name, in bytes.
	MaxCalendarNameLen = 256
	// MaxCalendarDays bounds a calendar's Dates, Ranges and Yearly together.
	MaxCalendarDays = 20_000
	// MaxCalendarText bounds a calendar's Zone, Description and By, in bytes.
	MaxCalendarText = 1024
	// MaxCalendars is the most calendars a store keeps.
	MaxCalendars = 1000
	// MaxCalendarsPerSchedule is the most calendars one job or entry names.
	MaxCalendarsPerSchedule = 16
	// MaxCalendarJSON bounds a calendar encoded as JSON, in bytes. A calendar
	// within the other limits takes at most about 815,000; this one leaves a
	// store room under NATS's default max payload of 1 MiB.
	MaxCalendarJSON = 900_000
)

// DateRange is the days From to To, both included, as "2006-01-02".
type DateRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Calendar is a named set of days on which the slots of the jobs and entries
// that name it are not run but recorded excluded. A slot is excluded when the
// day of its schedule time (before any spread), counted in Zone, is one of the
// calendar's days.
type Calendar struct {
	// Name names it; the rules of job names, at most MaxCalendarNameLen bytes.
	Name string `json:"name"`
	// Zone is the IANA time zone its days are counted in; empty: the zone of
	// the schedule that names it (UTC for an interval).
	Zone string `json:"zone,omitempty"`
	// Dates are single days, "2006-01-02".
	Dates []string `json:"dates,omitempty"`
	// Ranges are runs of days.
	Ranges []DateRange `json:"ranges,omitempty"`
	// Yearly are days of every year, "01-02" (month-day); "02-29" only in
	// leap years.
	Yearly []string `json:"yearly,omitempty"`
	// Weekdays are days of every week.
	Weekdays []time.Weekday `json:"weekdays,omitempty"`
	// Description says what it is for; shown by tools.
	Description string `json:"description,omitempty"`
	// By and At say who stored this revision and when (by its clock).
	By string    `json:"by,omitempty"`
	At time.Time `json:"at,omitzero"`
	// Revision is the store's revision of it, set by the store when read.
	Revision uint64 `json:"revision,omitempty"`
}

// ValidateCalendarName reports whether name can name a calendar.
func ValidateCalendarName(name string) error {
	if problem := nameProblem(name, "name", MaxCalendarNameLen); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidCalendar, problem)
	}
	return nil
}

// Check reports what keeps c from being stored, or nil: what Days refuses, and
// a calendar that does not encode as JSON in MaxCalendarJSON bytes.
func (c Calendar) Check() error {
	if _, err := c.Days(); err != nil {
		return err
	}
	data, err := json.Marshal(c)
	switch {
	case err != nil:
		return fmt.Errorf("%w: calendar %q: %v", ErrInvalidCalendar, c.Name, err)
	case len(data) > MaxCalendarJSON:
		return fmt.Errorf("%w: calendar %q: %d bytes as JSON, at most %d", ErrInvalidCalendar, c.Name, len(data), MaxCalendarJSON)
	}
	return nil
}

// Days compiles c for CalendarDays.Excludes, or says what is wrong with it.
func (c Calendar) Days() (*CalendarDays, error) {
	if err := ValidateCalendarName(c.Name); err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*CalendarDays, error) {
		return nil, fmt.Errorf("%w: calendar %q: %s", ErrInvalidCalendar, c.Name, fmt.Sprintf(format, args...))
	}
	if len(c.Zone) > MaxCalendarText || len(c.Description) > MaxCalendarText || len(c.By) > MaxCalendarText {
		return bad("zone, description and by are at most %d bytes each", MaxCalendarText)
	}
	if n := len(c.Dates) + len(c.Ranges) + len(c.Yearly); n > MaxCalendarDays {
		return bad("%d dates, ranges and yearly days, at most %d", n, MaxCalendarDays)
	}
	if len(c.Weekdays) > 7 {
		return bad("%d weekdays, at most 7", len(c.Weekdays))
	}
	d := &CalendarDays{name: c.Name, dates: make([]int32, 0, len(c.Dates))}
	if c.Zone != "" {
		loc, err := time.LoadLocation(c.Zone)
		if err != nil || strings.EqualFold(c.Zone, "local") {
			return bad("unknown zone %q", c.Zone)
		}
		d.zone = loc
	}
	for _, s := range c.Dates {
		day, err := parseDay(s)
		if err != nil {
			return bad("date %q: %v", s, err)
		}
		d.dates = append(d.dates, day)
	}
	slices.Sort(d.dates)
	d.dates = slices.Compact(d.dates)
	for _, r := range c.Ranges {
		from, err := parseDay(r.From)
		if err != nil {
			return bad("range from %q: %v", r.From, err)
		}
		to, err := parseDay(r.To)
		if err != nil {
			return bad("range to %q: %v", r.To, err)
		}
		if to < from {
			return bad("range %s..%s ends before it starts", r.From, r.To)
		}
		d.ranges = append(d.ranges, [2]int32{from, to})
	}
	for _, s := range c.Yearly {
		t, err := time.Parse("01-02", s)
		if err != nil || len(s) != 5 {
			if s == "02-29" {
				d.yearly[2*32+29] = true
				continue
			}
			return bad("yearly day %q: want MM-DD", s)
		}
		d.yearly[int(t.Month())*32+t.Day()] = true
	}
	for _, w := range c.Weekdays {
		if w < time.Sunday || w > time.Saturday {
			return bad("weekday %d: want 0 (Sunday) to 6", w)
		}
		d.weekdays |= 1 << w
	}
	sort.Slice(d.ranges, func(i, j int) bool { return d.ranges[i][0] < d.ranges[j][0] })
	// Merge overlapping ranges so that Excludes finds a day with one search.
	merged := d.ranges[:0]
	for _, r := range d.ranges {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1]+1 {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	d.ranges = merged
	return d, nil
}

// parseDay parses "2006-01-02" into a day number (days since 1970-01-01).
func parseDay(s string) (int32, error) {
	if len(s) != 10 {
		return 0, errors.New("want YYYY-MM-DD")
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return 0, errors.New("want YYYY-MM-DD, a real day")
	}
	return dayNumber(t), nil
}

// dayNumber is the day of t's calendar date (in t's location) counted from
// 1970-01-01.
func dayNumber(t time.Time) int32 {
	y, m, d := t.Date()
	return int32(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

// CalendarDays is a compiled Calendar.
type CalendarDays struct {
	name     string
	zone     *time.Location
	dates    []int32    // sorted, each once
	ranges   [][2]int32 // sorted, not overlapping
	yearly   [13 * 32]bool
	weekdays uint8
}

// Name is the calendar's name.
func (d *CalendarDays) Name() string { return d.name }

// Excludes reports whether the day of t, in the calendar's zone (in schedZone
// when it has none), is one of its days, and which rule says so.
func (d *CalendarDays) Excludes(t time.Time, schedZone *time.Location) (rule string, excluded bool) {
	loc := d.zone
	if loc == nil {
		loc = schedZone
	}
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	day := dayNumber(t)
	if _, ok := slices.BinarySearch(d.dates, day); ok {
		return t.Format(time.DateOnly), true
	}
	i, _ := slices.BinarySearchFunc(d.ranges, day, func(r [2]int32, day int32) int {
		switch {
		case r[1] < day:
			return -1
		case r[0] > day:
			return 1
		}
		return 0
	})
	if i < len(d.ranges) && d.ranges[i][0] <= day && day <= d.ranges[i][1] {
		from := time.Unix(int64(d.ranges[i][0])*86400, 0).UTC().Format(time.DateOnly)
		to := time.Unix(int64(d.ranges[i][1])*86400, 0).UTC().Format(time.DateOnly)
		return from + ".." + to, true
	}
	if _, m, dd := t.Date(); d.yearly[int(m)*32+dd] {
		return "every " + t.Format("01-02"), true
	}
	if d.weekdays&(1<<t.Weekday()) != 0 {
		return "every " + t.Weekday().String(), true
	}
	return "", false
}

// ExcludedWhy is the reason stored with a slot the calendar excludes.
func ExcludedWhy(calendar, rule string) string {
	return fmt.Sprintf("excluded by calendar %q (%s)", calendar, rule)
}

// CalendarStore is implemented by backends that store calendars, shared by
// every instance. It is optional: on a backend without it, jobs and entries
// that name a calendar are refused (ErrCalendarsNotSupported).
type CalendarStore interface {
	// PutCalendar stores c. With rev 0 it creates it (ErrCalendarExists if one
	// of that name is stored); otherwise it replaces the stored one if its
	// revision is rev (ErrCalendarConflict; ErrCalendarNotFound if none is
	// stored). It refuses a calendar Check refuses, and a new one past
	// MaxCalendars (ErrInvalidCalendar). It returns the new revision.
	PutCalendar(ctx context.Context, c Calendar, rev uint64) (uint64, error)
	// DeleteCalendar removes the calendar if its stored revision is rev, or
	// whatever its revision when rev is 0 (ErrCalendarConflict,
	// ErrCalendarNotFound).
	DeleteCalendar(ctx context.Context, name string, rev uint64) error
	// GetCalendar returns one calendar with its Revision (ErrCalendarNotFound).
	GetCalendar(ctx context.Context, name string) (Calendar, error)
	// Calendars returns every stored calendar with its Revision, ordered by name.
	Calendars(ctx context.Context) ([]Calendar, error)
	// WatchCalendars calls fn with every stored calendar (ordered by name) at
	// once and again after every change, until ctx ends (it then returns nil)
	// or the watch fails. fn is called from one goroutine at a time and must
	// return quickly.
	WatchCalendars(ctx context.Context, fn func([]Calendar)) error
}
