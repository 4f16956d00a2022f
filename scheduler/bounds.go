package scheduler

import (
	"fmt"
	"strings"
	"time"
)

// boundsLayout is how a bound is written in a schedule's String, and read back by
// DescribeSchedule.
const boundsLayout = "2006-01-02T15:04:05.000Z07:00"

// OnceSchedule has one slot, At, at millisecond precision.
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
// included); a zero bound leaves that side open.
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

// WithStartAt gives the job no slot before t (at millisecond precision, truncated):
// its first slot is the schedule's first at or after t. Slots before it are not
// run, recorded or caught up.
func WithStartAt(t time.Time) JobOption {
	return func(c *jobConfig) error {
		if t.IsZero() {
			return optErr("start time is zero")
		}
		c.start = time.UnixMilli(t.UnixMilli()).UTC()
		return nil
	}
}

// WithEndAt gives the job no slot at or after t (at millisecond precision,
// truncated): once its last slot before t is claimed, its loop ends (a run in
// progress finishes). Registration refuses bounds that leave the job no slot.
func WithEndAt(t time.Time) JobOption {
	return func(c *jobConfig) error {
		if t.IsZero() {
			return optErr("end time is zero")
		}
		c.end = time.UnixMilli(t.UnixMilli()).UTC()
		return nil
	}
}

// bound applies the job's start and end to sched, and refuses bounds that leave
// no slot.
func (c jobConfig) bound(sched Schedule) (Schedule, error) {
	if c.start.IsZero() && c.end.IsZero() {
		return sched, nil
	}
	b := BoundedSchedule{Schedule: sched, Start: c.start, End: c.end}
	if !c.start.IsZero() && !c.end.IsZero() && !c.start.Before(c.end) {
		return nil, optErr("start %s is not before end %s", c.start.Format(boundsLayout), c.end.Format(boundsLayout))
	}
	if !c.start.IsZero() && b.Next(c.start.Add(-time.Nanosecond)).IsZero() {
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
