package kvlease_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// bufferClaim is a claim of slot k (minutes) of job under p, with cap.
func bufferClaim(job string, k int, p backend.OverlapPolicy, cap int) backend.RunClaim {
	in := overlapClaim(job, k, "i"+token()[:4])
	in.Overlap, in.BufferCap = p, cap
	return in
}

// dieAt has s stop at step of slot k's claims (or Retry), once.
func dieAt(s *kvlease.Store, k int, step string) {
	var once sync.Once
	slot := overlapClaim("", k, "").Slot
	kvlease.OnBufferStepForTest(s, func(_ string, at time.Time, st string) bool {
		died := false
		if st == step && at.Equal(slot) {
			once.Do(func() { died = true })
		}
		return died
	})
}

func bufferedAt(t *testing.T, s *kvlease.Store, job string, k int) (backend.ActiveRun, bool) {
	t.Helper()
	runs, err := s.Active(t.Context(), job)
	require.NoError(t, err)
	for _, r := range runs {
		if r.Slot.Equal(overlapClaim(job, k, "").Slot) {
			return r, true
		}
	}
	return backend.ActiveRun{}, false
}

func finishAt(t *testing.T, s *kvlease.Store, in backend.RunClaim, st backend.Status) {
	t.Helper()
	require.NoError(t, s.Finish(t.Context(), in.Key(), st))
}

// bufferStores are two stores on their own connections, on one server and on R3.
func bufferStores(t *testing.T) map[string][2]*kvlease.Store {
	r3 := []kvlease.Option{kvlease.WithBucket("buffer_r3"), kvlease.WithReplicas(3)}
	return map[string][2]*kvlease.Store{
		"R1": {newStore(t, singleJS(t), kvlease.WithBucket(bucket)), newStore(t, singleJS(t), kvlease.WithBucket(bucket))},
		"R3": {newStore(t, clusterJS(t), r3...), newStore(t, clusterJS(t), r3...)},
	}
}

// A claimer that dies between listing its slot in the job's buffer key and
// writing its run record leaves a buffered slot: it counts against the cap, the
// next claim of it (another instance's) stores its record and waits, and it runs
// once the run before it ends. Nothing blocks for ever.
func TestBufferCrashAfterListed(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "crash-listed-" + token()
			one := backend.OverlapBufferOne
			first := bufferClaim(job, 1, one, 0)
			mustClaim(t, b, first, backend.OutcomeWon)

			dieAt(a, 2, "listed")
			dead := bufferClaim(job, 2, one, 0)
			_, err := a.Claim(t.Context(), dead)
			require.ErrorIs(t, err, kvlease.ErrDiedForTest)
			r, ok := bufferedAt(t, b, job, 2)
			require.True(t, ok, "Active lists the slot listed without its record")
			assert.True(t, r.Buffered)
			assert.Equal(t, dead.Token, r.Token)

			mustClaim(t, b, bufferClaim(job, 3, one, 0), backend.OutcomeOverlap) // the listed slot fills the cap
			res := mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered)
			assert.True(t, res.WaitsFor.Equal(first.Slot), "waits for slot 1: %+v", res)
			r, ok = bufferedAt(t, b, job, 2)
			require.True(t, ok, "the next claim stored the record")
			assert.True(t, r.Buffered)
			assert.Equal(t, dead.Token, r.Token, "for the claim that listed it")

			finishAt(t, b, first, backend.StatusOK)
			won := mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeWon)
			assert.Equal(t, 1, won.Attempt)
		})
	}
}

// The same death, and no other claim of the slot: a claim of a later slot that
// waits for it stores its record.
func TestBufferCrashAfterListedCompletedByALaterSlot(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "crash-listed-later-" + token()
			js, bkt := bucketOf(t, name)
			all := backend.OverlapBufferAll
			first := bufferClaim(job, 1, all, 3)
			mustClaim(t, b, first, backend.OutcomeWon)
			dieAt(a, 2, "listed")
			_, err := a.Claim(t.Context(), bufferClaim(job, 2, all, 3))
			require.ErrorIs(t, err, kvlease.ErrDiedForTest)
			mustClaim(t, b, bufferClaim(job, 3, all, 3), backend.OutcomeBuffered)
			finishAt(t, b, first, backend.StatusOK)
			res := mustClaim(t, b, bufferClaim(job, 3, all, 3), backend.OutcomeBuffered)
			assert.True(t, res.WaitsFor.Equal(overlapClaim(job, 2, "").Slot), "slot 3 waits for the older one: %+v", res)
			r, ok := bufferedAt(t, b, job, 2)
			require.True(t, ok, "Active lists it")
			assert.True(t, r.Buffered)
			m := lastMsgIn(t, js, bkt, runKey(job, r.Slot))
			require.NotNil(t, m, "stored by the claim that waits for it")
			adopt := bufferClaim(job, 2, all, 3)
			adopt.TakeoverOnly = true
			mustClaim(t, b, adopt, backend.OutcomeWon)
		})
	}
}

// A claimer that dies after taking its slot off the list, before its run record
// says running, leaves its lease key in flight: others see running, a later slot
// is buffered behind it, and once the lease expires the next claim takes the slot
// (attempt 1): it is never lost.
func TestBufferCrashAfterUnlisted(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "crash-unlisted-" + token()
			one := backend.OverlapBufferOne
			first := bufferClaim(job, 1, one, 0)
			mustClaim(t, b, first, backend.OutcomeWon)
			mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered)
			finishAt(t, b, first, backend.StatusOK)

			dieAt(a, 2, "unlisted")
			dead := bufferClaim(job, 2, one, 0)
			dead.Lease = time.Second
			_, err := a.Claim(t.Context(), dead)
			require.ErrorIs(t, err, kvlease.ErrDiedForTest)
			mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeRunning)
			res := mustClaim(t, b, bufferClaim(job, 3, one, 0), backend.OutcomeBuffered)
			assert.True(t, res.WaitsFor.Equal(dead.Slot), "slot 3 waits for the claim in flight: %+v", res)

			var won backend.ClaimResult
			require.Eventually(t, func() bool {
				in := bufferClaim(job, 2, one, 0)
				var err error
				won, err = b.Claim(t.Context(), in)
				require.NoError(t, err)
				if won.Outcome == backend.OutcomeWon {
					finishAt(t, b, in, backend.StatusOK)
				}
				return won.Outcome == backend.OutcomeWon
			}, 10*time.Second, 50*time.Millisecond, "the slot is taken once the dead claim's lease expires")
			assert.Equal(t, 1, won.Attempt)
			mustClaim(t, b, bufferClaim(job, 3, one, 0), backend.OutcomeWon)
		})
	}
}

// A withdrawal that dies after taking its slot off the list, before its run
// record: the Finish was never answered, and the slot, first in line, runs once
// nothing blocks it; a later slot does not wait for it in the list, but never
// runs beside it.
func TestBufferCrashWithdrawing(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "crash-withdraw-" + token()
			one := backend.OverlapBufferOne
			first := bufferClaim(job, 1, one, 0)
			mustClaim(t, b, first, backend.OutcomeWon)
			second := bufferClaim(job, 2, one, 0)
			mustClaim(t, a, second, backend.OutcomeBuffered)
			dieAt(a, 2, "unlisted")
			require.ErrorIs(t, a.Finish(t.Context(), second.Key(), backend.StatusCancelled), kvlease.ErrDiedForTest)
			r, ok := bufferedAt(t, b, job, 2)
			require.True(t, ok, "still stored buffered")
			assert.True(t, r.Buffered)

			res := mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered)
			assert.True(t, res.WaitsFor.Equal(first.Slot), "waits for the run: %+v", res)
			third := bufferClaim(job, 3, one, 0)
			mustClaim(t, b, third, backend.OutcomeBuffered) // the cap has room again
			finishAt(t, b, first, backend.StatusOK)
			won := bufferClaim(job, 2, one, 0)
			mustClaim(t, b, won, backend.OutcomeWon)
			mustClaim(t, b, bufferClaim(job, 3, one, 0), backend.OutcomeBuffered)
			finishAt(t, b, won, backend.StatusOK)
			mustClaim(t, b, bufferClaim(job, 3, one, 0), backend.OutcomeWon)
		})
	}
}

// A Retry that dies after marking its retry in the buffer key, before the run
// record: the attempt's lease runs out, a backup takes the run over, and the
// mark, stale, keeps nothing waiting once that run ends.
func TestBufferCrashAfterRetryMarked(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "crash-marked-" + token()
			one := backend.OverlapBufferOne
			first := bufferClaim(job, 1, one, 0)
			first.Lease = time.Second
			mustClaim(t, a, first, backend.OutcomeWon)
			dieAt(a, 1, "marked")
			require.ErrorIs(t, a.Retry(t.Context(), first.Key(), 0, time.Minute), kvlease.ErrDiedForTest)
			mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered)

			backup := bufferClaim(job, 1, one, 0)
			require.Eventually(t, func() bool {
				res, err := b.Claim(t.Context(), backup)
				require.NoError(t, err)
				return res.Outcome == backend.OutcomeWon
			}, 10*time.Second, 50*time.Millisecond, "a backup takes the run over")
			mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered)
			finishAt(t, b, backup, backend.StatusOK)
			mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeWon)
		})
	}
}

// Of n slots of a buffer job claimed at once, each claim on its own store and
// held at both looks until all are there (a tie), exactly one runs and the
// others are buffered; then, each time the run ends and every store claims every
// buffered slot at once, exactly one runs, the oldest. On one server and on R3.
func TestBufferTie(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("R%d/%d slots", map[bool]int{false: 1, true: 3}[cluster], n), func(t *testing.T) {
				t.Parallel()
				var stores []*kvlease.Store
				for range n {
					if cluster {
						stores = append(stores, newStore(t, clusterJS(t), kvlease.WithBucket("buffer_tie_r3"), kvlease.WithReplicas(3)))
					} else {
						stores = append(stores, newStore(t, singleJS(t), kvlease.WithBucket(bucket)))
					}
				}
				for round := range 4 {
					job := fmt.Sprintf("buffer-tie-%s-%d", token(), round)
					var ins []backend.RunClaim
					for k := range n {
						ins = append(ins, bufferClaim(job, k+1, backend.OverlapBufferAll, n))
					}
					untie := tie(stores, n)
					results := raceOverlap(t, stores, ins)
					untie()
					running := wonOf(t, ins, results, round)
					for left := n - 1; left > 0; left-- {
						runs, err := stores[0].Active(t.Context(), job)
						require.NoError(t, err)
						var buffered []int
						for _, r := range runs {
							if r.Buffered {
								buffered = append(buffered, int(r.Slot.Sub(ins[0].Slot)/time.Minute))
							}
						}
						require.Len(t, buffered, left, "round %d: %+v", round, runs)
						finishAt(t, stores[0], running, backend.StatusOK)
						var on []*kvlease.Store
						var claims []backend.RunClaim
						for _, s := range stores {
							for _, k := range buffered {
								on, claims = append(on, s), append(claims, bufferClaim(job, k+1, backend.OverlapBufferAll, n))
							}
						}
						results := raceOverlap(t, on, claims)
						running = wonOf(t, claims, results, round)
						require.True(t, running.Slot.Equal(ins[buffered[0]].Slot), "round %d: the oldest buffered slot runs: %v, won %v", round, buffered, running.Slot)
					}
					finishAt(t, stores[0], running, backend.StatusOK)
				}
			})
		}
	}
}

// Three instances each claim four slots of a buffer job at once (no barrier:
// whatever order the server gives), then, each time the run ends, every buffered
// slot at once, on one server and on R3: one slot runs at a time, each once, the
// buffered ones oldest first, and none is lost.
func TestBufferRaceOfFourSlotsOnThreeInstances(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("R%d", map[bool]int{false: 1, true: 3}[cluster]), func(t *testing.T) {
			t.Parallel()
			var stores []*kvlease.Store
			for range 3 {
				if cluster {
					stores = append(stores, newStore(t, clusterJS(t), kvlease.WithBucket("buffer_race4_r3"), kvlease.WithReplicas(3)))
				} else {
					stores = append(stores, newStore(t, singleJS(t), kvlease.WithBucket(bucket)))
				}
			}
			const slots = 4
			for round := range 5 {
				job := fmt.Sprintf("buffer-race4-%s-%d", token(), round)
				claimAll := func(ks []int) backend.RunClaim {
					var on []*kvlease.Store
					var ins []backend.RunClaim
					for _, s := range stores {
						for _, k := range ks {
							on, ins = append(on, s), append(ins, bufferClaim(job, k, backend.OverlapBufferAll, slots))
						}
					}
					return wonOf(t, ins, raceOverlap(t, on, ins), round)
				}
				ran := map[int64]bool{}
				running := claimAll([]int{1, 2, 3, 4})
				for {
					require.False(t, ran[running.Slot.UnixMilli()], "round %d: a slot runs once", round)
					ran[running.Slot.UnixMilli()] = true
					runs, err := stores[1].Active(t.Context(), job)
					require.NoError(t, err)
					var buffered []int
					for _, r := range runs {
						switch {
						case r.Buffered:
							buffered = append(buffered, int(r.Slot.Sub(overlapClaim(job, 0, "").Slot)/time.Minute))
						case r.Live:
							require.True(t, r.Slot.Equal(running.Slot), "round %d: one live run: %+v", round, runs)
						}
					}
					finishAt(t, stores[2], running, backend.StatusOK)
					if len(buffered) == 0 {
						break
					}
					running = claimAll(buffered)
					require.True(t, running.Slot.Equal(overlapClaim(job, buffered[0], "").Slot), "round %d: the oldest buffered runs: %v", round, buffered)
				}
				require.Len(t, ran, slots, "round %d: every slot ran", round)
			}
		})
	}
}

// wonOf requires exactly one of results to be won and every other buffered or
// running (another store's claim of the slot won), and returns the won claim.
func wonOf(t *testing.T, ins []backend.RunClaim, results []backend.ClaimResult, round int) backend.RunClaim {
	t.Helper()
	var won []backend.RunClaim
	for i, r := range results {
		switch r.Outcome {
		case backend.OutcomeWon:
			won = append(won, ins[i])
		case backend.OutcomeBuffered, backend.OutcomeRunning:
		default:
			require.Failf(t, "neither won nor buffered", "round %d, claim %d: %+v", round, i, r)
		}
	}
	require.Len(t, won, 1, "round %d: exactly one runs: %+v", round, results)
	return won[0]
}

// The layout of a buffered slot: the job's buffer key lists it (no TTL), its run
// record is in state buffered with attempt 1 (what a release that predates the
// state reads as done) and no TTL, and it has no lease key; once claimed, the
// buffer key is gone.
func TestBufferLayout(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job := "layout-" + token()
	one := backend.OverlapBufferOne
	first := bufferClaim(job, 1, one, 0)
	mustClaim(t, s, first, backend.OutcomeWon)
	second := bufferClaim(job, 2, one, 0)
	mustClaim(t, s, second, backend.OutcomeBuffered)

	m := lastMsg(t, js, kvlease.BufferKeyForTest(job))
	require.NotNil(t, m, "the buffer key")
	assert.Empty(t, m.Header.Get(jetstream.MsgTTLHeader), "kept while it lists a slot")
	var buf struct {
		Slots []struct {
			SlotMS int64  `json:"slot_ms"`
			Token  string `json:"token"`
		} `json:"slots"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &buf))
	require.Len(t, buf.Slots, 1)
	assert.Equal(t, second.Slot.UnixMilli(), buf.Slots[0].SlotMS)
	assert.Equal(t, second.Token, buf.Slots[0].Token)

	m = lastMsg(t, js, runKey(job, second.Slot))
	require.NotNil(t, m, "the run record")
	assert.Empty(t, m.Header.Get(jetstream.MsgTTLHeader), "never forgotten while buffered")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(m.Data, &rec))
	assert.Equal(t, "buffered", rec["state"])
	assert.EqualValues(t, 1, rec["attempt"], "an older release refuses an attempt below 1")
	assert.Nil(t, lastMsg(t, js, leaseKey(job, second.Slot)), "no lease key")

	finishAt(t, s, first, backend.StatusOK)
	mustClaim(t, s, bufferClaim(job, 2, one, 0), backend.OutcomeWon)
	m = lastMsg(t, js, kvlease.BufferKeyForTest(job))
	assert.True(t, m == nil || m.Header.Get("KV-Operation") == "PURGE", "the empty buffer key is purged: %+v", m)
}

// The requests of the buffer policies on one server, counted at the server (each
// a round trip, but a chained first claim's two writes, sent together): the
// first claim of an overlap-allowing job costs what it did (its two chained
// writes, one round trip); a buffer job's claims cost more. Run with -v to read
// them.
//
//	go test ./kvlease/ -run TestBufferRoundTrips -v
func TestBufferRoundTrips(t *testing.T) {
	t.Parallel()
	a, b, sp, conns := holderAndBackup(t, "buffer_trips")
	job := "trips-" + token()
	one := backend.OverlapBufferOne
	count := func(what string, f func()) int64 {
		n := sp.count(t, conns, f)
		t.Logf("%s: %d requests", what, n)
		return n
	}
	// The first claim of a store reads the server's clock; the second is blind.
	mustClaim(t, a, claimOf(job+"-allow", overlapClaim("", 1, "").Slot, token(), time.Minute), backend.OutcomeWon)
	allow := claimOf(job+"-allow", overlapClaim("", 2, "").Slot, token(), time.Minute)
	assert.EqualValues(t, 2, count("first claim, overlap allowed", func() { mustClaim(t, a, allow, backend.OutcomeWon) }))

	skip := overlapClaim(job+"-skip", 1, "i-skip")
	count("first claim under OverlapSkip, nothing else held (for comparison)", func() { mustClaim(t, a, skip, backend.OutcomeWon) })
	first := bufferClaim(job, 1, one, 0)
	count("first claim under a buffer policy, nothing else held", func() { mustClaim(t, a, first, backend.OutcomeWon) })
	second := bufferClaim(job, 2, one, 0)
	assert.LessOrEqual(t, count("first claim buffered behind one run", func() { mustClaim(t, b, second, backend.OutcomeBuffered) }), int64(9))
	count("claim of the buffered slot while the run holds the job", func() { mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered) })
	count("first claim skipped, the cap reached", func() { mustClaim(t, b, bufferClaim(job, 3, one, 0), backend.OutcomeOverlap) })
	count("retry of a run claimed under a buffer policy", func() { require.NoError(t, a.Retry(t.Context(), first.Key(), time.Hour, time.Hour)) })
	count("claim of the buffered slot behind a stored retry", func() { mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeBuffered) })
	count("withdraw", func() { finishAt(t, b, second, backend.StatusCancelled) })

	job2 := "trips2-" + token()
	first = bufferClaim(job2, 1, one, 0)
	mustClaim(t, a, first, backend.OutcomeWon)
	mustClaim(t, b, bufferClaim(job2, 2, one, 0), backend.OutcomeBuffered)
	finishAt(t, a, first, backend.StatusOK)
	assert.LessOrEqual(t, count("claim of a buffered slot once the run ended", func() { mustClaim(t, b, bufferClaim(job2, 2, one, 0), backend.OutcomeWon) }), int64(12))
}

// bucketOf is a JetStream on the server of bufferStores's stores named name,
// and their bucket.
func bucketOf(t *testing.T, name string) (jetstream.JetStream, string) {
	if name == "R3" {
		return clusterJS(t), "buffer_r3"
	}
	return singleJS(t), bucket
}

// The watch of a buffered slot fires when the token that buffered it withdraws
// it (its Finish purges the slot's lease key), on one server and on R3; Release
// and Heartbeat of a buffered slot change nothing.
func TestBufferWatchWithdrawn(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "watch-withdrawn-" + token()
			one := backend.OverlapBufferOne
			mustClaim(t, a, bufferClaim(job, 1, one, 0), backend.OutcomeWon)
			second := bufferClaim(job, 2, one, 0)
			mustClaim(t, a, second, backend.OutcomeBuffered)
			ch, err := b.WatchRun(t.Context(), job, second.Slot)
			require.NoError(t, err)
			require.NoError(t, a.Release(t.Context(), second.Key()), "nothing to release")
			require.ErrorIs(t, a.Heartbeat(t.Context(), second.Key(), time.Minute), backend.ErrLeaseLost)
			select {
			case <-ch:
				require.Fail(t, "the watch fired while the slot waits")
			default:
			}
			finishAt(t, a, second, backend.StatusCancelled)
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				require.Fail(t, "the watch of a withdrawn slot fires")
			}
			res := mustClaim(t, b, bufferClaim(job, 2, one, 0), backend.OutcomeDone)
			assert.Equal(t, backend.StatusCancelled, res.Status)
			require.NoError(t, a.Finish(t.Context(), second.Key(), backend.StatusCancelled), "a repeat")
		})
	}
}

// A stale entry: the claimer that listed slot 2 dies before its run record, and
// an overlap-allowing claim (a paused job's, which reads no buffer key) wins the
// slot meanwhile. Once that run ends the entry is dropped by the next claim that
// meets it at the cap: it neither blocks nor counts for ever.
func TestBufferStaleEntry(t *testing.T) {
	t.Parallel()
	for name, st := range bufferStores(t) {
		t.Run(name, func(t *testing.T) {
			a, b := st[0], st[1]
			job := "stale-" + token()
			one := backend.OverlapBufferOne
			first := bufferClaim(job, 1, one, 0)
			mustClaim(t, b, first, backend.OutcomeWon)
			dieAt(a, 2, "listed")
			_, err := a.Claim(t.Context(), bufferClaim(job, 2, one, 0))
			require.ErrorIs(t, err, kvlease.ErrDiedForTest)
			paused := bufferClaim(job, 2, backend.OverlapAllow, 0)
			mustClaim(t, b, paused, backend.OutcomeWon)
			finishAt(t, b, paused, backend.StatusPaused)
			finishAt(t, b, first, backend.StatusOK)

			third := bufferClaim(job, 3, one, 0)
			mustClaim(t, b, third, backend.OutcomeWon)
			runs, err := b.Active(t.Context(), job)
			require.NoError(t, err)
			for _, r := range runs {
				assert.False(t, r.Buffered, "no slot left buffered: %+v", runs)
			}
			mustClaim(t, b, bufferClaim(job, 4, one, 0), backend.OutcomeBuffered)
		})
	}
}
