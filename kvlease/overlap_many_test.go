package kvlease_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// Of n slots of an overlap-forbidden job claimed
// at once, exactly one runs; the others are told overlap (a first claim) or wait
// (a takeover). Three and four claims, each on its own store, held at both looks
// until all are there (a tie every round), on one server and on R3; with and
// without a takeover among them.
func TestOverlapTieOfThreeAndFourSlots(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		for _, n := range []int{3, 4} {
			for _, withTakeover := range []bool{false, true} {
				name := fmt.Sprintf("R%d/%d slots/takeover %v", map[bool]int{false: 1, true: 3}[cluster], n, withTakeover)
				t.Run(name, func(t *testing.T) {
					var stores []*kvlease.Store
					bucketName := bucket
					var opts []kvlease.Option
					if cluster {
						bucketName = "overlap_tie_n_r3"
						opts = append(opts, kvlease.WithReplicas(3))
					}
					opts = append(opts, kvlease.WithBucket(bucketName))
					for range n {
						js := singleJS(t)
						if cluster {
							js = clusterJS(t)
						}
						stores = append(stores, newStore(t, js, opts...))
					}
					rounds := 6
					if withTakeover {
						rounds = 2
					}
					for round := range rounds {
						job := fmt.Sprintf("tie-n-%s-%d", token(), round)
						var ins []backend.RunClaim
						if withTakeover {
							first := overlapClaim(job, 1, "dies")
							first.Lease = time.Second
							res, err := stores[0].Claim(t.Context(), first)
							require.NoError(t, err)
							require.Equal(t, backend.OutcomeWon, res.Outcome)
							js := singleJS(t)
							if cluster {
								js = clusterJS(t)
							}
							require.Eventually(t, func() bool { return lastMsgIn(t, js, bucketName, leaseKey(job, first.Slot)) == nil },
								10*time.Second, 20*time.Millisecond, "the first holder's lease key expires")
							ins = append(ins, overlapClaim(job, 1, "backup"))
						}
						for k := len(ins); k < n; k++ {
							ins = append(ins, overlapClaim(job, k+1, fmt.Sprintf("i%d", k)))
						}
						untie := tie(stores, n)
						results := raceOverlap(t, stores, ins)
						untie()
						won := 0
						for i, r := range results {
							switch {
							case r.Outcome == backend.OutcomeWon:
								won++
							case withTakeover && i == 0:
								require.Equal(t, backend.OutcomeRunning, r.Outcome, "round %d: a takeover that gives way waits: %+v", round, results)
							default:
								require.Equal(t, backend.OutcomeOverlap, r.Outcome, "round %d: claim %d: %+v", round, i, results)
							}
						}
						require.Equal(t, 1, won, "round %d: exactly one of %d runs: %+v", round, n, results)
						runs, err := stores[0].Active(t.Context(), job)
						require.NoError(t, err)
						live := 0
						for _, r := range runs {
							if r.Live {
								live++
							}
						}
						require.Equal(t, 1, live, "round %d: one live run: %+v", round, runs)
					}
				})
			}
		}
	}
}

// lastMsgIn is lastMsg in bucket b.
func lastMsgIn(t *testing.T, js jetstream.JetStream, b, key string) *jetstream.RawStreamMsg {
	t.Helper()
	st, err := js.Stream(t.Context(), "KV_"+b)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(t.Context(), "$KV."+b+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	require.NoError(t, err)
	return m
}

// Three instances each claim four slots of an
// overlap-forbidden job at once (no barrier: whatever order the server gives),
// on one server and on R3: one slot runs, once.
func TestOverlapRaceOfFourSlotsOnThreeInstances(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("R%d", map[bool]int{false: 1, true: 3}[cluster]), func(t *testing.T) {
			var stores []*kvlease.Store
			for range 3 {
				if cluster {
					stores = append(stores, newStore(t, clusterJS(t), kvlease.WithBucket("overlap_race4_r3"), kvlease.WithReplicas(3)))
				} else {
					stores = append(stores, newStore(t, singleJS(t), kvlease.WithBucket(bucket)))
				}
			}
			for round := range 20 {
				job := fmt.Sprintf("race4-%s-%d", token(), round)
				results, won := raceRound(t, stores, job, 4)
				require.Len(t, won, 1, "round %d: one slot runs: %+v", round, results)
				for _, n := range won {
					require.Equal(t, 1, n, "round %d: once", round)
				}
			}
		})
	}
}
