package jetstream

import (
	"context"
	"fmt"

	"github.com/anarchon/anarchon/backend"
)

var _ backend.CalendarStore = (*LeasedBackend)(nil)

// calendars is the run store's calendar capability, or an error saying there
// is none.
func (b *LeasedBackend) calendars() (backend.CalendarStore, error) {
	cs, ok := b.runs.(backend.CalendarStore)
	if !ok {
		return nil, fmt.Errorf("%w: the run store %T stores no calendars", backend.ErrCalendarsNotSupported, b.runs)
	}
	return cs, nil
}

// PutCalendar stores a calendar in the run store (a kvlease store keeps it in
// its bucket).
func (b *LeasedBackend) PutCalendar(ctx context.Context, c backend.Calendar, rev uint64) (uint64, error) {
	cs, err := b.calendars()
	if err != nil {
		return 0, err
	}
	return cs.PutCalendar(ctx, c, rev)
}

// DeleteCalendar removes a calendar from the run store.
func (b *LeasedBackend) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	cs, err := b.calendars()
	if err != nil {
		return err
	}
	return cs.DeleteCalendar(ctx, name, rev)
}

// GetCalendar reads a calendar from the run store.
func (b *LeasedBackend) GetCalendar(ctx context.Context, name string) (backend.Calendar, error) {
	cs, err := b.calendars()
	if err != nil {
		return backend.Calendar{}, err
	}
	return cs.GetCalendar(ctx, name)
}

// Calendars lists the run store's calendars.
func (b *LeasedBackend) Calendars(ctx context.Context) ([]backend.Calendar, error) {
	cs, err := b.calendars()
	if err != nil {
		return nil, err
	}
	return cs.Calendars(ctx)
}

// WatchCalendars watches the run store's calendars.
func (b *LeasedBackend) WatchCalendars(ctx context.Context, fn func([]backend.Calendar)) error {
	cs, err := b.calendars()
	if err != nil {
		return err
	}
	return cs.WatchCalendars(ctx, fn)
}
