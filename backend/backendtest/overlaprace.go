package backendtest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// overlapRaceRounds and overlapRaceSlots size OverlapRace: rounds of claims of
// that many different slots of one overlap-forbidden job, all at once.
const (
	overlapRaceRounds = 12
	overlapRaceSlots  = 3
)

// testLeaseOverlapRace: claims of different slots of a job that forbids overlap,
// sent at once (a catch-up slot and the slot due at Start, on every instance):
// exactly one wins, every other one is told overlap (its slot stored skipped).
// Never two (two slots running at once), never none (every slot skipped, each
// claim having seen the others': the tie a store must break).
func testLeaseOverlapRace(t *testing.T, f *leaseFixture) {
	for round := range overlapRaceRounds {
		job := fmt.Sprintf("%s-round-%d", f.job, round)
		results := make([]backend.ClaimResult, overlapRaceSlots)
		errs := make([]error, overlapRaceSlots)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range overlapRaceSlots {
			in := f.rc(Token(), fmt.Sprintf("slot-%d", i), leaseLong)
			in.Job, in.Slot, in.Overlap = job, leaseSlot(i), backend.OverlapSkip
			wg.Go(func() {
				<-gate
				results[i], errs[i] = f.s.Claim(f.ctx, in)
			})
		}
		close(gate)
		wg.Wait()
		won := 0
		for i, r := range results {
			require.NoError(t, errs[i], "round %d, slot %d", round, i)
			switch r.Outcome {
			case backend.OutcomeWon:
				won++
			case backend.OutcomeOverlap:
			default:
				require.Failf(t, "a claim is neither won nor overlap", "round %d, slot %d: %+v", round, i, r)
			}
		}
		require.Equal(t, 1, won, "round %d: exactly one slot runs: %+v", round, results)
		runs, err := f.s.Active(f.ctx, job)
		require.NoError(t, err)
		require.Len(t, runs, 1, "round %d: one run active: %+v", round, runs)
	}
}
