package kvlease_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// A claimer of a slot buffered behind a running one that dies after counting
// it, before listing it: once the running slot ends, another instance's claim
// runs the slot without counting it again (it was the n-th: its win says so),
// and the next slot is stored limit.
func TestLimitCrashAfterCountedBuffered(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		for _, p := range []backend.OverlapPolicy{backend.OverlapBufferOne, backend.OverlapBufferAll} {
			t.Run(name+"/"+p.String(), func(t *testing.T) {
				a, b := st[0], st[1]
				job := "counted-buffered-" + token()
				first := limitClaim(job, 1, p, 2)
				mustClaim(t, b, first, backend.OutcomeWon)
				dieAt(a, 2, "counted")
				_, err := a.Claim(t.Context(), limitClaim(job, 2, p, 2))
				require.ErrorIs(t, err, kvlease.ErrDiedForTest, "the claimer dies after its count")
				finishAt(t, b, first, backend.StatusOK)
				res := mustClaim(t, b, limitClaim(job, 2, p, 2), backend.OutcomeWon)
				assert.True(t, res.LimitReached, "the dead claim's count is the slot's: it is the second")
				mustClaim(t, b, limitClaim(job, 3, p, 2), backend.OutcomeLimit)
			})
		}
	}
}

// A slot counted by a claimer that died, claimed again after more than 64
// later slots were counted: it may be counted again (the count errs high), but
// never runs beyond the limit: with n = 70 and 69 slots counted after the dead
// one, its late claim is the 71st count at most, never a 71st run.
func TestLimitCrashAfterCountedPastTheList(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	a := newStore(t, js, kvlease.WithBucket(bucket))
	b := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	job := "counted-past-list-" + token()
	const n = 70
	dieAt(a, 0, "counted")
	_, err := a.Claim(t.Context(), limitClaim(job, 0, backend.OverlapAllow, n))
	require.ErrorIs(t, err, kvlease.ErrDiedForTest)
	won := 0
	for k := 1; k < n; k++ {
		res := mustClaim(t, b, limitClaim(job, k, backend.OverlapAllow, n), backend.OutcomeWon)
		won++
		assert.Equal(t, k == n-1, res.LimitReached, "slot %d: the dead slot and %d others are counted", k, k)
	}
	res, err := b.Claim(t.Context(), limitClaim(job, 0, backend.OverlapAllow, n))
	require.NoError(t, err)
	assert.Equal(t, backend.OutcomeLimit, res.Outcome, "n counted: the dead slot, off the list, is refused, not run: %+v", res)
	assert.Equal(t, n-1, won, "the count errs high by the dead slot, never low")
	mustClaim(t, b, limitClaim(job, n, backend.OverlapAllow, n), backend.OutcomeLimit)
}

// Ten instances, each on its own connection, claiming the same six slots of a
// job limited to three, all at once: each slot has at most one winner, at most
// three slots are run (or buffered), exactly one claim is told it reached the
// limit, and once a slot is stored limit exactly three were counted.
func TestLimitRaceOfTen(t *testing.T) {
	t.Parallel()
	var stores []*kvlease.Store
	for range 10 {
		stores = append(stores, newStore(t, singleJS(t), kvlease.WithBucket(bucket)))
	}
	// Not the buffer policies: kvlease counts a buffered slot before it wins
	// the buffer key, so a lost race can leave a skipped slot counted (it is no
	// backend.BufferedRunCounter, and the scheduler refuses the pair).
	for _, p := range []backend.OverlapPolicy{backend.OverlapAllow, backend.OverlapSkip} {
		t.Run(p.String(), func(t *testing.T) {
			job := "race-ten-" + token()
			const n, slots = 3, 6
			var mu sync.Mutex
			winners := map[int]map[string]bool{}
			decided := map[int]backend.ClaimOutcome{}
			reached := 0
			var all []string
			var wg sync.WaitGroup
			for i, s := range stores {
				for k := range slots {
					wg.Add(1)
					go func() {
						defer wg.Done()
						in := limitClaim(job, k, p, n)
						in.Instance = string(rune('A' + i))
						res, err := s.Claim(t.Context(), in)
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						defer mu.Unlock()
						all = append(all, fmt.Sprintf("slot %d by %s: %s %s reached=%v waits=%v", k, in.Instance, res.Outcome, res.Status, res.LimitReached, res.WaitsFor))
						if res.LimitReached {
							reached++
						}
						switch res.Outcome {
						case backend.OutcomeWon, backend.OutcomeBuffered:
							if winners[k] == nil {
								winners[k] = map[string]bool{}
							}
							if res.Outcome == backend.OutcomeWon {
								winners[k][in.Instance] = true
							}
							decided[k] = backend.OutcomeWon
						case backend.OutcomeLimit:
							decided[k] = res.Outcome
						case backend.OutcomeDone:
							if res.Status == backend.StatusLimit {
								decided[k] = backend.OutcomeLimit
							}
						}
					}()
				}
			}
			wg.Wait()
			runs, limited := 0, 0
			for k := range slots {
				assert.LessOrEqual(t, len(winners[k]), 1, "slot %d: one winner: %v", k, winners[k])
				switch decided[k] {
				case backend.OutcomeWon:
					runs++
				case backend.OutcomeLimit:
					limited++
				}
			}
			assert.LessOrEqual(t, runs, n, "at most %d slots run or buffered: %v", n, decided)
			if limited > 0 {
				assert.Equal(t, n, runs, "a slot stored limit: %d were counted: %v", n, decided)
				assert.GreaterOrEqual(t, reached, 1, "the n-th slot's claims are told")
			}
			if t.Failed() {
				slices.Sort(all)
				for _, l := range all {
					t.Log(l)
				}
				active, err := stores[0].Active(t.Context(), job)
				require.NoError(t, err)
				t.Logf("active: %+v", active)
			}
		})
	}
}
