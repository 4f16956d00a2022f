package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Calendar is a named set of days on which the slots of the jobs and entries
// that name it are not run but recorded StatusExcluded (WithCalendars,
// EntrySpec.Calendars). Calendars are stored in the backend, shared by every
// instance and changed at runtime (PutCalendar).
type Calendar = backend.Calendar

// DateRange is a run of days of a Calendar.
type DateRange = backend.DateRange

// Errors of calendars, the backend's values.
var (
	ErrCalendarsNotSupported = backend.ErrCalendarsNotSupported
	ErrCalendarExists        = backend.ErrCalendarExists
	ErrCalendarNotFound      = backend.ErrCalendarNotFound
	ErrCalendarConflict      = backend.ErrCalendarConflict
	ErrInvalidCalendar       = backend.ErrInvalidCalendar
)

// StatusExcluded: the slot fell on a day of a calendar its job or entry
// names; not run, never run later.
const StatusExcluded = backend.StatusExcluded

// WithCalendars names calendars (at most backend.MaxCalendarsPerSchedule)
// whose days the job's slots, and its entries', are not run on: such a slot
// is recorded StatusExcluded, once, by the instance whose claim decides it. A
// slot's day is that of its schedule time before any spread, in the
// calendar's zone (the cron schedule's zone when the calendar has none, UTC
// for an interval). The calendars are read when the slot is first claimed: a
// change decides later slots, never a run already started. A named calendar
// that is not stored excludes nothing (a warning says so). It needs a backend
// that stores calendars (backend.CalendarStore).
func WithCalendars(names ...string) JobOption {
	return func(c *jobConfig) error {
		if err := checkCalendarNames(names); err != nil {
			return optErr("%v", err)
		}
		c.calendars = slices.Clone(names)
		return nil
	}
}

// checkCalendarNames reports what is wrong with a list of calendar names.
func checkCalendarNames(names []string) error {
	if len(names) > backend.MaxCalendarsPerSchedule {
		return fmt.Errorf("%d calendars, at most %d", len(names), backend.MaxCalendarsPerSchedule)
	}
	for i, n := range names {
		if err := backend.ValidateCalendarName(n); err != nil {
			return err
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("calendar %q named twice", n)
		}
	}
	return nil
}

// calendarView is the scheduler's view of the stored calendars, as the
// backend's watch last told them.
type calendarView struct {
	mu     sync.Mutex
	days   map[string]*backend.CalendarDays
	stored map[string]Calendar
	// warned are the calendars named by a job but not stored, warned of.
	warned map[string]bool
}

func (s *Scheduler) calendarStore() (backend.CalendarStore, error) {
	cs, ok := s.backend.(backend.CalendarStore)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrCalendarsNotSupported, s.backend.Name())
	}
	return cs, nil
}

// PutCalendar stores c, by revision compare-and-set: rev 0 creates it
// (ErrCalendarExists if one of that name is stored), another rev replaces the
// calendar stored with that revision (ErrCalendarConflict if another writer
// changed it first). By defaults to the instance and At is set to now. Every
// instance follows the change; it decides the slots claimed after it. A write
// that failed (its answer lost, or refused as a conflict when a store retried
// it) and that is then found stored as asked, the same days, By and At,
// counts as done.
func (s *Scheduler) PutCalendar(ctx context.Context, c Calendar, rev uint64) (Calendar, error) {
	cs, err := s.calendarStore()
	if err != nil {
		return Calendar{}, err
	}
	if c.By == "" {
		c.By = s.instance
	}
	c.At = s.clock.Now().UTC().Truncate(time.Millisecond)
	c.Revision = 0
	if err := c.Check(); err != nil {
		return Calendar{}, err
	}
	if err := s.init(ctx); err != nil {
		return Calendar{}, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	nrev, err := cs.PutCalendar(cctx, c, rev)
	if err != nil && !errors.Is(err, ErrInvalidCalendar) {
		// A write whose answer was lost finds itself stored. At, to the
		// millisecond, with By, tells it from another writer's.
		rctx, rcancel := s.writeCtx()
		got, gerr := cs.GetCalendar(rctx, c.Name)
		rcancel()
		if gerr == nil && sameCalendar(got, c) {
			return got, nil
		}
	}
	if err != nil {
		return Calendar{}, fmt.Errorf("scheduler: put calendar %q on %s: %w", c.Name, s.backend.Name(), err)
	}
	c.Revision = nrev
	return c, nil
}

// sameCalendar reports whether stored is the write w (the same content, By
// and At).
func sameCalendar(stored, w Calendar) bool {
	return stored.Name == w.Name && stored.Zone == w.Zone && stored.Description == w.Description &&
		stored.By == w.By && stored.At.Equal(w.At) && slices.Equal(stored.Dates, w.Dates) &&
		slices.Equal(stored.Ranges, w.Ranges) && slices.Equal(stored.Yearly, w.Yearly) && slices.Equal(stored.Weekdays, w.Weekdays)
}

// DeleteCalendar removes the calendar name if its stored revision is rev, or
// whatever its revision when rev is 0. Jobs that name it then exclude nothing
// by it. A removal that failed for want of an answer and that then finds no
// calendar of that name stored counts as done.
func (s *Scheduler) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	cs, err := s.calendarStore()
	if err != nil {
		return err
	}
	if err := backend.ValidateCalendarName(name); err != nil {
		return err
	}
	if err := s.init(ctx); err != nil {
		return err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := cs.DeleteCalendar(cctx, name, rev); err != nil {
		if !errors.Is(err, ErrCalendarNotFound) && !errors.Is(err, ErrCalendarConflict) {
			// Its answer may have been lost after the store removed it.
			rctx, rcancel := s.writeCtx()
			_, gerr := cs.GetCalendar(rctx, name)
			rcancel()
			if errors.Is(gerr, ErrCalendarNotFound) {
				return nil
			}
		}
		return fmt.Errorf("scheduler: delete calendar %q on %s: %w", name, s.backend.Name(), err)
	}
	return nil
}

// GetCalendar returns the stored calendar name (ErrCalendarNotFound).
func (s *Scheduler) GetCalendar(ctx context.Context, name string) (Calendar, error) {
	cs, err := s.calendarStore()
	if err != nil {
		return Calendar{}, err
	}
	if err := backend.ValidateCalendarName(name); err != nil {
		return Calendar{}, err
	}
	if err := s.init(ctx); err != nil {
		return Calendar{}, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	c, err := cs.GetCalendar(cctx, name)
	if err != nil {
		return Calendar{}, fmt.Errorf("scheduler: get calendar %q on %s: %w", name, s.backend.Name(), err)
	}
	return c, nil
}

// Calendars returns the stored calendars, ordered by name.
func (s *Scheduler) Calendars(ctx context.Context) ([]Calendar, error) {
	cs, err := s.calendarStore()
	if err != nil {
		return nil, err
	}
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	all, err := cs.Calendars(cctx)
	if err != nil {
		return nil, fmt.Errorf("scheduler: list calendars on %s: %w", s.backend.Name(), err)
	}
	return all, nil
}

// watchCalendars keeps the view of the calendars current until the loops stop,
// watching again after a failed watch. Each time it watches again it reads the
// calendars first: a watch that keeps failing while the store answers reads
// leaves the view no older than the wait between two watches (at most 1.6s).
func (s *Scheduler) watchCalendars(cs backend.CalendarStore) {
	defer s.loops.Done()
	for attempt := 0; s.loopCtx.Err() == nil; attempt++ {
		err := cs.WatchCalendars(s.loopCtx, func(all []Calendar) {
			attempt = 0
			s.noteCalendars(all)
		})
		if s.loopCtx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("watching calendars failed; watching again", "err", err)
			s.emit(Event{Kind: EventBackendError, Op: "watch_calendars", Err: err})
		}
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return
		}
		cctx, cancel := s.callCtx(s.loopCtx)
		all, err := cs.Calendars(cctx)
		cancel()
		if err == nil {
			s.noteCalendars(all)
		}
	}
}

// noteCalendars takes the stored calendars as this instance's view. A
// calendar a store holds that this version cannot compile (written by hand or
// a newer version) is left out, with a warning.
func (s *Scheduler) noteCalendars(all []Calendar) {
	v := &s.calendars
	v.mu.Lock()
	old, oldDays := v.stored, v.days
	v.mu.Unlock()
	days := make(map[string]*backend.CalendarDays, len(all))
	stored := make(map[string]Calendar, len(all))
	for _, c := range all {
		if o, ok := old[c.Name]; ok && oldDays[c.Name] != nil && sameCalendar(o, c) && o.Revision == c.Revision {
			days[c.Name], stored[c.Name] = oldDays[c.Name], c // unchanged: not compiled again
			continue
		}
		d, err := c.Days()
		if err != nil {
			s.log.Warn("stored calendar not understood; it excludes nothing", "calendar", c.Name, "err", err)
			continue
		}
		days[c.Name], stored[c.Name] = d, c
	}
	v.mu.Lock()
	changed := !sameCalendars(v.stored, stored)
	v.days, v.stored = days, stored
	v.mu.Unlock()
	if changed {
		s.log.Info("calendars changed", "calendars", len(stored))
		s.emit(Event{Kind: EventCalendarsChanged})
	}
	s.warnMissingCalendars()
}

// sameCalendars reports whether two views hold the same calendars.
func sameCalendars(a, b map[string]Calendar) bool {
	if len(a) != len(b) {
		return false
	}
	for n, c := range a {
		if d, ok := b[n]; !ok || d.Revision != c.Revision || !sameCalendar(c, d) {
			return false
		}
	}
	return true
}

// warnMissingCalendars warns, once per calendar until it is stored, of each
// calendar a declared job names that the view does not hold.
func (s *Scheduler) warnMissingCalendars() {
	s.mu.Lock()
	var named []string
	for _, j := range s.order {
		named = append(named, j.cfg.calendars...)
	}
	s.mu.Unlock()
	v := &s.calendars
	v.mu.Lock()
	var missing []string
	for _, n := range named {
		_, ok := v.days[n]
		switch {
		case ok:
			delete(v.warned, n)
		case !v.warned[n]:
			if v.warned == nil {
				v.warned = map[string]bool{}
			}
			v.warned[n] = true
			missing = append(missing, n)
		}
	}
	v.mu.Unlock()
	for _, n := range missing {
		s.log.Warn("a job names a calendar that is not stored; it excludes nothing", "calendar", n)
	}
}

// excludedBy returns the first of j's calendars, in the order named, that
// excludes its slot nominal, and the rule that does; "" when none does.
func (s *Scheduler) excludedBy(j *job, nominal time.Time) (calendar, rule string) {
	if len(j.cfg.calendars) == 0 {
		return "", ""
	}
	var zone *time.Location
	if c := cronOf(j.sched); c != nil { // under its bounds and spread
		zone = c.Location()
	}
	v := &s.calendars
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, n := range j.cfg.calendars {
		if d := v.days[n]; d != nil {
			if rule, ok := d.Excludes(nominal, zone); ok {
				return n, rule
			}
		}
	}
	return "", ""
}

// excludes reports whether a calendar j names excludes its slot, as the view
// stands now.
func (s *Scheduler) excludes(j *job) func(slot time.Time) bool {
	return func(slot time.Time) bool {
		cal, _ := s.excludedBy(j, j.nominal(slot))
		return cal != ""
	}
}

// excludedWhy is the reason a's slot is recorded excluded, or "": manual runs
// are never excluded, nor is a missed record that stands for a range of slots.
func (s *Scheduler) excludedWhy(a *attempt) string {
	if a.kind == claimManual || a.stands > 1 {
		return ""
	}
	cal, rule := s.excludedBy(a.j, a.j.nominal(a.rc.Slot))
	if cal == "" {
		return ""
	}
	return backend.ExcludedWhy(cal, rule)
}
