package backendtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// settler returns f's store as a backend.Settler, or skips the case when it is
// none or the suite cannot read its history.
func (f *leaseFixture) settler() backend.Settler {
	f.t.Helper()
	st, ok := f.s.(backend.Settler)
	if !ok {
		f.t.Skipf("%T is not a backend.Settler: nothing to check", f.s)
	}
	if f.hist == nil {
		f.t.Skipf("%T keeps its records in a history of its own: run RunLeasesWithHistory", f.s)
	}
	return st
}

// rec is what a case expects of one record: its slot, token, status and attempt.
type rec struct {
	k       int
	token   string
	status  backend.Status
	attempt int
}

// recs returns name's records: each one apart when the suite holds them, else
// as History shows them.
func (f *leaseFixture) recs(name string) []backend.RunRecord {
	f.t.Helper()
	if f.raw != nil {
		return f.raw.each(name)
	}
	hist, err := f.hist.History(f.ctx, name, 1000)
	require.NoError(f.t, err, "History")
	return hist
}

// wantRecords requires name's records to be exactly want, in any order, and
// returns them by token.
func (f *leaseFixture) wantRecords(name, why string, want ...rec) map[string]backend.RunRecord {
	f.t.Helper()
	got := f.recs(name)
	byToken := make(map[string]backend.RunRecord, len(got))
	view := make([]rec, 0, len(got))
	for _, r := range got {
		k := int(r.Slot.Sub(leaseSlot(0)) / time.Minute)
		view = append(view, rec{k, r.Token, r.Status, r.Attempt})
		byToken[r.Token] = r
	}
	if want == nil {
		want = []rec{}
	}
	require.ElementsMatch(f.t, want, view, "%s: the records of %q", why, name)
	return byToken
}

// at is a claim of name's k-th slot by token.
func (f *leaseFixture) at(name string, k int, token string) backend.RunClaim {
	in := f.rc(token, "i-"+token[:4], leaseLong)
	in.Job, in.Slot = name, leaseSlot(k)
	return in
}

// settlement ends token's attempt of name's k-th slot with status, times of
// its own and an error naming the status.
func settlement(name string, k int, token string, status backend.Status, opts ...func(*backend.Settlement)) backend.Settlement {
	started := time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC()
	s := backend.Settlement{
		Key:    backend.RunKey{Job: name, Slot: leaseSlot(k), Token: token},
		Status: status, StartedAt: started, FinishedAt: started.Add(750 * time.Millisecond),
		Error: "settled " + string(status), Retention: backend.Retention{Size: 50},
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// settle requires st.Settle(s) to succeed.
func (f *leaseFixture) settle(st backend.Settler, s backend.Settlement, why string) {
	f.t.Helper()
	require.NoError(f.t, st.Settle(f.ctx, s), "Settle: %s", why)
}

// assertTimes asserts that r carries s's times and error.
func assertTimes(t *testing.T, r backend.RunRecord, s backend.Settlement, why string) {
	t.Helper()
	assert.True(t, s.StartedAt.Equal(r.StartedAt), "%s: started %v, want %v", why, r.StartedAt, s.StartedAt)
	assert.True(t, s.FinishedAt.Equal(r.FinishedAt), "%s: finished %v, want %v", why, r.FinishedAt, s.FinishedAt)
	assert.Equal(t, s.Error, r.Error, why)
}

// A slot decided skipped, late, paused or limit has exactly one record: attempt
// 1, the decider's token and instance, the reason, never started. Repeats and
// other claims of it add none; the run still held has none.
func testSettleDecisions(t *testing.T, f *leaseFixture) {
	f.settler()
	at := func(k int, token string) backend.RunClaim {
		in := f.at(f.job, k, token)
		in.Overlap = backend.OverlapSkip
		return in
	}
	f.outcome(at(1, "h"+Token()), backend.OutcomeWon)
	skip := at(2, "sk"+Token())
	late := at(3, "la"+Token())
	late.Deadline, late.LateWhy = time.Now().Add(-time.Hour), "missed while no instance was up"
	paused := at(4, "pa"+Token())
	paused.PausedWhy = "paused by ops: deploy"
	decided := []struct {
		in     backend.RunClaim
		told   backend.ClaimOutcome
		status backend.Status
	}{
		{skip, backend.OutcomeOverlap, backend.StatusSkipped},
		{late, backend.OutcomeLate, backend.StatusLate},
		{paused, backend.OutcomePaused, backend.StatusPaused},
	}
	if c, ok := f.s.(backend.RunCounter); ok && c.CountsRuns() {
		counted := at(6, "co"+Token())
		counted.Overlap, counted.MaxRuns = backend.OverlapAllow, 1
		f.outcome(counted, backend.OutcomeWon)
		limited := at(5, "li"+Token())
		limited.Overlap, limited.MaxRuns = backend.OverlapAllow, 1
		decided = append(decided, struct {
			in     backend.RunClaim
			told   backend.ClaimOutcome
			status backend.Status
		}{limited, backend.OutcomeLimit, backend.StatusLimit})
	}
	var want []rec
	for _, d := range decided {
		f.outcome(d.in, d.told)
		want = append(want, rec{int(d.in.Slot.Sub(leaseSlot(0)) / time.Minute), d.in.Token, d.status, 1})
	}
	for _, d := range decided {
		f.outcome(d.in, d.told) // the decider repeats
		probe := f.at(f.job, int(d.in.Slot.Sub(leaseSlot(0))/time.Minute), "pr"+Token())
		probe.TakeoverOnly = true
		assert.Equal(t, d.status, f.outcome(probe, backend.OutcomeDone).Status)
		assert.Equal(t, d.status, f.outcome(f.at(f.job, int(d.in.Slot.Sub(leaseSlot(0))/time.Minute), "ot"+Token()), backend.OutcomeDone).Status)
	}
	got := f.wantRecords(f.job, "one record per decision, the running slots none", want...)
	for _, d := range decided {
		r := got[d.in.Token]
		assert.Equal(t, d.in.Instance, r.Instance, "%s: the decider's instance", d.status)
		assert.NotEmpty(t, r.Error, "%s: the reason", d.status)
		assert.True(t, r.StartedAt.IsZero(), "%s: a slot decided without running never started: %v", d.status, r.StartedAt)
		assert.False(t, r.FinishedAt.IsZero(), "%s: when it was decided", d.status)
	}
	assert.Equal(t, late.LateWhy, got[late.Token].Error, "the claim's reason for late")
	assert.Equal(t, paused.PausedWhy, got[paused.Token].Error, "the claim's reason for paused")
}

// A takeover records the attempt it took over, lost, once: racing takeovers and
// repeated claims add none. A released lease is taken over the same way.
func testSettleTakeover(t *testing.T, f *leaseFixture) {
	f.settler()
	a := "a-" + Token()
	ra := f.won(a, "a", leaseShort)
	f.waitExpired(f.slot)
	claims, results := f.race(6, leaseLong)
	w := f.oneWinner(results)
	got := f.wantRecords(f.job, "a takeover", rec{0, a, backend.StatusLost, 1})
	assert.Equal(t, "a", got[a].Instance)
	assert.Equal(t, ra.Fence, got[a].Fence, "the lost attempt's fence")
	assert.NotEmpty(t, got[a].Error, "why it was lost")
	for _, in := range claims {
		f.claim(in)
	}
	f.wantRecords(f.job, "repeated claims", rec{0, a, backend.StatusLost, 1})

	b := claims[w].Token
	f.release(b)
	c := f.won("c-"+Token(), "c", leaseLong)
	assert.Equal(t, 3, c.Attempt)
	f.wantRecords(f.job, "a released lease taken over",
		rec{0, a, backend.StatusLost, 1}, rec{0, b, backend.StatusLost, 2})
}

// Settle's finish, retry and hand-over each leave exactly one record with the
// times and error given; repeating a Settle adds none; the seed's Finish on a
// Settler records too.
func testSettleEnds(t *testing.T, f *leaseFixture) {
	st := f.settler()
	won := func(k int, token string) backend.ClaimResult {
		return f.outcome(f.at(f.job, k, token), backend.OutcomeWon)
	}

	a1 := "a1" + Token()
	r1 := won(1, a1)
	finish := settlement(f.job, 1, a1, backend.StatusError)
	f.settle(st, finish, "finish")
	f.settle(st, finish, "finish repeated")
	got := f.wantRecords(f.job, "finish", rec{1, a1, backend.StatusError, 1})
	assertTimes(t, got[a1], finish, "finish")
	assert.Equal(t, r1.Fence, got[a1].Fence, "finish: the attempt's fence")
	assert.Equal(t, "i-"+a1[:4], got[a1].Instance)
	assert.Equal(t, backend.StatusError, f.outcome(f.at(f.job, 1, "x"+Token()), backend.OutcomeDone).Status)

	a2, b2 := "a2"+Token(), "b2"+Token()
	won(2, a2)
	retry := settlement(f.job, 2, a2, backend.StatusError, func(s *backend.Settlement) {
		s.Retry = &backend.RetryWindow{Delay: 0, Within: retryLong}
	})
	f.settle(st, retry, "retry")
	f.settle(st, retry, "retry repeated")
	rb := f.outcome(f.at(f.job, 2, b2), backend.OutcomeWon)
	assert.True(t, rb.Retried, "the retry: %+v", rb)
	assert.Equal(t, 2, rb.Attempt)
	f.settle(st, retry, "retry repeated once it was claimed")
	ok2 := settlement(f.job, 2, b2, backend.StatusOK)
	f.settle(st, ok2, "the retry's finish")
	got = f.wantRecords(f.job, "retry", rec{1, a1, backend.StatusError, 1},
		rec{2, a2, backend.StatusError, 1}, rec{2, b2, backend.StatusOK, 2})
	assertTimes(t, got[a2], retry, "retry")
	assertTimes(t, got[b2], ok2, "the retry's finish")

	a3, b3 := "a3"+Token(), "b3"+Token()
	won(3, a3)
	handOver := settlement(f.job, 3, a3, backend.StatusCancelled, func(s *backend.Settlement) { s.HandOver = true })
	f.settle(st, handOver, "hand-over")
	f.settle(st, handOver, "hand-over repeated")
	rb = f.outcome(f.at(f.job, 3, b3), backend.OutcomeWon)
	assert.Equal(t, 2, rb.Attempt, "a backup takes a handed-over run at once")
	assert.Equal(t, a3, rb.PreviousToken)
	f.outcome(f.at(f.job, 3, b3), backend.OutcomeWon)
	f.settle(st, handOver, "hand-over repeated once taken over")
	got = f.wantRecords(f.job, "hand-over: the backup records no lost attempt", rec{1, a1, backend.StatusError, 1},
		rec{2, a2, backend.StatusError, 1}, rec{2, b2, backend.StatusOK, 2}, rec{3, a3, backend.StatusCancelled, 1})
	assertTimes(t, got[a3], handOver, "hand-over")

	a4 := "a4" + Token()
	won(4, a4)
	require.NoError(t, f.finishAt(4, a4, backend.StatusOK), "the seed's Finish")
	require.NoError(t, f.finishAt(4, a4, backend.StatusOK), "the seed's Finish repeated")
	f.wantRecords(f.job, "the seed's Finish", rec{1, a1, backend.StatusError, 1},
		rec{2, a2, backend.StatusError, 1}, rec{2, b2, backend.StatusOK, 2}, rec{3, a3, backend.StatusCancelled, 1},
		rec{4, a4, backend.StatusOK, 1})
}

// A buffered slot withdrawn by the token that buffered it has one record, with
// the times and error given; a repeat adds none.
func testSettleWithdraw(t *testing.T, f *leaseFixture) {
	st := f.settler()
	f.bufferer()
	one := backend.OverlapBufferOne
	h, w := "h"+Token(), "w"+Token()
	f.outcome(f.bufferClaim(1, h, one, 0), backend.OutcomeWon)
	requireBuffered(t, f.claim(f.bufferClaim(2, w, one, 0)), 1, "slot 2")
	f.wantRecords(f.job, "a buffered slot")
	withdraw := settlement(f.job, 2, w, backend.StatusCancelled)
	require.ErrorIs(t, st.Settle(f.ctx, settlement(f.job, 2, "x"+Token(), backend.StatusCancelled)), backend.ErrStaleToken,
		"only its token withdraws it")
	f.settle(st, withdraw, "withdrawal")
	f.settle(st, withdraw, "withdrawal repeated")
	got := f.wantRecords(f.job, "withdrawn", rec{2, w, backend.StatusCancelled, 1})
	assertTimes(t, got[w], withdraw, "withdrawal")
	assert.Equal(t, backend.StatusCancelled, f.outcome(f.bufferClaim(2, "y"+Token(), one, 0), backend.OutcomeDone).Status)
	f.settle(st, settlement(f.job, 1, h, backend.StatusOK), "the run it waited for")
	f.wantRecords(f.job, "both", rec{2, w, backend.StatusCancelled, 1}, rec{1, h, backend.StatusOK, 1})
}

// A stale token's Settle, and one of a slot with nothing stored, fail with
// ErrStaleToken and add no record.
func testSettleStale(t *testing.T, f *leaseFixture) {
	st := f.settler()
	a, b := "a-"+Token(), "b-"+Token()
	f.won(a, "a", leaseLong)
	f.release(a)
	f.won(b, "b", leaseLong)
	for _, s := range []backend.Settlement{
		settlement(f.job, 0, a, backend.StatusOK),
		settlement(f.job, 0, a, backend.StatusError, func(s *backend.Settlement) { s.Retry = &backend.RetryWindow{Within: retryLong} }),
		settlement(f.job, 0, a, backend.StatusCancelled, func(s *backend.Settlement) { s.HandOver = true }),
		settlement(f.job, 0, "stranger-"+Token(), backend.StatusOK),
		settlement(f.job, 1, a, backend.StatusOK),
	} {
		require.ErrorIs(t, st.Settle(f.ctx, s), backend.ErrStaleToken, "%+v", s)
	}
	f.wantRecords(f.job, "stale settles", rec{0, a, backend.StatusLost, 1})
	require.NoError(t, f.heartbeat(b), "the holder still holds the run")
	f.settle(st, settlement(f.job, 0, b, backend.StatusOK), "the holder")
	require.ErrorIs(t, st.Settle(f.ctx, settlement(f.job, 0, a, backend.StatusOK)), backend.ErrStaleToken)
	f.wantRecords(f.job, "after the holder's", rec{0, a, backend.StatusLost, 1}, rec{0, b, backend.StatusOK, 2})
}

// A cancel-other run whose holder died is ended cancelled, with its record, by
// the next claim of its slot; the later slot that asked then runs.
func testSettleCancelOtherDied(t *testing.T, f *leaseFixture) {
	st := f.settler()
	f.canceller()
	t1, t2 := "t1"+Token(), "t2"+Token()
	r1 := f.outcome(f.cancelClaim(1, t1, leaseShort), backend.OutcomeWon)
	f.outcome(f.cancelClaim(2, t2, leaseLong), backend.OutcomeRunning)
	f.waitExpired(leaseSlot(1))
	f.wantRecords(f.job, "before the next claim")
	probe := f.cancelClaim(1, "b"+Token(), leaseLong)
	probe.TakeoverOnly = true
	assert.Equal(t, backend.StatusCancelled, f.outcome(probe, backend.OutcomeDone).Status)
	f.outcome(probe, backend.OutcomeDone)
	f.outcome(f.cancelClaim(1, "c"+Token(), leaseLong), backend.OutcomeDone)
	got := f.wantRecords(f.job, "the dead holder's run", rec{1, t1, backend.StatusCancelled, 1})
	assert.Equal(t, r1.Fence, got[t1].Fence)
	assert.NotEmpty(t, got[t1].Error, "why it was cancelled")
	f.outcome(f.cancelClaim(2, t2, leaseLong), backend.OutcomeWon)
	f.settle(st, settlement(f.job, 2, t2, backend.StatusOK), "the slot that asked")
	f.wantRecords(f.job, "both", rec{1, t1, backend.StatusCancelled, 1}, rec{2, t2, backend.StatusOK, 1})
}

// A buffered slot claimed while the job is paused stays buffered, with no
// record, and runs once the pause is over.
func testSettleBufferedPaused(t *testing.T, f *leaseFixture) {
	st := f.settler()
	f.bufferer()
	one := backend.OverlapBufferOne
	paused := func(k int) backend.RunClaim {
		in := f.bufferClaim(k, "p"+Token(), one, 0)
		in.PausedWhy = "paused by ops"
		return in
	}
	t1 := "t1" + Token()
	f.outcome(f.bufferClaim(1, t1, one, 0), backend.OutcomeWon)
	requireBuffered(t, f.claim(f.bufferClaim(2, "t2"+Token(), one, 0)), 1, "slot 2")
	f.outcome(paused(2), backend.OutcomeBuffered)
	f.settle(st, settlement(f.job, 1, t1, backend.StatusOK), "slot 1")
	for range 2 {
		f.outcome(paused(2), backend.OutcomeBuffered)
	}
	r, ok := f.activeAt(2)
	require.True(t, ok, "slot 2 is still active")
	assert.True(t, r.Buffered, "still buffered: %+v", r)
	f.wantRecords(f.job, "under the pause", rec{1, t1, backend.StatusOK, 1})

	t3 := "t3" + Token()
	res := f.outcome(f.bufferClaim(2, t3, one, 0), backend.OutcomeWon)
	assert.Equal(t, 1, res.Attempt, "its first attempt")
	f.settle(st, settlement(f.job, 2, t3, backend.StatusOK), "slot 2")
	f.wantRecords(f.job, "after the pause", rec{1, t1, backend.StatusOK, 1}, rec{2, t3, backend.StatusOK, 1})
}

// A run of another incarnation of its entry (removed, maybe added again) is
// never granted: while its lease is live a claim waits, once it ended the claim
// ends it cancelled with its record; a holder's hand-over or retry of such a
// run finishes it. A claim that sees the entry removed creates nothing.
func testSettleIncarnation(t *testing.T, f *leaseFixture) {
	st := f.settler()
	name := backend.EntryRunName(f.job, "e")
	of := func(k int, token string, inc uint64) backend.RunClaim {
		in := f.at(name, k, token)
		in.Incarnation = inc
		return in
	}
	a := "a" + Token()
	f.outcome(of(1, a, 1), backend.OutcomeWon)
	f.outcome(of(1, "b"+Token(), 2), backend.OutcomeRunning)
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: name, Slot: leaseSlot(1), Token: a}))
	newer := of(1, "b"+Token(), 2)
	assert.Equal(t, backend.StatusCancelled, f.outcome(newer, backend.OutcomeDone).Status, "a run of another incarnation")
	f.outcome(newer, backend.OutcomeDone)
	assert.Equal(t, backend.StatusCancelled, f.outcome(of(1, "c"+Token(), 1), backend.OutcomeDone).Status)

	a2 := "a2" + Token()
	f.outcome(of(2, a2, 1), backend.OutcomeWon)
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: name, Slot: leaseSlot(2), Token: a2}))
	gone := of(2, "g"+Token(), 0)
	gone.EntryGone, gone.TakeoverOnly = true, true
	f.outcome(gone, backend.OutcomeDone)
	none := of(3, "n"+Token(), 0)
	none.EntryGone = true
	f.outcome(none, backend.OutcomeNone)

	a4, a5 := "a4"+Token(), "a5"+Token()
	f.outcome(of(4, a4, 1), backend.OutcomeWon)
	f.settle(st, settlement(name, 4, a4, backend.StatusCancelled, func(s *backend.Settlement) {
		s.HandOver, s.EntryGone = true, true
	}), "a hand-over of a removed entry's run")
	f.outcome(of(4, "x"+Token(), 1), backend.OutcomeDone)
	f.outcome(of(5, a5, 1), backend.OutcomeWon)
	f.settle(st, settlement(name, 5, a5, backend.StatusError, func(s *backend.Settlement) {
		s.Retry, s.Incarnation = &backend.RetryWindow{Within: retryLong}, 2
	}), "a retry of a run the holder sees of another incarnation")
	assert.Equal(t, backend.StatusError, f.outcome(of(5, "y"+Token(), 1), backend.OutcomeDone).Status, "not retried")

	want := []rec{{1, a, backend.StatusCancelled, 1}, {2, a2, backend.StatusCancelled, 1},
		{4, a4, backend.StatusCancelled, 1}, {5, a5, backend.StatusError, 1}}
	f.wantRecords(name, "runs of removed entries", want...)

	if b, ok := f.s.(backend.OverlapBufferer); !ok || !b.BuffersOverlap() {
		return
	}
	h, w := "h"+Token(), "w"+Token()
	buf := func(k int, token string, inc uint64) backend.RunClaim {
		in := of(k, token, inc)
		in.Overlap = backend.OverlapBufferOne
		return in
	}
	f.outcome(buf(6, h, 1), backend.OutcomeWon)
	requireBuffered(t, f.claim(buf(7, w, 1)), 6, "slot 7")
	f.settle(st, settlement(name, 6, h, backend.StatusOK), "slot 6")
	assert.Equal(t, backend.StatusCancelled, f.outcome(buf(7, "z"+Token(), 2), backend.OutcomeDone).Status,
		"a buffered slot of another incarnation")
	f.wantRecords(name, "a buffered slot of a removed entry", append(want,
		rec{6, h, backend.StatusOK, 1}, rec{7, w, backend.StatusCancelled, 1})...)
}

// A record write that fails (the history is down) leaves no half-done
// decision: once the history is back, repeating the call answers as the first
// would have and leaves exactly one record. Only with the suite's own history.
func testSettleWriteFails(t *testing.T, f *leaseFixture) {
	st := f.settler()
	if f.raw == nil {
		t.Skipf("%T keeps its records in a history of its own: the suite cannot make it fail", f.s)
	}
	try := func(why string, call func() error) {
		t.Helper()
		f.raw.failNext(1)
		err := call()
		t.Logf("%s, with the history down: %v", why, err)
		f.raw.failNext(0)
	}

	late := f.at(f.job, 1, "la"+Token())
	late.Deadline = time.Now().Add(-time.Hour)
	try("a late claim", func() error { _, err := f.s.Claim(f.ctx, late); return err })
	f.outcome(late, backend.OutcomeLate)

	a, b := "a"+Token(), "b"+Token()
	f.outcome(f.at(f.job, 2, a), backend.OutcomeWon)
	require.NoError(t, f.s.Release(f.ctx, backend.RunKey{Job: f.job, Slot: leaseSlot(2), Token: a}))
	try("a takeover", func() error { _, err := f.s.Claim(f.ctx, f.at(f.job, 2, b)); return err })
	res := f.outcome(f.at(f.job, 2, b), backend.OutcomeWon)
	assert.Equal(t, 2, res.Attempt)

	s := settlement(f.job, 2, b, backend.StatusOK)
	try("a settle", func() error { return st.Settle(f.ctx, s) })
	f.settle(st, s, "once the history is back")
	f.wantRecords(f.job, "after the failed writes", rec{1, late.Token, backend.StatusLate, 1},
		rec{2, a, backend.StatusLost, 1}, rec{2, b, backend.StatusOK, 2})
	assert.Equal(t, backend.StatusOK, f.outcome(f.at(f.job, 2, fmt.Sprint("c", Token())), backend.OutcomeDone).Status)
}

// A holder's retry or hand-over, applied and sent again after a claim made
// while the job is paused ended the slot paused, is a repeat: nil, and no
// record more.
func testSettleRepeatAfterPause(t *testing.T, f *leaseFixture) {
	st := f.settler()
	paused := func(k int) backend.RunClaim {
		in := f.at(f.job, k, "p"+Token())
		in.PausedWhy = "paused by ops"
		return in
	}
	a1, a2 := "a1"+Token(), "a2"+Token()
	f.outcome(f.at(f.job, 1, a1), backend.OutcomeWon)
	retry := settlement(f.job, 1, a1, backend.StatusError, func(s *backend.Settlement) {
		s.Retry = &backend.RetryWindow{Delay: 0, Within: retryLong}
	})
	f.settle(st, retry, "retry")
	p1 := paused(1)
	res := f.outcome(p1, backend.OutcomePaused)
	assert.Equal(t, 2, res.Attempt, "the retry's attempt, paused")
	f.settle(st, retry, "the retry repeated after the paused claim")

	f.outcome(f.at(f.job, 2, a2), backend.OutcomeWon)
	handOver := settlement(f.job, 2, a2, backend.StatusCancelled, func(s *backend.Settlement) { s.HandOver = true })
	f.settle(st, handOver, "hand-over")
	p2 := paused(2)
	f.outcome(p2, backend.OutcomePaused)
	f.settle(st, handOver, "the hand-over repeated after the paused claim")
	f.wantRecords(f.job, "one record per attempt",
		rec{1, a1, backend.StatusError, 1}, rec{1, p1.Token, backend.StatusPaused, 2},
		rec{2, a2, backend.StatusCancelled, 1}, rec{2, p2.Token, backend.StatusPaused, 2})
}
