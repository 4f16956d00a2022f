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
)

// TestJobRegisteredAfterStart: a job registered on a running fleet, on every
// instance at different moments, runs each of its slots once, and JobsChanged
// tells a follower of the jobs.
func TestJobRegisteredAfterStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := &startLog{}
		time.Sleep(90 * time.Second)
		noop := func(context.Context, scheduler.Run) error { return nil }
		scheds, _ := startThree(t, b, func(s *scheduler.Scheduler) error { return s.Every("old", time.Hour, noop) })
		changed := scheds[0].JobsChanged()
		for i, s := range scheds {
			require.NoError(t, s.Every("new", 10*time.Second, func(_ context.Context, r scheduler.Run) error {
				log.add(r)
				return nil
			}))
			if i == 0 {
				select {
				case <-changed:
				default:
					t.Fatal("JobsChanged was not closed by a registration")
				}
			}
			time.Sleep(3 * time.Second)
		}
		require.ErrorIs(t, scheds[1].Every("new", time.Second, noop), scheduler.ErrJobExists)
		assert.Equal(t, []string{"old", "new"}, jobNames(scheds[2]))
		time.Sleep(time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		starts, _ := log.get()
		seen := map[int64]int{}
		for _, r := range starts {
			seen[r.Slot.UnixMilli()]++
		}
		require.GreaterOrEqual(t, len(seen), 6, "the slots of the minute after the first registration ran")
		for slot, n := range seen {
			assert.Equal(t, 1, n, "slot %d ran %d times", slot, n)
		}
	})
}

func jobNames(s *scheduler.Scheduler) []string {
	var names []string
	for _, j := range s.Jobs() {
		names = append(names, j.Job)
	}
	return names
}

// TestRemovedJobStandsDown: the instances that removed a job neither take over
// its run whose holder died nor claim its next slots; one that registers it
// again adopts the run.
func TestRemovedJobStandsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := &startLog{}
		var (
			died   atomic.Bool
			mu     sync.Mutex
			views  = map[string]*faultView{}
			scheds []*scheduler.Scheduler
		)
		h := func(ctx context.Context, r scheduler.Run) error {
			log.add(r)
			if r.Attempt == 1 && died.CompareAndSwap(false, true) {
				mu.Lock()
				// The holder dies: no heartbeat, no claim reaches the store.
				views[r.Instance].hangHeartbeats.Store(true)
				views[r.Instance].unreachableUntil.Store(time.Now().Add(1000 * time.Hour).UnixNano())
				for _, s := range scheds {
					if s.Instance() != r.Instance {
						require.NoError(t, s.RemoveJob("job"))
					}
				}
				mu.Unlock()
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return nil
		}
		time.Sleep(90 * time.Second)
		mu.Lock()
		var vs []*faultView
		scheds, vs = startThree(t, b, func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, h, scheduler.WithLease(2*time.Second))
		})
		for i, s := range scheds {
			views[s.Instance()] = vs[i]
		}
		mu.Unlock()
		time.Sleep(time.Hour)        // the slot at 01:00: its holder dies
		time.Sleep(30 * time.Second) // many leases, within the run store's keep: nobody took it over
		starts, _ := log.get()
		require.Len(t, starts, 1, "the instances that removed the job took nothing over: %+v", starts)
		holder := starts[0].Instance
		var other *scheduler.Scheduler
		for _, s := range scheds {
			if s.Instance() != holder {
				other = s
				assert.NotContains(t, jobNames(s), "job")
				_, err := s.RunNow(t.Context(), "job")
				assert.ErrorIs(t, err, scheduler.ErrJobNotFound)
			}
		}
		active, err := b.Runs().Active(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, active, 1, "the dead holder's run is still unfinished")

		// Registered again: its start adopts the run.
		require.NoError(t, other.Every("job", time.Hour, h, scheduler.WithLease(2*time.Second)))
		time.Sleep(10 * time.Second)
		starts, _ = log.get()
		require.Len(t, starts, 2)
		assert.Equal(t, other.Instance(), starts[1].Instance)
		assert.Equal(t, 2, starts[1].Attempt, "a takeover of the dead holder's run")
		assert.True(t, starts[1].Slot.Equal(starts[0].Slot))
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
	})
}

// TestEntriesFollowTheirJobInAndOut: the entries of a job this instance does
// not declare are orphaned here; registering the job runs them, removing it
// orphans them again, whether or not the instance declared a job at Start.
func TestEntriesFollowTheirJobInAndOut(t *testing.T) {
	for _, name := range []string{"no jobs at Start", "another job at Start"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				runs := newEntryRuns()
				writer := newScheduler(t, b, "writer")
				require.NoError(t, writer.Declare("report", runs.handler))
				require.NoError(t, writer.Start(t.Context()))
				for _, id := range []string{"e1", "e2"} {
					_, err := writer.AddEntry(t.Context(), "report", id, scheduler.EntrySpec{Every: 2 * time.Second})
					require.NoError(t, err)
				}
				require.NoError(t, writer.Stop(t.Context()))

				s := newScheduler(t, b, "A")
				if name == "another job at Start" {
					require.NoError(t, s.Every("other", time.Hour, func(context.Context, scheduler.Run) error { return nil }))
				}
				require.NoError(t, s.Start(t.Context()))
				defer s.Stop(context.Background())
				require.NoError(t, s.EntriesLoaded(t.Context()))
				time.Sleep(time.Second)
				followed, orphaned := s.EntryCounts()
				if name == "another job at Start" {
					assert.Equal(t, [2]int{0, 2}, [2]int{followed, orphaned})
				}

				require.NoError(t, s.Declare("report", runs.handler))
				time.Sleep(time.Second)
				followed, orphaned = s.EntryCounts()
				assert.Equal(t, [2]int{2, 0}, [2]int{followed, orphaned}, "followed once the job is registered")
				// Between two slots: a slot due at the instant of the removal
				// may have been won before it, and finishes.
				time.Sleep(10*time.Second + 500*time.Millisecond)
				before := len(runs.slots("e1"))
				assert.GreaterOrEqual(t, before, 4, "e1 ran while its job was registered")

				require.NoError(t, s.RemoveJob("report"))
				followed, orphaned = s.EntryCounts()
				assert.Equal(t, [2]int{0, 2}, [2]int{followed, orphaned}, "orphaned once the job is removed")
				time.Sleep(10 * time.Second)
				assert.Len(t, runs.slots("e1"), before, "no slot of a removed job's entry is claimed")

				require.NoError(t, s.Declare("report", runs.handler))
				time.Sleep(10 * time.Second)
				assert.Greater(t, len(runs.slots("e1")), before, "registered again: its entries run again")
				for _, id := range []string{"e1", "e2"} {
					for slot, by := range runs.slots(id) {
						assert.Len(t, by, 1, "entry %s slot %d", id, slot)
					}
				}
			})
		})
	}
}

// gatedPrepare is a memory backend whose PrepareJob of one job waits until
// released.
type gatedPrepare struct {
	*memory.Backend
	job      string
	waiting  atomic.Bool
	released chan struct{}
}

func (g *gatedPrepare) PrepareJob(ctx context.Context, l backend.JobLimits) error {
	if l.Job == g.job {
		g.waiting.Store(true)
		<-g.released
	}
	return g.Backend.PrepareJob(ctx, l)
}

// TestJobRegisteredDuringStart: a job registered while Start prepares the
// others is prepared by its registration and started with them.
func TestJobRegisteredDuringStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedPrepare{Backend: memory.New(), job: "first", released: make(chan struct{})}
		log := &startLog{}
		h := func(_ context.Context, r scheduler.Run) error {
			log.add(r)
			return nil
		}
		s := newScheduler(t, g, "A")
		require.NoError(t, s.Every("first", 10*time.Second, h))
		started := make(chan error, 1)
		go func() { started <- s.Start(t.Context()) }()
		synctest.Wait()
		require.True(t, g.waiting.Load(), "Start waits in the first job's PrepareJob")
		require.NoError(t, s.Every("second", 10*time.Second, h))
		_, err := s.RunNow(t.Context(), "second")
		require.ErrorIs(t, err, scheduler.ErrNotStarted, "not started until Start returns")
		close(g.released)
		require.NoError(t, <-started)
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		starts, _ := log.get()
		ran := map[string]int{}
		for _, r := range starts {
			ran[r.Job]++
		}
		assert.GreaterOrEqual(t, ran["first"], 5)
		assert.GreaterOrEqual(t, ran["second"], 5, "the job registered during Start runs")
	})
}

// TestRemoveJobRefusals: RemoveJob of an unknown job, or after Stop, says so.
func TestRemoveJobRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "A")
		noop := func(context.Context, scheduler.Run) error { return nil }
		require.ErrorIs(t, s.RemoveJob("nope"), scheduler.ErrJobNotFound)
		require.NoError(t, s.Every("j", time.Hour, noop))
		changed := s.JobsChanged()
		require.NoError(t, s.RemoveJob("j"), "before Start")
		<-changed
		assert.Empty(t, s.Jobs())
		require.NoError(t, s.Every("j", time.Hour, noop), "the name is free again")
		require.NoError(t, s.Start(t.Context()))
		require.NoError(t, s.Stop(t.Context()))
		require.ErrorIs(t, s.RemoveJob("j"), scheduler.ErrStopped)
	})
}

// TestAddJobCheck: a check refuses a registration before the backend prepares
// the job, before or after Start; once removed, it refuses nothing.
func TestAddJobCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errNo := errors.New("not this name")
		g := &gatedPrepare{Backend: memory.New(), job: "refused", released: make(chan struct{})}
		s := newScheduler(t, g, "A")
		noop := func(context.Context, scheduler.Run) error { return nil }
		remove := s.AddJobCheck(func(job string) error {
			if job == "refused" {
				return errNo
			}
			return nil
		})
		require.ErrorIs(t, s.Every("refused", time.Hour, noop), errNo)
		require.NoError(t, s.Every("fine", time.Hour, noop))
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(context.Background())
		require.ErrorIs(t, s.Every("refused", time.Hour, noop), errNo, "after Start, before PrepareJob")
		assert.False(t, g.waiting.Load(), "the backend never prepared the refused job")
		assert.Equal(t, []string{"fine"}, jobNames(s))
		remove()
		close(g.released)
		require.NoError(t, s.Every("refused", time.Hour, noop), "the check was removed")
	})
}
