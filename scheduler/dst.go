package scheduler

import "time"

// WithDST sets the daylight saving time policy of a Cron job's schedule: which
// occurrences of a wall time repeated when clocks fall back are slots (DSTFirst,
// the default; DSTLast; DSTBoth), and whether a wall time skipped when they spring
// forward is shifted by the jump (DSTShift, the default) or has no slot (DSTSkip).
// Empty values are the defaults. The policy is part of the schedule: its String
// says it, and replicas that declare the job with different policies conflict.
//
// It is refused (ErrInvalidOption) with an unknown value, on a job that is not a
// Cron job (Every, At, Declare: an entry carries its own, EntrySpec.DST), and on a
// Cron job in a zone that never changes its clocks, such as UTC.
func WithDST(p DSTPolicy) JobOption {
	return func(c *jobConfig) error {
		if err := p.Check(); err != nil {
			return err
		}
		c.dst, c.dstSet = p, true
		return nil
	}
}

// dstText joins a cron expression and its DST policy in a CronSchedule's text.
const dstText = "; DST "

// fixedZone reports whether loc never changes its offset (UTC, a fixed zone).
func fixedZone(loc *time.Location) bool {
	start, end := time.Date(2000, 1, 1, 0, 0, 0, 0, loc).ZoneBounds()
	return start.IsZero() && end.IsZero()
}

// zonePeriod is a stretch of time in which a zone keeps one offset, with the
// offsets before and after it (the same when unbounded on that side).
type zonePeriod struct {
	start, end       time.Time // zero: unbounded
	off, prev, after int       // seconds east of UTC
}

func periodAt(t time.Time, loc *time.Location) zonePeriod {
	lt := t.In(loc)
	_, off := lt.Zone()
	p := zonePeriod{off: off, prev: off, after: off}
	p.start, p.end = lt.ZoneBounds()
	if !p.start.IsZero() {
		_, p.prev = p.start.Add(-time.Nanosecond).In(loc).Zone()
	}
	if !p.end.IsZero() {
		_, p.after = p.end.In(loc).Zone()
	}
	return p
}

// maxPeriods bounds the zone periods next looks through: a cron's slots are at
// most 8 years apart (29 February), in which a zone has about 16 (a few 32).
const maxPeriods = 256

// next is the first slot after t under the policy, found period by period of the
// zone's offsets. Within a period with offset off, the instants whose wall time
// at off the expression lists are slots, but:
//   - those in the first d after clocks fell back by d repeat a wall time of the
//     period before: not slots under DSTFirst;
//   - those in the last d before clocks fall back by d have a repeat in the period
//     after: not slots under DSTLast;
//   - after clocks jumped forward by j, the instants in the first j whose wall
//     time at the offset before the jump the expression lists are the skipped
//     times shifted by the jump: slots under DSTShift.
func (s *CronSchedule) next(t time.Time) time.Time {
	p := s.dst.Normal()
	from, at := t, t
	for range maxPeriods {
		z := periodAt(at, s.loc)
		lo, hi := from, z.end
		if d := time.Duration(z.prev-z.off) * time.Second; d > 0 && p.Repeated == DSTFirst {
			lo = later(lo, z.start.Add(d-time.Nanosecond))
		}
		if d := time.Duration(z.off-z.after) * time.Second; d > 0 && p.Repeated == DSTLast {
			hi = z.end.Add(-d)
		}
		n := s.fixedNext(z.off, lo)
		if n.IsZero() {
			return n // none within the parser's search
		}
		if !hi.IsZero() && !n.Before(hi) {
			n = time.Time{}
		}
		if j := time.Duration(z.off-z.prev) * time.Second; j > 0 && p.Missing == DSTShift {
			sh := s.fixedNext(z.prev, later(from, z.start.Add(-time.Nanosecond)))
			if !sh.IsZero() && sh.Before(z.start.Add(j)) && (z.end.IsZero() || sh.Before(z.end)) && (n.IsZero() || sh.Before(n)) {
				n = sh
			}
		}
		if !n.IsZero() || z.end.IsZero() {
			return n
		}
		from, at = later(from, z.end.Add(-time.Nanosecond)), z.end
	}
	return time.Time{}
}

// fixedNext is the first instant after t whose wall time at offset off (seconds
// east of UTC) the expression lists.
func (s *CronSchedule) fixedNext(off int, t time.Time) time.Time {
	spec := *s.spec
	spec.Location = time.FixedZone("", off)
	return (&spec).Next(t)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
