package jetstream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestSchedulersRunEachSlotOnce runs three schedulers, each with its own connection
// and backend, on one job: every slot runs on exactly one of them. With leases the
// claims go through a shared run store, which writes the records: a won lease
// writes no claim record, so History has no ClaimedAt for it.
func TestSchedulersRunEachSlotOnce(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	t.Run("claims", func(t *testing.T) {
		testSchedulers(t, true, func() backend.Backend { return newBackend(t, natstest.JetStream(t, natstest.Conn(t, s))) })
	})
	t.Run("leases", func(t *testing.T) {
		runs := memory.NewRunStore(backend.SystemClock{})
		testSchedulers(t, false, func() backend.Backend {
			b, err := NewLeased(natstest.JetStream(t, natstest.Conn(t, s)), runs)
			require.NoError(t, err)
			return b
		})
	})
}

// testSchedulers runs them; claimed says History has the claims' times.
func testSchedulers(t *testing.T, claimed bool, newBackend func() backend.Backend) {
	ctx := ctxFor(t)
	job := jobName("tick")

	var mu sync.Mutex
	ran := map[int64][]string{}
	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b", "c"} {
		b := newBackend()
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, 50*time.Millisecond, func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			ran[r.Slot.UnixMilli()] = append(ran[r.Slot.UnixMilli()], r.Instance)
			mu.Unlock()
			return nil
		}, scheduler.WithJitter(20*time.Millisecond)))
		scheds = append(scheds, sc)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) >= 10
	}, 10*time.Second, 10*time.Millisecond)
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(ctx))
	}
	mu.Lock()
	defer mu.Unlock()
	for slot, by := range ran {
		assert.Len(t, by, 1, "slot %d ran on %v", slot, by)
	}
	hist, err := scheds[0].History(ctx, job, 5)
	require.NoError(t, err)
	require.NotEmpty(t, hist)
	for _, r := range hist {
		assert.Contains(t, []string{"a", "b", "c"}, r.Instance)
		assert.Equal(t, claimed, !r.ClaimedAt.IsZero(), "the claim is part of the record")
		assert.False(t, r.StartedAt.IsZero())
	}
}
