package kvlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/kvlease"
)

func TestConformanceSingleServer(t *testing.T) {
	t.Parallel()
	newStore(t, singleJS(t), kvlease.WithBucket("conformance_r1")) // create the bucket once
	backendtest.RunLeases(t, func(t *testing.T) backend.RunStore {
		return newStore(t, singleJS(t), kvlease.WithBucket("conformance_r1"))
	})
	runEntries(t, singleJS, kvlease.WithBucket("conformance_r1"))
}

func TestConformanceR3(t *testing.T) {
	t.Parallel()
	opts := []kvlease.Option{kvlease.WithBucket("conformance_r3"), kvlease.WithReplicas(3)}
	newStore(t, clusterJS(t), opts...)
	backendtest.RunLeases(t, func(t *testing.T) backend.RunStore {
		return newStore(t, clusterJS(t), opts...)
	})
	runEntries(t, clusterJS, opts...)
}

// runEntries runs the entry section of the suite on stores made with opts, each
// on its own connection: the entries and the runs (Runs) are the store's, the
// claims and history a memory backend's shared by the test's values.
func runEntries(t *testing.T, js func(testing.TB) jetstream.JetStream, opts ...kvlease.Option) {
	claims := memory.New()
	backendtest.RunEntries(t, func(t *testing.T) backend.Backend {
		return entryBackend{claims, newStore(t, js(t), opts...)}
	})
}

// entryBackend is a backend whose entries and run store are a kvlease store's.
type entryBackend struct {
	*memory.Backend
	s *kvlease.Store
}

func (e entryBackend) Init(ctx context.Context) error { return e.s.Init(ctx) }
func (e entryBackend) Runs() backend.RunStore         { return e.s }
func (e entryBackend) CreateEntry(ctx context.Context, x backend.Entry) (uint64, error) {
	return e.s.CreateEntry(ctx, x)
}
func (e entryBackend) UpdateEntry(ctx context.Context, x backend.Entry, rev uint64) (uint64, error) {
	return e.s.UpdateEntry(ctx, x, rev)
}
func (e entryBackend) DeleteEntry(ctx context.Context, job, id string, rev uint64) error {
	return e.s.DeleteEntry(ctx, job, id, rev)
}
func (e entryBackend) GetEntry(ctx context.Context, job, id string) (backend.Entry, error) {
	return e.s.GetEntry(ctx, job, id)
}
func (e entryBackend) ListEntries(ctx context.Context, job, afterJob, afterID string, limit int) ([]backend.Entry, error) {
	return e.s.ListEntries(ctx, job, afterJob, afterID, limit)
}
func (e entryBackend) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	return e.s.WatchEntries(ctx, fn)
}

func TestPausesConformance(t *testing.T) {
	t.Parallel()
	backendtest.RunPauses(t, func(t *testing.T) backend.Backend {
		s := newStore(t, singleJS(t), kvlease.WithBucket("kvlease_pauses"))
		return pauseBackend{memory.New(), s}
	})
}

// pauseBackend is a backend whose pauses are a kvlease store's (each value its own
// store on its own connection, all on one bucket): RunPauses needs a
// backend.Backend, and kvlease is a RunStore.
type pauseBackend struct {
	backend.Backend
	s *kvlease.Store
}

func (p pauseBackend) Init(ctx context.Context) error { return p.s.Init(ctx) }
func (p pauseBackend) SetPause(ctx context.Context, x backend.Pause) error {
	return p.s.SetPause(ctx, x)
}
func (p pauseBackend) ClearPause(ctx context.Context, job string) error {
	return p.s.ClearPause(ctx, job)
}
func (p pauseBackend) Pauses(ctx context.Context) ([]backend.Pause, error) {
	return p.s.Pauses(ctx)
}
func (p pauseBackend) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	return p.s.WatchPauses(ctx, fn)
}

func TestCalendarsConformance(t *testing.T) {
	t.Parallel()
	runCalendars(t, singleJS, kvlease.WithBucket("kvlease_calendars"))
}

func TestCalendarsConformanceR3(t *testing.T) {
	t.Parallel()
	runCalendars(t, clusterJS, kvlease.WithBucket("kvlease_calendars_r3"), kvlease.WithReplicas(3))
}

// runCalendars runs the calendar section of the suite on stores made with
// opts, each on its own connection, all on one bucket.
func runCalendars(t *testing.T, js func(testing.TB) jetstream.JetStream, opts ...kvlease.Option) {
	backendtest.RunCalendars(t, func(t *testing.T) backend.Backend {
		return calendarBackend{memory.New(), newStore(t, js(t), opts...)}
	})
}

// calendarBackend is a backend whose calendars are a kvlease store's:
// RunCalendars needs a backend.Backend, and kvlease is a RunStore.
type calendarBackend struct {
	backend.Backend
	s *kvlease.Store
}

func (c calendarBackend) Init(ctx context.Context) error { return c.s.Init(ctx) }
func (c calendarBackend) PutCalendar(ctx context.Context, x backend.Calendar, rev uint64) (uint64, error) {
	return c.s.PutCalendar(ctx, x, rev)
}
func (c calendarBackend) DeleteCalendar(ctx context.Context, name string, rev uint64) error {
	return c.s.DeleteCalendar(ctx, name, rev)
}
func (c calendarBackend) GetCalendar(ctx context.Context, name string) (backend.Calendar, error) {
	return c.s.GetCalendar(ctx, name)
}
func (c calendarBackend) Calendars(ctx context.Context) ([]backend.Calendar, error) {
	return c.s.Calendars(ctx)
}
func (c calendarBackend) WatchCalendars(ctx context.Context, fn func([]backend.Calendar)) error {
	return c.s.WatchCalendars(ctx, fn)
}

func TestMembersConformance(t *testing.T) {
	t.Parallel()
	runMembers(t, singleJS, kvlease.WithBucket("kvlease_members"))
}

func TestMembersConformanceR3(t *testing.T) {
	t.Parallel()
	runMembers(t, clusterJS, kvlease.WithBucket("kvlease_members_r3"), kvlease.WithReplicas(3))
}

// runMembers runs the membership section of the suite on stores made with
// opts, each on its own connection, all on one bucket.
func runMembers(t *testing.T, js func(testing.TB) jetstream.JetStream, opts ...kvlease.Option) {
	backendtest.RunMembers(t, func(t *testing.T) backend.Backend {
		return memberBackend{memory.New(), newStore(t, js(t), opts...)}
	})
}

// memberBackend is a backend whose members are a kvlease store's: RunMembers
// needs a backend.Backend, and kvlease is a RunStore.
type memberBackend struct {
	backend.Backend
	s *kvlease.Store
}

func (m memberBackend) Init(ctx context.Context) error { return m.s.Init(ctx) }
func (m memberBackend) Beat(ctx context.Context, x backend.Member, ttl time.Duration) error {
	return m.s.Beat(ctx, x, ttl)
}
func (m memberBackend) Leave(ctx context.Context, instance string) error {
	return m.s.Leave(ctx, instance)
}
func (m memberBackend) WatchMembers(ctx context.Context, fn func([]backend.Member)) error {
	return m.s.WatchMembers(ctx, fn)
}
