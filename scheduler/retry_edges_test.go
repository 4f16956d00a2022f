package scheduler_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
		{Attempts: 2, Backoff: math.MaxInt64, Jitter: 0.5},
		{Attempts: 2, Backoff: 1 << 62, Jitter: 1},
		{Attempts: scheduler.MaxRetryAttempts, Backoff: math.MaxInt64 / 2, MaxBackoff: math.MaxInt64, Jitter: 1},
	} {
		err := s.Every(fmt.Sprint("j", i), time.Minute, noop, scheduler.WithRetry(p))
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "%+v", p)
		assert.ErrorContains(t, err, "not before the next slot", "%+v", p)
	}
}
