package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
)

// The buffer overlap policies where the conformance suite (backendtest's Buffer
// cases, run on both dialects in conformance_test.go) cannot reach: the stored
// row itself, the sweep, a reopened database, and claims through several pools.

// bufferSlot is the k-th slot of the buffer tests, a second apart.
func bufferSlot(k int) time.Time { return time.UnixMilli(1_900_000_000_000 + int64(k)*1000).UTC() }

// bufferClaim claims slot k of job under OverlapBufferOne with a long lease and
// keep for keep.
func bufferClaim(job string, k int, token string, keep time.Duration) backend.RunClaim {
	return backend.RunClaim{Job: job, Slot: bufferSlot(k), Token: token, Instance: "i-" + token[:4], Lease: time.Minute,
		Deadline: time.Now().Add(time.Hour), Overlap: backend.OverlapBufferOne, Keep: keep}
}

func claimOf(t *testing.T, s backend.RunStore, in backend.RunClaim, want backend.ClaimOutcome) backend.ClaimResult {
	t.Helper()
	res, err := s.Claim(backendtest.Context(t), in)
	require.NoError(t, err)
	require.Equal(t, want, res.Outcome, "claim of %s by %s: %+v", in.Slot.Format(time.TimeOnly), in.Token, res)
	return res
}

// storedRun is a runs row as the database holds it.
type storedRun struct {
	status                            string
	attempt, fence, expires, forgetAt int64
	found                             bool
}

// rowOf reads (job, slot)'s row from b's runs table.
func rowOf(t *testing.T, b *sqlbackend.Backend, job string, slot time.Time) storedRun {
	t.Helper()
	q := "SELECT status, attempt, fence, expires, forget_at FROM " + b.TablePrefix() + "runs WHERE job = ? AND slot = ?"
	if b.Name() == "sql/postgres" {
		q = strings.Replace(strings.Replace(q, "?", "$1", 1), "?", "$2", 1)
	}
	var r storedRun
	err := b.DB().QueryRowContext(backendtest.Context(t), q, job, slot.UnixMilli()).Scan(&r.status, &r.attempt, &r.fence, &r.expires, &r.forgetAt)
	if !errors.Is(err, sql.ErrNoRows) {
		require.NoError(t, err)
		r.found = true
	}
	return r
}

// A buffered slot is a row of status 'buffered' with no lease, attempt and fence
// 0, and no expiry: the sweep, which deletes a finished slot once its keep has
// passed, leaves it, also when the keep the claim asked for is long past, and
// the database reopened (a new pool and backend on the file, or on the server)
// still holds it buffered behind the run it waited for. Once that run ends it
// runs as attempt 1 with a bigger fence; withdrawn or finished, the sweep may
// forget it again.
func TestBufferedSlotSurvivesSweepAndReopen(t *testing.T) {
	t.Parallel()
	onBoth(t, "bufsweep", func(t *testing.T, open opener) {
		ctx := backendtest.Context(t)
		db, b := open(t)
		s := b.Runs()
		job := backendtest.JobName("buf-sweep")
		const keep = time.Millisecond
		// A finished slot with the same keep: the sweep's control.
		t0 := backendtest.Token()
		claimOf(t, s, bufferClaim(job, 0, t0, keep), backend.OutcomeWon)
		require.NoError(t, s.Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(0), Token: t0}, backend.StatusOK))
		t1, t2 := backendtest.Token(), backendtest.Token()
		first := claimOf(t, s, bufferClaim(job, 1, t1, time.Hour), backend.OutcomeWon)
		claimOf(t, s, bufferClaim(job, 2, t2, keep), backend.OutcomeBuffered)

		row := rowOf(t, b, job, bufferSlot(2))
		require.True(t, row.found)
		assert.Equal(t, "buffered", row.status)
		assert.Zero(t, row.attempt, "no attempt yet")
		assert.Zero(t, row.fence, "no holder yet")
		assert.Zero(t, row.expires, "no lease")
		assert.Greater(t, row.forgetAt, time.Now().AddDate(1000, 0, 0).UnixMilli(), "no sweep reaches it")

		require.NoError(t, b.Close(ctx))
		require.NoError(t, db.Close())

		// Reopened: a new backend's first claim sweeps (once a minute per
		// backend: open one until the control is gone).
		var again *sqlbackend.Backend
		require.Eventually(t, func() bool {
			_, again = open(t)
			claimOf(t, again.Runs(), bufferClaim(backendtest.JobName("buf-other"), 0, backendtest.Token(), 0), backend.OutcomeWon)
			return !rowOf(t, again, job, bufferSlot(0)).found
		}, 10*time.Second, 20*time.Millisecond, "the sweep forgets the finished slot once its keep has passed")
		s = again.Runs()
		active, err := s.Active(ctx, job)
		require.NoError(t, err)
		require.Len(t, active, 2, "the run and the buffered slot: %+v", active)
		assert.True(t, active[1].Buffered, "%+v", active[1])
		assert.Equal(t, t2, active[1].Token)
		assert.False(t, active[1].Live)
		assert.True(t, active[1].Expires.IsZero(), "no lease: %+v", active[1])

		w := claimOf(t, s, bufferClaim(job, 2, backendtest.Token(), 0), backend.OutcomeBuffered)
		assert.True(t, w.WaitsFor.Equal(bufferSlot(1)), "waits for slot 1: %+v", w)
		assert.Equal(t, first.Holder, w.Holder)
		assert.True(t, w.Expires.Equal(first.Expires), "the expiry of the run it waits for: %+v", w)
		require.NoError(t, s.Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(1), Token: t1}, backend.StatusOK))
		t3 := backendtest.Token()
		won := claimOf(t, s, bufferClaim(job, 2, t3, keep), backend.OutcomeWon)
		assert.Equal(t, 1, won.Attempt)
		assert.Greater(t, won.Fence, first.Fence)
		require.NoError(t, s.Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(2), Token: t3}, backend.StatusOK))
		row = rowOf(t, again, job, bufferSlot(2))
		assert.Equal(t, "ok", row.status)
		assert.Less(t, row.forgetAt, time.Now().Add(time.Hour).UnixMilli(), "finished, it is forgotten after its keep")
	})
}

// Claims through three pools race for a buffered slot the moment the run it
// waited for ended, while the token that buffered it withdraws it and a fourth
// claims the next slot: the slot is either withdrawn or run by exactly one
// claimer, never both; the next slot runs only once the buffered one is
// withdrawn, never beside its run (it is buffered behind the run, or skipped
// while the slot is buffered: OverlapBufferOne keeps one).
func TestBufferedSlotClaimRace(t *testing.T) {
	t.Parallel()
	onBoth(t, "bufrace", func(t *testing.T, open opener) {
		const rounds = 15
		ctx := backendtest.Context(t)
		var stores []backend.RunStore
		for range 4 {
			_, b := open(t)
			stores = append(stores, b.Runs())
		}
		var won, withdrawn, nextWon int
		for round := range rounds {
			job := backendtest.JobName("buf-race")
			t1, tb := backendtest.Token(), backendtest.Token()
			claimOf(t, stores[0], bufferClaim(job, 1, t1, 0), backend.OutcomeWon)
			claimOf(t, stores[1], bufferClaim(job, 2, tb, 0), backend.OutcomeBuffered)
			require.NoError(t, stores[2].Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(1), Token: t1}, backend.StatusOK))

			var (
				wg       sync.WaitGroup
				start    = make(chan struct{})
				outcomes [3]backend.ClaimOutcome
				next     backend.ClaimOutcome
				errs     [5]error
			)
			for i := range 3 {
				wg.Go(func() {
					<-start
					var res backend.ClaimResult
					res, errs[i] = stores[i].Claim(ctx, bufferClaim(job, 2, backendtest.Token(), 0))
					outcomes[i] = res.Outcome
				})
			}
			wg.Go(func() {
				<-start
				errs[3] = stores[3].Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(2), Token: tb}, backend.StatusCancelled)
			})
			wg.Go(func() {
				<-start
				var res backend.ClaimResult
				res, errs[4] = stores[3].Claim(ctx, bufferClaim(job, 3, backendtest.Token(), 0))
				next = res.Outcome
			})
			close(start)
			wg.Wait()

			for i, err := range errs[:3] {
				require.NoError(t, err, "round %d, claim %d", round, i)
			}
			require.NoError(t, errs[4], "round %d, the next slot's claim", round)
			wins := 0
			for _, o := range outcomes {
				switch o {
				case backend.OutcomeWon:
					wins++
				case backend.OutcomeRunning, backend.OutcomeDone:
				default:
					assert.Failf(t, "an unexpected outcome", "round %d: %v", round, outcomes)
				}
			}
			wasWithdrawn := errs[3] == nil
			if !wasWithdrawn {
				require.ErrorIs(t, errs[3], backend.ErrStaleToken, "round %d: a withdrawal too late", round)
			}
			require.Equal(t, 1, wins+boolCount(wasWithdrawn), "round %d: withdrawn or run by one: %v, withdraw %v", round, outcomes, errs[3])
			switch next {
			case backend.OutcomeWon:
				require.Zero(t, wins, "round %d: the next slot ran beside the buffered one: %v", round, outcomes)
				nextWon++
			case backend.OutcomeBuffered:
				require.Equal(t, 1, wins, "round %d: the next slot waits for a run: %v", round, outcomes)
			case backend.OutcomeOverlap:
			default:
				require.Failf(t, "the next slot is neither won, buffered nor skipped", "round %d: %v", round, next)
			}
			won += wins
			withdrawn += boolCount(wasWithdrawn)
		}
		t.Logf("%d rounds: run %d, withdrawn %d, the next slot won at once %d", rounds, won, withdrawn, nextWon)
	})
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// On PostgreSQL a watch of a buffered slot through one pool fires when a claim
// through another runs it, by NOTIFY (the watcher polls once a minute only).
func TestBufferedWatchByNotify(t *testing.T) {
	t.Parallel()
	ctx := backendtest.Context(t)
	p := prefix("bufwatch")
	watcher := closeAtEnd(t, newPG(t, p, sqlbackend.WithPollInterval(time.Minute))).Runs()
	s := closeAtEnd(t, newPG(t, p)).Runs()
	for _, withdraw := range []bool{false, true} {
		job := backendtest.JobName("buf-watch")
		t1, t2 := backendtest.Token(), backendtest.Token()
		claimOf(t, s, bufferClaim(job, 1, t1, 0), backend.OutcomeWon)
		claimOf(t, s, bufferClaim(job, 2, t2, 0), backend.OutcomeBuffered)
		ch, err := watcher.(backend.LeaseWatcher).WatchRun(ctx, job, bufferSlot(2))
		require.NoError(t, err)
		require.NoError(t, s.Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(1), Token: t1}, backend.StatusOK))
		select {
		case <-ch:
			require.Fail(t, "the watch of a buffered slot fired while it is buffered")
		case <-time.After(100 * time.Millisecond):
		}
		if withdraw {
			require.NoError(t, s.Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(2), Token: t2}, backend.StatusCancelled))
		} else {
			claimOf(t, s, bufferClaim(job, 2, backendtest.Token(), 0), backend.OutcomeWon)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("withdrawn %v: the watch of a buffered slot did not see another pool's write", withdraw)
		}
	}
}

// Three schedulers, each on its own pool, run a job every second under
// OverlapBufferAll with a cap of 2, whose first run takes 3.5 s: the first two
// slots due meanwhile are buffered and run after it, oldest first, each once,
// never two runs of the job at a time; the third, due with two buffered, is
// skipped.
func TestSchedulersBufferOnSQL(t *testing.T) {
	t.Parallel()
	onBoth(t, "bufsched", testSchedulersBuffer)
}

func testSchedulersBuffer(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("buffered")
	const long = 3500 * time.Millisecond
	var (
		mu     sync.Mutex
		starts []start
		scheds []*scheduler.Scheduler
	)
	for _, inst := range []string{"a", "b", "c"} {
		_, b := open(t)
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, time.Second, func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			i := len(starts)
			starts = append(starts, start{slot: r.Slot.UnixMilli(), instance: r.Instance, attempt: r.Attempt, fence: r.Fence, from: time.Now()})
			d := 50 * time.Millisecond
			if i == 0 {
				d = long
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				starts[i].end = time.Now()
				mu.Unlock()
			}()
			tm := time.NewTimer(d)
			defer tm.Stop()
			select {
			case <-tm.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, scheduler.WithLease(3*time.Second), scheduler.WithMaxLate(900*time.Millisecond),
			scheduler.WithOverlap(scheduler.OverlapBufferAll), scheduler.WithBufferCap(2)))
		scheds = append(scheds, sc)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	// The long run, and two runs of slots due after it ended.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		after := 0
		for _, s := range starts[min(len(starts), 1):] {
			if !s.end.IsZero() && s.slot > starts[0].slot+long.Milliseconds()+1000 {
				after++
			}
		}
		return len(starts) > 0 && after >= 2
	}, 20*time.Second, 20*time.Millisecond, "runs go on after the long one")
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(stopCtx))
	}

	mu.Lock()
	defer mu.Unlock()
	first := starts[0]
	seen := map[int64]bool{}
	var buffered []int64 // slots due while the long run ran that ran
	for i, s := range starts {
		assert.False(t, seen[s.slot], "slot %d ran once: %+v", s.slot, starts)
		seen[s.slot] = true
		if i > 0 {
			prev := starts[i-1]
			assert.False(t, s.from.Before(prev.end), "two runs of the job at a time: %+v then %+v", prev, s)
			assert.Greater(t, s.slot, prev.slot, "runs oldest slot first: %+v", starts)
			assert.Equal(t, 1, s.attempt)
		}
		if s.slot > first.slot && s.slot < first.slot+long.Milliseconds() {
			buffered = append(buffered, s.slot)
		}
	}
	require.Len(t, buffered, 2, "the two slots due first while the long run ran were buffered and ran: %+v", starts)
	assert.Equal(t, first.slot+1000, buffered[0], "the slot after the long one: %+v", starts)

	_, reader := open(t)
	hist, err := reader.History(ctx, job, 100)
	require.NoError(t, err)
	skipped := 0
	for _, r := range hist {
		ms := r.Slot.UnixMilli()
		switch {
		case seen[ms]:
			assert.Equal(t, backend.StatusOK, r.Status, "%+v", r)
		case ms > first.slot && ms < first.slot+long.Milliseconds():
			assert.Equal(t, backend.StatusSkipped, r.Status, "due with two buffered: %+v", r)
			skipped++
		}
	}
	assert.Equal(t, 1, skipped, "the third slot due while the long run ran: %+v", hist)
	t.Logf("%d runs; buffered %v; %d skipped at the cap", len(starts), buffered, skipped)
}

// A slot claimed late (catch-up) while nothing runs but a later slot is
// buffered is older than every buffered slot: under the cap it runs at once,
// as a buffered slot with nothing to wait for would at its next claim, and the
// later slot waits for it; at the cap it is skipped.
func TestBufferedEarlierSlotRunsFirst(t *testing.T) {
	t.Parallel()
	onBoth(t, "bufearly", func(t *testing.T, open opener) {
		ctx := backendtest.Context(t)
		_, b := open(t)
		s := b.Runs()
		for _, limit := range []int{1, 2} {
			job := backendtest.JobName("buf-early")
			claim := func(k int, token string) backend.RunClaim {
				in := bufferClaim(job, k, token, 0)
				if limit > 1 {
					in.Overlap, in.BufferCap = backend.OverlapBufferAll, limit
				}
				return in
			}
			t2, t3 := backendtest.Token(), backendtest.Token()
			claimOf(t, s, claim(2, t2), backend.OutcomeWon)
			claimOf(t, s, claim(3, t3), backend.OutcomeBuffered)
			require.NoError(t, s.Finish(ctx, backend.RunKey{Job: job, Slot: bufferSlot(2), Token: t2}, backend.StatusOK))
			if limit == 1 {
				claimOf(t, s, claim(1, backendtest.Token()), backend.OutcomeOverlap)
				claimOf(t, s, claim(3, backendtest.Token()), backend.OutcomeWon)
				continue
			}
			won := claimOf(t, s, claim(1, backendtest.Token()), backend.OutcomeWon)
			assert.Equal(t, 1, won.Attempt)
			w := claimOf(t, s, claim(3, backendtest.Token()), backend.OutcomeBuffered)
			assert.True(t, w.WaitsFor.Equal(bufferSlot(1)), "slot 3 waits for slot 1: %+v", w)
		}
	})
}
