package sqlbackend_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
)

// The edges around the slot state machine on the SQL stores: a trigger follows the
// job's overlap policy fleet-wide, and a paused slot is never run, also when the
// winner's Finish(paused) fails once.

// A trigger of a job that forbids overlap is refused while a scheduled run of it
// is going on, on either replica.
func TestTriggersFollowOverlapSkip(t *testing.T) {
	t.Parallel()
	onBoth(t, "trigger_overlap", testTriggersFollowOverlapSkip)
}

func testTriggersFollowOverlapSkip(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("no-overlap")
	var mu sync.Mutex
	var running, most, manual int
	started := make(chan struct{}, 1)
	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b"} {
		_, b := open(t)
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, 2*time.Second, func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			running++
			most = max(most, running)
			if r.Manual {
				manual++
			}
			mu.Unlock()
			select {
			case started <- struct{}{}:
			default:
			}
			time.Sleep(1500 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}, scheduler.WithOverlap(backend.OverlapSkip), scheduler.WithLease(2*time.Second), scheduler.WithMaxLate(time.Second)))
		require.NoError(t, sc.Start(ctx))
		scheds = append(scheds, sc)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no scheduled run started")
	}
	for i := range 6 {
		_, err := scheds[i%2].RunNow(ctx, job)
		require.ErrorIs(t, err, scheduler.ErrJobBusy, "trigger %d", i)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(ctx))
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, manual, "no trigger ran")
	assert.Equal(t, 1, most, "never two runs of the job at once")
}

// failPausedFinish is a SQL backend whose run store fails the first Finish that
// stores a paused slot.
type failPausedFinish struct {
	*sqlbackend.Backend
	fail atomic.Int32
}

func (f *failPausedFinish) Runs() backend.RunStore { return pausedRuns{f.Backend.Runs(), f} }

type pausedRuns struct {
	backend.RunStore
	f *failPausedFinish
}

func (r pausedRuns) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if status == backend.StatusPaused && r.f.fail.Add(-1) >= 0 {
		return errors.New("test: the finish was lost")
	}
	return r.RunStore.Finish(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}, status)
}

func (r pausedRuns) Settle(ctx context.Context, st backend.Settlement) error {
	if st.Status == backend.StatusPaused && r.f.fail.Add(-1) >= 0 {
		return errors.New("test: the finish was lost")
	}
	return r.RunStore.(backend.Settler).Settle(ctx, st)
}

func (r pausedRuns) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	return r.RunStore.(backend.LeaseWatcher).WatchRun(ctx, job, slot)
}

// A slot that falls while its job is paused is not run, also when the winner's
// Finish(paused) fails once: each replica fails its first.
func TestPausedSlotNeverRunsWhenItsFinishFails(t *testing.T) {
	t.Parallel()
	onBoth(t, "paused_finish", testPausedFinish)
}

func testPausedFinish(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	job := backendtest.JobName("paused-finish")
	var ran atomic.Int32
	var scheds []*scheduler.Scheduler
	var first *failPausedFinish
	for _, inst := range []string{"a", "b"} {
		_, sb := open(t)
		b := &failPausedFinish{Backend: sb}
		b.fail.Store(1)
		if first == nil {
			first = b
		}
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(job, 500*time.Millisecond, func(context.Context, scheduler.Run) error {
			ran.Add(1)
			return nil
		}, scheduler.WithLease(time.Second)))
		scheds = append(scheds, sc)
	}
	require.NoError(t, scheds[0].Pause(ctx, job, scheduler.PauseOptions{Reason: "freeze"}))
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	time.Sleep(3 * time.Second)
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(ctx))
	}
	assert.Zero(t, ran.Load(), "a paused job ran")
	hist, err := first.History(ctx, job, 0)
	require.NoError(t, err)
	require.NotEmpty(t, hist)
	bySlot := map[int64][]backend.Status{}
	for _, r := range hist {
		bySlot[r.Slot.UnixMilli()] = append(bySlot[r.Slot.UnixMilli()], r.Status)
	}
	for slot, sts := range bySlot {
		assert.Equal(t, []backend.Status{backend.StatusPaused}, sts, "slot %d", slot)
	}
}
