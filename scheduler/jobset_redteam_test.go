package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// TestEntriesLoadedCountsAfterTheFirstJob: a scheduler started with no job
// reads no entries; once its first job is registered, EntriesLoaded waits
// until the stored entries were read, as it does after a Start with jobs, and
// EntryCounts then says the job's entries are followed.
func TestEntriesLoadedCountsAfterTheFirstJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		writer := newScheduler(t, b, "writer")
		require.NoError(t, writer.Declare("report", runs.handler))
		require.NoError(t, writer.Start(t.Context()))
		for _, id := range []string{"e1", "e2"} {
			_, err := writer.AddEntry(t.Context(), "report", id, scheduler.EntrySpec{Every: time.Hour})
			require.NoError(t, err)
		}
		require.NoError(t, writer.Stop(t.Context()))

		s := newScheduler(t, b, "A")
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(context.Background())
		require.NoError(t, s.Declare("report", runs.handler))
		require.NoError(t, s.EntriesLoaded(t.Context()))
		followed, orphaned := s.EntryCounts()
		assert.Equal(t, [2]int{2, 0}, [2]int{followed, orphaned},
			"EntriesLoaded returned: the entries of the job registered are read")
	})
}

// TestJobChurnRunsEachSlotOnce: three instances on one store register and
// remove the same job (its own slots and two entries) over and over, at random
// moments, with claims slowed so that many are in flight at each removal:
// every slot of the job and of its entries runs at most once across the fleet,
// none of a job removed from every instance runs, and Stop leaves nothing
// running (synctest fails on a leaked goroutine).
func TestJobChurnRunsEachSlotOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var (
			mu  sync.Mutex
			ran = map[string]map[int64][]string{} // entry ("" the job's own) → slot → instances
		)
		h := func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			if ran[r.Entry] == nil {
				ran[r.Entry] = map[int64][]string{}
			}
			ran[r.Entry][r.Slot.UnixMilli()] = append(ran[r.Entry][r.Slot.UnixMilli()], r.Instance)
			mu.Unlock()
			time.Sleep(700 * time.Millisecond) // runs overlap the removals
			return nil
		}
		register := func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Second, h, scheduler.WithLease(2*time.Second))
		}
		time.Sleep(90 * time.Second)
		scheds, views := startThree(t, b, register)
		for _, v := range views {
			v.delay.Store(int64(300 * time.Millisecond))
		}
		for _, id := range []string{"e1", "e2"} {
			_, err := scheds[0].AddEntry(t.Context(), "job", id, scheduler.EntrySpec{Every: time.Second})
			require.NoError(t, err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 300 {
			time.Sleep(time.Duration(rng.IntN(900)) * time.Millisecond)
			s := scheds[rng.IntN(len(scheds))]
			if err := s.RemoveJob("job"); err != nil {
				require.ErrorIs(t, err, scheduler.ErrJobNotFound)
				require.NoError(t, register(s))
			}
		}
		for _, s := range scheds {
			_ = s.RemoveJob("job")
		}
		time.Sleep(5 * time.Second) // the runs in progress end
		mu.Lock()
		before := 0
		for _, slots := range ran {
			before += len(slots)
		}
		mu.Unlock()
		time.Sleep(time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		mu.Lock()
		defer mu.Unlock()
		after := 0
		for entry, slots := range ran {
			after += len(slots)
			for slot, by := range slots {
				assert.Len(t, by, 1, "entry %q slot %d ran on %v", entry, slot, by)
			}
		}
		assert.Greater(t, before, 100, "the job ran while registered")
		assert.Equal(t, before, after, "nothing ran once the job was removed from every instance")
	})
}

// TestRegisterAndRemoveRacingStop: registrations and removals on one instance
// while it stops neither panic nor leave a loop running after Stop; once Stop
// returned, no handler starts.
func TestRegisterAndRemoveRacingStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var (
			mu      sync.Mutex
			stopped bool
			late    []string
		)
		h := func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			if stopped {
				late = append(late, r.Job)
			}
			mu.Unlock()
			return nil
		}
		time.Sleep(90 * time.Second)
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("base", time.Second, h))
		require.NoError(t, s.Start(t.Context()))
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					name := fmt.Sprint("j", w, "-", i%5)
					err := s.Every(name, time.Second, h, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Minute))
					if errors.Is(err, scheduler.ErrStopped) {
						return
					}
					if err != nil {
						assert.ErrorIs(t, err, scheduler.ErrJobExists)
					}
					err = s.RemoveJob(fmt.Sprint("j", w, "-", (i+3)%5))
					if errors.Is(err, scheduler.ErrStopped) {
						return
					}
					if err != nil {
						assert.ErrorIs(t, err, scheduler.ErrJobNotFound)
					}
					time.Sleep(time.Duration(10*(w+1)) * time.Millisecond)
				}
			})
		}
		time.Sleep(5 * time.Second)
		require.NoError(t, s.Stop(t.Context()))
		mu.Lock()
		stopped = true
		mu.Unlock()
		wg.Wait()
		time.Sleep(time.Minute)
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, late, "no handler started after Stop returned")
	})
}

// TestCatchUpOfAJobRegisteredAfterStart: a job with catch-up registered on
// running instances after every instance removed it runs the slots missed
// meanwhile once, on one instance, and none that ran before.
func TestCatchUpOfAJobRegisteredAfterStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := newRunLog()
		register := func(s *scheduler.Scheduler) error {
			return s.Every("job", 10*time.Second, log.handler, scheduler.WithCatchUp(scheduler.CatchUpAll, 2*time.Minute))
		}
		time.Sleep(90 * time.Second)
		first := time.Now()
		scheds, _ := startThree(t, b, register)
		time.Sleep(time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.RemoveJob("job"))
		}
		time.Sleep(45 * time.Second) // missed by all
		var wg sync.WaitGroup
		for _, s := range scheds {
			wg.Go(func() { assert.NoError(t, register(s)) })
		}
		wg.Wait()
		time.Sleep(time.Minute)
		last := time.Now().Add(-10 * time.Second)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		runs := log.snapshot()
		for slot := first.Truncate(10 * time.Second).Add(10 * time.Second); slot.Before(last); slot = slot.Add(10 * time.Second) {
			assert.Len(t, runs[slot.UnixMilli()], 1, "slot %v", slot.Format(time.TimeOnly))
		}
	})
}

// TestJobRegisteredDuringAFailedStart: a job registered while Start runs, and
// Start then fails, is started by the next Start like every other job.
func TestJobRegisteredDuringAFailedStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedPrepare{Backend: memory.New(), job: "first", released: make(chan struct{})}
		log := &startLog{}
		h := func(_ context.Context, r scheduler.Run) error {
			log.add(r)
			return nil
		}
		s := newScheduler(t, g, "A")
		require.NoError(t, s.Every("first", 10*time.Second, h))
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan error, 1)
		go func() { started <- s.Start(ctx) }()
		synctest.Wait()
		require.NoError(t, s.Every("second", 10*time.Second, h))
		cancel() // Start's PrepareJob of first fails
		close(g.released)
		require.Error(t, <-started)
		require.NoError(t, s.Every("third", 10*time.Second, h))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		starts, _ := log.get()
		ran := map[string]int{}
		for _, r := range starts {
			ran[r.Job]++
		}
		for _, j := range []string{"first", "second", "third"} {
			assert.GreaterOrEqual(t, ran[j], 5, j)
		}
	})
}

// TestRunLimitOfAJobRegisteredAfterStart: a job with a run limit registered on
// running instances at different moments, and removed and registered again on
// one of them, runs its limit of slots across the fleet, each once.
func TestRunLimitOfAJobRegisteredAfterStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := newRunLog()
		register := func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Second, log.handler, scheduler.WithMaxRuns(5))
		}
		time.Sleep(90 * time.Second)
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Start(t.Context()))
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
			scheds = append(scheds, s)
		}
		for _, s := range scheds {
			require.NoError(t, register(s))
			time.Sleep(1300 * time.Millisecond)
		}
		require.NoError(t, scheds[0].RemoveJob("job"))
		require.NoError(t, register(scheds[0]))
		time.Sleep(30 * time.Second)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		runs := log.snapshot()
		assert.Len(t, runs, 5)
		for slot, by := range runs {
			assert.Len(t, by, 1, "slot %d", slot)
		}
	})
}

// TestOneTimeJobRegisteredAfterStart: an At job registered on running
// instances at moments around its instant runs once, and not again when
// removed and registered again within its max lateness.
func TestOneTimeJobRegisteredAfterStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := newRunLog()
		time.Sleep(90 * time.Second)
		at := time.Now().Add(2 * time.Second)
		register := func(s *scheduler.Scheduler) error {
			return s.At("once", at, log.handler, scheduler.WithMaxLate(30*time.Second))
		}
		scheds, _ := startThree(t, b, func(*scheduler.Scheduler) error { return nil })
		for _, s := range scheds {
			require.NoError(t, register(s))
			time.Sleep(1500 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		for _, s := range scheds {
			require.NoError(t, s.RemoveJob("once"))
			require.NoError(t, register(s))
		}
		time.Sleep(time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		runs := log.snapshot()
		require.Len(t, runs, 1)
		for _, by := range runs {
			assert.Len(t, by, 1)
		}
	})
}

// gatedWatch is a memory backend whose first reading of the entries stops after
// its first entry until released.
type gatedWatch struct {
	*memory.Backend
	paused   chan struct{}
	released chan struct{}
}

func (g *gatedWatch) WatchEntries(ctx context.Context, fn func(backend.EntryChange)) error {
	first := true
	return g.Backend.WatchEntries(ctx, func(c backend.EntryChange) {
		fn(c)
		if first && !c.Synced {
			first = false
			close(g.paused)
			<-g.released
		}
	})
}

// TestJobInAndOutDuringTheFirstReading: a job registered, or removed, while
// the first reading of the entries is half done follows all of its entries,
// or none, and runs each slot of each once while registered.
func TestJobInAndOutDuringTheFirstReading(t *testing.T) {
	for _, atStart := range []bool{false, true} {
		t.Run(fmt.Sprint("declared at Start: ", atStart), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mb := memory.New()
				runs := newEntryRuns()
				writer := newScheduler(t, mb, "writer")
				require.NoError(t, writer.Declare("report", runs.handler))
				require.NoError(t, writer.Start(t.Context()))
				for _, id := range []string{"e1", "e2", "e3"} {
					_, err := writer.AddEntry(t.Context(), "report", id, scheduler.EntrySpec{Every: 2 * time.Second})
					require.NoError(t, err)
				}
				require.NoError(t, writer.Stop(t.Context()))

				g := &gatedWatch{Backend: mb, paused: make(chan struct{}), released: make(chan struct{})}
				s := newScheduler(t, g, "A")
				require.NoError(t, s.Every("other", time.Hour, func(context.Context, scheduler.Run) error { return nil }))
				if atStart {
					require.NoError(t, s.Declare("report", runs.handler))
				}
				require.NoError(t, s.Start(t.Context()))
				defer s.Stop(context.Background())
				<-g.paused
				if atStart {
					require.NoError(t, s.RemoveJob("report"))
				} else {
					require.NoError(t, s.Declare("report", runs.handler))
				}
				close(g.released)
				require.NoError(t, s.EntriesLoaded(t.Context()))
				synctest.Wait()
				followed, orphaned := s.EntryCounts()
				if atStart {
					assert.Equal(t, [2]int{0, 3}, [2]int{followed, orphaned}, "removed: every entry orphaned")
					time.Sleep(10 * time.Second)
					for _, id := range []string{"e1", "e2", "e3"} {
						assert.Empty(t, runs.slots(id), "entry %s of the removed job ran", id)
					}
					require.NoError(t, s.Declare("report", runs.handler))
					synctest.Wait()
					followed, orphaned = s.EntryCounts()
				}
				assert.Equal(t, [2]int{3, 0}, [2]int{followed, orphaned}, "registered: every entry followed")
				time.Sleep(20 * time.Second)
				for _, id := range []string{"e1", "e2", "e3"} {
					slots := runs.slots(id)
					assert.GreaterOrEqual(t, len(slots), 9, "entry %s runs", id)
					for slot, by := range slots {
						assert.Len(t, by, 1, "entry %s slot %d", id, slot)
					}
				}
			})
		})
	}
}
