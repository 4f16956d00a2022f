package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// eventLog keeps the events of some kinds, in order.
type eventLog struct {
	mu    sync.Mutex
	kinds map[scheduler.EventKind]bool
	evs   []scheduler.Event
}

func newEventLog(kinds ...scheduler.EventKind) *eventLog {
	l := &eventLog{kinds: map[scheduler.EventKind]bool{}}
	for _, k := range kinds {
		l.kinds[k] = true
	}
	return l
}

func (l *eventLog) hook(e scheduler.Event) {
	if !l.kinds[e.Kind] {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
}

func (l *eventLog) of(k scheduler.EventKind) []scheduler.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []scheduler.Event
	for _, e := range l.evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

var errAttempt = errors.New("attempt failed")

// failFirst is a handler whose first n attempts of each slot fail.
func failFirst(log *startLog, n int) scheduler.Handler {
	return func(_ context.Context, r scheduler.Run) error {
		log.add(r)
		if r.Attempt <= n {
			return errAttempt
		}
		return nil
	}
}

// A failed attempt's retry is stored: when the instance that failed is gone, the
// retry runs on another one, at its time, with a bigger fence; history shows every
// attempt; alerts see one retry event per retry and no final failure.
func TestRetryRunsOnAnotherInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := &startLog{}
		events := newEventLog(scheduler.EventRetry, scheduler.EventFailed)
		policy := scheduler.RetryPolicy{Attempts: 3, Backoff: 10 * time.Second}
		time.Sleep(90 * time.Second) // between slots
		scheds := map[string]*scheduler.Scheduler{}
		for _, id := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, id, func(c *scheduler.Config) { c.OnEvent = events.hook })
			require.NoError(t, s.Every("job", time.Hour, failFirst(log, 2), scheduler.WithRetry(policy), scheduler.WithLease(3*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			scheds[id] = s
		}
		time.Sleep(time.Hour - 90*time.Second + time.Second) // 01:00:01: attempt 1 ran and failed
		starts, _ := log.get()
		require.Len(t, starts, 1)
		failed := starts[0].Instance
		require.NoError(t, scheds[failed].Stop(t.Context()), "the instance that failed goes away before its retry")

		time.Sleep(time.Minute)
		for id, s := range scheds {
			if id != failed {
				require.NoError(t, s.Stop(t.Context()))
			}
		}
		starts, at := log.get()
		require.Len(t, starts, 3, "attempts 1 and 2 fail, 3 succeeds: %+v", starts)
		for i, r := range starts {
			assert.Equal(t, i+1, r.Attempt)
			assert.True(t, r.Slot.Equal(starts[0].Slot))
			if i > 0 {
				assert.Greater(t, r.Fence, starts[i-1].Fence, "fences grow with every attempt")
				assert.Equal(t, starts[i-1].Instance, r.Previous, "a retry names the attempt before it")
			}
		}
		assert.NotEqual(t, failed, starts[1].Instance, "the retry ran on another instance")
		assert.Equal(t, policy.Backoff, at[1].Sub(at[0]).Truncate(time.Second), "the first retry after the backoff")
		assert.Equal(t, 2*policy.Backoff, at[2].Sub(at[1]).Truncate(time.Second), "the second after twice the backoff")

		retries := events.of(scheduler.EventRetry)
		require.Len(t, retries, 2, "one retry event per failed attempt retried")
		assert.Equal(t, 1, retries[0].Attempt)
		assert.Empty(t, events.of(scheduler.EventFailed), "the slot ended ok: no final failure")

		hist, err := scheds["B"].History(t.Context(), "job", 10)
		require.NoError(t, err)
		require.Len(t, hist, 3, "every attempt is in history: %+v", hist)
		assert.Equal(t, []int{3, 2, 1}, []int{hist[0].Attempt, hist[1].Attempt, hist[2].Attempt})
		assert.Equal(t, []scheduler.Status{scheduler.StatusOK, scheduler.StatusError, scheduler.StatusError},
			[]scheduler.Status{hist[0].Status, hist[1].Status, hist[2].Status}, "no attempt recorded lost")
	})
}

// A slot whose every attempt fails runs Attempts times, then fails once for good;
// the next slot starts again at attempt 1.
func TestRetryGivesUp(t *testing.T) {
	for _, leases := range []bool{true, false} {
		t.Run(map[bool]string{true: "leases", false: "no leases"}[leases], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var b backend.Backend = memory.New()
				if !leases {
					b = struct{ backend.Backend }{memory.New()}
				}
				log := &startLog{}
				events := newEventLog(scheduler.EventRetry, scheduler.EventFailed)
				s := newScheduler(t, b, "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
				require.NoError(t, s.Every("job", time.Hour, failFirst(log, 99),
					scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: time.Second, MaxBackoff: 90 * time.Second})))
				require.NoError(t, s.Start(t.Context())) // at 00:00, the slot's time
				time.Sleep(time.Minute)
				require.NoError(t, s.Stop(t.Context()))
				starts, at := log.get()
				require.Len(t, starts, 3, "leases %v: three attempts of the slot", leases)
				assert.Equal(t, time.Second, at[1].Sub(at[0]).Truncate(time.Second))
				assert.Equal(t, 2*time.Second, at[2].Sub(at[1]).Truncate(time.Second))
				assert.Len(t, events.of(scheduler.EventRetry), 2)
				failed := events.of(scheduler.EventFailed)
				require.Len(t, failed, 1, "leases %v: one final failure, after the last attempt", leases)
				assert.Equal(t, 3, failed[0].Attempt)
				hist, err := s.History(t.Context(), "job", 10)
				require.NoError(t, err)
				require.Len(t, hist, 3)
				for _, r := range hist {
					assert.Equal(t, scheduler.StatusError, r.Status)
				}
			})
		})
	}
}

// A handler's NoRetry, and the policy's Retryable, stop retries; manual runs are
// not retried.
func TestRetryNotWanted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var mu sync.Mutex
		runs := map[string]int{}
		handler := func(wrap func(error) error) scheduler.Handler {
			return func(_ context.Context, r scheduler.Run) error {
				mu.Lock()
				runs[r.Job]++
				mu.Unlock()
				return wrap(errAttempt)
			}
		}
		policy := scheduler.RetryPolicy{Attempts: 5}
		events := newEventLog(scheduler.EventFailed)
		s := newScheduler(t, b, "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("no-retry", time.Hour, handler(scheduler.NoRetry), scheduler.WithRetry(policy)))
		skip := policy
		skip.Retryable = func(err error) bool { return !errors.Is(err, errAttempt) }
		require.NoError(t, s.Every("not-retryable", time.Hour, handler(func(err error) error { return err }), scheduler.WithRetry(skip)))
		require.NoError(t, s.Every("manual", 1000*time.Hour, handler(func(err error) error { return err }), scheduler.WithRetry(policy)))
		require.NoError(t, s.Start(t.Context()))
		rec, err := s.RunNow(t.Context(), "manual")
		require.NoError(t, err)
		assert.Equal(t, scheduler.StatusError, rec.Status)
		time.Sleep(time.Minute) // the slots at 00:00 ran at Start
		require.NoError(t, s.Stop(t.Context()))
		assert.Equal(t, map[string]int{"no-retry": 1, "not-retryable": 1, "manual": 1}, runs)
		assert.Len(t, events.of(scheduler.EventFailed), 3)
	})
}

// A retry never starts after the next slot: the backoff that would pass it ends the
// slot's retries. Timeouts are retried like errors.
func TestRetryNeverPastTheNextSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := &startLog{}
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", 10*time.Second, func(ctx context.Context, r scheduler.Run) error {
			log.add(r)
			<-ctx.Done()
			return context.Cause(ctx)
		}, scheduler.WithTimeout(time.Second), scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 10, Backoff: 3 * time.Second})))
		time.Sleep(5 * time.Second)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(6 * time.Second) // 00:00:11: the slot at 00:00:10 ran and failed
		time.Sleep(10 * time.Second)
		require.NoError(t, s.Stop(t.Context()))
		starts, at := log.get()
		require.GreaterOrEqual(t, len(starts), 3)
		// 00:00:10 times out at :11, retry at :14 times out at :15, the next delay
		// (6s) would come at :21, after the slot at :20.
		first := starts[0].Slot
		var ofFirst []int
		for i, r := range starts {
			if r.Slot.Equal(first) {
				ofFirst = append(ofFirst, r.Attempt)
				assert.True(t, at[i].Before(first.Add(10*time.Second)), "attempt %d of %s started at %s, past the next slot", r.Attempt, first, at[i])
			}
		}
		assert.Equal(t, []int{1, 2}, ofFirst)
	})
}

// Registration refuses a retry policy that cannot work, naming the terms.
func TestRetryRefusedAtRegistration(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	noop := func(context.Context, scheduler.Run) error { return nil }
	for _, c := range []struct {
		name string
		p    scheduler.RetryPolicy
		want string
	}{
		{"one attempt", scheduler.RetryPolicy{Attempts: 1}, "retry attempts 1"},
		{"too many attempts", scheduler.RetryPolicy{Attempts: scheduler.MaxRetryAttempts + 1}, "between 2 and"},
		{"negative backoff", scheduler.RetryPolicy{Attempts: 2, Backoff: -time.Second}, "negative"},
		{"jitter above one", scheduler.RetryPolicy{Attempts: 2, Jitter: 1.5}, "jitter"},
		{"cap below backoff", scheduler.RetryPolicy{Attempts: 2, Backoff: time.Minute, MaxBackoff: time.Second}, "below the backoff"},
		{"backoff past the next slot", scheduler.RetryPolicy{Attempts: 2, Backoff: time.Minute}, "not before the next slot"},
		{"jitter past the next slot", scheduler.RetryPolicy{Attempts: 2, Backoff: 40 * time.Second, Jitter: 0.5}, "not before the next slot"},
	} {
		err := s.Every("j", time.Minute, noop, scheduler.WithRetry(c.p))
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, c.name)
		assert.ErrorContains(t, err, c.want, c.name)
	}
	// A one-time job has no next slot to keep clear of.
	assert.NoError(t, s.At("once", time.Now().Add(time.Hour), noop, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: time.Hour})))

	// A run store that cannot store a retry refuses the option.
	plain := newScheduler(t, &noRetrier{memory.New()}, "B")
	err := plain.Every("j", time.Hour, noop, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2}))
	assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.ErrorContains(t, err, "backend.Retrier")
}

// noRetrier is a leased backend whose run store cannot store retries.
type noRetrier struct{ *memory.Backend }

func (n *noRetrier) Runs() backend.RunStore { return struct{ backend.RunStore }{n.Backend.Runs()} }

// A job that fails slot after slot is paused, fleet-wide, after the configured
// number of failed slots in a row, counted once their retries are spent; a success
// between failures starts the count again.
func TestPauseAfterFailedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var mu sync.Mutex
		fail := map[int64]bool{}
		for _, k := range []int64{1, 2, 4, 5, 6, 7} { // slot 3 succeeds
			fail[k] = true
		}
		events := newEventLog(scheduler.EventFailed, scheduler.EventPauseChanged)
		handler := func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			defer mu.Unlock()
			if fail[int64(r.Slot.Minute())] {
				return errAttempt
			}
			return nil
		}
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B"} {
			s := newScheduler(t, b, id, func(c *scheduler.Config) { c.OnEvent = events.hook })
			require.NoError(t, s.Every("job", time.Minute, handler, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: 10 * time.Second}),
				scheduler.WithPauseAfterFailures(3)))
			scheds = append(scheds, s)
		}
		time.Sleep(30 * time.Second) // the slot at 00:00 runs at Start, and succeeds
		for _, s := range scheds {
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(7*time.Minute + 10*time.Second) // slots 00:01 … 00:07 are due
		p, paused := scheds[1].Paused("job")
		require.True(t, paused, "paused after slots 4, 5 and 6 failed")
		assert.Contains(t, p.Reason, "paused after 3 failed slots in a row")
		assert.Contains(t, p.Reason, "attempt failed")
		hist, err := scheds[0].History(t.Context(), "job", 0)
		require.NoError(t, err)
		final := map[int64]scheduler.Status{}
		for _, r := range hist {
			if _, ok := final[int64(r.Slot.Minute())]; !ok {
				final[int64(r.Slot.Minute())] = r.Status // newest attempt first
			}
		}
		assert.Equal(t, map[int64]scheduler.Status{0: scheduler.StatusOK, 1: scheduler.StatusError, 2: scheduler.StatusError, 3: scheduler.StatusOK,
			4: scheduler.StatusError, 5: scheduler.StatusError, 6: scheduler.StatusError, 7: scheduler.StatusPaused}, final)
		assert.Len(t, events.of(scheduler.EventFailed), 5, "slots 1, 2, 4, 5, 6 failed for good")
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
	})
}

// Pausing after failures needs a backend that stores pauses.
func TestPauseAfterFailuresNeedsPauses(t *testing.T) {
	noop := func(context.Context, scheduler.Run) error { return nil }
	s := newScheduler(t, struct{ backend.Backend }{memory.New()}, "A")
	err := s.Every("j", time.Minute, noop, scheduler.WithPauseAfterFailures(3))
	assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.ErrorContains(t, err, "backend.Pauser")
	assert.ErrorIs(t, newScheduler(t, memory.New(), "B").Every("j", time.Minute, noop, scheduler.WithPauseAfterFailures(0)), scheduler.ErrInvalidOption)
}

// Without leases, a retry whose start window passed while the process stood still
// is not run, and the failure before it is the slot's final failure.
func TestRetryInProcessPastItsWindowFailsOnce(t *testing.T) {
	c := stepclock.New(time.Date(2030, 1, 1, 0, 59, 30, 0, time.UTC))
	failed := make(chan scheduler.Event, 4)
	var runs atomic.Int32
	s := newScheduler(t, withoutLeases{memory.NewWithClock(c)}, "A", func(cfg *scheduler.Config) {
		cfg.Clock = c
		cfg.OnEvent = func(e scheduler.Event) {
			if e.Kind == scheduler.EventFailed {
				failed <- e
			}
		}
	})
	require.NoError(t, s.Every("job", time.Hour, func(context.Context, scheduler.Run) error {
		runs.Add(1)
		return errAttempt
	}, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: time.Second})))
	require.NoError(t, s.Start(t.Context()))
	slot := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)
	c.AdvanceTo(slot, 1)
	c.WaitTimers(slot.Add(time.Second), 1) // the retry's wait
	c.Set(slot.Add(2 * time.Minute))       // past its start window (the job's max lateness, a minute)
	select {
	case e := <-failed:
		assert.Equal(t, 1, e.Attempt, "the attempt whose retry did not run")
		assert.True(t, e.Slot.Equal(slot))
	case <-time.After(10 * time.Second):
		t.Fatal("no final failure")
	}
	require.NoError(t, s.Stop(t.Context()))
	assert.EqualValues(t, 1, runs.Load(), "the retry did not run")
}
