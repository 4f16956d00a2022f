package scheduler

import (
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"time"
)

// WithSpread moves each slot of the job, and each slot of each of its schedule
// entries, later by an offset within window that a hash of its run name fixes:
// the job's name, or the entry's run name (backend.EntryRunName). Every replica
// and every restart computes the same offset, so 10,000 entries all set for
// 09:00 run spread evenly over 09:00 … 09:00 + window instead of in one second.
//
// The moved time is the slot: claims, history, lateness, catch-up, backfill
// ranges, start and end bounds (an entry's too, and the time it was stored or
// changed) and Jobs' next slot use it. Run.Nominal is the slot before the move.
// window must be at least a millisecond, at most the shortest gap between the
// schedule's slots (an entry's, at AddEntry), and at most MaxDuration. Changing
// the window (or the job's name) moves the slots: roll it out as a change of
// schedule.
func WithSpread(window time.Duration) JobOption {
	return func(c *jobConfig) error {
		if window < time.Millisecond {
			return optErr("spread window %v must be at least 1ms", window)
		}
		c.spreadWindow = window
		return nil
	}
}

// SpreadOffset is the offset WithSpread(window) gives the slots of the run name:
// in [0, window), whole milliseconds; 0 for a window under a millisecond.
func SpreadOffset(name string, window time.Duration) time.Duration {
	ms := window.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return time.Duration(h.Sum64()%uint64(ms)) * time.Millisecond
}

// SpreadSchedule is a schedule whose slots are another's moved later by
// Offset (WithSpread).
type SpreadSchedule struct {
	Schedule
	Offset, Window time.Duration
}

// Next returns the first moved slot strictly after t; zero when there is none
// within the range of slots.
func (s SpreadSchedule) Next(t time.Time) time.Time {
	n := s.Schedule.Next(t.Add(-s.Offset))
	if n.IsZero() || n.After(lastMillis.Add(-s.Offset)) {
		return time.Time{}
	}
	return n.Add(s.Offset)
}

func (s SpreadSchedule) String() string {
	return fmt.Sprintf("%s%s%v (+%v)", s.Schedule, spreadText, s.Window, s.Offset)
}

// spreadText joins a schedule and its spread in a SpreadSchedule's text.
const spreadText = ", spread over "

// spread returns sched moved for name by the config's spread window, checked
// against the schedule's shortest gap; sched as it is without one.
func (c jobConfig) spread(name string, sched Schedule, interval time.Duration) (Schedule, error) {
	if c.spreadWindow == 0 {
		return sched, nil
	}
	if _, none := sched.(noSchedule); none {
		return sched, nil
	}
	if gap := spreadGap(sched, interval); !isOnce(sched) && c.spreadWindow > gap {
		return nil, optErr("spread window %v is above the shortest gap %v between the schedule's slots", c.spreadWindow, gap)
	}
	s := SpreadSchedule{Schedule: sched, Offset: SpreadOffset(name, c.spreadWindow), Window: c.spreadWindow}
	if o, ok := sched.(OnceSchedule); ok && s.Next(o.At.Add(-time.Millisecond)).IsZero() {
		return nil, optErr("spread offset %v moves the slot %s out of the range of slots", s.Offset, o.At.Format(time.RFC3339))
	}
	return s, nil
}

// spreadGapSlots is how many slots of a schedule spreadGap looks at.
const spreadGapSlots = 1000

// spreadGapFrom is where spreadGap starts: a fixed instant, so that the check
// of a window gives the same answer whenever it is made.
var spreadGapFrom = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// spreadGap is the interval of an Every job, or the shortest gap between the
// first spreadGapSlots slots of the schedule from spreadGapFrom (a daily cron's
// cover years, its daylight saving changes with them). Gaps are kept by the
// schedule's text: the entries of a job mostly share a few.
func spreadGap(sched Schedule, interval time.Duration) time.Duration {
	if interval > 0 {
		return interval
	}
	key := sched.String()
	spreadGaps.mu.Lock()
	gap, ok := spreadGaps.m[key]
	spreadGaps.mu.Unlock()
	if ok {
		return gap
	}
	gap = firstGap(sched)
	spreadGaps.mu.Lock()
	if len(spreadGaps.m) >= 10_000 {
		clear(spreadGaps.m)
	}
	spreadGaps.m[key] = gap
	spreadGaps.mu.Unlock()
	return gap
}

// spreadGaps are the gaps spreadGap found, by schedule text.
var spreadGaps = struct {
	mu sync.Mutex
	m  map[string]time.Duration
}{m: map[string]time.Duration{}}

// firstGap is the shortest gap between sched's first spreadGapSlots slots from
// spreadGapFrom.
func firstGap(sched Schedule) time.Duration {
	gap := time.Duration(math.MaxInt64)
	prev := sched.Next(spreadGapFrom)
	for range spreadGapSlots {
		next := sched.Next(prev)
		if next.IsZero() || prev.IsZero() {
			break
		}
		gap = min(gap, next.Sub(prev))
		prev = next
	}
	return gap
}

// spreadOf is the spread of sched, under its bounds; false without one.
func spreadOf(sched Schedule) (SpreadSchedule, bool) {
	switch s := sched.(type) {
	case SpreadSchedule:
		return s, true
	case BoundedSchedule:
		return spreadOf(s.Schedule)
	}
	return SpreadSchedule{}, false
}

// nominal is slot, one of the job's, before the job's spread moved it.
func (j *job) nominal(slot time.Time) time.Time {
	if s, ok := spreadOf(j.sched); ok {
		return slot.Add(-s.Offset)
	}
	return slot
}
