package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// slowRetryThenDown is a memory backend whose run store applies the first Retry
// only after a delay (a congested store) and loses its answer, then loses every
// Settle, unapplied, until up.
type slowRetryThenDown struct {
	*memory.Backend
	st *slowRetryStore
}

func (b slowRetryThenDown) Runs() backend.RunStore { return b.st }

type slowRetryStore struct {
	*memory.RunStore
	delay time.Duration
	mu    sync.Mutex
	first bool
	up    time.Time
	sent  []backend.Settlement
}

func (s *slowRetryStore) Settle(ctx context.Context, st backend.Settlement) error {
	s.mu.Lock()
	s.sent = append(s.sent, st)
	first := st.Retry != nil && !s.first
	if first {
		s.first = true
		s.up = time.Now().Add(s.delay + s.delay/2)
	}
	up := s.up
	s.mu.Unlock()
	switch {
	case first:
		time.Sleep(s.delay)
		if err := s.RunStore.Settle(context.WithoutCancel(ctx), st); err != nil {
			return err
		}
		return errors.New("settle answer lost")
	case !up.IsZero() && time.Now().Before(up):
		return errors.New("store unreachable")
	}
	return s.RunStore.Settle(ctx, st)
}

// A Settle storing a retry that the store applied late (its answer lost), sent
// again without the retry once the window has passed by the holder's clock but
// not by the store's, is answered stale: the holder must not take its attempt
// superseded and leave the stored retry with nobody standing by for it.
func TestRedteamRetryAppliedLateRepeatedAfterItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(90 * time.Second)
		st := &slowRetryStore{RunStore: nil, delay: 4 * time.Second}
		mem := memory.New()
		st.RunStore = mem.Runs().(*memory.RunStore)
		b := slowRetryThenDown{Backend: mem, st: st}
		log := &startLog{}
		events := newEventLog(scheduler.EventRetry, scheduler.EventFailed)
		s := newScheduler(t, b, "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		// The retry's window: one second after the failure, for five seconds.
		require.NoError(t, s.Every("job", time.Hour, failFirst(log, 1), scheduler.WithLease(3*time.Second), scheduler.WithMaxLate(5*time.Second),
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: time.Second})))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Hour) // the slot at 01:00 failed; its settle's answers were lost
		require.NoError(t, s.Stop(t.Context()))

		st.mu.Lock()
		sent := append([]backend.Settlement(nil), st.sent...)
		st.mu.Unlock()
		require.NotEmpty(t, sent)
		require.NotNil(t, sent[0].Retry, "the first settle stores the retry")
		require.Nil(t, sent[len(sent)-1].Retry, "the last settle, past the window by the holder's clock, gives the retry up")
		starts, _ := log.get()
		require.Len(t, starts, 2, "the retry the store kept runs in its window, by the store's clock: %+v", starts)
		hist, err := s.History(t.Context(), "job", 0)
		require.NoError(t, err)
		require.Len(t, hist, 2)
		assert.Equal(t, []scheduler.Status{scheduler.StatusOK, scheduler.StatusError}, []scheduler.Status{hist[0].Status, hist[1].Status},
			"attempt 1 failed, not superseded, and was retried: %+v", hist)
		assert.Len(t, events.of(scheduler.EventRetry), 1, "the retry that was stored is reported")
		assert.Empty(t, events.of(scheduler.EventFailed))
	})
}
