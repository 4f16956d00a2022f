package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// flakyHistory is a memory backend whose history writes fail: the first failSaves
// SaveResult calls, every SaveResult before downUntil (a partition of the result
// stream), and the first failClaims Claim calls (the claim that picks who records a
// slot that did not run).
type flakyHistory struct {
	*memory.Backend
	runsOnce   sync.Once
	runs       *memory.RunStore
	mu         sync.Mutex
	failSaves  int
	failClaims int
	downUntil  time.Time
	saves      atomic.Int32 // SaveResult and WriteRecords calls, failed ones included
}

var errFlaky = errors.New("test: history write failed")

func (f *flakyHistory) fail(n *int, partitioned bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if partitioned && time.Now().Before(f.downUntil) {
		return true
	}
	if *n > 0 {
		*n--
		return true
	}
	return false
}

func (f *flakyHistory) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	f.saves.Add(1)
	if f.fail(&f.failSaves, true) {
		return errFlaky
	}
	return f.Backend.SaveResult(ctx, job, r, keep)
}

// WriteRecords is the history the run store writes its records into: it fails
// like SaveResult.
func (f *flakyHistory) WriteRecords(ctx context.Context, job string, recs []backend.StoredResult, keep backend.Retention) error {
	f.saves.Add(1)
	if f.fail(&f.failSaves, true) {
		return errFlaky
	}
	return f.Backend.WriteRecords(ctx, job, recs, keep)
}

// Runs is a memory run store that writes its records through f.
func (f *flakyHistory) Runs() backend.RunStore {
	f.runsOnce.Do(func() {
		f.runs = memory.NewRunStore(backend.SystemClock{})
		f.runs.UseRecords(f)
	})
	return f.runs
}

func (f *flakyHistory) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	if f.fail(&f.failClaims, false) {
		return false, errFlaky
	}
	return f.Backend.Claim(ctx, in)
}

// byStatus counts a job's history records by status.
func byStatus(t *testing.T, s *scheduler.Scheduler, job string) map[scheduler.Status]int {
	t.Helper()
	recs, err := s.History(context.Background(), job, 0)
	require.NoError(t, err)
	out := map[scheduler.Status]int{}
	for _, r := range recs {
		out[r.Status]++
	}
	return out
}

// One failed result write (a leader election on the result stream) is written
// again: the slot's record ends ok, never running for ever.
func TestFailedResultWriteIsRetried(t *testing.T) {
	for _, leases := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "leases"}[leases]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var b backend.Backend
				f := &flakyHistory{Backend: memory.New(), failSaves: 1}
				b = f
				if !leases {
					b = plainOf{f}
				}
				s := newScheduler(t, b, "A")
				require.NoError(t, s.Every("tick", time.Minute, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxLate(5*time.Second)))
				time.Sleep(time.Minute - time.Second) // a second before the slot
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(30 * time.Second)
				assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 1}, byStatus(t, s, "tick"))
				assert.Equal(t, int32(2), f.saves.Load(), "one failed write, one retry")
				require.NoError(t, s.Stop(t.Context()))
			})
		})
	}
}

// plainOf hides the memory backend's leases: a backend that claims only.
type plainOf struct{ *flakyHistory }

func (plainOf) Runs() {}

// A handler that ends while the store is cut off (a 3 s partition, with a call
// timeout of 1 s) has its result stored once the store is back: scheduled runs with
// and without leases, and manual runs.
func TestResultStoredAfterAPartition(t *testing.T) {
	for _, leases := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "leases"}[leases]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &flakyHistory{Backend: memory.New()}
				var b backend.Backend = f
				if !leases {
					b = plainOf{f}
				}
				s := newScheduler(t, b, "A", callTimeout(time.Second))
				require.NoError(t, s.Every("work", time.Minute, func(ctx context.Context, _ scheduler.Run) error {
					time.Sleep(10 * time.Second)
					return nil
				}, scheduler.WithLease(30*time.Second), scheduler.WithMaxLate(5*time.Second)))
				time.Sleep(time.Minute - time.Second)
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(5 * time.Second) // the handler runs, the manual one too
				go func() { _, _ = s.RunNow(context.Background(), "work") }()
				time.Sleep(4 * time.Second)
				f.mu.Lock()
				f.downUntil = time.Now().Add(3 * time.Second) // both handlers end inside it
				f.mu.Unlock()
				time.Sleep(20 * time.Second)
				recs, err := s.History(t.Context(), "work", 0)
				require.NoError(t, err)
				require.Len(t, recs, 2)
				for _, r := range recs {
					assert.Equal(t, scheduler.StatusOK, r.Status, "manual %v", r.Manual)
				}
				require.NoError(t, s.Stop(t.Context()))
			})
		})
	}
}

// The record of a slot skipped by the overlap policy is stored even when the claim
// that picks who records it fails once.
func TestSkippedRecordIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyHistory{Backend: memory.New()}
		s := newScheduler(t, f, "A")
		require.NoError(t, s.Every("long", time.Minute, func(ctx context.Context, _ scheduler.Run) error {
			time.Sleep(90 * time.Second)
			return nil
		}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(10*time.Second), scheduler.WithMaxLate(5*time.Second)))
		time.Sleep(time.Minute - time.Second)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(30 * time.Second)
		f.mu.Lock()
		f.failClaims = 1 // the next slot's record
		f.mu.Unlock()
		time.Sleep(90 * time.Second)
		got := byStatus(t, s, "long")
		assert.Equal(t, 1, got[scheduler.StatusSkipped], "%v", got)
		require.NoError(t, s.Stop(t.Context()))
	})
}

// Stop writes the records still waiting until its context ends, and says how many
// it could not store.
func TestStopDrainsTheOutbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyHistory{Backend: memory.New()}
		s := newScheduler(t, plainOf{f}, "A", callTimeout(time.Second))
		require.NoError(t, s.Every("tick", time.Minute, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxLate(5*time.Second)))
		time.Sleep(time.Minute - time.Second)
		f.mu.Lock()
		f.downUntil = time.Now().Add(time.Hour)
		f.mu.Unlock()
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(5 * time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := s.Stop(ctx)
		require.ErrorIs(t, err, scheduler.ErrNotStored)
		assert.Contains(t, err.Error(), "1 records that complete a slot")

		// With the store back before the deadline, Stop stores it and returns nil.
		f2 := &flakyHistory{Backend: memory.New()}
		s2 := newScheduler(t, plainOf{f2}, "A", callTimeout(time.Second))
		require.NoError(t, s2.Every("tick", time.Minute, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxLate(5*time.Second)))
		f2.mu.Lock()
		f2.downUntil = time.Now().Add(time.Minute + 10*time.Second)
		f2.mu.Unlock()
		require.NoError(t, s2.Start(t.Context()))
		time.Sleep(time.Minute + 2*time.Second)
		ctx2, cancel2 := context.WithTimeout(t.Context(), time.Minute)
		defer cancel2()
		require.NoError(t, s2.Stop(ctx2))
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 1}, byStatus(t, s2, "tick"))
	})
}
