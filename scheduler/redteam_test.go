package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// Red team (issue 20, repair on read): a record left running by a dead instance
// is ended by the next History read, and that ending is written through the
// outbox. While the result writes fail (the result stream's leader being elected,
// or its account at its storage limit, reads still answered), every History read
// finds the record still running and adds one more copy of the same ending to the
// outbox. A status page or a `history` loop during the outage fills it up to
// MaxPendingRecords, and from then on a real run's result that fails once is
// dropped: after the store is back, that slot reads lost (ended by the repair,
// as its result never came) although it ran ok. Reading must not crowd out the
// results the outbox is for: one pending ending per record.
func TestHistoryReadsDuringAWriteOutageDoNotCrowdOutResults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyHistory{MemoryBackend: scheduler.NewMemoryBackend()}
		b := plainOf{f}
		// An instance that died with its run of the 00:00 slot unfinished: its
		// claim is the record, running.
		won, err := f.MemoryBackend.Claim(t.Context(), scheduler.ClaimInput{
			Job: "work", Slot: time.Now(), Token: "dead-token", Instance: "dead", Attempt: 1, At: time.Now(),
			HistorySize: 100,
		})
		require.NoError(t, err)
		require.True(t, won)
		time.Sleep(5 * time.Minute)

		s := newScheduler(t, b, "B", callTimeout(time.Second))
		require.NoError(t, s.Every("work", time.Hour, func(context.Context, scheduler.Run) error { return nil },
			scheduler.WithTimeout(time.Minute)))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(t.Context())) }()

		// The result stream refuses writes from 00:05 to 01:00:30; reads work.
		f.mu.Lock()
		f.downUntil = time.Date(2000, 1, 1, 1, 0, 30, 0, time.UTC)
		f.mu.Unlock()
		for range scheduler.MaxPendingRecords + 1 {
			_, err := s.History(t.Context(), "work", 10)
			require.NoError(t, err)
		}
		time.Sleep(time.Hour) // 01:05: the 01:00 slot ran ok, its result failed once
		time.Sleep(5 * time.Minute)

		recs, err := s.History(t.Context(), "work", 0)
		require.NoError(t, err)
		got := map[string]scheduler.Status{}
		for _, r := range recs {
			got[r.Slot.Format("15:04")] = r.Status
		}
		assert.Equal(t, scheduler.StatusOK, got["01:00"], "the 01:00 run succeeded: %v", got)
		assert.Equal(t, scheduler.StatusLost, got["00:00"], "%v", got)
		assert.LessOrEqual(t, int(f.saves.Load()), 1000, "SaveResult calls: the same ending written again per read")
	})
}

var _ sync.Locker
