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

// crashable is the memory backend as one process sees it: once crashed, every
// call it sends fails at once and reaches nothing (the process is gone).
type crashable struct {
	*memory.Backend
	dead atomic.Bool
}

var errCrashed = errors.New("test: the process crashed")

func (c *crashable) err() error {
	if c.dead.Load() {
		return errCrashed
	}
	return nil
}

func (c *crashable) Runs() backend.RunStore { return crashedRuns{c.Backend.Runs(), c} }

func (c *crashable) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	if err := c.err(); err != nil {
		return false, err
	}
	return c.Backend.Claim(ctx, in)
}

func (c *crashable) RecordClaim(ctx context.Context, in backend.ClaimInput) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.Backend.RecordClaim(ctx, in)
}

func (c *crashable) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.Backend.SaveResult(ctx, job, r, keep)
}

type crashedRuns struct {
	backend.RunStore
	c *crashable
}

func (r crashedRuns) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if err := r.c.err(); err != nil {
		return backend.ClaimResult{}, err
	}
	return r.RunStore.Claim(ctx, in)
}

func (r crashedRuns) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	if err := r.c.err(); err != nil {
		return err
	}
	return r.RunStore.Heartbeat(ctx, key, lease)
}

func (r crashedRuns) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	if err := r.c.err(); err != nil {
		return err
	}
	return r.RunStore.Finish(ctx, key, status)
}

func (r crashedRuns) Settle(ctx context.Context, st backend.Settlement) error {
	if err := r.c.err(); err != nil {
		return err
	}
	return r.RunStore.(backend.Settler).Settle(ctx, st)
}

func (r crashedRuns) Release(ctx context.Context, key backend.RunKey) error {
	if err := r.c.err(); err != nil {
		return err
	}
	return r.RunStore.Release(ctx, key)
}

func (r crashedRuns) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	if err := r.c.err(); err != nil {
		return nil, err
	}
	return r.RunStore.Active(ctx, job)
}

// crash kills s, which sees the store through c: nothing it sends reaches the
// store any more, and Stop, with no time left, only reaps its goroutines.
func crash(t *testing.T, s *scheduler.Scheduler, c *crashable) {
	t.Helper()
	c.dead.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_ = s.Stop(ctx)
}

// blockingRuns is a handler that blocks until its context ends, and counts its
// starts by instance on one channel.
func blockingRuns() (scheduler.Handler, chan scheduler.Run) {
	started := make(chan scheduler.Run, 16)
	return func(ctx context.Context, run scheduler.Run) error {
		started <- run
		<-ctx.Done()
		return context.Cause(ctx)
	}, started
}

// assertRemovedRunEnded checks that the run of slot of the removed entry x of
// job j is finished in the run store and that its history ends with one
// terminal record, cancelled, saying the entry was removed; and that no handler
// started again.
func assertRemovedRunEnded(t *testing.T, runs backend.RunStore, s *scheduler.Scheduler, slot time.Time, started chan scheduler.Run) {
	t.Helper()
	active, err := runs.Active(t.Context(), backend.EntryRunName("j", "x"))
	require.NoError(t, err)
	assert.Empty(t, active, "the run of the removed entry is finished in the run store")
	hist, err := s.EntryHistory(t.Context(), "j", "x", 10)
	require.NoError(t, err)
	require.NotEmpty(t, hist)
	last := hist[0]
	assert.True(t, last.Slot.Equal(slot), "the newest record is the slot's: %+v", last)
	assert.Equal(t, scheduler.StatusCancelled, last.Status, "the slot ends cancelled: %+v", hist)
	assert.Contains(t, last.Error, "removed")
	terminal := 0
	for _, r := range hist {
		assert.NotEqual(t, scheduler.StatusRunning, r.Status, "no record of the slot is left running: %+v", hist)
		if r.Status != scheduler.StatusLost && r.Status != scheduler.StatusSuperseded {
			terminal++
		}
	}
	assert.Equal(t, 1, terminal, "one terminal record: %+v", hist)
	select {
	case run := <-started:
		t.Fatalf("the handler started again: %+v", run)
	default:
	}
}

// TestAbandonedRunOfARemovedEntryIsEnded: an entry is removed while one of its
// slots runs, and the holder crashes. Nobody follows the entry any more to take
// its run over, yet "every due slot ends with exactly one terminal record": a
// live replica (one that followed the entry, or one started after the removal,
// when no replica was up as the lease expired) ends the run cancelled, once its
// lease has expired, and never runs the handler again.
func TestAbandonedRunOfARemovedEntryIsEnded(t *testing.T) {
	for _, when := range []string{"backup up before the slot", "replica started while the entry was paused", "replica started after the removal", "replica started after the lease expired"} {
		t.Run(when, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				h, started := blockingRuns()
				opts := []scheduler.JobOption{scheduler.WithLease(5 * time.Second)}
				views := map[string]*crashable{}
				// The instances that may hold the run see the store through a
				// view that can crash; the one started later sees it as it is.
				start := func(name string) *scheduler.Scheduler {
					var b backend.Backend = mem
					if name == "i0" || when == "backup up before the slot" {
						v := &crashable{Backend: mem}
						views[name], b = v, v
					}
					s := newScheduler(t, b, name)
					require.NoError(t, s.Declare("j", h, opts...))
					require.NoError(t, s.Start(t.Context()))
					require.NoError(t, s.EntriesLoaded(t.Context()))
					t.Cleanup(func() { _ = s.Stop(context.Background()) })
					return s
				}
				fleet := map[string]*scheduler.Scheduler{"i0": start("i0")}
				e, err := fleet["i0"].AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
				require.NoError(t, err)
				if when == "backup up before the slot" {
					fleet["i1"] = start("i1")
				}
				time.Sleep(time.Minute)
				run := <-started
				synctest.Wait()
				var taker *scheduler.Scheduler
				if when == "replica started while the entry was paused" {
					// This replica starts following a paused entry: it adopts
					// the entry's runs (standing by for the holder's), and sees
					// the removal while it stands by.
					_, err := fleet["i0"].UpdateEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute, Paused: true}, e.Revision)
					require.NoError(t, err)
					taker = start("i1")
					synctest.Wait()
				}
				require.NoError(t, mem.DeleteEntry(t.Context(), "j", "x", 0))
				synctest.Wait()
				crash(t, fleet[run.Instance], views[run.Instance])
				delete(fleet, run.Instance)
				switch when {
				case "backup up before the slot":
					for _, s := range fleet {
						taker = s
					}
				case "replica started after the removal":
					taker = start("i1")
				case "replica started after the lease expired":
					time.Sleep(10 * time.Second)
					synctest.Wait()
					taker = start("i1")
				}
				time.Sleep(10 * time.Second) // past the lease
				synctest.Wait()
				assertRemovedRunEnded(t, mem.Runs(), taker, run.Slot, started)
			})
		})
	}
}

// TestRemovedEntryRunOfALiveHolderIsNotRaced: a replica that finds the run of a
// removed entry while its holder is alive only stands by: the holder's lease
// lives on its heartbeats, the run ends as the holder finishes it, once, and
// nothing is recorded cancelled.
func TestRemovedEntryRunOfALiveHolderIsNotRaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		started := make(chan scheduler.Run, 4)
		h := func(ctx context.Context, run scheduler.Run) error {
			started <- run
			select {
			case <-time.After(time.Minute / 2): // six leases
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		start := func(name string) *scheduler.Scheduler {
			s := newScheduler(t, mem, name)
			require.NoError(t, s.Declare("j", h, scheduler.WithLease(5*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			require.NoError(t, s.EntriesLoaded(t.Context()))
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
			return s
		}
		holder := start("i0")
		_, err := holder.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		run := <-started
		require.NoError(t, holder.RemoveEntry(t.Context(), "j", "x", 0))
		other := start("i1")
		synctest.Wait()
		active, err := mem.Runs().Active(t.Context(), backend.EntryRunName("j", "x"))
		require.NoError(t, err)
		require.Len(t, active, 1, "the holder's run goes on")
		time.Sleep(time.Minute / 2)
		synctest.Wait()
		active, err = mem.Runs().Active(t.Context(), backend.EntryRunName("j", "x"))
		require.NoError(t, err)
		assert.Empty(t, active)
		hist, err := other.EntryHistory(t.Context(), "j", "x", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1, "one attempt, the holder's: %+v", hist)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status)
		assert.Equal(t, run.Token, hist[0].Token)
		select {
		case again := <-started:
			t.Fatalf("the handler started again: %+v", again)
		default:
		}
	})
}

// TestAdoptedRunOfAChangedEntryIsTakenOver: an entry is changed while one of
// its slots runs, and the holder crashes. A replica started after the change
// follows the new version, whose schedule begins after the change: the running
// slot is not on it. Its adoption takes the run over all the same (an entry has
// no manual runs): the slot runs again as attempt 2 and ends ok, not ended lost
// as a manual run would be.
func TestAdoptedRunOfAChangedEntryIsTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		started := make(chan scheduler.Run, 4)
		h := func(ctx context.Context, run scheduler.Run) error {
			started <- run
			if run.Attempt > 1 {
				return nil
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}
		opts := []scheduler.JobOption{scheduler.WithLease(5 * time.Second)}
		v := &crashable{Backend: mem}
		holder := newScheduler(t, v, "holder")
		require.NoError(t, holder.Declare("j", h, opts...))
		require.NoError(t, holder.Start(t.Context()))
		require.NoError(t, holder.EntriesLoaded(t.Context()))
		t.Cleanup(func() { _ = holder.Stop(context.Background()) })
		e, err := holder.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute, Payload: []byte("v1")})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		run := <-started
		_, err = holder.UpdateEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute, Payload: []byte("v2")}, e.Revision)
		require.NoError(t, err)
		synctest.Wait()
		crash(t, holder, v)
		taker := newScheduler(t, mem, "taker")
		require.NoError(t, taker.Declare("j", h, opts...))
		require.NoError(t, taker.Start(t.Context()))
		require.NoError(t, taker.EntriesLoaded(t.Context()))
		t.Cleanup(func() { _ = taker.Stop(context.Background()) })
		time.Sleep(10 * time.Second) // past the lease
		synctest.Wait()
		var again scheduler.Run
		select {
		case again = <-started:
		default:
			t.Fatal("the run was not taken over")
		}
		assert.Equal(t, "taker", again.Instance)
		assert.True(t, again.Slot.Equal(run.Slot))
		assert.Equal(t, 2, again.Attempt)
		hist, err := taker.EntryHistory(t.Context(), "j", "x", 10)
		require.NoError(t, err)
		require.Len(t, hist, 2, "%+v", hist)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status, "%+v", hist)
		assert.Equal(t, scheduler.StatusLost, hist[1].Status)
		assert.False(t, hist[1].Manual, "not a manual run")
	})
}

// TestAbandonedRunOfAPausedEntryIsEnded: an entry is paused while one of its
// slots runs, and the holder crashes. A replica that starts while the entry is
// paused still follows it, and must take the run over once its lease has
// ended: recorded paused, not run, and finished in the run store.
func TestAbandonedRunOfAPausedEntryIsEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		h, started := blockingRuns()
		v := &crashable{Backend: mem}
		holder := newScheduler(t, v, "i0")
		require.NoError(t, holder.Declare("j", h, scheduler.WithLease(5*time.Second)))
		require.NoError(t, holder.Start(t.Context()))
		require.NoError(t, holder.EntriesLoaded(t.Context()))
		t.Cleanup(func() { _ = holder.Stop(context.Background()) })
		e, err := holder.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		run := <-started
		_, err = holder.UpdateEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute, Paused: true}, e.Revision)
		require.NoError(t, err)
		synctest.Wait()
		crash(t, holder, v)
		taker := newScheduler(t, mem, "i1")
		require.NoError(t, taker.Declare("j", h, scheduler.WithLease(5*time.Second)))
		require.NoError(t, taker.Start(t.Context()))
		require.NoError(t, taker.EntriesLoaded(t.Context()))
		t.Cleanup(func() { _ = taker.Stop(context.Background()) })
		time.Sleep(10 * time.Second) // past the lease
		synctest.Wait()
		active, err := mem.Runs().Active(t.Context(), backend.EntryRunName("j", "x"))
		require.NoError(t, err)
		assert.Empty(t, active, "the run of the paused entry is finished in the run store")
		hist, err := taker.EntryHistory(t.Context(), "j", "x", 10)
		require.NoError(t, err)
		require.NotEmpty(t, hist)
		assert.True(t, hist[0].Slot.Equal(run.Slot))
		assert.Equal(t, scheduler.StatusPaused, hist[0].Status, "%+v", hist)
		select {
		case again := <-started:
			t.Fatalf("the handler started again: %+v", again)
		default:
		}
	})
}

// cuttableWatch is the memory backend whose first entry watch ends when cut is
// closed; the next begins once resume is closed.
type cuttableWatch struct {
	*memory.Backend
	cut, resume chan struct{}
	calls       atomic.Int32
}

func (c *cuttableWatch) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	if c.calls.Add(1) > 1 {
		select {
		case <-c.resume:
		case <-ctx.Done():
			return nil
		}
		return c.Backend.WatchEntries(ctx, fn)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.cut:
			cancel()
		case <-wctx.Done():
		}
	}()
	err := c.Backend.WatchEntries(wctx, fn)
	if ctx.Err() != nil {
		return err
	}
	return errors.New("test: the watch was cut")
}

// seenLate sets up a replica, late, whose entry watch is down while the holder
// adds entry x of job j (every) and starts its first slot; the slot's deadline
// passes, then late's watch comes back and reads the entry.
func seenLate(t *testing.T, every time.Duration) (mem *memory.Backend, late, holder *scheduler.Scheduler, v *crashable, run scheduler.Run, started chan scheduler.Run) {
	mem = memory.New()
	h, started := blockingRuns()
	opts := []scheduler.JobOption{scheduler.WithLease(5 * time.Second), scheduler.WithMaxLate(10 * time.Second)}
	cw := &cuttableWatch{Backend: mem, cut: make(chan struct{}), resume: make(chan struct{})}
	late = newScheduler(t, cw, "late")
	require.NoError(t, late.Declare("j", h, opts...))
	require.NoError(t, late.Start(t.Context()))
	require.NoError(t, late.EntriesLoaded(t.Context()))
	t.Cleanup(func() { _ = late.Stop(context.Background()) })
	close(cw.cut)
	synctest.Wait()

	v = &crashable{Backend: mem}
	holder = newScheduler(t, v, "holder")
	require.NoError(t, holder.Declare("j", h, opts...))
	require.NoError(t, holder.Start(t.Context()))
	require.NoError(t, holder.EntriesLoaded(t.Context()))
	t.Cleanup(func() { _ = holder.Stop(context.Background()) })
	_, err := holder.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: every})
	require.NoError(t, err)
	time.Sleep(every)
	run = <-started
	require.Equal(t, "holder", run.Instance)

	time.Sleep(20 * time.Second) // past the slot's deadline: the late reading does not claim it
	close(cw.resume)
	time.Sleep(time.Second) // the watch's retry
	synctest.Wait()
	return mem, late, holder, v, run, started
}

// TestAbandonedRunOfAnEntrySeenLateIsEnded: a replica whose entry watch was down
// while an entry was added and one of its slots started reads the entry only
// in a later reading: it follows the entry's next slots, and stands by for none
// of its runs. When the entry is removed and the holder crashes, that replica,
// which saw the removal, ends the run.
func TestAbandonedRunOfAnEntrySeenLateIsEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, late, holder, v, run, started := seenLate(t, time.Minute)
		followed, _ := late.EntryCounts()
		require.Equal(t, 1, followed, "the late reading follows the entry")
		require.NoError(t, mem.DeleteEntry(t.Context(), "j", "x", 0))
		synctest.Wait()
		crash(t, holder, v)
		time.Sleep(10 * time.Second) // past the lease
		synctest.Wait()
		assertRemovedRunEnded(t, mem.Runs(), late, run.Slot, started)
	})
}

// TestAbandonedRunOfARemovedEntryFoundByAJobRegisteredLater: a replica that
// runs other jobs registers the entry's job only after the entry was removed
// and its holder crashed: registering the job looks for its removed entries'
// runs as Start does, and ends the run.
func TestAbandonedRunOfARemovedEntryFoundByAJobRegisteredLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		h, started := blockingRuns()
		opts := []scheduler.JobOption{scheduler.WithLease(5 * time.Second)}
		later := newScheduler(t, mem, "later")
		require.NoError(t, later.Every("other", time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		require.NoError(t, later.Start(t.Context()))
		require.NoError(t, later.EntriesLoaded(t.Context()))
		t.Cleanup(func() { _ = later.Stop(context.Background()) })

		v := &crashable{Backend: mem}
		holder := newScheduler(t, v, "holder")
		require.NoError(t, holder.Declare("j", h, opts...))
		require.NoError(t, holder.Start(t.Context()))
		require.NoError(t, holder.EntriesLoaded(t.Context()))
		t.Cleanup(func() { _ = holder.Stop(context.Background()) })
		_, err := holder.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		run := <-started
		require.NoError(t, mem.DeleteEntry(t.Context(), "j", "x", 0))
		synctest.Wait()
		crash(t, holder, v)

		require.NoError(t, later.Declare("j", h, opts...))
		time.Sleep(10 * time.Second) // past the lease
		synctest.Wait()
		assertRemovedRunEnded(t, mem.Runs(), later, run.Slot, started)
	})
}

// TestRunOfAnEntrySeenLateIsTakenOver: a replica whose entry watch was down
// while an entry was added and one of its slots started reads the entry in a
// later reading and adopts its runs: when the holder crashes, it takes the run
// over.
func TestRunOfAnEntrySeenLateIsTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, late, holder, v, run, started := seenLate(t, time.Hour)
		crash(t, holder, v)
		time.Sleep(10 * time.Second) // past the lease
		synctest.Wait()
		var again scheduler.Run
		select {
		case again = <-started:
		default:
			t.Fatal("nobody took the dead holder's run over")
		}
		assert.Equal(t, "late", again.Instance)
		assert.Equal(t, 2, again.Attempt)
		assert.True(t, again.Slot.Equal(run.Slot))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_ = late.Stop(ctx) // the taken-over run blocks until cancelled
	})
}
