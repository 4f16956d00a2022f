package scheduler

import (
	"fmt"
	"hash/fnv"
	"time"
)

// WithSpread moves each slot of the job, and each slot of each of its schedule
// entries, later by an offset within window that a hash of its run name fixes:
// the job's name, or the entry's run name (backend.EntryRunName). Every replica
// and every restart computes the same offset, so 10,000 entries all set for
// 09:00 run spread evenly over 09:00 … 09:00 + window instead of in one second.
//
// The moved time is the slot: claims, history, lateness, catch-up, backfill
// ranges and Jobs' next slot use it. Run.Nominal is the slot before the move.
// Start and end bounds apply to the nominal slots. window must be positive, at
// most the shortest gap between the schedule's slots (an entry's, at AddEntry),
// and at most MaxDuration. Changing the window (or the job's name) moves the
// slots: roll it out as a change of schedule.
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

// Next returns the first moved slot strictly after t.
func (s SpreadSchedule) Next(t time.Time) time.Time {
	n := s.Schedule.Next(t.Add(-s.Offset))
	if n.IsZero() {
		return n
	}
	return n.Add(s.Offset)
}

func (s SpreadSchedule) String() string {
	return fmt.Sprintf("%s, spread over %v (+%v)", s.Schedule, s.Window, s.Offset)
}

// spread returns sched moved for name by the config's spread window, checked
// against the schedule's shortest gap; sched as it is without one.
func (c jobConfig) spread(name string, sched Schedule, interval time.Duration) (Schedule, error) {
	if c.spreadWindow == 0 {
		return sched, nil
	}
	if _, none := sched.(noSchedule); none {
		return sched, nil
	}
	if gap := shortestGap(sched, interval); !isOnce(sched) && c.spreadWindow > gap {
		return nil, optErr("spread window %v is above the shortest gap %v between the schedule's slots", c.spreadWindow, gap)
	}
	return SpreadSchedule{Schedule: sched, Offset: SpreadOffset(name, c.spreadWindow), Window: c.spreadWindow}, nil
}

// nominal is slot, one of the job's, before the job's spread moved it.
func (j *job) nominal(slot time.Time) time.Time {
	if s, ok := j.sched.(SpreadSchedule); ok {
		return slot.Add(-s.Offset)
	}
	return slot
}
