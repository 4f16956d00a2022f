package scheduler

import (
	"fmt"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// Schedule is a pure value: the slots of a job. Every instance computes the same slots
// from the same schedule, without talking to the others.
type Schedule interface {
	// Next returns the first slot strictly after t, at millisecond precision, or the
	// zero time when there is none.
	Next(t time.Time) time.Time
	String() string
}

// IntervalSchedule fires every Interval, aligned to the Unix epoch: the slots are the
// multiples of Interval since 1970-01-01T00:00:00Z, so two instances started at
// different times agree on them.
type IntervalSchedule struct{ Interval time.Duration }

// MinInterval is the shortest interval Every accepts. Slots are identified at
// millisecond precision, so a shorter interval would give two slots one identity.
const MinInterval = time.Millisecond

// NewIntervalSchedule validates interval: it must be a positive whole number of
// milliseconds.
func NewIntervalSchedule(interval time.Duration) (IntervalSchedule, error) {
	if interval <= 0 {
		return IntervalSchedule{}, fmt.Errorf("%w: interval %v must be positive", ErrInvalidSchedule, interval)
	}
	if interval%MinInterval != 0 {
		return IntervalSchedule{}, fmt.Errorf("%w: interval %v must be a whole number of milliseconds (slots are identified at millisecond precision)", ErrInvalidSchedule, interval)
	}
	return IntervalSchedule{Interval: interval}, nil
}

// Next returns the first multiple of the interval since the epoch after t.
func (s IntervalSchedule) Next(t time.Time) time.Time {
	ms := t.UnixMilli()
	step := s.Interval.Milliseconds()
	// floor division that also holds before 1970
	k := ms / step
	if ms%step != 0 && ms < 0 {
		k--
	}
	next := (k + 1) * step
	if next < ms { // overflow: no slot left before the end of representable time
		return time.Time{}
	}
	return time.UnixMilli(next).UTC()
}

func (s IntervalSchedule) String() string { return "every " + s.Interval.String() }

// CronSchedule is a cron expression in a location.
//
// Expressions have 5 fields (minute hour day-of-month month day-of-week) or 6 (with
// seconds first), or a descriptor (@hourly, @daily, @weekly, @monthly, @yearly). A
// CRON_TZ=Zone/Name prefix sets the location; otherwise the location given to the
// job applies (UTC by default, never the host's local zone, so replicas on hosts with
// different zones agree). When both day-of-month and day-of-week are restricted, a
// day matches if either does, as in Vixie cron and Kubernetes CronJob.
//
// Daylight saving time, in a zone that has it (parsing by
// github.com/netresearch/go-cron; tested in TestCronDaylightSaving):
//   - Spring forward: a time inside the skipped hour fires once, shifted by the
//     jump. When clocks jump from 02:00 to 03:00, 02:30 fires at 03:30 local, the
//     instant 02:30 would have been.
//   - Fall back: a time inside the repeated hour fires once, on its first
//     occurrence (the earlier UTC instant), never twice. go-cron alone fires it
//     twice; Next skips the second occurrence.
//
// So every calendar day gives each listed time exactly one slot. Use UTC for jobs that
// must keep exact spacing.
type CronSchedule struct {
	expr  string
	loc   *time.Location
	sched cron.Schedule
}

var cronParser = cron.MustNewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom |
	cron.Month | cron.Dow | cron.Descriptor | cron.DowOrDom)

// ParseCron parses expr in loc (UTC when nil; a CRON_TZ= prefix must agree with loc). It fails on a malformed expression, an
// unknown zone and an expression that never fires (such as 30 February).
func ParseCron(expr string, loc *time.Location) (*CronSchedule, error) {
	trimmed := strings.TrimSpace(expr)
	if trimmed == "" {
		return nil, fmt.Errorf("%w: empty cron expression", ErrInvalidSchedule)
	}
	if strings.HasPrefix(trimmed, "@every") {
		return nil, fmt.Errorf("%w: cron %q: use Every for fixed intervals", ErrInvalidSchedule, expr)
	}
	hasTZ := strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=")
	s, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q: %w", ErrInvalidSchedule, expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%w: cron %q: unsupported expression", ErrInvalidSchedule, expr)
	}
	switch {
	case hasTZ && loc != nil && loc.String() != spec.Location.String():
		return nil, fmt.Errorf("%w: cron %q names zone %s but the job asks for %s", ErrInvalidSchedule, expr, spec.Location, loc)
	case hasTZ:
		loc = spec.Location
	case loc == nil:
		loc = time.UTC
		spec.Location = loc
	default:
		spec.Location = loc
	}
	cs := &CronSchedule{expr: trimmed, loc: loc, sched: spec}
	if cs.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: cron %q never fires", ErrInvalidSchedule, expr)
	}
	return cs, nil
}

// Next returns the first slot after t, truncated to the millisecond. A wall-clock time
// that occurs twice (the hour repeated when clocks fall back) gives a slot only on its
// first occurrence; one skipped by a jump forward gives its slot shifted by the jump,
// whatever t is.
func (s *CronSchedule) Next(t time.Time) time.Time {
	n := s.next(t)
	if c := s.shifted(t); !c.IsZero() && (n.IsZero() || c.Before(n)) {
		return c
	}
	return n
}

// maxJump bounds how far a jump forward of the zone's clocks (and the slot it
// shifts) can lie before t.
const maxJump = 3 * time.Hour

// shifted is the slot after t that a jump forward of the clocks shifted, found
// from before the jump: the expression's parser finds a time inside the skipped
// hour (shifted by the jump) only when it starts before the jump. Zero when no jump
// lies in the maxJump before t.
func (s *CronSchedule) shifted(t time.Time) time.Time {
	lo, hi := t.Add(-maxJump), t
	_, before := lo.In(s.loc).Zone()
	if _, after := hi.In(s.loc).Zone(); after <= before {
		return time.Time{}
	}
	for hi.Sub(lo) > time.Second { // the jump's instant, to the second
		mid := lo.Add(hi.Sub(lo) / 2)
		if _, off := mid.In(s.loc).Zone(); off == before {
			lo = mid
		} else {
			hi = mid
		}
	}
	// The parser finds the shifted time from a minute before the jump, not from
	// within that minute; slots before t are stepped past (a few: a frequent
	// expression has slots after t that Next finds without this).
	c := s.next(lo.Truncate(time.Minute).Add(-time.Minute))
	for range 16 {
		if c.IsZero() || c.After(t) {
			return c
		}
		c = s.next(c)
	}
	return time.Time{}
}

// next is the first slot after t the parser gives, past repeated wall times.
func (s *CronSchedule) next(t time.Time) time.Time {
	for range 4 {
		n := s.sched.Next(t)
		if n.IsZero() {
			return n
		}
		if !s.repeatedWallTime(n) {
			return time.UnixMilli(n.UnixMilli()).UTC()
		}
		t = n
	}
	return time.Time{}
}

// repeatedWallTime reports whether the wall-clock time of n in the schedule's zone
// already happened a little earlier (a DST fall-back repeats an hour, or 30 minutes
// in a few zones).
func (s *CronSchedule) repeatedWallTime(n time.Time) bool {
	local := n.In(s.loc)
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		p := n.Add(-d).In(s.loc)
		if p.Hour() == local.Hour() && p.Minute() == local.Minute() && p.Second() == local.Second() && p.YearDay() == local.YearDay() {
			return true
		}
	}
	return false
}

// Location is the zone the expression is read in.
func (s *CronSchedule) Location() *time.Location { return s.loc }

func (s *CronSchedule) String() string {
	if strings.HasPrefix(s.expr, "TZ=") || strings.HasPrefix(s.expr, "CRON_TZ=") {
		return s.expr
	}
	return "CRON_TZ=" + s.loc.String() + " " + s.expr
}
