package scheduler_test

import (
	"context"
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
)

// Reading does not crowd out the results the outbox is for. While result writes
// fail (reads still answered), each History read finds a dead instance's record
// still running; one ending per record waits in the outbox, not one per read, so
// a status page or a history loop during the outage cannot fill it up to
// MaxPendingRecords and make a real run's result be dropped.
func TestHistoryReadsDuringAWriteOutageDoNotCrowdOutResults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyHistory{Backend: memory.New()}
		b := plainOf{f}
		// An instance that died with its run of the 00:00 slot unfinished: its
		// claim is the record, running.
		won, err := f.Backend.Claim(t.Context(), backend.ClaimInput{
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

// Stop without a deadline returns within a few call timeouts while the run store
// is down, with ErrNotStored: a run whose handler has returned leaves its Finish,
// and its result, to the outbox, which Stop drains for 2 x CallTimeout, instead of
// sending it again for as long as the store would remember the run (a day, with a
// day's catch-up window). The store goes down during the run (every call hangs
// until its timeout), the handler returns, and Stop is called a second later;
// CallTimeout is 1s.
func TestStopWithoutDeadlineReturnsWhileTheRunStoreIsDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []scheduler.JobOption
	}{
		{"defaults", nil},
		{"catch-up window 24h", []scheduler.JobOption{scheduler.WithCatchUp(scheduler.CatchUpLatest, 24*time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &failingFinish{Backend: memory.New()}
				s := newScheduler(t, f, "A", callTimeout(time.Second))
				require.NoError(t, s.Every("work", time.Hour, func(ctx context.Context, _ scheduler.Run) error {
					time.Sleep(2 * time.Second)
					f.dead.Store(true) // the store goes down while the handler runs
					time.Sleep(3 * time.Second)
					return nil
				}, tc.opts...))
				time.Sleep(time.Hour - time.Second)
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(7 * time.Second) // 01:00:06: the handler returned a second ago
				start := time.Now()
				err := s.Stop(context.Background())
				took := time.Since(start)
				t.Logf("Stop took %v: %v", took, err)
				assert.ErrorIs(t, err, scheduler.ErrNotStored)
				assert.LessOrEqual(t, took, 3*time.Second, "Stop without a deadline, no handler running, the store down")
			})
		})
	}
}

// A manual run holds a lease on an instant that is not one of the job's slots, so
// that it is never taken for a scheduled run, and one whose instance died is ended
// lost, never run again. On Every(1ms) (the shortest interval Every accepts) every
// millisecond is a slot: a manual run there was given a scheduled slot a second
// ahead, and when its instance died the slot's scheduled claim on another instance
// took it over and ran it again. Such a manual run is refused.
func TestManualRunOnEveryMillisecondIsNotRunAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		a := &failingFinish{Backend: mem}
		var mu sync.Mutex
		var manualSlot time.Time
		bySlot := map[int64][]scheduler.Run{}
		note := func(r scheduler.Run) {
			mu.Lock()
			defer mu.Unlock()
			bySlot[r.Slot.UnixMilli()] = append(bySlot[r.Slot.UnixMilli()], r)
		}
		sa := newScheduler(t, a, "A", callTimeout(time.Second))
		require.NoError(t, sa.Every("fast", time.Millisecond, func(ctx context.Context, r scheduler.Run) error {
			note(r)
			if r.Manual {
				a.dead.Store(true) // A dies during its manual run
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return nil
		}, scheduler.WithLease(time.Second)))
		sb := newScheduler(t, mem, "B", callTimeout(time.Second))
		require.NoError(t, sb.Every("fast", time.Millisecond, func(ctx context.Context, r scheduler.Run) error {
			note(r)
			return nil
		}, scheduler.WithLease(time.Second)))
		time.Sleep(time.Hour)
		require.NoError(t, sa.Start(t.Context()))
		require.NoError(t, sb.Start(t.Context()))
		time.Sleep(100 * time.Millisecond)
		refused := make(chan error, 1)
		go func() {
			_, err := sa.RunNow(context.Background(), "fast", scheduler.OnStart(func(r scheduler.Run) {
				mu.Lock()
				manualSlot = r.Slot
				mu.Unlock()
			}))
			refused <- err
		}()
		time.Sleep(3 * time.Second)
		require.NoError(t, sb.Stop(t.Context()))
		stop, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = sa.Stop(stop) // the dead process

		mu.Lock()
		defer mu.Unlock()
		// With every millisecond a slot there is no instant for a manual run's
		// lease of its own: it is refused, and nothing runs twice.
		err := <-refused
		require.ErrorIs(t, err, scheduler.ErrInvalidOption)
		assert.Contains(t, err.Error(), "every millisecond is one of its slots")
		assert.True(t, manualSlot.IsZero(), "no manual run started")
		for slot, runs := range bySlot {
			assert.Len(t, runs, 1, "slot %d ran once", slot)
		}
	})
}

// A slot that falls while its job is paused is not run, a takeover included, and
// with CatchUpNone a paused slot stays paused after the pause ends: when the
// winner's Finish(paused) keeps failing and the pause is lifted meanwhile, the
// backup that takes the slot over (the pause having ended) still finishes it
// paused, as it fell during a pause the backup saw.
func TestSlotThatFellWhilePausedIsNotRunAfterAResumeDuringItsFailingFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var ran atomic.Int32
		handler := func(context.Context, scheduler.Run) error {
			ran.Add(1)
			return nil
		}
		opts := []scheduler.JobOption{scheduler.WithLease(2 * time.Second), scheduler.WithMaxLate(10 * time.Second)}
		a := &failingFinish{Backend: mem}
		a.failPaused.Store(1 << 20) // A's Finish(paused) never gets through
		sa := newScheduler(t, a, "A")
		require.NoError(t, sa.Every("job", time.Hour, handler, opts...))
		sb := newScheduler(t, mem, "B")
		require.NoError(t, sb.Every("job", time.Hour, handler, opts...))
		require.NoError(t, sa.Pause(t.Context(), "job", scheduler.PauseOptions{Reason: "freeze"}))
		time.Sleep(time.Hour - time.Second)
		require.NoError(t, sa.Start(t.Context())) // A wins the 01:00 slot, paused
		time.Sleep(1200 * time.Millisecond)
		require.NoError(t, sb.Start(t.Context())) // 01:00:00.2: B stands by for it
		time.Sleep(300 * time.Millisecond)
		// 01:00:00.5: A is still sending Finish(paused) again (it gives up after
		// 0.8s to 1.6s of retries, before its lease would expire).
		require.NoError(t, sb.Resume(t.Context(), "job"))
		time.Sleep(time.Minute)
		require.NoError(t, sb.Stop(t.Context()))
		// A's Finish(paused) never gets through, so its Stop says so.
		if err := sa.Stop(t.Context()); err != nil {
			require.ErrorIs(t, err, scheduler.ErrNotStored)
		}
		hist, err := sb.History(t.Context(), "job", 0)
		require.NoError(t, err)
		for _, r := range hist {
			t.Logf("%s attempt %d on %s: %s %s", r.Slot.Format("15:04:05"), r.Attempt, r.Instance, r.Status, r.Error)
		}
		assert.Zero(t, ran.Load(), "the 01:00 slot fell while the job was paused (CatchUpNone)")
	})
}

// Every slot ends with one terminal record while any instance runs: a slot won
// while its job is paused, whose Finish(paused) fails for the whole lease on a
// lone instance (no backup to decide it), is finished paused from the outbox once
// the store answers, and recorded then. Here Finish(paused) fails 20 times (a
// couple of seconds of a store's trouble), then works.
func TestPausedSlotOfALoneInstanceGetsARecordWhenItsFinishFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &failingFinish{Backend: memory.New()}
		a.failPaused.Store(20)
		s := newScheduler(t, a, "A")
		require.NoError(t, s.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil },
			scheduler.WithLease(2*time.Second), scheduler.WithMaxLate(10*time.Second)))
		require.NoError(t, s.Pause(t.Context(), "job", scheduler.PauseOptions{Reason: "freeze"}))
		time.Sleep(time.Hour - time.Second)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(30 * time.Minute) // 01:29:59
		hist, err := s.History(t.Context(), "job", 0)
		require.NoError(t, err)
		active, err := s.Active(t.Context(), "job")
		require.NoError(t, err)
		t.Logf("history %+v; active %+v", hist, active)
		require.NoError(t, s.Stop(t.Context()))
		require.Len(t, hist, 1, "the 01:00 slot has its one record")
		assert.Equal(t, scheduler.StatusPaused, hist[0].Status)
	})
}
