package kvlease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// barrier holds the callers of wait until n of them are there.
type barrier struct {
	mu      sync.Mutex
	n, seen int
	open    chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) wait() {
	b.mu.Lock()
	b.seen++
	if b.seen == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	<-b.open
}

// tie makes n claims of an overlap-forbidden job on stores tie: each waits for the
// others after its first look at the job's other slots, before it writes its lease
// key (so each passed that look), and again after it stored its lease key (so each
// sees all the others' at its second look).
func tie(stores []*kvlease.Store, n int) (untie func()) {
	look, wrote := newBarrier(n), newBarrier(n)
	for _, s := range stores {
		kvlease.OnOverlapForTest(s, func(_ string, _ time.Time, after bool) {
			if after {
				wrote.wait()
			} else {
				look.wait()
			}
		})
	}
	return func() {
		for _, s := range stores {
			kvlease.OnOverlapForTest(s, nil)
		}
	}
}

// overlapClaim is a claim of slot k (minutes) of job, overlap forbidden.
func overlapClaim(job string, k int, instance string) backend.RunClaim {
	return backend.RunClaim{
		Job: job, Slot: time.UnixMilli(1_900_000_000_000 + int64(k)*60_000).UTC(), Token: token(), Instance: instance,
		Lease: time.Minute, Deadline: time.Now().Add(time.Hour), Keep: time.Hour, Overlap: backend.OverlapSkip,
	}
}

// raceOverlap claims ins at once, each on its own store, and returns the results.
// raceRound races, at once, every store's claim of each of job's first slots (an
// overlap-forbidding claim per store and slot), and counts the won answers per slot.
func raceRound(t *testing.T, stores []*kvlease.Store, job string, slots int) ([]backend.ClaimResult, map[time.Time]int) {
	t.Helper()
	var on []*kvlease.Store
	var ins []backend.RunClaim
	for i, s := range stores {
		for slot := 1; slot <= slots; slot++ {
			on, ins = append(on, s), append(ins, overlapClaim(job, slot, fmt.Sprintf("i%d", i)))
		}
	}
	results := raceOverlap(t, on, ins)
	won := map[time.Time]int{}
	for i, r := range results {
		if r.Outcome == backend.OutcomeWon {
			won[ins[i].Slot]++
		}
	}
	return results, won
}

func raceOverlap(t *testing.T, stores []*kvlease.Store, ins []backend.RunClaim) []backend.ClaimResult {
	t.Helper()
	results := make([]backend.ClaimResult, len(ins))
	errs := make([]error, len(ins))
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range ins {
		wg.Go(func() {
			<-gate
			results[i], errs[i] = stores[i].Claim(t.Context(), ins[i])
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "claim %d", i)
	}
	return results
}

// TestOverlapTie: two claims of two slots of an OverlapSkip job (the newest missed
// slot a catch-up claims and the slot due at Start), each on its own store, both
// held after writing their lease keys until the other has written its own: a tie
// every round. Both used to back off, each seeing the other's live lease, and the
// two slots were stored skipped: nothing ran. Of two claims in flight the one whose
// lease key was stored first goes on: exactly one wins per round, the other is
// told overlap, and its slot is stored skipped.
func TestOverlapTie(t *testing.T) {
	t.Parallel()
	t.Run("R1", func(t *testing.T) {
		t.Parallel()
		testOverlapTie(t, []*kvlease.Store{
			newStore(t, singleJS(t), kvlease.WithBucket(bucket)),
			newStore(t, singleJS(t), kvlease.WithBucket(bucket)),
		})
	})
	t.Run("R3", func(t *testing.T) {
		t.Parallel()
		opts := []kvlease.Option{kvlease.WithBucket("overlap_tie_r3"), kvlease.WithReplicas(3)}
		testOverlapTie(t, []*kvlease.Store{newStore(t, clusterJS(t), opts...), newStore(t, clusterJS(t), opts...)})
	})
}

func testOverlapTie(t *testing.T, stores []*kvlease.Store) {
	const rounds = 20
	for round := range rounds {
		job := fmt.Sprintf("tie-%s-%d", token(), round)
		ins := []backend.RunClaim{overlapClaim(job, 1, "a"), overlapClaim(job, 2, "b")}
		untie := tie(stores, 2)
		results := raceOverlap(t, stores, ins)
		untie()
		won, overlap := 0, 0
		for _, r := range results {
			switch r.Outcome {
			case backend.OutcomeWon:
				won++
			case backend.OutcomeOverlap:
				overlap++
			}
		}
		require.Equal(t, 1, won, "round %d: exactly one wins: %+v", round, results)
		require.Equal(t, 1, overlap, "round %d: the other is told overlap: %+v", round, results)

		// The stored state agrees: one run active, the other slot decided skipped.
		runs, err := stores[0].Active(t.Context(), job)
		require.NoError(t, err)
		require.Len(t, runs, 1, "round %d", round)
		for i, r := range results {
			again, err := stores[1-i].Claim(t.Context(), overlapClaim(job, i+1, "late"))
			require.NoError(t, err)
			if r.Outcome == backend.OutcomeWon {
				assert.Equal(t, backend.OutcomeRunning, again.Outcome, "round %d: the winner's slot runs", round)
				assert.True(t, runs[0].Slot.Equal(ins[i].Slot))
			} else {
				assert.Equal(t, backend.OutcomeDone, again.Outcome, "round %d: the other slot is decided", round)
				assert.Equal(t, backend.StatusSkipped, again.Status)
			}
		}
	}
}

// TestOverlapTieTakeover: the tie between a takeover of an expired run (its run
// record names the previous holder) and a first claim of another slot: exactly one
// goes on; a takeover that gives way waits (running), a first claim is skipped.
func TestOverlapTieTakeover(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	stores := []*kvlease.Store{
		newStore(t, singleJS(t), kvlease.WithBucket(bucket)),
		newStore(t, singleJS(t), kvlease.WithBucket(bucket)),
	}
	for round := range 3 {
		job := fmt.Sprintf("tie-takeover-%s-%d", token(), round)
		first := overlapClaim(job, 1, "dies")
		first.Lease = time.Second
		res, err := stores[0].Claim(t.Context(), first)
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeWon, res.Outcome)

		takeover := overlapClaim(job, 1, "backup")
		fresh := overlapClaim(job, 2, "fresh")
		// The first holder's lease expires, and the marker it leaves (a first
		// claim's look would wait for the backup it announces).
		require.Eventually(t, func() bool { return lastMsg(t, js, leaseKey(job, first.Slot)) == nil },
			10*time.Second, 20*time.Millisecond, "the first holder's lease key expires")

		untie := tie(stores, 2)
		results := raceOverlap(t, stores, []backend.RunClaim{takeover, fresh})
		untie()
		tookOver, freshWon := results[0].Outcome == backend.OutcomeWon, results[1].Outcome == backend.OutcomeWon
		require.True(t, tookOver != freshWon, "round %d: exactly one goes on: %+v", round, results)
		if tookOver {
			assert.Equal(t, 2, results[0].Attempt)
			assert.Equal(t, backend.OutcomeOverlap, results[1].Outcome)
		} else {
			assert.Equal(t, backend.OutcomeRunning, results[0].Outcome, "the takeover waits")
		}
	}
}

// TestOverlapCheckOnARepeatedClaim: a claim of an overlap-forbidden job's slot
// wrote its lease key and its call ended before it looked at the job's other slots
// (WriteLeaseForTest: the lease key alone). Another slot runs meanwhile. Asked
// again with the same token, the claim used to finish itself ("we hold the lease
// key") without the overlap check: two slots ran at once. It now looks first: it
// is told overlap, its slot is stored skipped and its lease key ended.
func TestOverlapCheckOnARepeatedClaim(t *testing.T) {
	t.Parallel()
	s := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	job := "repeat-" + token()
	running := overlapClaim(job, 2, "b")
	res, err := s.Claim(ctx, running)
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeWon, res.Outcome)

	repeated := overlapClaim(job, 1, "a")
	require.NoError(t, kvlease.WriteLeaseForTest(ctx, s, job, repeated.Slot, repeated.Token))
	res, err = s.Claim(ctx, repeated)
	require.NoError(t, err)
	assert.Equal(t, backend.OutcomeOverlap, res.Outcome, "slot 2 runs: slot 1 may not")
	runs, err := s.Active(ctx, job)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.True(t, runs[0].Slot.Equal(running.Slot))

	// With nothing else running, the same repeated claim finishes itself.
	job = "repeat-alone-" + token()
	alone := overlapClaim(job, 1, "a")
	require.NoError(t, kvlease.WriteLeaseForTest(ctx, s, job, alone.Slot, alone.Token))
	res, err = s.Claim(ctx, alone)
	require.NoError(t, err)
	assert.Equal(t, backend.OutcomeWon, res.Outcome)
}

// TestOverlapRaceOfInstances: three instances (stores) each claim both slots of
// an overlap-forbidden job at once, as at Start (catch-up and loop), many rounds:
// one slot runs (one won, its other claims running), the other is stored skipped.
// A first look that gave way to a claim in flight let a third instance store the
// slot of that claim skipped while it was between its writes: nothing ran.
func TestOverlapRaceOfInstances(t *testing.T) {
	t.Parallel()
	var stores []*kvlease.Store
	for range 3 {
		stores = append(stores, newStore(t, singleJS(t), kvlease.WithBucket(bucket)))
	}
	for round := range 30 {
		job := fmt.Sprintf("instances-%s-%d", token(), round)
		results, won := raceRound(t, stores, job, 2)
		require.Len(t, won, 1, "round %d: one slot runs: %+v", round, results)
		runs, err := stores[0].Active(t.Context(), job)
		require.NoError(t, err)
		require.Len(t, runs, 1, "round %d", round)
		for slot := range won {
			assert.Equal(t, 1, won[slot], "round %d: once", round)
			assert.True(t, runs[0].Slot.Equal(slot))
		}
	}
}
