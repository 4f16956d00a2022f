package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// A retry whose start window is shorter than the scheduler's claim margin (it
// closes at the next slot a moment after it opens, or the job's max lateness is
// that short) is still run while its instance is up: the claim comes inside the
// window, not after it.
func TestRetryShortWindowRuns(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []scheduler.JobOption
	}{
		{"closes at the next slot", []scheduler.JobOption{
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: 10*time.Second - 2*time.Millisecond})}},
		{"short max lateness", []scheduler.JobOption{scheduler.WithMaxLate(2 * time.Millisecond),
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: time.Second})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				log := &startLog{}
				slot := time.Now().Add(10 * time.Second) // 00:00:10
				s := newScheduler(t, memory.New(), "A")
				require.NoError(t, s.Every("job", 10*time.Second, failFirst(log, 1), c.opts...))
				time.Sleep(5 * time.Second)
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(16 * time.Second) // 00:00:21: the slot at 00:00:10 failed, its retry was due before 00:00:20
				require.NoError(t, s.Stop(t.Context()))
				starts, at := log.get()
				var attempts []int
				for _, r := range starts {
					if r.Slot.Equal(slot) {
						attempts = append(attempts, r.Attempt)
					}
				}
				assert.Equal(t, []int{1, 2}, attempts, "the slot at 00:00:10 and its retry ran: %v at %v", starts, at)
			})
		})
	}
}

// Registration refuses a policy whose first retry never comes before the next slot
// also when the backoff with its jitter overflows a time.Duration: the longest delay
// saturates, it does not wrap around to a negative one that passes the check.
func TestRetryHugeBackoffRefused(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	noop := func(context.Context, scheduler.Run) error { return nil }
	for i, p := range []scheduler.RetryPolicy{
		{Attempts: scheduler.MaxRetryAttempts, Backoff: scheduler.MaxDuration, Jitter: 1},
		{Attempts: scheduler.MaxRetryAttempts, Backoff: scheduler.MaxDuration / 2, MaxBackoff: scheduler.MaxDuration, Jitter: 1},
	} {
		err := s.Every(fmt.Sprint("j", i), time.Minute, noop, scheduler.WithRetry(p))
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "%+v", p)
		assert.ErrorContains(t, err, "not before the next slot", "%+v", p)
	}
	for i, p := range []scheduler.RetryPolicy{
		{Attempts: 2, Backoff: math.MaxInt64, Jitter: 0.5},
		{Attempts: 2, Backoff: time.Minute, MaxBackoff: math.MaxInt64, Jitter: 1},
	} {
		err := s.Every(fmt.Sprint("k", i), time.Minute, noop, scheduler.WithRetry(p))
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "%+v", p)
		assert.ErrorContains(t, err, "above MaxDuration", "%+v", p)
	}
}

// answerLostOnce is a memory backend whose run store applies the first Retry any of
// its views is sent and loses the answer (the caller sees an error).
type answerLostOnce struct {
	*memory.Backend
	lost *atomic.Bool
}

func (b answerLostOnce) Runs() backend.RunStore {
	return retryAnswerLost{b.Backend.Runs().(*memory.RunStore), b.lost}
}

type retryAnswerLost struct {
	*memory.RunStore
	lost *atomic.Bool
}

func (s retryAnswerLost) Settle(ctx context.Context, st backend.Settlement) error {
	err := s.RunStore.Settle(ctx, st)
	if err == nil && st.Retry != nil && s.lost.CompareAndSwap(false, true) {
		return errors.New("retry answer lost")
	}
	return err
}

// A Retry that was stored but whose answer was lost is sent again; when another
// instance has claimed the retry meanwhile, the repeat is still that attempt's
// own, applied: the failed attempt is recorded error (not superseded, it never
// lost its lease) and its retry is reported.
func TestRetryAnswerLostThenClaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, lost := memory.New(), &atomic.Bool{}
		log := &startLog{}
		events := newEventLog(scheduler.EventRetry, scheduler.EventFailed)
		time.Sleep(90 * time.Second)
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B"} {
			s := newScheduler(t, answerLostOnce{mem, lost}, id, func(c *scheduler.Config) { c.OnEvent = events.hook })
			require.NoError(t, s.Every("job", time.Hour, failFirst(log, 1), scheduler.WithLease(3*time.Second),
				scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: 10 * time.Millisecond})))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		time.Sleep(time.Hour) // the slot at 01:00 failed once, its retry ran
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		require.True(t, lost.Load(), "a Retry answer was lost")
		starts, _ := log.get()
		require.Len(t, starts, 2, "the failed attempt and its retry: %+v", starts)
		hist, err := scheds[0].History(t.Context(), "job", 0)
		require.NoError(t, err)
		require.Len(t, hist, 2)
		assert.Equal(t, []scheduler.Status{scheduler.StatusOK, scheduler.StatusError}, []scheduler.Status{hist[0].Status, hist[1].Status},
			"attempt 1 failed and was retried: %+v", hist)
		assert.Len(t, events.of(scheduler.EventRetry), 1, "the retry that was stored is reported")
		assert.Empty(t, events.of(scheduler.EventFailed))
	})
}

// claimsDown is a memory backend whose takeover-only claims (a backup's, a
// retry's) fail while down is set.
type claimsDown struct {
	*memory.Backend
	down *atomic.Bool
}

func (b claimsDown) Runs() backend.RunStore {
	return takeoversDown{b.Backend.Runs().(*memory.RunStore), b.down}
}

type takeoversDown struct {
	*memory.RunStore
	down *atomic.Bool
}

func (s takeoversDown) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if in.TakeoverOnly && s.down.Load() {
		return backend.ClaimResult{}, errors.New("store unreachable")
	}
	return s.RunStore.Claim(ctx, in)
}

// A stored retry that nobody claims before its window closes leaves the failed
// attempt's failure standing: the instance whose attempt it was reports it as the
// slot's final failure, once, when it finds the window closed.
func TestRetryWindowMissedIsTheFinalFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := &atomic.Bool{}
		log := &startLog{}
		events := newEventLog(scheduler.EventRetry, scheduler.EventFailed)
		time.Sleep(90 * time.Second)
		s := newScheduler(t, claimsDown{memory.New(), down}, "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("job", time.Hour, failFirst(log, 1), scheduler.WithLease(3*time.Second), scheduler.WithMaxLate(time.Minute),
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: time.Second})))
		require.NoError(t, s.Start(t.Context()))
		down.Store(true)
		time.Sleep(59*time.Minute + 30*time.Second) // the slot at 01:00 fails; its retry's claims fail
		require.Len(t, events.of(scheduler.EventRetry), 1, "the retry was stored")
		assert.Empty(t, events.of(scheduler.EventFailed), "nothing final yet")
		time.Sleep(90 * time.Second) // past the retry's window (its max lateness), within the run's keep
		down.Store(false)
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))

		starts, _ := log.get()
		require.Len(t, starts, 1, "the retry never ran: %+v", starts)
		failed := events.of(scheduler.EventFailed)
		require.Len(t, failed, 1, "the final failure, once: %+v", failed)
		assert.Equal(t, 1, failed[0].Attempt, "the attempt whose failure stands")
		assert.Equal(t, scheduler.StatusError, failed[0].Status)
		assert.ErrorIs(t, failed[0].Err, errAttempt, "the handler's error")
	})
}
