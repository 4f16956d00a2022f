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

// slotRuns counts handler starts by slot second.
type slotRuns struct {
	mu   sync.Mutex
	runs map[int64]int
}

func (r *slotRuns) handler(ctx context.Context, run scheduler.Run) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[int64]int{}
	}
	r.runs[run.Slot.Unix()]++
	return nil
}

func (r *slotRuns) get(sec int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[sec]
}

// statuses returns the history of job by slot second, failing on two records of one
// slot.
func statuses(t *testing.T, s *scheduler.Scheduler, job string) map[int64]scheduler.Status {
	t.Helper()
	hist, err := s.History(t.Context(), job, 1000)
	require.NoError(t, err)
	out := map[int64]scheduler.Status{}
	for _, r := range hist {
		_, dup := out[r.Slot.Unix()]
		assert.False(t, dup, "one record per slot: %s", r.Slot)
		out[r.Slot.Unix()] = r.Status
	}
	return out
}

func TestPauseStopsEveryInstanceUntilResume(t *testing.T) {
	for _, leased := range []bool{true, false} {
		t.Run(map[bool]string{true: "with leases", false: "without leases"}[leased], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				var b backend.Backend = mem
				if !leased {
					b = plainPauser{mem}
				}
				var runs slotRuns
				var paused atomic.Int32
				var scheds []*scheduler.Scheduler
				for _, id := range []string{"A", "B", "C"} {
					s := newScheduler(t, b, id, func(c *scheduler.Config) {
						c.OnEvent = func(e scheduler.Event) {
							if e.Kind == scheduler.EventPaused {
								paused.Add(1)
							}
						}
					})
					require.NoError(t, s.Every("tick", time.Second, runs.handler))
					require.NoError(t, s.Start(t.Context()))
					scheds = append(scheds, s)
				}
				base := time.Now().Unix()           // 00:00:00
				time.Sleep(2500 * time.Millisecond) // slots 0, 1, 2 run
				require.NoError(t, scheds[1].Pause(t.Context(), "tick", scheduler.PauseOptions{Reason: "migrating the table", By: "ops@example.com"}))
				synctest.Wait() // every instance's watch has delivered
				for _, s := range scheds {
					p, ok := s.Paused("tick")
					require.True(t, ok, "%s sees the pause", s.Instance())
					assert.Equal(t, "migrating the table", p.Reason)
					assert.Equal(t, "ops@example.com", p.By)
				}
				time.Sleep(3 * time.Second) // slots 3, 4, 5 fall while paused
				require.NoError(t, scheds[2].Resume(t.Context(), "tick"))
				synctest.Wait()
				time.Sleep(2 * time.Second) // slots 6, 7 run
				for _, s := range scheds {
					require.NoError(t, s.Stop(t.Context()))
				}
				st := statuses(t, scheds[0], "tick")
				for sec := int64(0); sec <= 7; sec++ {
					want := scheduler.StatusOK
					if sec >= 3 && sec <= 5 {
						want = scheduler.StatusPaused
						assert.Zero(t, runs.get(base+sec), "slot %d fell while paused and did not run", sec)
					} else {
						assert.Equal(t, 1, runs.get(base+sec), "slot %d ran once", sec)
					}
					assert.Equal(t, want, st[base+sec], "slot %d", sec)
				}
				assert.EqualValues(t, 3, paused.Load(), "each paused slot recorded once across the fleet")
			})
		})
	}
}

// plainPauser is a memory backend without leases that still stores pauses.
type plainPauser struct{ *memory.Backend }

func (plainPauser) Runs() {} // hides the LeaseBackend method set (different signature)

func TestPauseUntilEndsByItselfAndAllJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var a, c slotRuns
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("a", time.Second, a.handler))
		require.NoError(t, s.Every("c", time.Second, c.handler))
		require.NoError(t, s.Start(t.Context()))
		base := time.Now().Unix()
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, s.PauseAll(t.Context(), scheduler.PauseOptions{Reason: "freeze", Until: time.Now().Add(2 * time.Second)}))
		require.NoError(t, s.Pause(t.Context(), "c", scheduler.PauseOptions{Reason: "c broken"}))
		time.Sleep(3 * time.Second) // slots 1, 2 fall inside the all-jobs pause; it ends at 2.5
		require.NoError(t, s.ResumeAll(t.Context()))
		time.Sleep(time.Second)
		require.NoError(t, s.Stop(t.Context()))
		for sec, want := range map[int64]int{0: 1, 1: 0, 2: 0, 3: 1, 4: 1} {
			assert.Equal(t, want, a.get(base+sec), "job a, slot %d", sec)
		}
		for sec := int64(1); sec <= 4; sec++ {
			assert.Zero(t, c.get(base+sec), "job c stays paused after the all-jobs pause ended, slot %d", sec)
		}
		assert.Equal(t, scheduler.StatusPaused, statuses(t, s, "a")[base+1])
	})
}

func TestPauseLetsARunningHandlerFinishAndSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var done atomic.Int32
		register := func(s *scheduler.Scheduler) {
			require.NoError(t, s.Every("long", time.Minute, func(ctx context.Context, r scheduler.Run) error {
				select {
				case <-time.After(30 * time.Second):
					done.Add(1)
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}))
		}
		s := newScheduler(t, b, "A")
		register(s)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Second) // the 00:00 run is going
		require.NoError(t, s.Pause(t.Context(), "long", scheduler.PauseOptions{Reason: "quiet hours"}))
		time.Sleep(40 * time.Second)
		assert.EqualValues(t, 1, done.Load(), "a run going when the pause arrived finished, uncancelled")
		require.NoError(t, s.Stop(t.Context()))

		s2 := newScheduler(t, b, "A2") // a restart: the pause is stored
		register(s2)
		require.NoError(t, s2.Start(t.Context()))
		_, ok := s2.Paused("long")
		assert.True(t, ok, "the pause survives a restart")
		time.Sleep(time.Minute)
		require.NoError(t, s2.Stop(t.Context()))
		assert.EqualValues(t, 1, done.Load(), "no run while paused")
	})
}

func TestPauseBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		ctx := t.Context()
		assert.ErrorIs(t, s.Pause(ctx, "nope", scheduler.PauseOptions{Reason: "x"}), scheduler.ErrJobNotFound)
		assert.ErrorIs(t, s.Resume(ctx, "nope"), scheduler.ErrJobNotFound)
		assert.ErrorIs(t, s.Pause(ctx, "job", scheduler.PauseOptions{}), scheduler.ErrInvalidOption, "a reason is required")
		assert.ErrorIs(t, s.Pause(ctx, "job", scheduler.PauseOptions{Reason: "x", Until: time.Now().Add(-time.Second)}), scheduler.ErrInvalidOption, "until in the past")
		assert.ErrorIs(t, s.Pause(ctx, "job", scheduler.PauseOptions{Reason: string([]byte{0xff})}), scheduler.ErrInvalidOption)
		assert.NoError(t, s.Resume(ctx, "job"), "resuming a job that is not paused")
		_, ok := s.Paused("job")
		assert.False(t, ok)

		plain := newScheduler(t, struct{ backend.Backend }{memory.New()}, "B")
		require.NoError(t, plain.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		assert.ErrorIs(t, plain.Pause(ctx, "job", scheduler.PauseOptions{Reason: "x"}), scheduler.ErrPauseNotSupported)
	})
}

// Jobs' next slot is the next one that will run: past the end of the pauses that
// hold the job (its own and the all-jobs pause, whichever ends later), none while a
// pause without an end holds it, and the schedule's own next slot again on resume.
func TestJobsNextSkipsPausedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("a", time.Minute, func(context.Context, scheduler.Run) error { return nil }))
		require.NoError(t, s.Every("b", time.Minute, func(context.Context, scheduler.Run) error { return nil }))
		require.NoError(t, s.Start(t.Context())) // the pauses are seen from Start on
		time.Sleep(10 * time.Second)             // 00:00:10; the next slot of both is 00:01
		base := time.Now().Truncate(time.Minute)
		// next is each job's next slot in minutes after base, -1 for none.
		next := func() map[string]int64 {
			out := map[string]int64{}
			for _, j := range s.Jobs() {
				out[j.Job] = -1
				if !j.Next.IsZero() {
					out[j.Job] = int64(j.Next.Sub(base) / time.Minute)
				}
			}
			return out
		}
		assert.Equal(t, map[string]int64{"a": 1, "b": 1}, next())

		// The all-jobs pause ends at 00:03:00 exactly: the slot at its end runs.
		require.NoError(t, s.PauseAll(t.Context(), scheduler.PauseOptions{Reason: "freeze", Until: base.Add(3 * time.Minute)}))
		// a's own pause ends later, between two slots.
		require.NoError(t, s.Pause(t.Context(), "a", scheduler.PauseOptions{Reason: "a broken", Until: base.Add(4*time.Minute + 30*time.Second)}))
		synctest.Wait() // the watch has delivered
		assert.Equal(t, map[string]int64{"a": 5, "b": 3}, next())

		require.NoError(t, s.Pause(t.Context(), "b", scheduler.PauseOptions{Reason: "until told"}))
		synctest.Wait()
		assert.Equal(t, map[string]int64{"a": 5, "b": -1}, next(), "no slot runs while a pause without an end holds b")

		require.NoError(t, s.Resume(t.Context(), "b"))
		require.NoError(t, s.ResumeAll(t.Context()))
		require.NoError(t, s.Resume(t.Context(), "a"))
		synctest.Wait()
		assert.Equal(t, map[string]int64{"a": 1, "b": 1}, next())
		require.NoError(t, s.Stop(t.Context()))
	})
}
