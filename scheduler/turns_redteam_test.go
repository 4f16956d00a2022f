package scheduler_test

import (
	"cmp"
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// Red-team tests of Config.Turns. A test named TestTurnsRedTeam... whose comment
// says "reproduces" fails on the code it was written against and passes once
// the bug is fixed; the others are probes that guard behaviour that held.

// rtScore is the scheduler's rendezvous hash (turns.go turnScore), copied so a
// test can pick the members ranked first for a run before the slot.
func rtScore(run, instance string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(run))
	h.Write([]byte{0})
	h.Write([]byte(instance))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// rtRanked returns members ranked for run, first first, as every member of a
// group holding them all ranks them.
func rtRanked(run string, members []string) []string {
	out := slices.Clone(members)
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(rtScore(run, b), rtScore(run, a)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out
}

func rtNames(f *anarchontest.Fleet) []string {
	var out []string
	for _, r := range f.Replicas() {
		out = append(out, r.Name())
	}
	return out
}

// rtLong is a handler that runs for d unless cancelled, recording its runs.
func rtLong(ran *runTally, d time.Duration) scheduler.Handler {
	return func(ctx context.Context, r scheduler.Run) error {
		ran.add(r)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(d):
			return nil
		}
	}
}

// Reproduces a bug: the holder of a long run and its backup (the members ranked
// first and second for the job) die after the slot's keep window on the members
// ranked below (slot + max lateness + 2 TTL + skew). The others dropped the slot
// from their waiting map, and no one else stands by for the run: its lease
// expires and it is never taken over (it stays "running" in the history until
// some replica restarts and adopts it). Without turns every replica stands by
// and one takes it over at the lease's end.
func TestTurnsRedTeamLongRunOrphanedWhenHolderAndBackupDie(t *testing.T) {
	for _, turns := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ran := &runTally{}
			time.Sleep(90 * time.Second)
			f := anarchontest.Start(t, anarchontest.Config{
				Replicas:  5,
				Scheduler: scheduler.Config{Turns: turns},
				Setup: func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Hour, rtLong(ran, 10*time.Minute), scheduler.WithLease(5*time.Second))
				},
			})
			slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
			anarchontest.AdvanceTo(slot.Add(2 * time.Minute))
			runs := ran.of("job", slot)
			require.Len(t, runs, 1)
			holder := runs[0].Instance
			ranked := rtRanked("job", rtNames(f))
			if turns {
				require.Equal(t, ranked[0], holder, "the first member runs the slot")
			}
			// The holder and one more member (the backup under turns) die.
			backup := ranked[1]
			if backup == holder {
				backup = ranked[0]
			}
			f.Named(holder).Kill()
			f.Named(backup).Kill()
			anarchontest.AdvanceTo(slot.Add(3 * time.Minute))
			runs = ran.of("job", slot)
			require.Len(t, runs, 2, "turns=%v: the run of the dead holder is taken over once its lease expired", turns)
			assert.NotContains(t, []string{holder, backup}, runs[1].Instance)
		})
	}
}

// Reproduces a bug: under turns, a graceful Stop of the holder hands its run over
// (Replica.Stop: "handed over for backups to take over at once"), but the
// backup, polling at the lease's end instead of following the lease watch,
// takes it over only when the (here one-minute) lease would have ended. Without
// turns the takeover is at once.
func TestTurnsRedTeamStopHandOverWaitsForLeaseEnd(t *testing.T) {
	for _, turns := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ran := &runTally{}
			time.Sleep(90 * time.Second)
			f := anarchontest.Start(t, anarchontest.Config{
				Replicas:  3,
				Scheduler: scheduler.Config{Turns: turns},
				Setup: func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Hour, rtLong(ran, 10*time.Minute), scheduler.WithLease(time.Minute))
				},
			})
			slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
			anarchontest.AdvanceTo(slot.Add(10 * time.Second))
			runs := ran.of("job", slot)
			require.Len(t, runs, 1)
			holder := f.Named(runs[0].Instance)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			stopped := time.Now()
			_ = holder.Stop(ctx)
			anarchontest.AdvanceTo(slot.Add(3 * time.Minute))
			started := ran.startedAt("job", slot)
			require.Len(t, started, 2, "turns=%v: the handed-over run is taken over", turns)
			assert.LessOrEqual(t, started[1].Sub(stopped), 5*time.Second, "turns=%v: taken over at once after the hand-over, not at the lease's end", turns)
		})
	}
}

// Reproduces a bug: one death at a time is enough to orphan a long run under
// turns. The holder (first member) dies mid-run; the backup (second) takes the
// run over at the lease's end. Minutes later the new holder dies too: no member
// is left standing by (the others dropped the slot once its keep window
// passed), and the run is never taken over though three replicas live. Without
// turns the three would stand by and one would take it over.
func TestTurnsRedTeamSecondTakeoverHasNoBackup(t *testing.T) {
	for _, turns := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ran := &runTally{}
			time.Sleep(90 * time.Second)
			f := anarchontest.Start(t, anarchontest.Config{
				Replicas:  5,
				Scheduler: scheduler.Config{Turns: turns},
				Setup: func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Hour, rtLong(ran, 20*time.Minute), scheduler.WithLease(5*time.Second))
				},
			})
			slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
			anarchontest.AdvanceTo(slot.Add(2 * time.Minute))
			runs := ran.of("job", slot)
			require.Len(t, runs, 1)
			f.Named(runs[0].Instance).Kill()
			anarchontest.AdvanceTo(slot.Add(4 * time.Minute))
			runs = ran.of("job", slot)
			require.Len(t, runs, 2, "turns=%v: the first death is taken over", turns)
			f.Named(runs[1].Instance).Kill()
			anarchontest.AdvanceTo(slot.Add(6 * time.Minute))
			runs = ran.of("job", slot)
			require.Len(t, runs, 3, "turns=%v: the second death is taken over too, three replicas live", turns)
		})
	}
}

// Reproduces a bug: a rolling deploy that changes a job's schedule but not its
// name. The group is a digest of the job names only, so the replicas of the old
// release (hourly at :00) and of the new one (hourly at :30) form one group and
// leave each other their turns. Here the two members ranked first run the old
// release: at :30 the new release's members, ranked third and lower, leave the
// slot to them, who have no such slot. It is never claimed and nothing records
// it (not even late or missed). The docs promise "no slot is left to a replica
// that would not claim it".
func TestTurnsRedTeamRollingDeployChangedScheduleDropsSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		names := []string{"replica-1", "replica-2", "replica-3", "replica-4", "replica-5"}
		old := rtRanked("job", names)[:2]
		time.Sleep(90 * time.Second)
		f := anarchontest.Start(t, anarchontest.Config{
			Replicas:  5,
			Scheduler: scheduler.Config{Turns: true},
			Setup: func(s *scheduler.Scheduler) error {
				h := func(ctx context.Context, r scheduler.Run) error { ran.add(r); return nil }
				if slices.Contains(old, s.Instance()) {
					return s.Cron("job", "0 * * * *", h) // the release being replaced
				}
				return s.Cron("job", "30 * * * *", h) // the new release
			},
		})
		newSlot := time.Date(2000, 1, 1, 0, 30, 0, 0, time.UTC)
		anarchontest.AdvanceTo(newSlot.Add(5 * time.Minute))
		recs, err := f.RunsOf(t.Context(), "job", newSlot)
		require.NoError(t, err)
		assert.NotEmpty(t, recs, "the new release's slot %s is run, or at least recorded", newSlot.Format(time.TimeOnly))
		assert.Len(t, ran.of("job", newSlot), 1)
		for _, r := range f.Replicas() {
			t.Logf("%s (old=%v) members %v", r.Name(), slices.Contains(old, r.Name()), r.Scheduler().Members())
		}
	})
}

// Reproduces a bug: under OverlapBufferOne a slot buffered behind a long run is
// claimed (and stood by for) only by the first two members. Both die minutes
// later, after the slot's keep window on the others: the long run is orphaned
// and the buffered slot stays buffered with nobody to claim it. It holds the
// buffer, so every later slot of the job is skipped, on every replica, for as
// long as no replica restarts (orphan.go's check covers only manual slots).
// Without turns the surviving replicas stand by for both and the job goes on.
func TestTurnsRedTeamBufferedSlotOrphanedBlocksJob(t *testing.T) {
	for _, turns := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ran := &runTally{}
			time.Sleep(90 * time.Second)
			f := anarchontest.Start(t, anarchontest.Config{
				Replicas:  5,
				Scheduler: scheduler.Config{Turns: turns},
				Setup: func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Minute, rtLong(ran, 6*time.Minute),
						scheduler.WithLease(5*time.Second), scheduler.WithOverlap(scheduler.OverlapBufferOne))
				},
			})
			slot := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC) // claimed as the fleet starts, at 00:01:30
			anarchontest.AdvanceTo(slot.Add(4*time.Minute + 30*time.Second))
			runs := ran.of("job", slot)
			require.Len(t, runs, 1)
			ranked := rtRanked("job", rtNames(f))
			victims := []string{runs[0].Instance, ranked[1]}
			if victims[1] == victims[0] {
				victims[1] = ranked[0]
			}
			for _, v := range victims {
				f.Named(v).Kill()
			}
			anarchontest.AdvanceTo(slot.Add(20 * time.Minute))
			var later []string
			for s := slot.Add(10 * time.Minute); s.Before(slot.Add(19 * time.Minute)); s = s.Add(time.Minute) {
				for _, r := range ran.of("job", s) {
					later = append(later, r.Slot.Format(time.TimeOnly))
				}
			}
			assert.NotEmpty(t, later, "turns=%v: the job runs again minutes after two replicas of five died", turns)
			active, err := f.Store().Runs().Active(t.Context(), "job")
			require.NoError(t, err)
			for _, a := range active {
				assert.False(t, a.Buffered && a.Slot.Before(slot.Add(5*time.Minute)), "turns=%v: slot %s still buffered with nobody to claim it", turns, a.Slot.Format(time.TimeOnly))
			}
		})
	}
}

// The members ranked first and second for a schedule entry are alive (they
// beat) but cannot read the entries (their entry watch is cut and
// fails again for minutes). Each gives the entry's slots up at the max lateness
// ("the schedule entries were not read again", an event, no record), and the
// members ranked below, which follow the store, leave the slots to them: the
// slots are neither run nor recorded. Without turns the others run them. Being
// a member (beating) is taken as able to claim every slot of every job and
// entry of the group; it is not.
func TestTurnsRedTeamEntrySlotsDroppedWhenFirstTwoCannotReadEntries(t *testing.T) {
	for _, turns := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ran := &runTally{}
			time.Sleep(90 * time.Second)
			f := anarchontest.Start(t, anarchontest.Config{
				Replicas:  5,
				Scheduler: scheduler.Config{Turns: turns},
				Setup: func(s *scheduler.Scheduler) error {
					return s.Declare("tenants", func(ctx context.Context, r scheduler.Run) error { ran.add(r); return nil },
						scheduler.WithMaxLate(10*time.Second))
				},
			})
			_, err := f.Replica(0).Scheduler().AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Minute})
			require.NoError(t, err)
			run := backend.EntryRunName("tenants", "acme")
			ranked := rtRanked(run, rtNames(f))
			anarchontest.AdvanceTo(time.Date(2000, 1, 1, 0, 3, 30, 0, time.UTC))
			for _, name := range ranked[:2] {
				r := f.Named(name)
				r.LoseAnswers(1000, anarchontest.OpWatchEntries)
				r.Partition() // cuts the running watch; too short to miss a beat
				anarchontest.Advance(10 * time.Millisecond)
				r.Heal()
			}
			first := time.Date(2000, 1, 1, 0, 5, 0, 0, time.UTC)
			last := first.Add(3 * time.Minute)
			anarchontest.AdvanceTo(last.Add(30 * time.Second))
			if turns {
				// Every member still beats; the two that cannot read the
				// entries are a group apart.
				assert.Len(t, f.Named(ranked[2]).Scheduler().Members(), 3)
			}
			for slot := first; !slot.After(last); slot = slot.Add(time.Minute) {
				recs, err := f.RunsOf(t.Context(), run, slot)
				require.NoError(t, err)
				assert.NotEmpty(t, recs, "turns=%v: entry slot %s is run or recorded", turns, slot.Format(time.TimeOnly))
			}
		})
	}
}

// Probe (held): the first two members cut off from the store, frozen, or both,
// just before a slot; or a storm of lost membership answers; or clocks skewed
// within the allowance: every slot still runs once, and none is late.
func TestTurnsRedTeamFaultsAroundTheSlot(t *testing.T) {
	faults := map[string]func(f *anarchontest.Fleet, first, second *anarchontest.Replica){
		"partition": func(f *anarchontest.Fleet, a, b *anarchontest.Replica) { a.Partition(); b.Partition() },
		"freeze": func(f *anarchontest.Fleet, a, b *anarchontest.Replica) {
			a.Freeze(4 * time.Second)
			b.Freeze(4 * time.Second)
		},
		"freeze-first-partition-second": func(f *anarchontest.Fleet, a, b *anarchontest.Replica) {
			a.Freeze(2900 * time.Millisecond)
			b.Partition()
		},
		"lost-membership-answers": func(f *anarchontest.Fleet, a, b *anarchontest.Replica) {
			for _, r := range f.Replicas() {
				r.LoseAnswers(5, anarchontest.OpBeat, anarchontest.OpWatchMembers, anarchontest.OpLeave)
			}
		},
		"skew": func(f *anarchontest.Fleet, a, b *anarchontest.Replica) {
			a.Skew(-1900 * time.Millisecond)
			b.Skew(1900 * time.Millisecond)
		},
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ran := &runTally{}
				time.Sleep(90 * time.Second)
				f := turnsFleet(t, 5, []string{"job"}, ran)
				ranked := rtRanked("job", rtNames(f))
				slot := time.Date(2000, 1, 1, 0, 3, 0, 0, time.UTC)
				anarchontest.AdvanceTo(slot.Add(-500 * time.Millisecond))
				fault(f, f.Named(ranked[0]), f.Named(ranked[1]))
				anarchontest.AdvanceTo(slot.Add(30 * time.Second))
				for _, r := range f.Replicas() {
					r.Heal()
				}
				anarchontest.AdvanceTo(slot.Add(3*time.Minute + 30*time.Second))
				ran.onceEach(t, []string{"job"}, slot.Add(-time.Minute), slot.Add(3*time.Minute))
				f.AssertRanOnce(t, "job")
				assert.Empty(t, f.Events(anarchontest.Match("job", scheduler.EventLate, scheduler.EventMissed)))
			})
		})
	}
}

// Probe (held): the first member stopped gracefully just before a slot leaves
// the fleet at once (Leave): the second runs the slot at its time, not a grace
// later.
func TestTurnsRedTeamStopBeforeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		time.Sleep(90 * time.Second)
		f := turnsFleet(t, 5, []string{"job"}, ran)
		ranked := rtRanked("job", rtNames(f))
		slot := time.Date(2000, 1, 1, 0, 3, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot.Add(-300 * time.Millisecond))
		require.NoError(t, f.Named(ranked[0]).Stop(t.Context()))
		anarchontest.AdvanceTo(slot.Add(30 * time.Second))
		runs := ran.of("job", slot)
		require.Len(t, runs, 1)
		assert.Equal(t, ranked[1], runs[0].Instance)
		assert.Less(t, ran.startedAt("job", slot)[0].Sub(slot), 100*time.Millisecond)
	})
}

// Probe (held): twenty replicas; the first two members of every job killed at
// once just before a slot. Each slot runs once and is claimed twice in steady
// state.
func TestTurnsRedTeamTwentyReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		jobs := turnJobs(10)
		time.Sleep(90 * time.Second)
		f := turnsFleet(t, 20, jobs, ran)
		first := time.Date(2000, 1, 1, 0, 2, 0, 0, time.UTC)
		anarchontest.AdvanceTo(first.Add(2*time.Minute + 30*time.Second))
		assert.Equal(t, 2*3*len(jobs), claimsPerSlot(f, first, first.Add(2*time.Minute)))
		anarchontest.AdvanceTo(first.Add(3*time.Minute - 500*time.Millisecond))
		killed := map[string]bool{}
		for _, j := range jobs[:3] {
			for _, name := range rtRanked(j, rtNames(f))[:2] {
				if !killed[name] {
					killed[name] = true
					f.Named(name).Kill()
				}
			}
		}
		last := first.Add(6 * time.Minute)
		anarchontest.AdvanceTo(last.Add(30 * time.Second))
		ran.onceEach(t, jobs, first, last)
		for _, j := range jobs {
			f.AssertRanOnce(t, j)
		}
	})
}

// Probe (held): a run limit with turns runs exactly that many slots, and the
// members that saw it reached leave the group.
func TestTurnsRedTeamMaxRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		time.Sleep(90 * time.Second)
		f := turnsFleet(t, 5, []string{"job", "other"}, ran, scheduler.WithMaxRuns(3))
		anarchontest.AdvanceTo(time.Date(2000, 1, 1, 0, 10, 0, 0, time.UTC))
		n := 0
		for slot := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC); slot.Before(time.Now()); slot = slot.Add(time.Minute) {
			n += len(ran.of("job", slot))
		}
		assert.Equal(t, 3, n)
		_ = f
	})
}

// Probe (held): retries of a failing slot under turns are claimed once due, by
// the members standing by, and the slot ends ok once.
func TestTurnsRedTeamRetryAfterHolderDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := &runTally{}
		time.Sleep(90 * time.Second)
		f := anarchontest.Start(t, anarchontest.Config{
			Replicas:  5,
			Scheduler: scheduler.Config{Turns: true},
			Setup: func(s *scheduler.Scheduler) error {
				return s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
					ran.add(r)
					if r.Attempt < 3 {
						return assert.AnError
					}
					return nil
				}, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 4, Backoff: 20 * time.Second}), scheduler.WithLease(5*time.Second))
			},
		})
		slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot.Add(5 * time.Second))
		runs := ran.of("job", slot)
		require.Len(t, runs, 1)
		ranked := rtRanked("job", rtNames(f))
		f.Named(ranked[0]).Kill()
		f.Named(ranked[1]).Kill()
		anarchontest.AdvanceTo(slot.Add(5 * time.Minute))
		f.AssertRanOnce(t, "job", slot)
	})
}

// Reproduces a bug (the same hole as the orphaned long run): a slot's stored
// retry, due after the slot's keep window on the members ranked third and
// lower, is stood by for only by the first two. Both die before it is due:
// the retry is never claimed, and the slot never ends ok. Without turns the
// surviving replicas claim the retry.
func TestTurnsRedTeamLateRetryOrphaned(t *testing.T) {
	for _, turns := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ran := &runTally{}
			time.Sleep(90 * time.Second)
			f := anarchontest.Start(t, anarchontest.Config{
				Replicas:  5,
				Scheduler: scheduler.Config{Turns: turns},
				Setup: func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
						ran.add(r)
						if r.Attempt < 2 {
							return assert.AnError
						}
						return nil
					}, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: 3 * time.Minute}), scheduler.WithLease(5*time.Second))
				},
			})
			slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
			anarchontest.AdvanceTo(slot.Add(90 * time.Second))
			require.Len(t, ran.of("job", slot), 1)
			ranked := rtRanked("job", rtNames(f))
			f.Named(ranked[0]).Kill()
			f.Named(ranked[1]).Kill()
			anarchontest.AdvanceTo(slot.Add(10 * time.Minute))
			assert.Len(t, ran.of("job", slot), 2, "turns=%v: the retry ran", turns)
			f.AssertRanOnce(t, "job", slot)
		})
	}
}
