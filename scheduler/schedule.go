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
// The expression lists wall-clock times. Where the zone changes its clocks
// (daylight saving time), its DSTPolicy decides the slots; by default:
//   - Fall back (DSTFirst): a time inside the repeated hour fires once, on its
//     first occurrence (the earlier instant), never twice.
//   - Spring forward (DSTShift): a time inside the skipped hour fires once,
//     shifted by the jump. When clocks jump from 02:00 to 03:00, 02:30 fires at
//     03:30 local, the instant 02:30 would have been.
//
// So by default every calendar day gives each listed time exactly one slot. DSTLast
// and DSTBoth take the second or both occurrences of a repeated time, DSTSkip gives
// a skipped time no slot. Any change of the zone's offset is treated alike, of any
// size (30 minutes on Lord Howe Island) and at any hour (midnight in Santiago).
// Use UTC for jobs that must keep exact spacing.
type CronSchedule struct {
	expr string
	loc  *time.Location
	dst  DSTPolicy
	spec *cron.SpecSchedule
	// fixed says the zone never changes its offset (UTC): no policy applies.
	fixed bool
}

var cronParser = cron.MustNewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom |
	cron.Month | cron.Dow | cron.Descriptor | cron.DowOrDom).WithMaxSearchYears(cronSearchYears)

// cronSearchYears is how far ahead a cron looks for its next slot. The calendar
// repeats every 400 years: a cron with no slot within them has none.
const cronSearchYears = 400

// ParseCron parses expr in loc (UTC when nil; a CRON_TZ= prefix must agree with
// loc), with the default DST policy. It fails on a malformed expression, an
// unknown zone and an expression that never fires (such as 30 February).
func ParseCron(expr string, loc *time.Location) (*CronSchedule, error) {
	return ParseCronDST(expr, loc, DSTPolicy{})
}

// ParseCronDST is ParseCron with the DST policy p. It also refuses an unknown
// policy, and any policy but the zero value in a zone that never changes its
// clocks (such as UTC), where it could have no effect; both errors match
// ErrInvalidSchedule and ErrInvalidOption.
func ParseCronDST(expr string, loc *time.Location, p DSTPolicy) (*CronSchedule, error) {
	trimmed := strings.TrimSpace(expr)
	if trimmed == "" {
		return nil, fmt.Errorf("%w: empty cron expression", ErrInvalidSchedule)
	}
	if strings.HasPrefix(trimmed, "@every") {
		return nil, fmt.Errorf("%w: cron %q: use Every for fixed intervals", ErrInvalidSchedule, expr)
	}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("%w: cron %q: %w", ErrInvalidSchedule, expr, err)
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
	cs := &CronSchedule{expr: trimmed, loc: loc, dst: p, spec: spec, fixed: fixedZone(loc)}
	if cs.fixed && p != (DSTPolicy{}) {
		return nil, fmt.Errorf("%w: cron %q: %w: zone %s never changes its clocks, a DST policy has no effect there (name the zone with WithLocation or CRON_TZ=)", ErrInvalidSchedule, expr, ErrInvalidOption, loc)
	}
	if cs.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: cron %q never fires", ErrInvalidSchedule, expr)
	}
	return cs, nil
}

// Next returns the first slot after t, truncated to the millisecond, under the
// schedule's DST policy.
func (s *CronSchedule) Next(t time.Time) time.Time {
	var n time.Time
	if s.fixed {
		n = s.spec.Next(t)
	} else {
		n = s.next(t)
	}
	if n.IsZero() {
		return n
	}
	return time.UnixMilli(n.UnixMilli()).UTC()
}

// Location is the zone the expression is read in.
func (s *CronSchedule) Location() *time.Location { return s.loc }

// DST is the schedule's DST policy, as given.
func (s *CronSchedule) DST() DSTPolicy { return s.dst }

// String is the expression with its zone, and its DST policy when not the
// default: "CRON_TZ=America/New_York 30 1 * * *; DST repeated=both".
func (s *CronSchedule) String() string {
	return CronText(s.expr, s.loc.String(), s.dst)
}

// CronText is the String of a cron schedule of expr in zone (UTC when empty)
// with the DST policy p, without parsing it: what DescribeSchedule reads.
func CronText(expr, zone string, p DSTPolicy) string {
	expr = strings.TrimSpace(expr)
	if !strings.HasPrefix(expr, "TZ=") && !strings.HasPrefix(expr, "CRON_TZ=") {
		if zone == "" {
			zone = "UTC"
		}
		expr = "CRON_TZ=" + zone + " " + expr
	}
	if d := p.String(); d != "" {
		expr += dstText + d
	}
	return expr
}
