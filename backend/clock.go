package backend

import "time"

// Clock is the scheduler's source of time. Tests inject their own; production uses
// the system clock. Slot identities never come from it alone: a slot is computed from
// the schedule, the clock only says when to look.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the scheduler uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }

// OffsetClock is the system clock shifted by Offset: a way to run an instance whose
// clock is skewed from the others, in tests and drills.
type OffsetClock struct{ Offset time.Duration }

// Now returns the shifted time.
func (c OffsetClock) Now() time.Time { return time.Now().Add(c.Offset) }

// NewTimer returns a real timer; durations are not affected by the offset.
func (OffsetClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }
