package scheduler_test

import (
	"slices"
	"sync"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// stepClock is a scheduler.Clock that stands still until the example moves it with
// Set, so that the examples' output never depends on how fast the machine is. Tests
// can do the same, or run under testing/synctest; production uses the default,
// scheduler.SystemClock.
type stepClock struct {
	mu     sync.Mutex
	added  *sync.Cond // broadcast when a timer is started
	now    time.Time
	timers []*stepTimer
}

func newStepClock(t time.Time) *stepClock {
	c := &stepClock{now: t}
	c.added = sync.NewCond(&c.mu)
	return c
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock is set to now+d or later; at
// once when d <= 0.
func (c *stepClock) NewTimer(d time.Duration) scheduler.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &stepTimer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
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
func (c *stepClock) WaitTimers(t time.Time, n int) {
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
func (c *stepClock) AdvanceTo(t time.Time, n int) {
	c.WaitTimers(t, n)
	c.Set(t)
}

// Set moves the clock to now (forwards only) and fires the timers that are due.
func (c *stepClock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.now) {
		panic("stepClock: time goes forwards only")
	}
	c.now = now
	c.timers = slices.DeleteFunc(c.timers, func(t *stepTimer) bool {
		if t.at.After(now) {
			return false
		}
		t.ch <- now
		return true
	})
}

type stepTimer struct {
	clock *stepClock
	at    time.Time
	ch    chan time.Time
}

func (t *stepTimer) C() <-chan time.Time { return t.ch }

// Stop reports whether it stopped the timer before it fired.
func (t *stepTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.timers)
	c.timers = slices.DeleteFunc(c.timers, func(x *stepTimer) bool { return x == t })
	return len(c.timers) < n
}

// at is 2030-01-01 (a Tuesday) at hh:mm:ss UTC: the examples' fixed times.
func at(hh, mm, ss int) time.Time { return time.Date(2030, 1, 1, hh, mm, ss, 0, time.UTC) }

// finished returns an OnEvent hook that passes every finished run on to the
// channel it returns, so an example can wait for a run to be over (result stored,
// lease settled) before it moves the clock again.
func finished() (func(scheduler.Event), <-chan scheduler.Event) {
	ch := make(chan scheduler.Event, 64)
	return func(e scheduler.Event) {
		if e.Kind == scheduler.EventFinished {
			ch <- e
		}
	}, ch
}
