// Package stepclock is a clock for examples and tests that stands still until it is
// moved, so that their output never depends on how fast the machine is. Give the
// same clock to the scheduler and to the memory backend, and move it to each slot
// once the schedulers wait for it:
//
//	c := stepclock.New(start)
//	s, err := scheduler.New(scheduler.Config{Backend: memory.NewWithClock(c), Clock: c})
//	// ... register jobs, Start
//	c.AdvanceTo(slot, 1) // once one scheduler's loop waits for slot, the clock is set to it
//
// Tests can also run under testing/synctest with the system clock. Production uses
// the default, scheduler.SystemClock.
package stepclock

import (
	"slices"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Clock is a backend.Clock whose time moves only by Set.
type Clock struct {
	mu     sync.Mutex
	added  *sync.Cond // broadcast when a timer is started
	now    time.Time
	timers []*timer
}

// New returns a Clock standing at t.
func New(t time.Time) *Clock {
	c := &Clock{now: t}
	c.added = sync.NewCond(&c.mu)
	return c
}

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock is set to now+d or later; at
// once when d <= 0.
func (c *Clock) NewTimer(d time.Duration) backend.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.added.Broadcast()
	return t
}

// WaitTimers waits until n timers are due exactly at t: the loops of n schedulers
// waiting for the slot t. A loop reads the time and then starts a timer for what
// is left until its next slot; moving the clock between the two would make it wait
// for a later time, so an example moves the clock to a slot only once every loop
// is waiting for it.
func (c *Clock) WaitTimers(t time.Time, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		waiting := 0
		for _, x := range c.timers {
			if x.at.Equal(t) {
				waiting++
			}
		}
		if waiting >= n {
			return
		}
		c.added.Wait()
	}
}

// AdvanceTo waits until n loops wait for the slot t, then sets the clock to t.
func (c *Clock) AdvanceTo(t time.Time, n int) {
	c.WaitTimers(t, n)
	c.Set(t)
}

// Set moves the clock to now (forwards only) and fires the timers that are due.
func (c *Clock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.now) {
		panic("stepclock: time goes forwards only")
	}
	c.now = now
	c.timers = slices.DeleteFunc(c.timers, func(t *timer) bool {
		if t.at.After(now) {
			return false
		}
		t.ch <- now
		return true
	})
}

type timer struct {
	clock *Clock
	at    time.Time
	ch    chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

// Stop reports whether it stopped the timer before it fired.
func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.timers)
	c.timers = slices.DeleteFunc(c.timers, func(x *timer) bool { return x == t })
	return len(c.timers) < n
}
