package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// turnsFleet starts a fleet of n replicas with Config.Turns, each declaring jobs
// every minute that record their runs in ran.
func turnsFleet(t *testing.T, n int, jobs []string, ran *runTally, opts ...scheduler.JobOption) *anarchontest.Fleet {
	return anarchontest.Start(t, anarchontest.Config{
		Replicas:  n,
		Scheduler: scheduler.Config{Turns: true},
		Setup: func(s *scheduler.Scheduler) error {
			for _, name := range jobs {
				if err := s.Every(name, time.Minute, func(ctx context.Context, r scheduler.Run) error {
					ran.add(r)
					return nil
				}, opts...); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

// runTally counts the runs of each (job, slot) and who ran them.
type runTally struct {
	mu      sync.Mutex
	runs    map[string][]scheduler.Run
	started map[string][]time.Time
}

func (r *runTally) add(run scheduler.Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs, r.started = map[string][]scheduler.Run{}, map[string][]time.Time{}
	}
	k := run.Job + "@" + run.Slot.UTC().Format(time.RFC3339)
	r.runs[k] = append(r.runs[k], run)
	r.started[k] = append(r.started[k], time.Now())
}

// startedAt returns when the runs of job's slot started.
func (r *runTally) startedAt(job string, slot time.Time) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.started[job+"@"+slot.UTC().Format(time.RFC3339)]...)
}

func (r *runTally) of(job string, slot time.Time) []scheduler.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]scheduler.Run(nil), r.runs[job+"@"+slot.UTC().Format(time.RFC3339)]...)
}

// onceEach checks that every job's slots from first to last ran exactly once.
func (r *runTally) onceEach(t *testing.T, jobs []string, first, last time.Time) {
	t.Helper()
	for _, job := range jobs {
		for slot := first; !slot.After(last); slot = slot.Add(time.Minute) {
			assert.Len(t, r.of(job, slot), 1, "job %s slot %s", job, slot.Format(time.TimeOnly))
		}
	}
}

func turnJobs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("job-%02d", i))
	}
	return out
}

// claimsPerSlot counts the fleet's claims (won and lost) of the slots from first
// to last.
func claimsPerSlot(f *anarchontest.Fleet, first, last time.Time) int {
	return len(f.Events(func(e scheduler.Event) bool {
		return (e.Kind == scheduler.EventClaimed || e.Kind == scheduler.EventLost) && !e.Slot.Before(first) && !e.Slot.After(last)
	}))
}

// With turns, the claims of a slot do not grow with the fleet: the first member
// claims it at its time and the second once after a grace, whatever the number of
// replicas; every slot runs once.
func TestTurnsClaimsDoNotGrowWithTheFleet(t *testing.T) {
	jobs := turnJobs(12)
	claims := map[int]int{}
	for _, n := range []int{3, 10} {
		synctest.Test(t, func(t *testing.T) {
			ran := &runTally{}
			time.Sleep(90 * time.Second)
			f := turnsFleet(t, n, jobs, ran)
			first := time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)
			last := first.Add(9 * time.Minute)
			anarchontest.AdvanceTo(last.Add(30 * time.Second))
			ran.onceEach(t, jobs, first, last)
			for _, r := range f.Replicas() {
				assert.Len(t, r.Scheduler().Members(), n, "%s sees every member", r.Name())
			}
			claims[n] = claimsPerSlot(f, first, last)
		})
	}
	slots := 12 * 10
	t.Logf("claims per slot: %d replicas %.2f, %d replicas %.2f", 3, float64(claims[3])/float64(slots), 10, float64(claims[10])/float64(slots))
	assert.Equal(t, 2*slots, claims[3], "3 replicas: the first and the second member claim each slot")
	assert.Equal(t, 2*slots, claims[10], "10 replicas: the first and the second member claim each slot")
}

// The first member of a job killed just before a slot: the second member runs it
// a grace after it, before the killed one is seen gone, and the slot is not late.
func TestTurnsSecondMemberRunsWhenTheFirstDied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		time.Sleep(90 * time.Second)
		f := turnsFleet(t, 5, []string{"job"}, ran)
		slot := time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot.Add(30 * time.Second))
		runs := ran.of("job", slot)
		require.Len(t, runs, 1)
		first := f.Named(runs[0].Instance)
		next := slot.Add(time.Minute)
		anarchontest.AdvanceTo(next.Add(-500 * time.Millisecond)) // its last beat is fresh
		first.Kill()
		anarchontest.AdvanceTo(next.Add(30 * time.Second))
		runs = ran.of("job", next)
		require.Len(t, runs, 1, "the next slot ran once")
		assert.NotEqual(t, first.Name(), runs[0].Instance)
		// Within the grace (1 s), before the killed member's last beat could
		// expire (2 to 3 s after the kill).
		assert.LessOrEqual(t, ran.startedAt("job", next)[0].Sub(next), time.Second+100*time.Millisecond)
		f.AssertRanOnce(t, "job", slot, next)
		// One member gone leaves the earlier slot to the second: the others do
		// not claim it again.
		assert.Equal(t, 2, claimsPerSlot(f, slot, slot), "claims of the slot before the death")
		late := f.Events(anarchontest.Match("job", scheduler.EventLate, scheduler.EventMissed))
		assert.Empty(t, late)
	})
}

// The first two members of a job killed at once just before a slot: a third
// claims the slot once it sees them gone, within the job's max lateness.
func TestTurnsThirdMemberRunsWhenTheFirstTwoDied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		time.Sleep(90 * time.Second)
		f := turnsFleet(t, 5, []string{"job"}, ran)
		slot := time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot.Add(30 * time.Second))
		// The members ranked first and second for the job: the one that ran it,
		// and the one that claimed it after.
		var ranked []string
		for _, e := range f.Events(anarchontest.Match("job", scheduler.EventClaimed, scheduler.EventLost)) {
			if e.Slot.Equal(slot) {
				ranked = append(ranked, e.Instance)
			}
		}
		require.Len(t, ranked, 2, "two members claimed the slot")
		next := slot.Add(time.Minute)
		anarchontest.AdvanceTo(next.Add(-500 * time.Millisecond)) // their last beats are fresh
		f.Named(ranked[0]).Kill()
		f.Named(ranked[1]).Kill()
		anarchontest.AdvanceTo(next.Add(30 * time.Second))
		runs := ran.of("job", next)
		require.Len(t, runs, 1, "the next slot ran once")
		assert.NotContains(t, ranked, runs[0].Instance)
		assert.Empty(t, f.Events(anarchontest.Match("job", scheduler.EventLate, scheduler.EventMissed)))
		// Once they were seen gone: their last beats expired 2 to 3 s after
		// the kill.
		assert.GreaterOrEqual(t, ran.startedAt("job", next)[0].Sub(next), 1500*time.Millisecond)
	})
}

// Replicas that stop and start again every few seconds shift the work without a
// slot run twice or not at all.
func TestTurnsReplicasJoinAndLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		jobs := turnJobs(8)
		time.Sleep(90 * time.Second)
		f := turnsFleet(t, 4, jobs, ran, scheduler.WithLease(5*time.Second))
		first := time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)
		last := first.Add(15 * time.Minute)
		anarchontest.AdvanceTo(first.Add(-time.Second))
		for i := 0; time.Now().Before(last); i++ {
			r := f.Replica(i % 4)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if i%3 == 0 {
				r.Kill()
			} else {
				require.NoError(t, r.Stop(ctx))
			}
			anarchontest.Advance(7 * time.Second)
			require.NoError(t, r.Restart(ctx))
			cancel()
			anarchontest.Advance(11 * time.Second)
		}
		anarchontest.AdvanceTo(last.Add(3 * time.Minute))
		for _, job := range jobs {
			for slot := first; !slot.After(last); slot = slot.Add(time.Minute) {
				recs, err := f.RunsOf(t.Context(), job, slot)
				require.NoError(t, err)
				assert.NotEmpty(t, recs, "job %s slot %s has a record", job, slot.Format(time.TimeOnly))
				oks := 0
				for _, r := range recs {
					if r.Status == scheduler.StatusOK {
						oks++
					}
				}
				assert.LessOrEqual(t, oks, 1, "job %s slot %s ran ok at most once", job, slot.Format(time.TimeOnly))
				assert.LessOrEqual(t, len(ran.of(job, slot)), 2, "job %s slot %s: a run killed mid-way is taken over once", job, slot.Format(time.TimeOnly))
			}
		}
	})
}

// Replicas declaring different jobs share out only the jobs they all declare:
// an instance never leaves a slot to a member that does not have the job.
func TestTurnsOnlyWithinTheSameJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		time.Sleep(90 * time.Second)
		f := anarchontest.Start(t, anarchontest.Config{
			Replicas:  4,
			Scheduler: scheduler.Config{Turns: true},
			Setup: func(s *scheduler.Scheduler) error {
				h := func(ctx context.Context, r scheduler.Run) error { ran.add(r); return nil }
				for _, name := range turnJobs(6) {
					if err := s.Every(name, time.Minute, h); err != nil {
						return err
					}
				}
				// Every replica but the first declares one job more: a
				// rolling deploy half done.
				if s.Instance() != "replica-1" {
					return s.Every("new-job", time.Minute, h)
				}
				return nil
			},
		})
		first := time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)
		last := first.Add(5 * time.Minute)
		anarchontest.AdvanceTo(last.Add(30 * time.Second))
		ran.onceEach(t, append(turnJobs(6), "new-job"), first, last)
		sizes := map[int]int{}
		for _, r := range f.Replicas() {
			sizes[len(r.Scheduler().Members())]++
		}
		assert.Equal(t, map[int]int{1: 1, 3: 3}, sizes, "the replica without the new job is a group of its own")
	})
}

// Turns need a backend that keeps members.
func TestTurnsRefusedWithoutMembership(t *testing.T) {
	mem := memory.New()
	_, err := scheduler.New(scheduler.Config{Backend: noMembers{mem, mem}, Turns: true})
	require.ErrorIs(t, err, scheduler.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "Membership")
}

// noMembers is a backend with leases, without backend.Membership.
type noMembers struct {
	backend.Backend
	lb backend.LeaseBackend
}

func (n noMembers) Runs() backend.RunStore { return n.lb.Runs() }

// A slot's deadline is judged by the members that claim it; when the first two
// die before the deadline, the third, claiming the slot they left, judges it.
func TestTurnsDeadlineJudgedWhenTheFirstTwoDied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(90 * time.Second)
		f := anarchontest.Start(t, anarchontest.Config{
			Replicas:  5,
			Scheduler: scheduler.Config{Turns: true},
			Setup: func(s *scheduler.Scheduler) error {
				return s.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
					<-ctx.Done() // never ends ok
					return context.Cause(ctx)
				}, scheduler.WithDeadline(30*time.Second), scheduler.WithLease(5*time.Second))
			},
		})
		slot := time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot.Add(2 * time.Second))
		var ranked []string
		for _, e := range f.Events(anarchontest.Match("job", scheduler.EventClaimed, scheduler.EventLost, scheduler.EventStandby)) {
			if e.Slot.Equal(slot) && !slices.Contains(ranked, e.Instance) {
				ranked = append(ranked, e.Instance)
			}
		}
		require.Len(t, ranked, 2, "the first two members claimed the slot")
		f.Named(ranked[0]).Kill()
		f.Named(ranked[1]).Kill()
		anarchontest.AdvanceTo(slot.Add(45 * time.Second))
		missed := f.Events(func(e scheduler.Event) bool {
			return e.Kind == scheduler.EventDeadlineMissed && e.Slot.Equal(slot)
		})
		require.Len(t, missed, 1, "the deadline was judged once")
		assert.NotContains(t, ranked, missed[0].Instance)
	})
}
