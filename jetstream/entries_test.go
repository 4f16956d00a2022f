package jetstream

import (
	"fmt"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// TestEntryRunsInJobStream: the runs of a job's entries are recorded in the job's
// stream on their own subjects: each History is its own runs only, bounded by
// the job's history size per entry, and the job's History passes over its
// entries' records without counting them as foreign. Entries' claims are stored
// for the job's window. A plain Backend (no entry store) records them too.
func TestEntryRunsInJobStream(t *testing.T) {
	js, b, l, ctx := retainedJob(t, "entries", backend.Retention{Size: 5})
	a, c := l, l
	a.Job, c.Job = backend.EntryRunName(l.Job, "a"), backend.EntryRunName(l.Job, "c.d ✓")
	ok := func(int) backend.Status { return backend.StatusOK }
	runsOf(t, b, c, "x", 0, 2, ok) // the oldest, then many records after them
	runsOf(t, b, l, "x", 0, 3, ok)
	runsOf(t, b, a, "x", 0, 8, ok)
	runsOf(t, b, l, "x", 3, 4, ok)

	for _, tc := range []struct {
		job   string
		slots []int
	}{
		{l.Job, []int{3, 2, 1, 0}},
		{a.Job, []int{7, 6, 5, 4, 3}}, // the history size, per entry
		{c.Job, []int{1, 0}},
	} {
		hist, err := b.History(ctx, tc.job, 50)
		require.NoError(t, err)
		got := make([]int64, len(hist))
		want := make([]int64, len(tc.slots))
		for i, r := range hist {
			got[i] = r.Slot.UnixMilli()
			assert.Equal(t, backend.StatusOK, r.Status)
			assert.False(t, r.ClaimedAt.IsZero(), "%q: the run's claim is read", tc.job)
		}
		for i, k := range tc.slots {
			want[i] = slot(k).UnixMilli()
		}
		assert.Equal(t, want, got, "History(%q)", tc.job)
	}
	one, err := b.History(ctx, c.Job, 1)
	require.NoError(t, err)
	require.Len(t, one, 1, "an entry's runs far behind the stream's last message")
	assert.True(t, one[0].Slot.Equal(slot(1)))
	assert.Zero(t, b.SkippedRecords(), "entries' records are not foreign to their job")

	last, err := b.LastRuns(ctx, []string{l.Job, a.Job})
	require.NoError(t, err)
	require.NotNil(t, last[a.Job].Run)
	require.NotNil(t, last[l.Job].Run)
	assert.True(t, last[a.Job].Run.Slot.Equal(slot(7)), "the entry's own last run")
	assert.True(t, last[l.Job].Run.Slot.Equal(slot(3)), "the job's own last run")

	st := b.cached(l.Job)
	stream, err := js.Stream(ctx, st.names.stream)
	require.NoError(t, err)
	jobClaim, err := stream.GetLastMsgForSubject(ctx, st.claimSubject(slot(0).UnixMilli()))
	require.NoError(t, err)
	entryClaim, err := stream.GetLastMsgForSubject(ctx, st.entryView("a").claimSubject(slot(0).UnixMilli()))
	require.NoError(t, err)
	assert.NotEmpty(t, jobClaim.Header.Get(natsjs.MsgTTLHeader))
	assert.Equal(t, jobClaim.Header.Get(natsjs.MsgTTLHeader), entryClaim.Header.Get(natsjs.MsgTTLHeader), "stored for the job's window")
	assert.NotEqual(t, jobClaim.Header.Get(natsjs.MsgIDHeader), entryClaim.Header.Get(natsjs.MsgIDHeader))

	_, isStore := any(b).(backend.EntryStore)
	assert.False(t, isStore, "a plain Backend stores no entries")
	_, err = b.History(ctx, backend.EntryRunName(l.Job+" none", "a"), 5)
	require.NoError(t, err, "an entry of a job without a stream has no history")
	_, err = b.Claim(ctx, claimIn(backend.EntryRunName(l.Job+" none", "a"), slot(0), token(), "x"))
	assert.ErrorIs(t, err, natsjs.ErrStreamNotFound, "an entry's claim needs its job's stream")
}

// TestEntriesNeedAnEntryStore: a LeasedBackend whose run store stores no entries
// says so.
func TestEntriesNeedAnEntryStore(t *testing.T) {
	lb := &LeasedBackend{runs: noEntries{}}
	_, err := lb.CreateEntry(t.Context(), backend.Entry{})
	assert.ErrorIs(t, err, backend.ErrEntriesNotSupported)
	err = lb.WatchEntries(t.Context(), func(backend.EntryChange) {})
	assert.ErrorIs(t, err, backend.ErrEntriesNotSupported)
	_, err = lb.ListEntries(t.Context(), "", "", "", 10)
	assert.ErrorIs(t, err, backend.ErrEntriesNotSupported)
}

// noEntries is a run store without entries.
type noEntries struct{ backend.RunStore }

// TestJobHistoryPastManyEntries reads a job's own history in a stream that holds
// mostly its entries' records: past them, and with no own record at all.
func TestJobHistoryPastManyEntries(t *testing.T) {
	_, b, l, ctx := retainedJob(t, "many-entries", backend.Retention{Size: 5})
	ok := func(int) backend.Status { return backend.StatusOK }
	runsOf(t, b, l, "x", 0, 3, ok)
	for i := range 150 {
		e := l
		e.Job = backend.EntryRunName(l.Job, fmt.Sprint("e", i))
		runsOf(t, b, e, "x", 0, 4, ok)
	}
	runsOf(t, b, l, "x", 3, 4, ok)
	hist, err := b.History(ctx, l.Job, 50)
	require.NoError(t, err)
	got := make([]int64, len(hist))
	for i, r := range hist {
		got[i] = r.Slot.UnixMilli()
		assert.False(t, r.ClaimedAt.IsZero(), "the run's claim is read")
	}
	assert.Equal(t, []int64{slot(3).UnixMilli(), slot(2).UnixMilli(), slot(1).UnixMilli(), slot(0).UnixMilli()}, got)

	none := l
	none.Job = l.Job + " entries only"
	require.NoError(t, b.PrepareJob(ctx, none))
	for i := range 100 {
		e := none
		e.Job = backend.EntryRunName(none.Job, fmt.Sprint("e", i))
		runsOf(t, b, e, "x", 0, 3, ok)
	}
	last, err := b.LastRuns(ctx, []string{none.Job, backend.EntryRunName(none.Job, "e7")})
	require.NoError(t, err)
	assert.Nil(t, last[none.Job].Run, "a job with entries' runs only has no run of its own")
	require.NotNil(t, last[backend.EntryRunName(none.Job, "e7")].Run)
}
