package backendtest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// bufferer skips the case unless f's store implements the buffer policies.
func (f *leaseFixture) bufferer() {
	f.t.Helper()
	if b, ok := f.s.(backend.OverlapBufferer); !ok || !b.BuffersOverlap() {
		f.t.Skipf("%T does not implement OverlapBufferOne and OverlapBufferAll: nothing to check", f.s)
	}
}

// bufferClaim is a claim of the k-th slot by token under p (with cap for
// OverlapBufferAll).
func (f *leaseFixture) bufferClaim(k int, token string, p backend.OverlapPolicy, cap int) backend.RunClaim {
	in := f.rc(token, "i-"+token[:4], leaseLong)
	in.Slot, in.Overlap, in.BufferCap = leaseSlot(k), p, cap
	return in
}

func (f *leaseFixture) finishAt(k int, token string, st backend.Status) error {
	return f.s.Finish(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(k), Token: token}, st)
}

// requireBuffered requires res to be a buffered answer waiting for slot k.
func requireBuffered(t *testing.T, res backend.ClaimResult, k int, why string) {
	t.Helper()
	require.Equal(t, backend.OutcomeBuffered, res.Outcome, "%s: %+v", why, res)
	require.True(t, res.WaitsFor.Equal(leaseSlot(k)), "%s: waits for slot %d: %+v", why, k, res)
}

// A slot due while another runs is stored buffered, for every claimer and past
// its deadline; a further one is skipped; the buffered slot holds no lease; once
// the run ends any token wins it, as a first claim with a bigger fence.
func testBufferOne(t *testing.T, f *leaseFixture) {
	f.bufferer()
	one := backend.OverlapBufferOne
	t1, t2, t3 := "t1"+Token(), "t2"+Token(), "t3"+Token()
	first := f.outcome(f.bufferClaim(1, t1, one, 0), backend.OutcomeWon)

	w := f.claim(f.bufferClaim(2, t2, one, 0))
	requireBuffered(t, w, 1, "slot 2 while slot 1 runs")
	assert.Equal(t, "i-"+t1[:4], w.Holder, "the holder it waits for")
	requireBuffered(t, f.claim(f.bufferClaim(2, t3, one, 0)), 1, "another claimer of slot 2")
	late := f.bufferClaim(2, t3, one, 0)
	late.Deadline = time.Unix(1, 0)
	requireBuffered(t, f.claim(late), 1, "a buffered slot keeps no deadline")
	r, ok := f.activeAt(2)
	require.True(t, ok, "Active lists the buffered slot")
	assert.True(t, r.Buffered, "listed buffered: %+v", r)
	assert.False(t, r.Live, "a buffered slot holds no lease: %+v", r)
	assert.Equal(t, t2, r.Token, "the token that buffered it")
	require.ErrorIs(t, f.heartbeatAt(2, t2), backend.ErrLeaseLost, "a buffered slot has no lease to extend")
	if rt, ok := f.s.(backend.Retrier); ok {
		require.ErrorIs(t, rt.Retry(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(2), Token: t2}, retryShort, retryLong), backend.ErrStaleToken,
			"a buffered slot has no attempt to retry")
	}

	// A third slot: one is buffered already.
	f.outcome(f.bufferClaim(3, "t4"+Token(), one, 0), backend.OutcomeOverlap)
	d := f.outcome(f.bufferClaim(3, Token(), one, 0), backend.OutcomeDone)
	assert.Equal(t, backend.StatusSkipped, d.Status)

	require.NoError(t, f.finishAt(1, t1, backend.StatusOK))
	won := f.outcome(f.bufferClaim(2, t3, one, 0), backend.OutcomeWon)
	assert.Equal(t, 1, won.Attempt, "a buffered slot's first attempt")
	assert.Greater(t, won.Fence, first.Fence, "a new holder, a bigger fence")
	f.outcome(f.bufferClaim(2, t3, one, 0), backend.OutcomeWon) // a repeat
	f.outcome(f.bufferClaim(2, t2, one, 0), backend.OutcomeRunning)
	require.NoError(t, f.heartbeatAt(2, t3), "the winner holds the lease")
	r, ok = f.activeAt(2)
	require.True(t, ok)
	assert.False(t, r.Buffered, "no longer buffered once claimed: %+v", r)
	assert.True(t, r.Live)
}

// Under OverlapBufferAll up to the cap are buffered and run oldest first; a
// new slot never jumps ahead of a buffered one.
func testBufferAllOrder(t *testing.T, f *leaseFixture) {
	f.bufferer()
	all := backend.OverlapBufferAll
	t1 := "t1" + Token()
	f.outcome(f.bufferClaim(1, t1, all, 2), backend.OutcomeWon)
	requireBuffered(t, f.claim(f.bufferClaim(2, "t2"+Token(), all, 2)), 1, "slot 2")
	requireBuffered(t, f.claim(f.bufferClaim(3, "t3"+Token(), all, 2)), 1, "slot 3")
	f.outcome(f.bufferClaim(4, "t4"+Token(), all, 2), backend.OutcomeOverlap)

	require.NoError(t, f.finishAt(1, t1, backend.StatusOK))
	requireBuffered(t, f.claim(f.bufferClaim(3, "b3"+Token(), all, 2)), 2, "slot 3 waits for the older buffered slot")
	f.outcome(f.bufferClaim(5, "t5"+Token(), all, 2), backend.OutcomeOverlap) // two are buffered still
	t2 := "b2" + Token()
	f.outcome(f.bufferClaim(2, t2, all, 2), backend.OutcomeWon)
	requireBuffered(t, f.claim(f.bufferClaim(3, "b3"+Token(), all, 2)), 2, "slot 3 while slot 2 runs")
	requireBuffered(t, f.claim(f.bufferClaim(6, "t6"+Token(), all, 2)), 2, "slot 6 under the cap again")
	require.NoError(t, f.finishAt(2, t2, backend.StatusError))
	requireBuffered(t, f.claim(f.bufferClaim(6, "b6"+Token(), all, 2)), 3, "slot 6 after slot 3")
	t3 := "b3" + Token()
	f.outcome(f.bufferClaim(3, t3, all, 2), backend.OutcomeWon)
	require.NoError(t, f.finishAt(3, t3, backend.StatusOK))
	f.outcome(f.bufferClaim(6, "b6"+Token(), all, 2), backend.OutcomeWon)
}

// A takeover-only claim (an instance adopting runs at Start) takes a buffered
// slot once nothing blocks it; a claim allowing overlap (a paused job's) takes
// it at once; the token that buffered a slot may withdraw it by finishing it.
func testBufferAdoptAndWithdraw(t *testing.T, f *leaseFixture) {
	f.bufferer()
	one := backend.OverlapBufferOne
	t1, t2 := "t1"+Token(), "t2"+Token()
	f.outcome(f.bufferClaim(1, t1, one, 0), backend.OutcomeWon)
	requireBuffered(t, f.claim(f.bufferClaim(2, t2, one, 0)), 1, "slot 2")
	adopt := f.bufferClaim(2, "a"+Token(), one, 0)
	adopt.TakeoverOnly = true
	requireBuffered(t, f.claim(adopt), 1, "an adopting claim waits too")
	require.ErrorIs(t, f.finishAt(2, "x"+Token(), backend.StatusCancelled), backend.ErrStaleToken, "only its token withdraws it")
	require.NoError(t, f.finishAt(2, t2, backend.StatusCancelled), "withdrawn")
	d := f.outcome(f.bufferClaim(2, Token(), one, 0), backend.OutcomeDone)
	assert.Equal(t, backend.StatusCancelled, d.Status)
	_, ok := f.activeAt(2)
	assert.False(t, ok, "a withdrawn slot is finished")

	requireBuffered(t, f.claim(f.bufferClaim(3, "t3"+Token(), one, 0)), 1, "slot 3, under the cap again")
	paused := f.bufferClaim(3, "p"+Token(), backend.OverlapAllow, 0)
	f.outcome(paused, backend.OutcomeWon)
	require.NoError(t, f.finishAt(3, paused.Token, backend.StatusPaused))

	requireBuffered(t, f.claim(f.bufferClaim(4, "t4"+Token(), one, 0)), 1, "slot 4")
	require.NoError(t, f.finishAt(1, t1, backend.StatusOK))
	adopt = f.bufferClaim(4, "a"+Token(), one, 0)
	adopt.TakeoverOnly = true
	f.outcome(adopt, backend.OutcomeWon)
}

// A run whose last attempt stored a retry still holds the job: a slot due
// meanwhile is buffered behind it and runs once the retry has ended.
func testBufferBehindRetry(t *testing.T, f *leaseFixture) {
	f.bufferer()
	r, ok := f.s.(backend.Retrier)
	if !ok {
		t.Skipf("%T is not a backend.Retrier: nothing to check", f.s)
	}
	one := backend.OverlapBufferOne
	t1 := "t1" + Token()
	f.outcome(f.bufferClaim(1, t1, one, 0), backend.OutcomeWon)
	require.NoError(t, r.Retry(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(1), Token: t1}, retryShort, retryLong))
	requireBuffered(t, f.claim(f.bufferClaim(2, "t2"+Token(), one, 0)), 1, "slot 2 while slot 1's retry is pending")
	retry := f.claimUntil(func() backend.RunClaim { return f.bufferClaim(1, "r"+Token(), one, 0) })
	require.Equal(t, backend.OutcomeWon, retry.Outcome, "the retry runs first: %+v", retry)
	requireBuffered(t, f.claim(f.bufferClaim(2, "b"+Token(), one, 0)), 1, "slot 2 while the retry runs")
}

// Claims of several slots at once with nothing running: exactly one runs and
// the others are buffered; as each run ends, exactly one buffered slot runs,
// the oldest.
func testBufferRace(t *testing.T, f *leaseFixture) {
	f.bufferer()
	const slots = 3
	for round := range overlapRaceRounds {
		won := f.raceSlots(round, slots, false)
		for range slots - 1 {
			require.Len(t, won, 1, "round %d: exactly one slot runs", round)
			for i, token := range won {
				require.NoError(t, f.finishAt(round*slots+i, token, backend.StatusOK))
			}
			won = f.raceSlots(round, slots, true)
		}
		require.Len(t, won, 1, "round %d: the last buffered slot runs", round)
		for i, token := range won {
			require.NoError(t, f.finishAt(round*slots+i, token, backend.StatusOK))
		}
	}
}

// raceSlots has a fresh token claim at once each slot of the round (only those
// Active lists buffered, when buffered), requires every answer to be won or
// buffered and a buffered slot never to run before an older one, and returns
// the slots won (by index in the round) with their tokens.
func (f *leaseFixture) raceSlots(round, slots int, buffered bool) map[int]string {
	f.t.Helper()
	var claims []int
	if !buffered {
		for i := range slots {
			claims = append(claims, i)
		}
	} else {
		runs, err := f.s.Active(f.ctx, f.job)
		require.NoError(f.t, err)
		for _, r := range runs { // oldest first
			if i := int(r.Slot.Sub(leaseSlot(round*slots)) / time.Minute); r.Buffered && i >= 0 && i < slots {
				claims = append(claims, i)
			}
		}
	}
	var mu sync.Mutex
	won := map[int]string{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, i := range claims {
		wg.Go(func() {
			in := f.bufferClaim(round*slots+i, "r"+Token(), backend.OverlapBufferAll, slots)
			<-start
			res, err := f.s.Claim(f.ctx, in)
			mu.Lock()
			defer mu.Unlock()
			require.NoError(f.t, err)
			switch res.Outcome {
			case backend.OutcomeWon:
				won[i] = in.Token
			case backend.OutcomeBuffered:
			default:
				assert.Failf(f.t, "a claim is neither won nor buffered", "round %d, slot %d: %+v", round, i, res)
			}
		})
	}
	close(start)
	wg.Wait()
	if _, ok := won[claims[0]]; buffered && len(won) == 1 && !ok {
		require.Failf(f.t, "a buffered slot ran before an older one", "round %d: buffered %v, won %v", round, claims, won)
	}
	return won
}

// A watch of a buffered slot fires once it is claimed, so that its backups
// watch its run instead.
func testBufferWatch(t *testing.T, f *leaseFixture) {
	f.bufferer()
	w := f.watcher()
	if w == nil {
		t.Skipf("%T is not a backend.LeaseWatcher: nothing to check", f.s)
	}
	one := backend.OverlapBufferOne
	t1 := "t1" + Token()
	f.outcome(f.bufferClaim(1, t1, one, 0), backend.OutcomeWon)
	requireBuffered(t, f.claim(f.bufferClaim(2, "t2"+Token(), one, 0)), 1, "slot 2")
	ch, err := w.WatchRun(f.ctx, f.job, leaseSlot(2))
	require.NoError(t, err)
	select {
	case <-ch:
		require.Fail(t, "the watch of a buffered slot fired while it waits")
	default:
	}
	held, err := w.WatchRun(f.ctx, f.job, leaseSlot(1))
	require.NoError(t, err)
	require.NoError(t, f.finishAt(1, t1, backend.StatusOK))
	leaseRequireFires(t, held, leaseWatchBound, "the watch of the run it waits for, once it finished")
	f.outcome(f.bufferClaim(2, "b"+Token(), one, 0), backend.OutcomeWon)
	leaseRequireFires(t, ch, leaseWatchBound, "the watch of the buffered slot, once claimed")
}

// With RunClaim.Concurrency 2, two slots run at once: a third that finds both
// running is skipped under OverlapSkip, buffered under a buffer policy, and runs
// once one of them ended.
func testConcurrency(t *testing.T, f *leaseFixture) {
	if c, ok := f.s.(backend.ConcurrencyCapper); !ok || !c.CapsConcurrency() {
		t.Skipf("%T does not apply RunClaim.Concurrency: nothing to check", f.s)
	}
	claim := func(k int, token string, p backend.OverlapPolicy) backend.RunClaim {
		in := f.bufferClaim(k, token, p, 0)
		in.Concurrency = 2
		return in
	}
	skip := backend.OverlapSkip
	t1, t2 := "t1"+Token(), "t2"+Token()
	f.outcome(claim(1, t1, skip), backend.OutcomeWon)
	f.outcome(claim(2, t2, skip), backend.OutcomeWon)
	d := f.outcome(claim(3, "t3"+Token(), skip), backend.OutcomeOverlap)
	assert.Equal(t, backend.StatusSkipped, d.Status, "a third slot while two run")
	require.NoError(t, f.finishAt(1, t1, backend.StatusOK))
	f.outcome(claim(4, "t4"+Token(), skip), backend.OutcomeWon)

	if b, ok := f.s.(backend.OverlapBufferer); !ok || !b.BuffersOverlap() {
		return
	}
	all := backend.OverlapBufferAll
	t5 := "t5" + Token()
	w := f.claim(claim(5, t5, all))
	assert.Equal(t, backend.OutcomeBuffered, w.Outcome, "slot 5 while 2 and 4 run")
	require.NoError(t, f.finishAt(2, t2, backend.StatusOK))
	f.outcome(claim(5, t5, all), backend.OutcomeWon)
}
