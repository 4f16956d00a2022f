package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.CalendarStore = (*Backend)(nil)

// memCalendars holds the memory backend's calendars and wakes its watchers.
type memCalendars struct {
	byName map[string]backend.Calendar
	rev    uint64
	notify chan struct{} // closed and replaced on every change
}

func (b *Backend) calendarsLocked() *memCalendars {
	if b.cals == nil {
		b.cals = &memCalendars{byName: map[string]backend.Calendar{}, notify: make(chan struct{})}
	}
	return b.cals
}

func (cs *memCalendars) changed() {
	close(cs.notify)
	cs.notify = make(chan struct{})
}

// PutCalendar stores c by revision compare-and-set (0: create).
func (b *Backend) PutCalendar(ctx context.Context, c backend.Calendar, rev uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := c.Check(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cs := b.calendarsLocked()
	cur, ok := cs.byName[c.Name]
	switch {
	case rev == 0 && ok:
		return 0, fmt.Errorf("%w: %q", backend.ErrCalendarExists, c.Name)
	case rev == 0 && len(cs.byName) >= backend.MaxCalendars:
		return 0, fmt.Errorf("%w: %d calendars stored, at most %d", backend.ErrInvalidCalendar, len(cs.byName), backend.MaxCalendars)
	case rev != 0 && !ok:
		return 0, fmt.Errorf("%w: %q", backend.ErrCalendarNotFound, c.Name)
	case rev != 0 && cur.Revision != rev:
		return 0, fmt.Errorf("%w: %q is at revision %d, not %d", backend.ErrCalendarConflict, c.Name, cur.Revision, rev)
	}
	cs.rev++
	c = cloneCalendar(c)
	c.Revision = cs.rev
	cs.byName[c.Name] = c
	cs.changed()
	return c.Revision, nil
}

// DeleteCalendar removes name by revision compare-and-set (0: any).
func (b *Backend) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cs := b.calendarsLocked()
	cur, ok := cs.byName[name]
	switch {
	case !ok:
		return fmt.Errorf("%w: %q", backend.ErrCalendarNotFound, name)
	case rev != 0 && cur.Revision != rev:
		return fmt.Errorf("%w: %q is at revision %d, not %d", backend.ErrCalendarConflict, name, cur.Revision, rev)
	}
	delete(cs.byName, name)
	cs.rev++
	cs.changed()
	return nil
}

// GetCalendar returns the calendar name.
func (b *Backend) GetCalendar(ctx context.Context, name string) (backend.Calendar, error) {
	if err := ctx.Err(); err != nil {
		return backend.Calendar{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.calendarsLocked().byName[name]
	if !ok {
		return backend.Calendar{}, fmt.Errorf("%w: %q", backend.ErrCalendarNotFound, name)
	}
	return cloneCalendar(c), nil
}

// Calendars returns every calendar, by name.
func (b *Backend) Calendars(ctx context.Context) ([]backend.Calendar, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	all, _ := b.snapshotCalendarsLocked()
	return all, nil
}

func (b *Backend) snapshotCalendarsLocked() ([]backend.Calendar, <-chan struct{}) {
	cs := b.calendarsLocked()
	out := make([]backend.Calendar, 0, len(cs.byName))
	for _, c := range cs.byName {
		out = append(out, cloneCalendar(c))
	}
	slices.SortFunc(out, func(x, y backend.Calendar) int { return strings.Compare(x.Name, y.Name) })
	return out, cs.notify
}

// WatchCalendars calls fn with the calendars now and after every change until
// ctx ends.
func (b *Backend) WatchCalendars(ctx context.Context, fn func([]backend.Calendar)) error {
	return watchSet(ctx, b, b.snapshotCalendarsLocked, fn)
}

// cloneCalendar copies c's slices, so a caller's changes never reach the store.
func cloneCalendar(c backend.Calendar) backend.Calendar {
	c.Dates, c.Ranges = slices.Clone(c.Dates), slices.Clone(c.Ranges)
	c.Yearly, c.Weekdays = slices.Clone(c.Yearly), slices.Clone(c.Weekdays)
	return c
}
