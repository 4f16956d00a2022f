package kvlease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// The buffer policies and run limits of an entry's runs are the entry's own: a
// run of its job or of another entry neither blocks it nor counts against it,
// and its runs neither block nor count for them.
func TestEntryBuffersAndLimitsPerEntry(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "entries " + token()
			ea, eb := backend.EntryRunName(job, "a"), backend.EntryRunName(job, "a.b")
			buf := backend.OverlapBufferOne
			mustClaim(t, a, bufferClaim(job, 0, buf, 1), backend.OutcomeWon)
			mustClaim(t, b, bufferClaim(ea, 1, buf, 1), backend.OutcomeWon)
			mustClaim(t, a, bufferClaim(ea, 2, buf, 1), backend.OutcomeBuffered)
			mustClaim(t, b, bufferClaim(job, 2, buf, 1), backend.OutcomeBuffered)
			mustClaim(t, a, bufferClaim(eb, 2, buf, 1), backend.OutcomeWon)

			for _, c := range []struct {
				name  string
				slots map[int]bool // slot -> buffered
			}{
				{job, map[int]bool{0: false, 2: true}},
				{ea, map[int]bool{1: false, 2: true}},
				{eb, map[int]bool{2: false}},
			} {
				runs, err := b.Active(t.Context(), c.name)
				require.NoError(t, err)
				got := map[int]bool{}
				for _, r := range runs {
					got[int(r.Slot.Sub(overlapClaim("", 0, "").Slot)/time.Minute)] = r.Buffered
				}
				assert.Equal(t, c.slots, got, "Active(%q)", c.name)
			}

			limited := backend.EntryRunName(job, "limited")
			mustClaim(t, a, limitClaim(limited, 0, backend.OverlapAllow, 1), backend.OutcomeWon)
			mustClaim(t, b, limitClaim(limited, 1, backend.OverlapAllow, 1), backend.OutcomeLimit)
			mustClaim(t, b, limitClaim(backend.EntryRunName(job, "other"), 1, backend.OverlapAllow, 1), backend.OutcomeWon)
			mustClaim(t, b, limitClaim(job+" limited", 1, backend.OverlapAllow, 1), backend.OutcomeWon)
		})
	}
}

// Entry keys are apart from the run keys: scans of runs, pauses and the watch of
// the leases pass over them, and entries over run keys.
func TestEntryKeysApart(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	job := "apart " + token()
	mustClaim(t, s, overlapClaim(job, 0, "i"), backend.OutcomeWon)
	_, err := s.CreateEntry(t.Context(), backend.Entry{Job: job, ID: "0", EntrySpec: backend.EntrySpec{Every: time.Minute}})
	require.NoError(t, err)
	runs, err := s.Active(t.Context(), job)
	require.NoError(t, err)
	assert.Len(t, runs, 1, "the job's run only")
	all, err := s.ActiveJobs(t.Context(), []string{job, backend.EntryRunName(job, "0")})
	require.NoError(t, err)
	assert.Len(t, all[job], 1)
	assert.Empty(t, all[backend.EntryRunName(job, "0")], "an entry with no run has none")
	es, err := s.ListEntries(t.Context(), job, "", "", 10)
	require.NoError(t, err)
	require.Len(t, es, 1, "the entry, not the job's run keys")
	assert.Equal(t, "0", es[0].ID)
	pauses, err := s.Pauses(t.Context())
	require.NoError(t, err)
	for _, p := range pauses {
		assert.NotEqual(t, job, p.Job)
	}
}

// WatchEntries ends with ErrClosed when its store is closed (the suite's Watch
// checks the end by its context).
func TestWatchEntriesEnds(t *testing.T) {
	t.Parallel()
	s, err := kvlease.New(singleJS(t), kvlease.WithBucket(bucket))
	require.NoError(t, err)
	require.NoError(t, s.Init(t.Context()))
	synced := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.WatchEntries(t.Context(), func(c backend.EntryChange) {
			if c.Synced {
				close(synced)
			}
		})
	}()
	select {
	case <-synced:
	case err := <-done:
		t.Fatalf("the watch ended before Synced: %v", err)
	}
	s.Close()
	assert.ErrorIs(t, <-done, kvlease.ErrClosed)
}
