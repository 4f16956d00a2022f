package scheduler_test

import (
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

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
