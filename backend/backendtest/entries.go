package backendtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// RunEntries runs the schedule entry section of the conformance suite on a
// backend that implements backend.EntryStore: compare-and-set changes (one of
// two writers wins), paging, the watch seen from another backend value, and the
// runs of entries kept apart from their job's and from each other's. Like Run,
// every backend newBackend returns within one test shares one store.
func RunEntries(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, f *entryFixture)
	}{
		{"CreateAndGet", testEntryCreateGet},
		{"CreateTwice", testEntryCreateTwice},
		{"UpdateCompareAndSet", testEntryUpdateCAS},
		{"WritersRace", testEntryWritersRace},
		{"Delete", testEntryDelete},
		{"Invalid", testEntryInvalid},
		{"ListPages", testEntryList},
		{"Watch", testEntryWatch},
		{"RunsApart", testEntryRunsApart},
		{"LeasesApart", testEntryLeasesApart},
		{"EntryRunNames", testEntryRunNames},
	}
	t.Run("Entries", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				a, b := setup(t, newBackend), setup(t, newBackend)
				ea, ok := a.(backend.EntryStore)
				require.True(t, ok, "%T is not a backend.EntryStore", a)
				eb := b.(backend.EntryStore)
				c.fn(t, &entryFixture{t: t, a: a, b: b, ea: ea, eb: eb, ctx: Context(t), job: JobName("entries ✓ " + c.name + " a.b/c")})
			})
		}
	})
}

// entryFixture is one case's two backend values on one store, and its job.
type entryFixture struct {
	t      *testing.T
	a, b   backend.Backend
	ea, eb backend.EntryStore
	ctx    context.Context
	job    string
}

func (f *entryFixture) entry(id string) backend.Entry {
	return backend.Entry{Job: f.job, ID: id, EntrySpec: backend.EntrySpec{Every: time.Minute, Payload: []byte("p:" + id)},
		By: "suite", User: "ops-1 (account OPS)", Instance: "replica-" + id}
}

func (f *entryFixture) create(s backend.EntryStore, e backend.Entry) uint64 {
	f.t.Helper()
	rev, err := s.CreateEntry(f.ctx, e)
	require.NoError(f.t, err, "CreateEntry %q", e.ID)
	require.NotZero(f.t, rev, "a stored entry has a revision")
	return rev
}

// same compares what a user stored, not the store's bookkeeping.
func same(t *testing.T, want, got backend.Entry, msg string) {
	t.Helper()
	assert.Equal(t, want.Job, got.Job, msg)
	assert.Equal(t, want.ID, got.ID, msg)
	assert.Equal(t, want.Every, got.Every, msg)
	assert.Equal(t, want.Cron, got.Cron, msg)
	assert.Equal(t, want.Zone, got.Zone, msg)
	assert.True(t, want.At.Equal(got.At), "%s: At %v, got %v", msg, want.At, got.At)
	assert.True(t, want.Start.Equal(got.Start), "%s: Start", msg)
	assert.True(t, want.End.Equal(got.End), "%s: End", msg)
	assert.Equal(t, string(want.Payload), string(got.Payload), msg)
	assert.Equal(t, want.Paused, got.Paused, msg)
	assert.Equal(t, want.By, got.By, msg)
	assert.Equal(t, want.User, got.User, msg)
	assert.Equal(t, want.Instance, got.Instance, msg)
	assert.Equal(t, want.DST, got.DST, msg)
	assert.Equal(t, want.Deadline, got.Deadline, msg)
}

func testEntryCreateGet(t *testing.T, f *entryFixture) {
	at := time.UnixMilli(1_900_000_000_123).UTC()
	for _, e := range []backend.Entry{
		f.entry("every"),
		{Job: f.job, ID: "cron ✓ a.b/c *", EntrySpec: backend.EntrySpec{Cron: "0 9 * * MON-FRI", Zone: "Europe/Athens", Start: at, End: at.Add(time.Hour), Paused: true,
			DST: backend.DSTPolicy{Repeated: backend.DSTBoth, Missing: backend.DSTSkip}, Deadline: 90 * time.Minute}},
		{Job: f.job, ID: "at", EntrySpec: backend.EntrySpec{At: at, Payload: make([]byte, backend.MaxEntryPayload)}},
	} {
		rev := f.create(f.ea, e)
		got, err := f.eb.GetEntry(f.ctx, f.job, e.ID)
		require.NoError(t, err, "another instance reads the entry")
		same(t, e, got, e.ID)
		assert.Equal(t, rev, got.Revision)
	}
	_, err := f.eb.GetEntry(f.ctx, f.job, "absent")
	assert.ErrorIs(t, err, backend.ErrEntryNotFound)
	_, err = f.eb.GetEntry(f.ctx, f.job+" other", "every")
	assert.ErrorIs(t, err, backend.ErrEntryNotFound, "entries are per job")
}

func testEntryCreateTwice(t *testing.T, f *entryFixture) {
	f.create(f.ea, f.entry("x"))
	_, err := f.eb.CreateEntry(f.ctx, f.entry("x"))
	require.ErrorIs(t, err, backend.ErrEntryExists)
	other := f.entry("x")
	other.Job += " other"
	f.create(f.eb, other)
}

func testEntryUpdateCAS(t *testing.T, f *entryFixture) {
	rev := f.create(f.ea, f.entry("x"))
	e := f.entry("x")
	e.Every, e.Payload = 2*time.Minute, []byte("changed")
	rev2, err := f.eb.UpdateEntry(f.ctx, e, rev)
	require.NoError(t, err)
	assert.Greater(t, rev2, rev, "a change raises the revision")
	_, err = f.ea.UpdateEntry(f.ctx, f.entry("x"), rev)
	require.ErrorIs(t, err, backend.ErrEntryConflict, "a change based on an old revision")
	got, err := f.ea.GetEntry(f.ctx, f.job, "x")
	require.NoError(t, err)
	same(t, e, got, "the first writer's change stands")
	_, err = f.ea.UpdateEntry(f.ctx, f.entry("absent"), rev)
	require.ErrorIs(t, err, backend.ErrEntryNotFound)
}

func testEntryWritersRace(t *testing.T, f *entryFixture) {
	for round := range 5 {
		id := fmt.Sprint("race-", round)
		rev := f.create(f.ea, f.entry(id))
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				s := f.ea
				if i%2 == 1 {
					s = f.eb
				}
				e := f.entry(id)
				e.Payload = []byte(fmt.Sprint("writer-", i))
				_, errs[i] = s.UpdateEntry(f.ctx, e, rev)
			})
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, won, "writers %d and %d both changed revision %d", won, i, rev)
				won = i
				continue
			}
			require.ErrorIs(t, err, backend.ErrEntryConflict, "writer %d", i)
		}
		require.NotEqual(t, -1, won, "one writer wins")
		got, err := f.eb.GetEntry(f.ctx, f.job, id)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint("writer-", won), string(got.Payload), "the winner's change is stored")
	}
}

func testEntryDelete(t *testing.T, f *entryFixture) {
	rev := f.create(f.ea, f.entry("x"))
	e := f.entry("x")
	e.Paused = true
	rev2, err := f.ea.UpdateEntry(f.ctx, e, rev)
	require.NoError(t, err)
	require.ErrorIs(t, f.eb.DeleteEntry(f.ctx, f.job, "x", rev), backend.ErrEntryConflict, "a removal based on an old revision")
	require.NoError(t, f.eb.DeleteEntry(f.ctx, f.job, "x", rev2))
	_, err = f.ea.GetEntry(f.ctx, f.job, "x")
	require.ErrorIs(t, err, backend.ErrEntryNotFound)
	require.ErrorIs(t, f.ea.DeleteEntry(f.ctx, f.job, "x", 0), backend.ErrEntryNotFound)
	f.create(f.ea, f.entry("y"))
	require.NoError(t, f.eb.DeleteEntry(f.ctx, f.job, "y", 0), "revision 0 removes whatever the revision")
	f.create(f.eb, f.entry("x"))
}

func testEntryInvalid(t *testing.T, f *entryFixture) {
	for name, edit := range map[string]func(*backend.Entry){
		"no schedule":    func(e *backend.Entry) { e.Every = 0 },
		"two schedules":  func(e *backend.Entry) { e.Cron = "* * * * *" },
		"empty ID":       func(e *backend.Entry) { e.ID = "" },
		"control in ID":  func(e *backend.Entry) { e.ID = "a" + backend.EntrySep + "b" },
		"long ID":        func(e *backend.Entry) { e.ID = string(make([]byte, backend.MaxEntryIDLen+1)) },
		"big payload":    func(e *backend.Entry) { e.Payload = make([]byte, backend.MaxEntryPayload+1) },
		"invalid job":    func(e *backend.Entry) { e.Job = "" },
		"end before":     func(e *backend.Entry) { e.Start, e.End = time.Unix(100, 0), time.Unix(50, 0) },
		"zone, no cron":  func(e *backend.Entry) { e.Zone = "UTC" },
		"negative every": func(e *backend.Entry) { e.Every = -time.Second },
		"long user":      func(e *backend.Entry) { e.User = strings.Repeat("u", backend.MaxEntryText+1) },
		"long instance":  func(e *backend.Entry) { e.Instance = strings.Repeat("i", backend.MaxJobNameLen+1) },
	} {
		e := f.entry("bad")
		edit(&e)
		_, err := f.ea.CreateEntry(f.ctx, e)
		assert.ErrorIs(t, err, backend.ErrInvalidEntry, name)
	}
	_, err := f.ea.GetEntry(f.ctx, f.job, "bad")
	assert.ErrorIs(t, err, backend.ErrEntryNotFound, "nothing invalid was stored")
}

func testEntryList(t *testing.T, f *entryFixture) {
	other := f.job + " other"
	var want []string
	for i := range 23 {
		e := f.entry(fmt.Sprintf("e%02d", i))
		f.create(f.ea, e)
		want = append(want, e.ID)
		o := e
		o.Job = other
		f.create(f.ea, o)
	}
	var got []string
	afterJob, afterID := "", ""
	for page := 0; ; page++ {
		require.Less(t, page, 10, "paging ends")
		es, err := f.eb.ListEntries(f.ctx, f.job, afterJob, afterID, 7)
		require.NoError(t, err)
		require.LessOrEqual(t, len(es), 7)
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			assert.Equal(t, f.job, e.Job, "only the job's entries")
			got = append(got, e.ID)
		}
		last := es[len(es)-1]
		afterJob, afterID = last.Job, last.ID
	}
	assert.Equal(t, want, got, "every entry once, ordered by ID")

	all, err := f.eb.ListEntries(f.ctx, "", f.job, "e20", 5)
	require.NoError(t, err)
	require.Len(t, all, 5, "every job's entries, after a cursor")
	assert.Equal(t, []string{"e21", "e22"}, []string{all[0].ID, all[1].ID})
	assert.Equal(t, other, all[2].Job, "then the next job's, from its first")
	assert.Equal(t, "e00", all[2].ID)
}

func testEntryWatch(t *testing.T, f *entryFixture) {
	f.create(f.ea, f.entry("before"))
	ctx, cancel := context.WithCancel(f.ctx)
	changes := make(chan backend.EntryChange, 64)
	done := make(chan error, 1)
	go func() {
		done <- f.eb.WatchEntries(ctx, func(c backend.EntryChange) {
			if c.Synced || c.Entry.Job == f.job {
				changes <- c
			}
		})
	}()
	next := func(what string) backend.EntryChange {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case err := <-done:
			t.Fatalf("the watch ended waiting for %s: %v", what, err)
		case <-f.ctx.Done():
			t.Fatalf("no change: %s", what)
		}
		return backend.EntryChange{}
	}
	c := next("the stored entry")
	require.False(t, c.Synced)
	assert.Equal(t, "before", c.Entry.ID)
	require.True(t, next("synced").Synced, "the stored entries, then Synced")

	rev := f.create(f.ea, f.entry("x"))
	c = next("a created entry")
	assert.Equal(t, "x", c.Entry.ID)
	assert.Equal(t, rev, c.Entry.Revision)
	assert.Equal(t, "p:x", string(c.Entry.Payload))
	assert.Equal(t, "ops-1 (account OPS)", c.Entry.User, "who changed it is stored with it")
	e := f.entry("x")
	e.Paused, e.By, e.User, e.Instance = true, "bo", "", "replica-2"
	rev, err := f.ea.UpdateEntry(f.ctx, e, rev)
	require.NoError(t, err)
	c = next("a changed entry")
	assert.True(t, c.Entry.Paused)
	assert.Equal(t, "bo", c.Entry.By)
	assert.Empty(t, c.Entry.User, "a change without a user keeps none of the one before")
	assert.Equal(t, "replica-2", c.Entry.Instance)
	assert.Equal(t, rev, c.Entry.Revision)
	require.NoError(t, f.ea.DeleteEntry(f.ctx, f.job, "x", rev))
	c = next("a removed entry")
	assert.True(t, c.Removed)
	assert.Equal(t, f.job, c.Entry.Job)
	assert.Equal(t, "x", c.Entry.ID)
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "a watch ended by its context")
	case <-f.ctx.Done():
		t.Fatal("the watch did not end with its context")
	}
}

// testEntryRunsApart claims the same slot for a job and two of its entries on a
// backend's claims: three runs, each with its own history.
func testEntryRunsApart(t *testing.T, f *entryFixture) {
	prepare(t, f.a, f.job)
	prepare(t, f.b, f.job)
	names := []string{f.job, backend.EntryRunName(f.job, "a.b"), backend.EntryRunName(f.job, "a"), backend.EntryRunName(f.job, "a b ✓")}
	for _, name := range names {
		won, err := f.a.Claim(f.ctx, claim(name, slotAt(0), Token(), "x"))
		require.NoError(t, err, "claim %q", name)
		require.True(t, won, "%q: the same slot of another entry is another run", name)
		won, err = f.b.Claim(f.ctx, claim(name, slotAt(0), Token(), "y"))
		require.NoError(t, err)
		require.False(t, won, "%q: one winner per (job, entry, slot)", name)
	}
	for _, name := range names {
		hist, err := f.b.History(f.ctx, name, 10)
		require.NoError(t, err)
		require.Len(t, hist, 1, "%q: history is per entry", name)
		assert.Equal(t, "x", hist[0].Instance)
	}
}

// testEntryLeasesApart claims with leases: a live run of the job or of one
// entry is no overlap for another entry, and Active lists each one's own runs.
func testEntryLeasesApart(t *testing.T, f *entryFixture) {
	la, ok := f.a.(backend.LeaseBackend)
	if !ok {
		t.Logf("%T has no leases: nothing to check", f.a)
		return
	}
	prepare(t, f.a, f.job)
	runs := la.Runs()
	names := []string{f.job, backend.EntryRunName(f.job, "a"), backend.EntryRunName(f.job, "b")}
	tokens := map[string]string{}
	for _, name := range names {
		tok := Token()
		res, err := runs.Claim(f.ctx, backend.RunClaim{Job: name, Slot: slotAt(0), Token: tok, Instance: "x", Lease: time.Minute,
			Deadline: time.Now().Add(time.Hour), Keep: leaseKeep, Overlap: backend.OverlapSkip})
		require.NoError(t, err, "claim %q", name)
		require.Equal(t, backend.OutcomeWon, res.Outcome, "%q", name)
		tokens[name] = tok
		res, err = runs.Claim(f.ctx, backend.RunClaim{Job: name, Slot: slotAt(1), Token: Token(), Instance: "y", Lease: time.Minute,
			Deadline: time.Now().Add(time.Hour), Keep: leaseKeep, Overlap: backend.OverlapSkip})
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeOverlap, res.Outcome, "%q: overlap is judged per entry", name)
	}
	for _, name := range names {
		active, err := runs.Active(f.ctx, name)
		require.NoError(t, err)
		require.Len(t, active, 1, "%q: its own unfinished runs only: %+v", name, active)
		assert.Equal(t, tokens[name], active[0].Token)
	}
	if l, ok := runs.(backend.ActiveLister); ok {
		got, err := l.ActiveJobs(f.ctx, names)
		require.NoError(t, err)
		for _, name := range names {
			require.Len(t, got[name], 1, "ActiveJobs %q", name)
			assert.Equal(t, tokens[name], got[name][0].Token)
		}
	}
	for _, name := range names {
		require.NoError(t, runs.Finish(f.ctx, backend.RunKey{Job: name, Slot: slotAt(0), Token: tokens[name]}, backend.StatusOK))
	}
	res, err := runs.Claim(f.ctx, backend.RunClaim{Job: names[1], Slot: slotAt(0), Token: Token(), Instance: "y", Lease: time.Minute,
		Deadline: time.Now().Add(time.Hour), Keep: leaseKeep})
	require.NoError(t, err)
	assert.Equal(t, backend.OutcomeDone, res.Outcome, "a finished entry run is done")
}

// testEntryRunNames: an EntryRunLister lists the entries of the jobs asked for
// that hold an unfinished run, released or live, whether the entry store holds
// them or not (a removed entry's run is what it is for); never the job's own
// runs, nor another job's entries.
func testEntryRunNames(t *testing.T, f *entryFixture) {
	la, ok := f.a.(backend.LeaseBackend)
	if !ok {
		t.Logf("%T has no leases: nothing to check", f.a)
		return
	}
	lister, ok := la.Runs().(backend.EntryRunLister)
	if !ok {
		t.Logf("%T is no backend.EntryRunLister: nothing to check", la.Runs())
		return
	}
	other := f.job + "-other"
	prepare(t, f.a, f.job)
	prepare(t, f.a, other)
	runs := la.Runs()
	live, released, finished := backend.EntryRunName(f.job, "live"), backend.EntryRunName(f.job, "released"), backend.EntryRunName(f.job, "finished")
	otherEntry := backend.EntryRunName(other, "live")
	f.create(f.ea, f.entry("live")) // "released" and "finished" are in no entry store: removed
	tokens := map[string]string{}
	for _, name := range []string{f.job, live, released, finished, otherEntry} {
		tok := Token()
		res, err := runs.Claim(f.ctx, backend.RunClaim{Job: name, Slot: slotAt(0), Token: tok, Instance: "x", Lease: time.Minute,
			Deadline: time.Now().Add(time.Hour), Keep: leaseKeep})
		require.NoError(t, err, "claim %q", name)
		require.Equal(t, backend.OutcomeWon, res.Outcome, "%q", name)
		tokens[name] = tok
	}
	require.NoError(t, runs.Release(f.ctx, backend.RunKey{Job: released, Slot: slotAt(0), Token: tokens[released]}))
	require.NoError(t, runs.Finish(f.ctx, backend.RunKey{Job: finished, Slot: slotAt(0), Token: tokens[finished]}, backend.StatusOK))

	lb := f.b.(backend.LeaseBackend).Runs().(backend.EntryRunLister) // another process's view
	for _, l := range []backend.EntryRunLister{lister, lb} {
		names, err := l.EntryRunNames(f.ctx, []string{f.job})
		require.NoError(t, err)
		assert.Contains(t, names, live, "an entry with a live lease")
		assert.Contains(t, names, released, "a removed entry's unfinished run, its lease released")
		assert.NotContains(t, names, f.job, "the job's own runs are not an entry's")
		assert.NotContains(t, names, otherEntry, "another job's entries are not asked for")
		seen := map[string]bool{}
		for _, name := range names {
			assert.False(t, seen[name], "%q listed twice", name)
			seen[name] = true
		}
	}
	names, err := lister.EntryRunNames(f.ctx, []string{f.job, other})
	require.NoError(t, err)
	assert.Subset(t, names, []string{live, released, otherEntry}, "the entries of every job asked for")
	names, err = lister.EntryRunNames(f.ctx, []string{f.job + "-none"})
	require.NoError(t, err)
	assert.Empty(t, names, "a job without entries")
}
