package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// retryLostUntil is a memory backend whose run store loses every Retry request
// sent before until (the store never sees it).
type retryLostUntil struct {
	*memory.Backend
	until time.Time
}

func (b retryLostUntil) Runs() backend.RunStore {
	return lostRetries{b.Backend.Runs().(*memory.RunStore), b.until}
}

type lostRetries struct {
	*memory.RunStore
	until time.Time
}

func (s lostRetries) Settle(ctx context.Context, st backend.Settlement) error {
	if st.Retry != nil && time.Now().Before(s.until) {
		return errors.New("retry request lost")
	}
	return s.RunStore.Settle(ctx, st)
}

// A Retry sent again after failed tries asks for what is left of the window the
// failure planned, by the instance's clock, not for the whole delay from now:
// the retry still never starts after the next slot.
func TestRetrySentLateKeepsItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(10500 * time.Millisecond)                                               // the slot at 00:00:10 runs at Start and fails
		b := retryLostUntil{Backend: memory.New(), until: time.Now().Add(9 * time.Second)} // 00:00:19.5
		log := &startLog{}
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", 10*time.Second, failFirst(log, 1), scheduler.WithMaxLate(9*time.Second),
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: time.Second})))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(15 * time.Second)
		require.NoError(t, s.Stop(t.Context()))
		starts, at := log.get()
		require.NotEmpty(t, starts)
		first := starts[0].Slot
		require.Equal(t, 10, first.Second(), "the first slot is at 00:00:10")
		for i, r := range starts {
			if r.Slot.Equal(first) {
				assert.True(t, at[i].Before(first.Add(10*time.Second)), "attempt %d of the slot at :10 started at %s, past the next slot", r.Attempt, at[i].Format("15:04:05.000"))
			}
		}
	})
}
