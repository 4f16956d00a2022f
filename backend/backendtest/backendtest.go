// Package backendtest is the conformance suite every anarchon backend passes. A
// backend's tests call Run with a constructor; a run store's tests call RunLeases.
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t) })
//	}
//
// The backends Run's constructor returns within one test must share one store, as
// separate processes of a replicated service share a server: a new value (a new
// client) each time, deciding in the same place. The race calls the constructor
// once per claimer, so a backend that decides from its own value's memory fails it.
// A constructor that returns the same value every time passes the race without
// showing that claims from separate processes are decided together.
//
// The suite checks the contract's rules, not a store's internals: the race (one winner
// among many concurrent claims of a slot, each from its own backend value), repeat
// safety, history (order, limit, retention by size and TTL, takeover attempts),
// manual runs, invalid claims and the reported window, a backend.OnceRecorder's one
// stored record of concurrent writers; and, for run stores, the
// lease rules and the one stored decision per slot.
//
// For a run store that is a backend.Settler the lease section also checks the
// records each decision leaves: one per attempt, none on a repeat. RunLeases
// gives a store that is a backend.RecordsUser a history of the suite's own,
// which keeps each record apart and can be made to fail. A Settler whose
// history is a backend of its own runs RunLeasesWithHistory, with the store and
// the backend whose History shows its records:
//
//	backendtest.RunLeasesWithHistory(t, func(t *testing.T) (backend.RunStore, backendtest.Historian) {
//		b := newBackend(t)
//		return b.Runs(), b
//	})
//
// History merges the records of one token, so there a second record of an
// attempt shows only when its status differs.
package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Options tune the suite for slow stores.
type Options struct {
	// Rounds of the race (default 20) and claimers per round (default 16).
	Rounds, Claimers int
}

// Run runs the claim section of the conformance suite. newBackend returns a backend
// ready for Init; the suite calls Init, PrepareJob, and Close at the end of the test
// that made it.
//
// Every backend newBackend returns within one test (the t it is given, or its
// parent) must share one store, as separate processes share a server: the race
// makes one value per claimer and requires exactly one of them to win. Return a
// new value each time (a new client of the same server, a wrapper of one shared
// in-memory store), not the same value.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	RunWithOptions(t, newBackend, Options{})
}

// RunWithOptions is Run with tuning.
func RunWithOptions(t *testing.T, newBackend func(t *testing.T) backend.Backend, o Options) {
	o = o.withDefaults()
	t.Run("Window", func(t *testing.T) {
		b := setup(t, newBackend)
		assert.NotEmpty(t, b.Name())
		assert.Greater(t, b.DedupeWindow(), time.Duration(0), "a window of zero would reject every job")
	})
	t.Run("Race", func(t *testing.T) { testRace(t, newBackend, o) })
	t.Run("RepeatSafety", func(t *testing.T) { testRepeat(t, newBackend) })
	t.Run("History", func(t *testing.T) { testHistory(t, newBackend) })
	t.Run("HistoryLimitAndOrder", func(t *testing.T) { testHistoryOrder(t, newBackend) })
	t.Run("ManualRuns", func(t *testing.T) { testManual(t, newBackend) })
	t.Run("JobsAreIndependent", func(t *testing.T) { testIndependent(t, newBackend) })
	t.Run("RetentionSize", func(t *testing.T) { testRetentionSize(t, newBackend) })
	t.Run("RetentionTTL", func(t *testing.T) { testRetentionTTL(t, newBackend) })
	t.Run("TakeoverAttemptsInHistory", func(t *testing.T) { testTakeoverHistory(t, newBackend) })
	t.Run("RecordOnce", func(t *testing.T) { testRecordOnce(t, newBackend) })
	t.Run("InvalidClaims", func(t *testing.T) { testInvalidClaims(t, newBackend) })
}

// setup returns a backend from newBackend, after Init, closed when t ends.
func setup(t *testing.T, newBackend func(t *testing.T) backend.Backend) backend.Backend {
	t.Helper()
	b := open(t, newBackend)
	require.NoError(t, b.Init(Context(t)), "Init")
	return b
}

// open returns a backend from newBackend, closed when t ends, before Init.
func open(t *testing.T, newBackend func(t *testing.T) backend.Backend) backend.Backend {
	t.Helper()
	b := newBackend(t)
	require.NotNil(t, b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, b.Close(ctx), "Close")
	})
	return b
}

// Context returns a context for one test step, ended when the test ends or after 30s.
func Context(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// JobName returns a job name unique to this test run, with prefix.
func JobName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Token returns a random claim token.
func Token() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func prepare(t *testing.T, b backend.Backend, job string) backend.JobLimits {
	t.Helper()
	l := limits(job)
	require.NoError(t, b.PrepareJob(Context(t), l), "PrepareJob")
	return l
}

// limits are the suite's jobs: every second, a history of 50.
func limits(job string) backend.JobLimits {
	return backend.JobLimits{
		Job: job, Schedule: "every 1s", Interval: time.Second, MaxLate: time.Second,
		Lease: scheduler.DefaultLease, Retention: backend.Retention{Size: 50},
	}
}

func claim(job string, slot time.Time, token, instance string) backend.ClaimInput {
	return backend.ClaimInput{
		Job: job, Slot: slot, Token: token, Instance: instance, Attempt: 1,
		At: time.Now(), HistorySize: 50,
	}
}

// slotAt returns a slot k seconds after a fixed base, at millisecond precision.
func slotAt(k int) time.Time {
	return time.UnixMilli(1_800_000_000_000 + int64(k)*1000).UTC()
}

func testRepeat(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("repeat")
	prepare(t, b, job)
	ctx := Context(t)
	first := claim(job, slotAt(0), Token(), "a")
	won, err := b.Claim(ctx, first)
	require.NoError(t, err)
	require.True(t, won, "first claim of a fresh slot wins")
	for range 3 {
		won, err = b.Claim(ctx, first)
		require.NoError(t, err)
		assert.True(t, won, "same token again must win again")
	}
	other := claim(job, slotAt(0), Token(), "b")
	won, err = b.Claim(ctx, other)
	require.NoError(t, err)
	assert.False(t, won, "another token must lose")
	won, err = b.Claim(ctx, claim(job, slotAt(0), first.Token, "b"))
	require.NoError(t, err)
	assert.True(t, won, "the winning token wins whoever repeats it")
	// The next slot is a different run.
	won, err = b.Claim(ctx, claim(job, slotAt(1), other.Token, "b"))
	require.NoError(t, err)
	assert.True(t, won, "a new slot has a new winner")
}

func testHistory(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("history")
	l := prepare(t, b, job)
	ctx := Context(t)
	in := claim(job, slotAt(5), Token(), "instance-a")
	won, err := b.Claim(ctx, in)
	require.NoError(t, err)
	require.True(t, won)
	lost, err := b.Claim(ctx, claim(job, slotAt(5), Token(), "instance-b"))
	require.NoError(t, err)
	require.False(t, lost)

	hist, err := b.History(ctx, job, 10)
	require.NoError(t, err)
	require.Len(t, hist, 1, "a won claim without a result is one record")
	assert.Equal(t, backend.StatusRunning, hist[0].Status)
	assert.Equal(t, "instance-a", hist[0].Instance)

	started := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	finished := time.Now().Truncate(time.Millisecond)
	require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
		Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: 1,
		Status: backend.StatusError, StartedAt: started, FinishedAt: finished, Error: "boom",
	}, l.Retention))
	hist, err = b.History(ctx, job, 10)
	require.NoError(t, err)
	require.Len(t, hist, 1, "claim + result = one record")
	r := hist[0]
	assert.Equal(t, job, r.Job)
	assert.True(t, r.Slot.Equal(in.Slot), "slot %v, want %v", r.Slot, in.Slot)
	assert.Equal(t, "instance-a", r.Instance)
	assert.Equal(t, in.Token, r.Token)
	assert.Equal(t, backend.StatusError, r.Status)
	assert.Equal(t, "boom", r.Error)
	assert.Equal(t, 1, r.Attempt)
	assert.False(t, r.Manual)
	assert.True(t, r.StartedAt.Equal(started), "started %v, want %v", r.StartedAt, started)
	assert.True(t, r.FinishedAt.Equal(finished), "finished %v, want %v", r.FinishedAt, finished)
	assert.Equal(t, finished.Sub(started), r.Duration)

	empty, err := b.History(ctx, JobName("never-ran"), 10)
	require.NoError(t, err)
	assert.Empty(t, empty, "a job with no runs has an empty history")
}

func testHistoryOrder(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("order")
	l := prepare(t, b, job)
	ctx := Context(t)
	// Claim out of order, from two instances.
	order := []int{3, 0, 4, 1, 2, 6, 5}
	for _, k := range order {
		in := claim(job, slotAt(k), Token(), fmt.Sprintf("i%d", k%2))
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		if k%3 != 0 { // some finished, some still running
			require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
				Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: 1,
				Status: backend.StatusOK, StartedAt: time.Now(), FinishedAt: time.Now(),
			}, l.Retention))
		}
	}
	hist, err := b.History(ctx, job, 4)
	require.NoError(t, err)
	require.Len(t, hist, 4, "limit honoured")
	for i, want := range []int{6, 5, 4, 3} {
		assert.True(t, hist[i].Slot.Equal(slotAt(want)), "record %d: slot %v, want %v (newest first)", i, hist[i].Slot, slotAt(want))
		assert.Equal(t, fmt.Sprintf("i%d", want%2), hist[i].Instance)
		if want%3 == 0 {
			assert.Equal(t, backend.StatusRunning, hist[i].Status, "slot %d has no result yet", want)
		} else {
			assert.Equal(t, backend.StatusOK, hist[i].Status)
		}
	}
	all, err := b.History(ctx, job, 100)
	require.NoError(t, err)
	assert.Len(t, all, len(order))
}

func testManual(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("manual")
	l := prepare(t, b, job)
	ctx := Context(t)
	slot := slotAt(7)
	var ins []backend.ClaimInput
	for i := range 2 {
		in := claim(job, slot, Token(), fmt.Sprintf("m%d", i))
		in.Manual = true
		got, err := b.RecordManualRun(ctx, in)
		require.NoError(t, err)
		if !got.IsZero() {
			in.Slot = got
		}
		ins = append(ins, in)
	}
	// A scheduled claim of the same slot is not blocked by manual runs.
	won, err := b.Claim(ctx, claim(job, slot, Token(), "scheduled"))
	require.NoError(t, err)
	assert.True(t, won, "manual runs do not claim the slot")
	require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
		Slot: ins[0].Slot, Token: ins[0].Token, Instance: ins[0].Instance, Attempt: 1, Manual: true,
		Status: backend.StatusOK, StartedAt: time.Now(), FinishedAt: time.Now(),
	}, l.Retention))

	hist, err := b.History(ctx, job, 10)
	require.NoError(t, err)
	manual := map[string]backend.RunRecord{}
	for _, r := range hist {
		if r.Manual {
			manual[r.Token] = r
		}
	}
	require.Len(t, manual, 2, "both manual runs are recorded, none de-duplicated")
	assert.Equal(t, backend.StatusOK, manual[ins[0].Token].Status)
	assert.Equal(t, "m0", manual[ins[0].Token].Instance)
	assert.Equal(t, backend.StatusRunning, manual[ins[1].Token].Status)
	assert.Len(t, hist, 3, "two manual runs and one scheduled")
}

func testIndependent(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	a, c := JobName("indep-a"), JobName("indep-b")
	prepare(t, b, a)
	prepare(t, b, c)
	ctx := Context(t)
	for _, job := range []string{a, c} {
		won, err := b.Claim(ctx, claim(job, slotAt(0), Token(), "x"))
		require.NoError(t, err)
		assert.True(t, won, "the same slot of another job is another run")
	}
	hist, err := b.History(ctx, a, 10)
	require.NoError(t, err)
	assert.Len(t, hist, 1, "history is per job")
}
