package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/backend/memory"
)

func TestMemoryRunStoreConformance(t *testing.T) {
	backendtest.RunLeases(t, func(t *testing.T) backend.RunStore {
		return memory.NewRunStore(backend.SystemClock{})
	})
}

// The backend's own store writes its records into the backend: the suite
// reads them through its History.
func TestMemoryBackendRunsConformance(t *testing.T) {
	backendtest.RunLeasesWithHistory(t, func(t *testing.T) (backend.RunStore, backendtest.Historian) {
		b := memory.New()
		return b.Runs(), b
	})
}

func TestMemoryBackendRuns(t *testing.T) {
	b := memory.New()
	runs := b.Runs()
	require.NotNil(t, runs)
	assert.Same(t, runs, b.Runs(), "one store per backend")
	_, ok := runs.(backend.LeaseWatcher)
	assert.True(t, ok, "the memory run store is a LeaseWatcher")
	_, ok = runs.(backend.Settler)
	assert.True(t, ok, "the memory run store is a Settler")
	var _ backend.LeaseBackend = b
	var _ backend.RecordWriter = b
}

var memSlot = time.UnixMilli(1_900_000_000_000).UTC()

func memClaim(job, token string, lease time.Duration) backend.RunClaim {
	return backend.RunClaim{Job: job, Slot: memSlot, Token: token, Instance: "i-" + token, Lease: lease, Keep: time.Hour}
}

func mustClaim(t *testing.T, s *memory.RunStore, in backend.RunClaim, want backend.ClaimOutcome) backend.ClaimResult {
	t.Helper()
	res, err := s.Claim(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, want, res.Outcome, "claim by %s", in.Token)
	return res
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The lease is judged by the store's clock, to the nanosecond: a heartbeat keeps it,
// the missing heartbeat loses it exactly at expiry.
func TestMemoryRunStoreExpiryByClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.NewRunStore(backend.SystemClock{})
		start := time.Now()
		a := mustClaim(t, s, memClaim("job", "a", 10*time.Second), backend.OutcomeWon)
		assert.Equal(t, start.Add(10*time.Second), a.Expires)

		time.Sleep(9 * time.Second)
		require.NoError(t, s.Heartbeat(t.Context(), backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}, 10*time.Second))
		time.Sleep(10*time.Second - time.Nanosecond)
		b := mustClaim(t, s, memClaim("job", "b", 10*time.Second), backend.OutcomeRunning)
		assert.Equal(t, start.Add(19*time.Second), b.Expires)

		time.Sleep(time.Nanosecond)
		assert.ErrorIs(t, s.Heartbeat(t.Context(), backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}, 10*time.Second), backend.ErrLeaseLost)
		b = mustClaim(t, s, memClaim("job", "b", 10*time.Second), backend.OutcomeWon)
		assert.Equal(t, 2, b.Attempt)
		assert.Equal(t, "i-a", b.Previous)
		assert.Equal(t, "a", b.PreviousToken)
		assert.Equal(t, 1, b.PreviousAttempt)

		again := mustClaim(t, s, memClaim("job", "b", 10*time.Second), backend.OutcomeWon)
		assert.Equal(t, b, again, "a repeated claim gets the same answer, previous holder included")
	})
}

func TestMemoryRunStoreWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.NewRunStore(backend.SystemClock{})
		mustClaim(t, s, memClaim("job", "a", 10*time.Second), backend.OutcomeWon)
		ch, err := s.WatchRun(t.Context(), "job", memSlot)
		require.NoError(t, err)

		time.Sleep(5 * time.Second)
		require.NoError(t, s.Heartbeat(t.Context(), backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}, 10*time.Second))
		synctest.Wait()
		assert.False(t, isClosed(ch), "a heartbeat is not a change of holder")

		time.Sleep(10*time.Second - time.Nanosecond) // the old expiry has passed, the new one not
		synctest.Wait()
		assert.False(t, isClosed(ch), "the heartbeat re-armed the watch")

		time.Sleep(time.Nanosecond)
		synctest.Wait()
		assert.True(t, isClosed(ch), "fires at expiry, by the store's clock")
		mustClaim(t, s, memClaim("job", "b", 10*time.Second), backend.OutcomeWon)
	})
}

func TestMemoryRunStoreWatchChanges(t *testing.T) {
	for name, change := range map[string]func(t *testing.T, s *memory.RunStore){
		"release": func(t *testing.T, s *memory.RunStore) {
			require.NoError(t, s.Release(t.Context(), backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}))
		},
		"finish": func(t *testing.T, s *memory.RunStore) {
			require.NoError(t, s.Finish(t.Context(), backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}, backend.StatusOK))
		},
		"hand-over": func(t *testing.T, s *memory.RunStore) {
			require.NoError(t, s.Settle(t.Context(), backend.Settlement{Key: backend.RunKey{Job: "job", Slot: memSlot, Token: "a"},
				Status: backend.StatusCancelled, HandOver: true}))
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memory.NewRunStore(backend.SystemClock{})
				mustClaim(t, s, memClaim("job", "a", time.Minute), backend.OutcomeWon)
				ch, err := s.WatchRun(t.Context(), "job", memSlot)
				require.NoError(t, err)
				synctest.Wait()
				require.False(t, isClosed(ch))
				change(t, s)
				synctest.Wait()
				assert.True(t, isClosed(ch), "fires at once, with no time passing")
			})
		})
	}
}

// A watch ends with its context and leaves no goroutine or timer behind: synctest
// fails the test if one is still blocked when the bubble ends.
func TestMemoryRunStoreWatchEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.NewRunStore(backend.SystemClock{})
		mustClaim(t, s, memClaim("job", "a", time.Hour), backend.OutcomeWon)
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := s.WatchRun(ctx, "job", memSlot)
		require.NoError(t, err)
		synctest.Wait()
		require.False(t, isClosed(ch))
		cancel()
		synctest.Wait()
		assert.True(t, isClosed(ch))

		_, err = s.WatchRun(ctx, "job", memSlot)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestMemoryRunStoreWatchWithoutLiveLease(t *testing.T) {
	s := memory.NewRunStore(backend.SystemClock{})
	ch, err := s.WatchRun(t.Context(), "job", memSlot)
	require.NoError(t, err)
	assert.True(t, isClosed(ch), "nothing stored: a claim may decide differently now")

	mustClaim(t, s, memClaim("job", "a", time.Minute), backend.OutcomeWon)
	require.NoError(t, s.Release(t.Context(), backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}))
	ch, err = s.WatchRun(t.Context(), "job", memSlot)
	require.NoError(t, err)
	assert.True(t, isClosed(ch), "released: a backup may take over now")
}

// A finished run is remembered for its Keep, so late instances see it done, and is
// forgotten afterwards; a live run is never forgotten.
func TestMemoryRunStoreKeep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.NewRunStore(backend.SystemClock{})
		done := memClaim("done", "a", time.Minute)
		mustClaim(t, s, done, backend.OutcomeWon)
		require.NoError(t, s.Finish(t.Context(), backend.RunKey{Job: "done", Slot: memSlot, Token: "a"}, backend.StatusOK))

		live := memClaim("live", "l", 2*time.Hour)
		mustClaim(t, s, live, backend.OutcomeWon)

		probe := func(job string) backend.RunClaim {
			in := memClaim(job, "probe", time.Minute)
			in.TakeoverOnly = true
			return in
		}
		time.Sleep(59 * time.Minute)
		mustClaim(t, s, probe("done"), backend.OutcomeDone)
		time.Sleep(3 * time.Minute)
		mustClaim(t, s, probe("done"), backend.OutcomeNone)
		mustClaim(t, s, probe("live"), backend.OutcomeRunning)

		defaultKeep := memClaim("default", "d", time.Minute)
		defaultKeep.Keep = 0
		mustClaim(t, s, defaultKeep, backend.OutcomeWon)
		require.NoError(t, s.Finish(t.Context(), backend.RunKey{Job: "default", Slot: memSlot, Token: "d"}, backend.StatusOK))
		time.Sleep(backend.DefaultRunKeep - time.Minute)
		mustClaim(t, s, probe("default"), backend.OutcomeDone)
	})
}

// Fences come from one counter: every new holder of any run gets a bigger one.
func TestMemoryRunStoreFencesGrow(t *testing.T) {
	s := memory.NewRunStore(backend.SystemClock{})
	x1 := mustClaim(t, s, memClaim("x", "x1", time.Minute), backend.OutcomeWon)
	y1 := mustClaim(t, s, memClaim("y", "y1", time.Minute), backend.OutcomeWon)
	require.NoError(t, s.Release(t.Context(), backend.RunKey{Job: "x", Slot: memSlot, Token: "x1"}))
	x2 := mustClaim(t, s, memClaim("x", "x2", time.Minute), backend.OutcomeWon)
	assert.Greater(t, y1.Fence, x1.Fence)
	assert.Greater(t, x2.Fence, y1.Fence)
}

func TestMemoryRunStoreCanceledContext(t *testing.T) {
	s := memory.NewRunStore(backend.SystemClock{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Claim(ctx, memClaim("job", "a", time.Minute))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, s.Heartbeat(ctx, backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}, time.Minute), context.Canceled)
	assert.ErrorIs(t, s.Finish(ctx, backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}, backend.StatusOK), context.Canceled)
	assert.ErrorIs(t, s.Release(ctx, backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}), context.Canceled)
	_, err = s.Active(ctx, "job")
	assert.ErrorIs(t, err, context.Canceled)
}

// failingWriter is a history that is down.
type failingWriter struct{}

var errDown = errors.New("history down")

func (failingWriter) WriteRecords(context.Context, string, []backend.StoredResult, backend.Retention) error {
	return errDown
}

// A decision whose records cannot be written is not applied: the store answers
// the writer's error and keeps the state it had.
func TestMemoryRunStoreFailedWriteChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.NewRunStore(backend.SystemClock{})
		a := mustClaim(t, s, memClaim("job", "a", time.Minute), backend.OutcomeWon)
		require.NoError(t, s.Release(t.Context(), backend.RunKey{Job: "job", Slot: memSlot, Token: "a"}))
		s.UseRecords(failingWriter{})

		_, err := s.Claim(t.Context(), memClaim("job", "b", time.Minute))
		require.ErrorIs(t, err, errDown, "a takeover records the attempt lost")
		late := memClaim("job", "l", time.Minute)
		late.Slot, late.Deadline = memSlot.Add(time.Minute), time.Now().Add(-time.Hour)
		_, err = s.Claim(t.Context(), late)
		require.ErrorIs(t, err, errDown, "a late decision")
		runs, err := s.Active(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, runs, 1, "the late slot is not stored")
		assert.Equal(t, "a", runs[0].Token, "the released run is not taken over")
		assert.Equal(t, a.Fence, runs[0].Fence)

		b := memory.NewWithClock(backend.SystemClock{})
		s.UseRecords(b)
		won := mustClaim(t, s, memClaim("job", "b", time.Minute), backend.OutcomeWon)
		assert.Equal(t, 2, won.Attempt)
		assert.Greater(t, won.Fence, a.Fence)
		_, err = s.Claim(t.Context(), late)
		require.NoError(t, err)
		hist, err := b.History(t.Context(), "job", 10)
		require.NoError(t, err)
		require.Len(t, hist, 2)
		assert.Equal(t, backend.StatusLate, hist[0].Status)
		assert.Equal(t, backend.StatusLost, hist[1].Status)
	})
}

// Every decision's record is in the backend as soon as the call returns,
// while others read History and decide at once (the store's mutex is taken
// before the backend's, never after).
func TestMemoryBackendRecordsWithState(t *testing.T) {
	b := memory.New()
	s := b.Runs().(*memory.RunStore)
	const n = 50
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := b.History(t.Context(), "job", 0)
			assert.NoError(t, err)
		}
	})
	var decided sync.WaitGroup
	for i := range n {
		decided.Go(func() {
			in := memClaim("job", fmt.Sprint("t", i), time.Minute)
			in.Slot = memSlot.Add(time.Duration(i) * time.Minute)
			if i%2 == 0 {
				in.Deadline = time.Now().Add(-time.Hour)
				res, err := s.Claim(t.Context(), in)
				assert.NoError(t, err)
				assert.Equal(t, backend.OutcomeLate, res.Outcome)
			} else {
				mustClaim(t, s, in, backend.OutcomeWon)
				assert.NoError(t, s.Settle(t.Context(), backend.Settlement{Key: in.Key(), Status: backend.StatusOK}))
			}
			hist, err := b.History(t.Context(), "job", 0)
			assert.NoError(t, err)
			found := slices.ContainsFunc(hist, func(r backend.RunRecord) bool { return r.Slot.Equal(in.Slot) })
			assert.True(t, found, "slot %d's record is in the backend once the call returned", i)
		})
	}
	decided.Wait()
	close(stop)
	wg.Wait()
	hist, err := b.History(t.Context(), "job", 0)
	require.NoError(t, err)
	assert.Len(t, hist, n, "one record per slot")
}

// UseRecords(nil) gives the store a history of its own again.
func TestMemoryRunStoreUseRecordsNil(t *testing.T) {
	s := memory.NewRunStore(nil)
	s.UseRecords(failingWriter{})
	s.UseRecords(nil)
	late := memClaim("job", "l", time.Minute)
	late.Deadline = time.Now().Add(-time.Hour)
	mustClaim(t, s, late, backend.OutcomeLate)
}
