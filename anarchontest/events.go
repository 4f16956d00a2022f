package anarchontest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/anarchon/anarchon/scheduler"
)

// eventLog is the fleet's record of its replicas' events.
type eventLog struct {
	mu      sync.Mutex
	all     []scheduler.Event
	changed chan struct{} // closed and replaced on every event
}

func (l *eventLog) init() { l.changed = make(chan struct{}) }

func (l *eventLog) add(e scheduler.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

// matching returns the events match accepts (all when match is nil), and a
// channel closed at the next event.
func (l *eventLog) matching(match func(scheduler.Event) bool) ([]scheduler.Event, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []scheduler.Event
	for _, e := range l.all {
		if match == nil || match(e) {
			out = append(out, e)
		}
	}
	return out, l.changed
}

// Events returns the events of every replica that match accepts (all when
// match is nil), in the order they were reported. A killed process reports
// none.
func (f *Fleet) Events(match func(scheduler.Event) bool) []scheduler.Event {
	out, _ := f.events.matching(match)
	return out
}

// WaitEvents waits until n events match, then returns the first n. It fails
// once ctx ends. Inside synctest.Test, Advance is simpler; WaitEvents serves a
// fleet on a clock of its own.
func (f *Fleet) WaitEvents(ctx context.Context, n int, match func(scheduler.Event) bool) ([]scheduler.Event, error) {
	for {
		got, changed := f.events.matching(match)
		if len(got) >= n {
			return got[:n], nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return got, fmt.Errorf("anarchontest: %d of %d events: %w", len(got), n, context.Cause(ctx))
		}
	}
}

// Match returns a match for Events and WaitEvents: the events of one of kinds,
// of job too unless job is empty.
func Match(job string, kinds ...scheduler.EventKind) func(scheduler.Event) bool {
	return func(e scheduler.Event) bool {
		return (job == "" || e.Job == job) && slices.Contains(kinds, e.Kind)
	}
}
