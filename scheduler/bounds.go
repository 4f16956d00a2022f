package scheduler

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// boundsLayout is how a bound is written in a schedule's String, and read back by
// DescribeSchedule.
const boundsLayout = "2006-01-02T15:04:05.000Z07:00"

// OnceSchedule has one slot, At. At registers one with At truncated to the
// millisecond; a value built by hand is used as it is.
type OnceSchedule struct{ At time.Time }

// Next returns At when t is before it, else the zero time.
func (s OnceSchedule) Next(t time.Time) time.Time {
	if t.Before(s.At) {
		return s.At
	}
	return time.Time{}
}

func (s OnceSchedule) String() string { return "once at " + s.At.UTC().Format(boundsLayout) }

// BoundedSchedule is the slots of Schedule from Start (included) until End (not
// included); a zero bound leaves that side open. WithStartAt and WithEndAt build
// one with the bounds rounded up to the millisecond.
type BoundedSchedule struct {
	Schedule
	Start, End time.Time
}

// Next returns the first slot of the inner schedule strictly after t within the
// bounds, or the zero time when none is left before End.
func (s BoundedSchedule) Next(t time.Time) time.Time {
	if !s.Start.IsZero() && t.Before(s.Start) {
		t = s.Start.Add(-time.Nanosecond) // Next is strictly after: Start itself may be a slot
	}
	n := s.Schedule.Next(t)
	if n.IsZero() || !s.End.IsZero() && !n.Before(s.End) {
		return time.Time{}
	}
	return n
}

func (s BoundedSchedule) String() string {
	out := s.Schedule.String()
	if !s.Start.IsZero() {
		out += " from " + s.Start.UTC().Format(boundsLayout)
	}
	if !s.End.IsZero() {
		out += " until " + s.End.UTC().Format(boundsLayout)
	}
	return out
}

// WithStartAt gives the job no slot before t: its first slot is the schedule's first
// at or after t. Slots before it are not run, recorded or caught up.
func WithStartAt(t time.Time) JobOption {
	return func(c *jobConfig) error {
		ms, err := boundMillis("start", t)
		c.start = ms
		return err
	}
}

// WithEndAt gives the job no slot at or after t: once its last slot before t is
// claimed, its loop ends (a run in progress finishes). An end already past is
// accepted: the job then does nothing, and Jobs shows no next slot. Bounds that
// can never hold a slot are refused: an end not after the start, or before a
// one-time job's instant.
// RunNow still runs an ended job, as a manual run.
func WithEndAt(t time.Time) JobOption {
	return func(c *jobConfig) error {
		ms, err := boundMillis("end", t)
		c.end = ms
		return err
	}
}

// Slots are whole milliseconds since the Unix epoch, in int64.
var (
	firstMillis = time.UnixMilli(math.MinInt64 + 1).UTC()
	lastMillis  = time.UnixMilli(math.MaxInt64 - 1).UTC()
)

// boundMillis is t rounded up to the millisecond (a slot is before t exactly when
// it is before that), or an error for a zero t or one slots cannot reach.
func boundMillis(what string, t time.Time) (time.Time, error) {
	if t.IsZero() {
		return time.Time{}, optErr("%s time is zero", what)
	}
	if t.Before(firstMillis) || t.After(lastMillis) {
		return time.Time{}, optErr("%s time %v is outside the range of slots (milliseconds since 1970 in 64 bits)", what, t)
	}
	ms := time.UnixMilli(t.UnixMilli()).UTC()
	if ms.Before(t) {
		ms = ms.Add(time.Millisecond)
	}
	return ms, nil
}

// bound applies the job's start and end to sched, and refuses bounds that leave
// no slot.
func (c jobConfig) bound(sched Schedule) (Schedule, error) {
	if _, none := sched.(noSchedule); none || c.start.IsZero() && c.end.IsZero() {
		return sched, nil // a job of entries only: its entries are bounded by the job's bounds
	}
	b := BoundedSchedule{Schedule: sched, Start: c.start, End: c.end}
	if !c.start.IsZero() && !c.end.IsZero() && !c.start.Before(c.end) {
		return nil, optErr("start %s is not before end %s", c.start.Format(boundsLayout), c.end.Format(boundsLayout))
	}
	from := c.start
	if at, ok := onceAt(sched); ok && (from.IsZero() || at.Before(from)) {
		from = at // a one-time job's one slot is known: probe it whatever the bounds
	}
	if !from.IsZero() && b.Next(from.Add(-time.Nanosecond)).IsZero() {
		return nil, fmt.Errorf("%w: %s has no slot within its bounds", ErrInvalidSchedule, b)
	}
	return b, nil
}

// describeBounds turns the bounds at the end of a schedule's String into words:
// the inner schedule and ", from T until T".
func describeBounds(s string) (inner, bounds string) {
	inner = s
	if i := strings.LastIndex(inner, " until "); i >= 0 {
		bounds = " until " + inner[i+len(" until "):]
		inner = inner[:i]
	}
	if i := strings.LastIndex(inner, " from "); i >= 0 {
		bounds = " from " + inner[i+len(" from "):] + bounds
		inner = inner[:i]
	}
	if bounds != "" {
		bounds = "," + bounds
	}
	return inner, bounds
}

// isOnce reports whether sched has at most one slot: a one-time job, bounded or not.
// onceAt is the one slot of a one-time schedule (moved by its spread).
func onceAt(sched Schedule) (time.Time, bool) {
	switch s := sched.(type) {
	case OnceSchedule:
		return s.At, true
	case SpreadSchedule:
		at, ok := onceAt(s.Schedule)
		return at.Add(s.Offset), ok
	}
	return time.Time{}, false
}

func isOnce(sched Schedule) bool {
	switch s := sched.(type) {
	case OnceSchedule:
		return true
	case BoundedSchedule:
		return isOnce(s.Schedule)
	case SpreadSchedule:
		return isOnce(s.Schedule)
	}
	return false
}
