package scheduler_test

import (
	"context"
	"errors"
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

// Policies met with each other and with faults: the machine decides each
// combination once, and these are the ones a review found broken.

// A backfilled slot whose attempts fail is retried as the job's policy says:
// its next slot is long past, and does not bound its retries.
func TestBackfilledSlotIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &startLog{}
		events := newEventLog(scheduler.EventRetry, scheduler.EventFailed)
		s := newScheduler(t, memory.New(), "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("hourly", time.Hour, failFirst(log, 10),
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: time.Second})))
		time.Sleep(3*time.Hour + 30*time.Minute)
		require.NoError(t, s.Start(t.Context()))
		synctest.Wait() // Start read the job's history: none, nothing missed
		base := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
		res, err := s.Backfill(t.Context(), "hourly", base, base.Add(2*time.Hour))
		require.NoError(t, err)
		require.NoError(t, s.Stop(t.Context()))
		require.Len(t, res.Slots, 2)
		for _, sl := range res.Slots {
			assert.Equal(t, scheduler.BackfillRan, sl.Outcome)
			assert.Equal(t, 3, sl.Attempt, "slot %s ran every attempt of the policy", sl.Slot)
			assert.Equal(t, scheduler.StatusError, sl.Status)
		}
		recs := records(t, s, "hourly")
		for _, slot := range []time.Time{base, base.Add(time.Hour)} {
			rs := recs[slot.Unix()]
			require.Len(t, rs, 3, "one record per attempt of %s: %+v", slot, rs)
			for _, r := range rs {
				assert.Equal(t, scheduler.StatusError, r.Status)
				assert.True(t, r.Backfill)
			}
		}
		assert.Len(t, events.of(scheduler.EventRetry), 4, "two retries of each slot")
		assert.Len(t, events.of(scheduler.EventFailed), 2, "one final failure of each slot")
	})
}

// Buffer-one: the slot at 0:02 is buffered behind the run of 0:01, which lasts
// five minutes; a pause from 0:03:30 to 0:07:30 holds it, and it runs once the
// pause ends, in its turn, as the slots the pause held do (catch-up all).
func TestBufferedSlotCaughtByAPauseRunsAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		long := t0.Add(time.Minute)
		scheds := startBuffered(t, b, longFirst(log, long, 5*time.Minute), []string{"A", "B"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0),
			scheduler.WithCatchUp(scheduler.CatchUpAll, 10*time.Minute))
		time.Sleep(3*time.Minute + 30*time.Second)
		require.NoError(t, scheds[0].Pause(t.Context(), "job", scheduler.PauseOptions{Reason: "maintenance", Until: t0.Add(7*time.Minute + 30*time.Second)}))
		time.Sleep(8 * time.Minute) // 0:11:30
		stopAll(t, scheds)

		m := func(k int) time.Time { return t0.Add(time.Duration(k) * time.Minute) }
		assert.Equal(t, []int{1, 1}, slotsStarted(log, m(1), m(2)), "the long run, and the slot buffered behind it")
		assert.Equal(t, []int{1, 1, 1, 1}, slotsStarted(log, m(4), m(5), m(6), m(7)), "the slots the pause held, caught up")
		starts, at := log.get()
		for i, r := range starts {
			if r.Slot.Equal(m(2)) {
				assert.False(t, at[i].Before(t0.Add(7*time.Minute+30*time.Second)), "the buffered slot ran after the pause")
			}
		}
	})
}

// claimFailsOnce is a memory backend whose run store fails one claim of a
// buffered slot, as a store that did not answer once would.
type claimFailsOnce struct {
	*memory.Backend
	at   time.Time
	done *atomic.Bool
}

func (b claimFailsOnce) Runs() backend.RunStore {
	return failOneClaim{b.Backend.Runs().(*memory.RunStore), b.at, b.done}
}

type failOneClaim struct {
	*memory.RunStore
	at   time.Time
	done *atomic.Bool
}

func (s failOneClaim) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if !time.Now().Before(s.at) && s.done.CompareAndSwap(false, true) {
		return backend.ClaimResult{}, errors.New("test: no answer")
	}
	return s.RunStore.Claim(ctx, in)
}

// A stand-by behind a 30-minute run whose store fails to answer once: the
// buffered slot it waits for is still run once the run ends, never recorded
// late, and the slots after the long run run too: the store's state, not a
// local timer, says what is still possible.
func TestOneLostAnswerInALongWaitDecidesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &startLog{}
		t0 := time.Now()
		b := claimFailsOnce{memory.New(), t0.Add(15 * time.Minute), &atomic.Bool{}}
		scheds := startBuffered(t, b, longFirst(log, t0.Add(time.Minute), 30*time.Minute), []string{"A"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(41*time.Minute + 30*time.Second)
		stopAll(t, scheds)
		require.True(t, b.done.Load(), "a claim went unanswered")

		m := func(k int) time.Time { return t0.Add(time.Duration(k) * time.Minute) }
		assert.Equal(t, []int{1, 1}, slotsStarted(log, m(1), m(2)), "the long run and the slot buffered behind it")
		assert.Equal(t, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, slotsStarted(log, m(33), m(34), m(35), m(36), m(37), m(38), m(39), m(40), m(41)),
			"the slots after the long run")
		for _, r := range records(t, scheds[0], "job")[m(2).Unix()] {
			assert.NotEqual(t, scheduler.StatusLate, r.Status, "the buffered slot ran, and is not recorded late: %+v", r)
		}
	})
}

// The holder of entry x's slot dies; x is removed and at once added again with
// the same ID. The slot belongs to the removed incarnation: it is ended
// cancelled, never run again, neither by the replica that stood by for it nor
// by one started later.
func TestReAddedEntryDoesNotRunItsOldSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		a := &failingFinish{Backend: mem}
		var starts atomic.Int32
		var payloads []string
		handler := func(dies bool) scheduler.Handler {
			return func(ctx context.Context, r scheduler.Run) error {
				starts.Add(1)
				payloads = append(payloads, string(r.Payload))
				if dies {
					a.dead.Store(true)
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}
		}
		opts := []scheduler.JobOption{scheduler.WithLease(3 * time.Second), scheduler.WithJitter(0)}
		sa := newScheduler(t, a, "A", callTimeout(time.Second))
		require.NoError(t, sa.Declare("tenants", handler(true), opts...))
		require.NoError(t, sa.Start(t.Context()))
		_, err := sa.AddEntry(t.Context(), "tenants", "x", scheduler.EntrySpec{Every: time.Hour, Payload: []byte("old")})
		require.NoError(t, err)
		time.Sleep(time.Hour + time.Second) // 1:00:01: A won the slot at 1:00 and died
		slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
		sb := newScheduler(t, mem, "B", callTimeout(time.Second))
		require.NoError(t, sb.Declare("tenants", handler(false), opts...))
		require.NoError(t, sb.Start(t.Context()))
		require.NoError(t, sb.EntriesLoaded(t.Context()))
		synctest.Wait() // B follows the old x and stands by for its run
		require.NoError(t, sb.RemoveEntry(t.Context(), "tenants", "x", 0))
		_, err = sb.AddEntry(t.Context(), "tenants", "x", scheduler.EntrySpec{Every: time.Hour, Payload: []byte("new")})
		require.NoError(t, err)
		time.Sleep(10 * time.Second) // A's lease ends

		sc := newScheduler(t, mem, "C", callTimeout(time.Second))
		require.NoError(t, sc.Declare("tenants", handler(false), opts...))
		require.NoError(t, sc.Start(t.Context()))
		time.Sleep(10 * time.Second)
		for _, s := range []*scheduler.Scheduler{sb, sc} {
			require.NoError(t, s.Stop(t.Context()))
		}
		stop, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = sa.Stop(stop)

		assert.EqualValues(t, 1, starts.Load(), "the slot ran once, on A: %v", payloads)
		recs, err := mem.History(t.Context(), backend.EntryRunName("tenants", "x"), 0)
		require.NoError(t, err)
		require.Len(t, recs, 1, "%+v", recs)
		assert.True(t, recs[0].Slot.Equal(slot))
		assert.Equal(t, scheduler.StatusCancelled, recs[0].Status)
		assert.Equal(t, 1, recs[0].Attempt)
		assert.Equal(t, "A", recs[0].Instance)
	})
}
