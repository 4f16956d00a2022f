package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// Who changed an entry is stored with it: the name given (ChangedBy), the user
// the transport authenticated (ChangedByUser) and the instance that wrote it; a
// change that gives none is the instance's.
func TestWhoChangedAnEntryIsStoredWithIt(t *testing.T) {
	b := memory.New()
	// An instance name longer than an entry's By: its own changes store it cut.
	long := strings.Repeat("replica-", 40)
	s := newScheduler(t, b, long)
	require.NoError(t, s.Declare("tenants", func(context.Context, scheduler.Run) error { return nil }))
	require.NoError(t, s.Start(t.Context()))
	defer func() { require.NoError(t, s.Stop(context.Background())) }()

	e, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Hour},
		scheduler.ChangedBy("ana"), scheduler.ChangedByUser("ops-1 (account OPS)"))
	require.NoError(t, err)
	got, err := s.GetEntry(t.Context(), "tenants", "acme")
	require.NoError(t, err)
	assert.Equal(t, "ana", got.By)
	assert.Equal(t, "ops-1 (account OPS)", got.User)
	assert.Equal(t, long, got.Instance)

	_, err = s.UpdateEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: 2 * time.Hour}, e.Revision)
	require.NoError(t, err, "an instance whose name is longer than By allows changes entries")
	got, err = s.GetEntry(t.Context(), "tenants", "acme")
	require.NoError(t, err)
	assert.Equal(t, backend.TruncateText(long, backend.MaxEntryText), got.By, "no ChangedBy: the instance's name")
	assert.Empty(t, got.User, "the user of the change before is not kept")

	for _, opt := range []scheduler.EntryChangeOption{
		scheduler.ChangedBy(strings.Repeat("x", backend.MaxEntryText+1)),
		scheduler.ChangedBy("\xff"),
		scheduler.ChangedByUser(strings.Repeat("u", backend.MaxEntryText+1)),
	} {
		_, err = s.AddEntry(t.Context(), "tenants", "bad", scheduler.EntrySpec{Every: time.Hour}, opt)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
		_, err = s.UpdateEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Hour}, got.Revision, opt)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
		assert.ErrorIs(t, s.RemoveEntry(t.Context(), "tenants", "acme", 0, opt), scheduler.ErrInvalidOption)
	}
	_, err = s.GetEntry(t.Context(), "tenants", "bad")
	assert.ErrorIs(t, err, scheduler.ErrEntryNotFound, "nothing was stored")
	require.NoError(t, s.RemoveEntry(t.Context(), "tenants", "acme", 0, scheduler.ChangedBy("bo")))
}

// A job of entries sums them up: counts by state, the earliest next slot, the
// newest runs, and the failing entries, checked in the shared history: an entry
// that failed on one instance and ran well since on another is not failing.
func TestEntriesSummary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var broken sync.Map
		broken.Store("a", true)
		handler := func(ctx context.Context, r scheduler.Run) error {
			if v, _ := broken.Load(r.Entry); v == true {
				return errors.New("tenant a is broken")
			}
			return nil
		}
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("tenants", handler))
		})
		s0, s1 := fleet[0], fleet[1]
		add := func(id string, spec scheduler.EntrySpec) {
			_, err := s0.AddEntry(t.Context(), "tenants", id, spec)
			require.NoError(t, err)
		}
		time.Sleep(time.Second)
		add("a", scheduler.EntrySpec{Every: time.Minute})
		add("b", scheduler.EntrySpec{Every: 2 * time.Minute})
		add("c", scheduler.EntrySpec{Every: time.Minute, Paused: true})
		add("d", scheduler.EntrySpec{At: time.Now().Add(30 * time.Second)})
		time.Sleep(2*time.Minute + 10*time.Second)
		synctest.Wait()

		states := s1.EntryStates()["tenants"]
		assert.Equal(t, scheduler.EntryStateCounts{Active: 2, Paused: 1, Ended: 1}, states)
		// Each instance knows the runs it ran; together they know them all.
		var newest *scheduler.RunRecord
		failing := 0
		for _, s := range fleet {
			sum, err := s.EntriesSummary(t.Context(), "tenants")
			require.NoError(t, err)
			assert.Equal(t, states, sum.EntryStateCounts)
			assert.True(t, time.Now().Truncate(time.Minute).Add(time.Minute).Equal(sum.Next), "a's next slot: %v", sum.Next)
			assert.False(t, sum.Unchecked)
			if r := sum.Last.Run; r != nil && (newest == nil || r.Slot.After(newest.Slot)) {
				newest = r
			}
			if sum.Last.Failure != nil {
				assert.Equal(t, "a", sum.Last.Failure.Entry)
				assert.Equal(t, "tenants", sum.Last.Failure.Job)
				assert.Equal(t, []string{"a"}, sum.Failing, "checked in the history: a failed last")
				failing++
			}
		}
		require.NotNil(t, newest)
		assert.True(t, time.Now().Truncate(time.Minute).Equal(newest.Slot), "the newest slot: %v", newest.Slot)
		assert.Positive(t, failing)

		broken.Delete("a")
		time.Sleep(time.Minute)
		synctest.Wait()
		for _, s := range fleet {
			sum, err := s.EntriesSummary(t.Context(), "tenants")
			require.NoError(t, err)
			assert.Empty(t, sum.Failing, "a ran well since, on whichever instance")
		}
		_, err := s0.EntriesSummary(t.Context(), "nojob")
		assert.ErrorIs(t, err, scheduler.ErrJobNotFound)
	})
}
