package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

var _ backend.CalendarStore = (*Store)(nil)

// Calendar keys: cal.<name>, the name one base64url token, in the bucket of the
// leases. Their values never expire; a deleted calendar's marker is kept
// markerTTL (a watch that missed it reads the whole set again).
const calendarPrefix = "cal."

// calendarHeaderRoom is what a calendar's message needs beside its value: its
// subject and compare-and-set header, under the server's max payload.
const calendarHeaderRoom = 1024

func calendarKey(name string) string { return calendarPrefix + nameToken(name) }

// parseCalendarKey is the reverse of calendarKey.
func parseCalendarKey(key string) (string, bool) { return parseNameKey(calendarPrefix, key) }

// calendarRecord is the value of a calendar key.
type calendarRecord struct {
	V int `json:"v"`
	backend.Calendar
}

// decodeCalendar reads the calendar stored at key; ok is false for a marker or
// a value that is not a calendar this version reads.
func decodeCalendar(key string, e entry) (backend.Calendar, bool) {
	name, ok := parseCalendarKey(key)
	if !ok || !e.put {
		return backend.Calendar{}, false
	}
	var rec calendarRecord
	if err := json.Unmarshal(e.value, &rec); err != nil || rec.V < 1 || rec.Name != name {
		return backend.Calendar{}, false
	}
	rec.Calendar.Revision = e.rev
	return rec.Calendar, true
}

func calendarNotFound(name string) error {
	return fmt.Errorf("%w: %q", backend.ErrCalendarNotFound, name)
}

func calendarConflict(name string, have, want uint64) error {
	return fmt.Errorf("%w: %q is at revision %d, not %d", backend.ErrCalendarConflict, name, have, want)
}

// PutCalendar stores c by compare-and-set on its key's revision: from nothing
// stored (or a deleted calendar's marker) when rev is 0, else from rev. The KV
// revision is the calendar's Revision. A new calendar is refused once the
// bucket holds MaxCalendars; concurrent creates may pass that by a few. A
// calendar larger than the server's max payload allows is refused
// (ErrInvalidCalendar); on NATS's default of 1 MiB every calendar Check accepts
// fits (backend.MaxCalendarJSON).
func (s *Store) PutCalendar(ctx context.Context, c backend.Calendar, rev uint64) (uint64, error) {
	if err := c.Check(); err != nil {
		return 0, err
	}
	c.Revision = 0
	rec := calendarRecord{V: recordVersion, Calendar: c}
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("%w: calendar %q: %w", backend.ErrInvalidCalendar, c.Name, err)
	}
	if nc := s.js.Conn(); nc != nil && nc.MaxPayload() > 0 && int64(len(data))+calendarHeaderRoom > nc.MaxPayload() {
		return 0, fmt.Errorf("%w: calendar %q is %d bytes as JSON, more than the server's max payload of %d bytes allows",
			backend.ErrInvalidCalendar, c.Name, len(data), nc.MaxPayload())
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return 0, err
	}
	key := calendarKey(c.Name)
	if rev != 0 {
		return s.updateCalendar(ctx, b, key, c.Name, rec, rev)
	}
	if err := s.checkCalendarCount(ctx, b); err != nil {
		return 0, err
	}
	expect := uint64(0)
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return 0, err
		}
		next, err := s.put(ctx, b, write{key: key, value: rec, expect: expect})
		if !errors.Is(err, errConflict) {
			return next, err
		}
		cur, err := s.read(ctx, b, key)
		if err != nil {
			return 0, err
		}
		if cur.put {
			return 0, fmt.Errorf("%w: %q", backend.ErrCalendarExists, c.Name)
		}
		expect = cur.rev // a deleted calendar's marker (or nothing, once it expired)
	}
	return 0, fmt.Errorf("%w: create calendar %q", ErrContention, c.Name)
}

// updateCalendar replaces the calendar at key by compare-and-set on rev.
func (s *Store) updateCalendar(ctx context.Context, b *bucket, key, name string, rec calendarRecord, rev uint64) (uint64, error) {
	// Read first: a marker's revision must not bring a deleted calendar back.
	cur, err := s.read(ctx, b, key)
	switch {
	case err != nil:
		return 0, err
	case !cur.put:
		return 0, calendarNotFound(name)
	case cur.rev != rev:
		return 0, calendarConflict(name, cur.rev, rev)
	}
	next, err := s.put(ctx, b, write{key: key, value: rec, expect: rev})
	if !errors.Is(err, errConflict) {
		return next, err
	}
	if cur, err = s.read(ctx, b, key); err != nil {
		return 0, err
	}
	if !cur.put {
		return 0, calendarNotFound(name)
	}
	return 0, calendarConflict(name, cur.rev, rev)
}

// checkCalendarCount refuses a new calendar when MaxCalendars are stored. It
// counts the calendar keys, and reads them only when markers may make up the
// count.
func (s *Store) checkCalendarCount(ctx context.Context, b *bucket) error {
	keys, err := s.calendarKeys(ctx, b)
	if err != nil {
		return err
	}
	if len(keys) < backend.MaxCalendars {
		return nil
	}
	all, err := s.readCalendars(ctx, b, keys)
	if err != nil {
		return err
	}
	if len(all) >= backend.MaxCalendars {
		return fmt.Errorf("%w: %d calendars stored, at most %d", backend.ErrInvalidCalendar, len(all), backend.MaxCalendars)
	}
	return nil
}

// DeleteCalendar purges the calendar's key by compare-and-set on revision rev
// (on the revision read when rev is 0), leaving a marker that watchers see.
func (s *Store) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	if err := backend.ValidateCalendarName(name); err != nil {
		return err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	key := calendarKey(name)
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		cur, err := s.read(ctx, b, key)
		switch {
		case err != nil:
			return err
		case !cur.put:
			return calendarNotFound(name)
		case rev != 0 && cur.rev != rev:
			return calendarConflict(name, cur.rev, rev)
		}
		err = s.attempt(ctx, func(ctx context.Context) error {
			_, err := natsutil.Publish(ctx, s.js.Conn(), purgeMsg(b, key, cur.rev, markerTTL, nil))
			return err
		})
		switch {
		case err == nil:
			return nil
		case !isConflict(err):
			return fmt.Errorf("kvlease: delete calendar %q: %w", name, err)
		}
		// Changed meanwhile: read again (a given revision is then a conflict).
	}
	return fmt.Errorf("%w: delete calendar %q", ErrContention, name)
}

// GetCalendar reads one calendar from the stream leader.
func (s *Store) GetCalendar(ctx context.Context, name string) (backend.Calendar, error) {
	if err := backend.ValidateCalendarName(name); err != nil {
		return backend.Calendar{}, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return backend.Calendar{}, err
	}
	key := calendarKey(name)
	cur, err := s.read(ctx, b, key)
	if err != nil {
		return backend.Calendar{}, err
	}
	c, ok := decodeCalendar(key, cur)
	if !ok {
		return backend.Calendar{}, calendarNotFound(name)
	}
	return c, nil
}

// Calendars lists the calendar keys with one stream information request and
// reads their values (readValues).
func (s *Store) Calendars(ctx context.Context) ([]backend.Calendar, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := s.calendarKeys(ctx, b)
	if err != nil {
		return nil, err
	}
	return s.readCalendars(ctx, b, keys)
}

// calendarKeys lists the calendar keys, markers included.
func (s *Store) calendarKeys(ctx context.Context, b *bucket) ([]string, error) {
	info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(calendarPrefix+"*")))
	if err != nil {
		return nil, fmt.Errorf("kvlease: list calendars: %w", err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, b.prefix))
	}
	return keys, nil
}

// readCalendars reads the calendars of keys, by name, leaving out markers.
func (s *Store) readCalendars(ctx context.Context, b *bucket, keys []string) ([]backend.Calendar, error) {
	found, err := s.readValues(ctx, b, keys)
	if err != nil {
		return nil, fmt.Errorf("kvlease: list calendars: %w", err)
	}
	out := make([]backend.Calendar, 0, len(keys))
	for i, k := range keys {
		if c, ok := decodeCalendar(k, found[i]); ok {
			out = append(out, c)
		}
	}
	sortCalendars(out)
	return out, nil
}

func sortCalendars(all []backend.Calendar) {
	slices.SortFunc(all, func(x, y backend.Calendar) int { return strings.Compare(x.Name, y.Name) })
}

// WatchCalendars watches the calendar keys (a KV watch of cal.*) and calls fn
// with every calendar once the watch has read them, and again after every
// change. When the connection reconnects (a server restart, a network cut), it
// watches again and calls fn once the new watch read them, if they changed
// meanwhile. It returns nil when ctx ends, ErrClosed when the store is closed,
// and an error when a watch cannot start.
func (s *Store) WatchCalendars(ctx context.Context, fn func([]backend.Calendar)) error {
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	var reconnected chan nats.Status
	if nc := s.js.Conn(); nc != nil {
		reconnected = nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(reconnected)
	}
	var last []backend.Calendar
	delivered := false
	report := func(all []backend.Calendar) {
		if delivered && sameRevisions(all, last) {
			return
		}
		delivered, last = true, all
		fn(all)
	}
	for {
		err := s.watchCalendars(ctx, b, reconnected, report)
		if !errors.Is(err, errResync) {
			return err
		}
	}
}

// watchCalendars is one watch of WatchCalendars, until ctx ends, the store
// closes, or the connection reconnects (errResync).
func (s *Store) watchCalendars(ctx context.Context, b *bucket, reconnected <-chan nats.Status, report func([]backend.Calendar)) error {
	w, err := b.kv.WatchFiltered(ctx, []string{calendarPrefix + "*"})
	if err != nil {
		return fmt.Errorf("kvlease: watch calendars: %w", err)
	}
	defer stopWatcher(w)
	byKey := map[string]backend.Calendar{}
	ready := false
	all := func() []backend.Calendar {
		out := make([]backend.Calendar, 0, len(byKey))
		for _, c := range byKey {
			out = append(out, c)
		}
		sortCalendars(out)
		return out
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.done.Done():
			return ErrClosed
		case <-reconnected:
			return errResync
		case kv, ok := <-w.Updates():
			switch {
			case !ok && ctx.Err() != nil:
				return nil
			case !ok && (s.js.Conn() == nil || s.js.Conn().IsClosed()):
				return errors.New("kvlease: the calendar watch ended: the connection is closed")
			case !ok:
				return errResync
			case kv == nil: // the stored calendars have been read
				ready = true
				report(all())
				continue
			}
			if c, ok := decodeCalendar(kv.Key(), entryFromKV(kv)); ok {
				byKey[kv.Key()] = c
			} else {
				delete(byKey, kv.Key())
			}
			if ready {
				report(all())
			}
		}
	}
}

// sameRevisions reports whether x and y hold the same calendars at the same
// revisions.
func sameRevisions(x, y []backend.Calendar) bool {
	return slices.EqualFunc(x, y, func(a, b backend.Calendar) bool { return a.Name == b.Name && a.Revision == b.Revision })
}
