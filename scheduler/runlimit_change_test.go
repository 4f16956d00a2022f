package scheduler_test

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// Two replicas declaring different limits (a rolling change from 2 to 4): the
// fleet runs at least the lower and at most the higher limit, every loop ends
// (the lower limit's stored limit ends the other's loop too), and a replica
// restarted with a larger limit runs slots again up to it, counted from the
// kept count, while the replica whose loop ended stays ended until it restarts.
func TestMaxRunsChangedAcrossTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(5 * time.Second)
		b := memory.New()
		log := newRunLog()
		start := func(id string, n int) *scheduler.Scheduler {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("limited", 10*time.Second, log.handler, scheduler.WithMaxRuns(n), scheduler.WithJitter(time.Second)))
			require.NoError(t, s.Start(t.Context()))
			return s
		}
		low, high := start("A", 2), start("B", 4)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		ran := len(log.snapshot())
		assert.GreaterOrEqual(t, ran, 2)
		assert.LessOrEqual(t, ran, 4)
		assert.True(t, low.Jobs()[0].LimitReached)
		assert.True(t, high.Jobs()[0].LimitReached, "a limit stored by the lower one ends the loop")
		stopAll(t, []*scheduler.Scheduler{low})

		raised := start("A", 6)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.Len(t, log.snapshot(), 6, "the raised limit runs slots again, up to 6 in all")
		assert.True(t, raised.Jobs()[0].LimitReached)
		assert.True(t, high.Jobs()[0].LimitReached, "an ended loop does not restart")
		stopAll(t, []*scheduler.Scheduler{raised, high})
	})
}

// The limit's edges: math.MaxInt never ends the loop; a one-time job limited
// to 1 runs once; WithEndAt before the limit ends the loop by its end (the
// limit not reached); RunNow and a Backfill rerun after the limit run and are
// not counted: a replica restarted with the limit raised by one runs one slot.
func TestMaxRunsEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(5 * time.Second)
		b := memory.New()
		log, twoLog := newRunLog(), newRunLog()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("huge", 10*time.Second, log.handler, scheduler.WithMaxRuns(math.MaxInt)))
		require.NoError(t, s.At("once", time.Now().Add(time.Minute), log.handler, scheduler.WithMaxRuns(1)))
		require.NoError(t, s.Every("ends", 10*time.Second, log.handler, scheduler.WithMaxRuns(5), scheduler.WithEndAt(time.Now().Add(25*time.Second))))
		require.NoError(t, s.Every("two", 10*time.Second, twoLog.handler, scheduler.WithMaxRuns(2)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		jobs := map[string]scheduler.JobInfo{}
		for _, j := range s.Jobs() {
			jobs[j.Job] = j
		}
		count := func(job string) map[scheduler.Status]int { st, _, _ := limitStatuses(t, s, job); return st }
		assert.False(t, jobs["huge"].LimitReached)
		assert.False(t, jobs["huge"].Next.IsZero())
		assert.GreaterOrEqual(t, count("huge")[scheduler.StatusOK], 12)
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 1}, count("once"))
		assert.Equal(t, map[scheduler.Status]int{scheduler.StatusOK: 3}, count("ends"), "slots 0, 10 and 20 s, before the end")
		assert.False(t, jobs["ends"].LimitReached, "ended by its end, not its limit")
		assert.True(t, jobs["two"].LimitReached)
		require.Len(t, twoLog.snapshot(), 2)

		rec, err := s.RunNow(t.Context(), "two")
		require.NoError(t, err)
		assert.True(t, rec.Manual)
		res, err := s.Backfill(t.Context(), "two", time.Now().Add(-2*time.Minute), time.Now(), scheduler.BackfillRerun())
		require.NoError(t, err)
		assert.Positive(t, res.Count(scheduler.BackfillRan), "%+v", res)
		stopAll(t, []*scheduler.Scheduler{s})

		before := 0
		for _, v := range twoLog.snapshot() {
			before += len(v)
		}
		raised := newScheduler(t, b, "A")
		require.NoError(t, raised.Every("two", 10*time.Second, twoLog.handler, scheduler.WithMaxRuns(3)))
		require.NoError(t, raised.Start(t.Context()))
		time.Sleep(time.Minute)
		synctest.Wait()
		after := 0
		for _, v := range twoLog.snapshot() {
			after += len(v)
		}
		assert.Equal(t, before+1, after, "the manual run and the backfill were not counted: one more slot runs")
		assert.True(t, raised.Jobs()[0].LimitReached)
		stopAll(t, []*scheduler.Scheduler{raised})
	})
}

// A job limited to 2 runs with CatchUpAll (and no slot before its start), paused
// before its first slot: the two slots won while it was paused are counted, and
// once the pause ends catch-up runs them: the job runs twice.
func TestMaxRunsPausedSlotsRunByCatchUp(t *testing.T) {
	for _, policy := range []scheduler.CatchUpPolicy{scheduler.CatchUpAll} {
		t.Run(policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(5 * time.Second)
				log := newRunLog()
				s := newScheduler(t, memory.New(), "A")
				require.NoError(t, s.Every("limited", 10*time.Second, log.handler, scheduler.WithMaxRuns(2),
					scheduler.WithCatchUp(policy, 10*time.Minute), scheduler.WithStartAt(time.Now())))
				require.NoError(t, s.Start(t.Context()))
				require.NoError(t, s.Pause(t.Context(), "limited", scheduler.PauseOptions{Reason: "maintenance"}))
				time.Sleep(time.Minute)
				synctest.Wait()
				require.NoError(t, s.Resume(t.Context(), "limited"))
				time.Sleep(time.Minute)
				synctest.Wait()
				st, _, _ := limitStatuses(t, s, "limited")
				assert.Len(t, log.snapshot(), 2, "the counted paused slots ran: history %v", st)
				stopAll(t, []*scheduler.Scheduler{s})
			})
		})
	}
}
