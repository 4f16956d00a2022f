package scheduler_test

import (
	"context"
	"strings"
	"testing"
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
