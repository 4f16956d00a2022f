package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// bfRuns records the runs of a job by slot second, and how many backfill runs
// ran at once at most (with any other run of the job when all is set).
type bfRuns struct {
	mu        sync.Mutex
	runs      map[int64][]scheduler.Run
	cur, most int
	all       bool
}

// handler runs for d.
func (r *bfRuns) handler(d time.Duration) scheduler.Handler {
	return func(ctx context.Context, run scheduler.Run) error {
		r.mu.Lock()
		if r.runs == nil {
			r.runs = map[int64][]scheduler.Run{}
		}
		r.runs[run.Slot.Unix()] = append(r.runs[run.Slot.Unix()], run)
		counted := run.Backfill || r.all
		if counted {
			r.cur++
			r.most = max(r.most, r.cur)
		}
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			if counted {
				r.cur--
			}
			r.mu.Unlock()
		}()
		if d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

func (r *bfRuns) of(sec int64) []scheduler.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]scheduler.Run(nil), r.runs[sec]...)
}

func (r *bfRuns) maxAtOnce() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.most
}

// outcomes maps a backfill result's slots (seconds from base) to their outcomes.
func outcomes(res scheduler.BackfillResult, base time.Time) map[int64]scheduler.BackfillOutcome {
	out := map[int64]scheduler.BackfillOutcome{}
	for _, s := range res.Slots {
		out[s.Slot.Unix()-base.Unix()] = s.Outcome
	}
	return out
}

// A replica runs the slots 0, 10 and 20 and stops; 30, 40 and 50 fall with no
// replica up. A backfill of [0, 60) runs only the three that never ran, once,
// oldest first, as backfills (Run.Backfill, the events, history); with
// BackfillRerun it runs all six, those that ran as their second attempt.
func TestBackfillRunsTheSlotsThatNeverRan(t *testing.T) {
	for _, rerun := range []bool{false, true} {
		name := "default"
		if rerun {
			name = "rerun"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				var runs bfRuns
				base := time.Now()
				a := newScheduler(t, b, "A")
				require.NoError(t, a.Every("tick", 10*time.Second, runs.handler(time.Second)))
				require.NoError(t, a.Start(t.Context()))
				time.Sleep(25 * time.Second) // slots 0, 10, 20
				require.NoError(t, a.Stop(t.Context()))
				time.Sleep(40 * time.Second) // 30, 40, 50 fall with nobody up; now 65

				var mu sync.Mutex
				var started []scheduler.Event
				s := newScheduler(t, b, "B", func(c *scheduler.Config) {
					c.OnEvent = func(e scheduler.Event) {
						if e.Kind == scheduler.EventStarted {
							mu.Lock()
							started = append(started, e)
							mu.Unlock()
						}
					}
				})
				require.NoError(t, s.Every("tick", 10*time.Second, runs.handler(time.Second)))
				require.NoError(t, s.Start(t.Context()))
				synctest.Wait() // 30, 40 and 50 recorded missed
				var opts []scheduler.BackfillOption
				if rerun {
					opts = append(opts, scheduler.BackfillRerun())
				}
				res, err := s.Backfill(t.Context(), "tick", base, base.Add(60*time.Second), opts...)
				require.NoError(t, err)
				require.NoError(t, s.Stop(t.Context()))

				assert.Equal(t, "tick", res.Job)
				require.Len(t, res.Slots, 6)
				for i, slot := range res.Slots {
					sec := int64(10 * i)
					assert.WithinDuration(t, base.Add(time.Duration(sec)*time.Second), slot.Slot, 0, "oldest first")
					ranBefore := sec < 30
					switch {
					case ranBefore && !rerun:
						assert.Equal(t, scheduler.BackfillAlreadyRan, slot.Outcome, "slot %d", sec)
						assert.Equal(t, scheduler.StatusOK, slot.Status)
						assert.Len(t, runs.of(base.Unix()+sec), 1, "slot %d not run again", sec)
					default:
						assert.Equal(t, scheduler.BackfillRan, slot.Outcome, "slot %d", sec)
						assert.Equal(t, scheduler.StatusOK, slot.Status, "slot %d", sec)
						assert.Equal(t, "B", slot.Instance)
						want := 1
						if ranBefore {
							want = 2 // the run store remembers attempt 1
						}
						// Attempt 1 of a slot nobody was up for is its missed record.
						assert.Equal(t, 2, slot.Attempt, "slot %d", sec)
						got := runs.of(base.Unix() + sec)
						if assert.Len(t, got, want, "slot %d", sec) {
							assert.True(t, got[want-1].Backfill, "the handler is told")
							assert.False(t, got[0].Backfill && ranBefore)
						}
					}
				}
				assert.Equal(t, 1, runs.maxAtOnce(), "one at a time")

				mu.Lock()
				backfilled := 0
				for _, e := range started {
					if e.Backfill {
						backfilled++
					}
				}
				mu.Unlock()
				assert.Equal(t, res.Count(scheduler.BackfillRan), backfilled, "EventStarted says backfill")

				recs := records(t, s, "tick")
				for sec := int64(0); sec < 60; sec += 10 {
					rs := recs[base.Unix()+sec]
					last := rs[len(rs)-1]
					ranBefore := sec < 30
					assert.Equal(t, scheduler.StatusOK, last.Status, "slot %d", sec)
					assert.Equal(t, !ranBefore || rerun, last.Backfill, "slot %d: history marks the backfill", sec)
					if ranBefore {
						assert.False(t, rs[0].Backfill)
					}
				}
			})
		})
	}
}

// Too many slots are refused, saying how many, before anything runs.
func TestBackfillCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var runs bfRuns
		base := time.Now()
		time.Sleep(30 * time.Hour)
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("tick", time.Second, runs.handler(0)))
		require.NoError(t, s.Start(t.Context()))
		_, err := s.Backfill(t.Context(), "tick", base, base.Add(2000*time.Second))
		require.ErrorIs(t, err, scheduler.ErrInvalidOption)
		assert.Contains(t, err.Error(), "2000 slots")
		assert.Contains(t, err.Error(), "narrow the range")
		_, err = s.Backfill(t.Context(), "tick", base, base.Add(29*time.Hour))
		require.ErrorIs(t, err, scheduler.ErrInvalidOption)
		assert.Contains(t, err.Error(), "more than")
		// Exactly the cap is accepted.
		res, err := s.Backfill(t.Context(), "tick", base, base.Add(scheduler.MaxBackfillSlots*time.Second), scheduler.BackfillConcurrency(50))
		require.NoError(t, err)
		assert.Equal(t, scheduler.MaxBackfillSlots, res.Count(scheduler.BackfillRan))
		require.NoError(t, s.Stop(t.Context()))
		assert.Len(t, runs.of(base.Unix()+scheduler.MaxBackfillSlots), 0, "the range ends before to")
		assert.Len(t, runs.of(base.Unix()), 1)
	})
}

func TestBackfillErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs bfRuns
		base := time.Now()
		time.Sleep(time.Minute)
		now := time.Now()
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("tick", 10*time.Second, runs.handler(0)))
		_, err := s.Backfill(t.Context(), "tick", base, now)
		require.ErrorIs(t, err, scheduler.ErrNotStarted)
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(t.Context())) }()

		_, err = s.Backfill(t.Context(), "nope", base, now)
		require.ErrorIs(t, err, scheduler.ErrJobNotFound)
		for _, tc := range []struct {
			name     string
			from, to time.Time
			opts     []scheduler.BackfillOption
			says     string
		}{
			{"zero from", time.Time{}, now, nil, "must both be set"},
			{"zero to", base, time.Time{}, nil, "must both be set"},
			{"from after to", now, base, nil, "must be before"},
			{"from is to", base, base, nil, "must be before"},
			{"to in the future", base, now.Add(time.Second), nil, "in the future"},
			{"concurrency 0", base, now, []scheduler.BackfillOption{scheduler.BackfillConcurrency(0)}, "concurrency"},
			{"concurrency above the cap", base, now, []scheduler.BackfillOption{scheduler.BackfillConcurrency(scheduler.MaxBackfillSlots + 1)}, "concurrency"},
		} {
			_, err := s.Backfill(t.Context(), "tick", tc.from, tc.to, tc.opts...)
			require.ErrorIs(t, err, scheduler.ErrInvalidOption, tc.name)
			assert.Contains(t, err.Error(), tc.says, tc.name)
		}

		plain := newScheduler(t, struct{ backend.Backend }{memory.New()}, "P") // no leases
		require.NoError(t, plain.Every("tick", 10*time.Second, runs.handler(0)))
		require.NoError(t, plain.Start(t.Context()))
		_, err = plain.Backfill(t.Context(), "tick", base, now)
		require.ErrorIs(t, err, scheduler.ErrBackfillNotSupported)
		require.NoError(t, plain.Stop(t.Context()))

		require.NoError(t, s.Stop(t.Context()))
		_, err = s.Backfill(t.Context(), "tick", base, now)
		require.ErrorIs(t, err, scheduler.ErrNotStarted)
		for sec := base.Unix(); sec < now.Unix(); sec++ {
			assert.Empty(t, runs.of(sec), "nothing ran")
		}
	})
}

// Two replicas backfill the same range at once while a third catches up on it:
// every slot runs once across the fleet, and the replicas' results add up to it.
func TestBackfillTwiceAtOnceRunsEachSlotOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var runs bfRuns
		base := time.Now()
		time.Sleep(65 * time.Second) // slots 0 to 60 fall with nobody up
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("tick", 10*time.Second, runs.handler(3*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		results := make([]scheduler.BackfillResult, len(scheds))
		var wg sync.WaitGroup
		for i, s := range scheds {
			wg.Go(func() {
				var err error
				results[i], err = s.Backfill(t.Context(), "tick", base, base.Add(60*time.Second), scheduler.BackfillConcurrency(1+i))
				assert.NoError(t, err)
			})
		}
		catchUp := newScheduler(t, b, "C")
		require.NoError(t, catchUp.Every("tick", 10*time.Second, runs.handler(3*time.Second), scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour)))
		require.NoError(t, catchUp.Start(t.Context()))
		wg.Wait()
		time.Sleep(time.Minute)
		for _, s := range append(scheds, catchUp) {
			require.NoError(t, s.Stop(t.Context()))
		}
		ranBy := map[int64]int{}
		for _, res := range results {
			for _, sl := range res.Slots {
				switch sl.Outcome {
				case scheduler.BackfillRan:
					ranBy[sl.Slot.Unix()]++
				case scheduler.BackfillElsewhere: // the other replica, or catch-up
					assert.Equal(t, scheduler.StatusOK, sl.Status)
				case scheduler.BackfillAlreadyRan: // catch-up, before the history was read
					assert.Contains(t, []scheduler.Status{scheduler.StatusOK, scheduler.StatusRunning}, sl.Status)
				default:
					t.Errorf("slot %v: %s", sl.Slot, sl.Outcome)
				}
			}
		}
		for sec := int64(0); sec < 60; sec += 10 {
			assert.Len(t, runs.of(base.Unix()+sec), 1, "slot %d ran once", sec)
			assert.LessOrEqual(t, ranBy[base.Unix()+sec], 1, "slot %d reported run by one replica at most", sec)
		}
	})
}

// A paused job's backfilled slots are finished paused, not run; once resumed, a
// backfill runs them (they are paused, so never ran).
func TestBackfillOfAPausedJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var runs bfRuns
		base := time.Now()
		time.Sleep(35 * time.Second)
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("tick", 10*time.Second, runs.handler(0)))
		require.NoError(t, s.Pause(t.Context(), "tick", scheduler.PauseOptions{Reason: "freeze", By: "ops"}))
		require.NoError(t, s.Start(t.Context()))
		res, err := s.Backfill(t.Context(), "tick", base, base.Add(30*time.Second))
		require.NoError(t, err)
		require.Len(t, res.Slots, 3)
		for _, sl := range res.Slots {
			assert.Equal(t, scheduler.BackfillPaused, sl.Outcome)
			assert.Equal(t, scheduler.StatusPaused, sl.Status)
			assert.Empty(t, runs.of(sl.Slot.Unix()))
		}
		recs := records(t, s, "tick")
		for sec := int64(0); sec < 30; sec += 10 {
			if rs := recs[base.Unix()+sec]; assert.Len(t, rs, 1, "slot %d", sec) {
				assert.Equal(t, scheduler.StatusPaused, rs[0].Status)
				assert.True(t, rs[0].Backfill)
			}
		}

		require.NoError(t, s.Resume(t.Context(), "tick"))
		time.Sleep(2 * time.Second) // the resume reaches the scheduler
		res, err = s.Backfill(t.Context(), "tick", base, base.Add(30*time.Second))
		require.NoError(t, err)
		assert.Equal(t, 3, res.Count(scheduler.BackfillRan))
		require.NoError(t, s.Stop(t.Context()))
		for sec := int64(0); sec < 30; sec += 10 {
			assert.Len(t, runs.of(base.Unix()+sec), 1, "slot %d ran once after the resume", sec)
		}
	})
}

// A slot the run store holds late, and one it holds skipped, are reopened by a
// backfill: run as attempt 2, after the record that says why they did not run.
func TestBackfillReopensLateAndSkippedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runStore := b.Runs()
		var runs bfRuns
		base := time.Now()
		lateSlot, busySlot, skippedSlot := base, base.Add(10*time.Second), base.Add(20*time.Second)
		claim := func(slot time.Time, deadline time.Time) backend.ClaimResult {
			res, err := runStore.Claim(t.Context(), backend.RunClaim{Job: "tick", Slot: slot, Token: backendtest.Token(),
				Instance: "old", Lease: time.Minute, Deadline: deadline, Overlap: backend.OverlapSkip, Keep: time.Hour})
			require.NoError(t, err)
			return res
		}
		time.Sleep(15 * time.Second)
		require.Equal(t, backend.OutcomeLate, claim(lateSlot, base.Add(time.Second)).Outcome)
		busy := claim(busySlot, time.Now().Add(time.Minute))
		require.Equal(t, backend.OutcomeWon, busy.Outcome)
		time.Sleep(10 * time.Second)
		require.Equal(t, backend.OutcomeOverlap, claim(skippedSlot, time.Now().Add(time.Minute)).Outcome)
		active, err := runStore.Active(t.Context(), "tick")
		require.NoError(t, err)
		require.Len(t, active, 1)
		// The store records what it decided, and the run its holder finishes.
		require.NoError(t, runStore.Finish(t.Context(), backend.RunKey{Job: "tick", Slot: busySlot, Token: active[0].Token}, backend.StatusOK))

		time.Sleep(10 * time.Second) // now 35
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("tick", 10*time.Second, runs.handler(0), scheduler.WithOverlap(scheduler.OverlapSkip)))
		require.NoError(t, s.Start(t.Context()))
		res, err := s.Backfill(t.Context(), "tick", base, base.Add(30*time.Second))
		require.NoError(t, err)
		require.NoError(t, s.Stop(t.Context()))
		assert.Equal(t, map[int64]scheduler.BackfillOutcome{0: scheduler.BackfillRan, 10: scheduler.BackfillAlreadyRan, 20: scheduler.BackfillRan}, outcomes(res, base), "%+v", res.Slots)
		recs := records(t, s, "tick")
		for _, slot := range []time.Time{lateSlot, skippedSlot} {
			assert.Len(t, runs.of(slot.Unix()), 1)
			if rs := recs[slot.Unix()]; assert.Len(t, rs, 2) {
				assert.Contains(t, []scheduler.Status{scheduler.StatusLate, scheduler.StatusSkipped}, rs[0].Status)
				assert.Equal(t, scheduler.StatusOK, rs[1].Status)
				assert.Equal(t, 2, rs[1].Attempt, "attempt 2 of the slot the store held")
				assert.True(t, rs[1].Backfill)
			}
		}
		assert.Empty(t, runs.of(busySlot.Unix()))
	})
}

// A job that forbids overlap: backfilled slots never run beside another of its
// runs. While the loop's slot runs, a backfill's slots are stored skipped and
// reported so; a later backfill reopens them and runs them one at a time.
func TestBackfillOfAJobThatForbidsOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := bfRuns{all: true}
		base := time.Now()
		time.Sleep(3*time.Minute + 5*time.Second) // 0:00, 1:00, 2:00 fall with nobody up
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("tick", time.Minute, runs.handler(20*time.Second), scheduler.WithOverlap(scheduler.OverlapSkip)))
		require.NoError(t, s.Start(t.Context())) // claims 3:00 at once, runs it until 3:25
		time.Sleep(5 * time.Second)
		res, err := s.Backfill(t.Context(), "tick", base, base.Add(3*time.Minute))
		require.NoError(t, err)
		assert.Equal(t, map[int64]scheduler.BackfillOutcome{0: scheduler.BackfillSkipped, 60: scheduler.BackfillSkipped, 120: scheduler.BackfillSkipped}, outcomes(res, base))
		for _, sl := range res.Slots {
			assert.Empty(t, runs.of(sl.Slot.Unix()))
		}
		time.Sleep(25 * time.Second) // 3:35: the loop's run ended
		res, err = s.Backfill(t.Context(), "tick", base, base.Add(3*time.Minute))
		require.NoError(t, err)
		require.NoError(t, s.Stop(t.Context()))
		assert.Equal(t, 3, res.Count(scheduler.BackfillRan), "%+v", res.Slots)
		for _, sl := range res.Slots {
			assert.Len(t, runs.of(sl.Slot.Unix()), 1)
		}
		assert.Equal(t, 1, runs.maxAtOnce(), "never two runs of the job at once")
	})
}

// A one-time job and a bounded schedule count only their own slots.
func TestBackfillOfOneTimeAndBoundedJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var runs bfRuns
		base := time.Now()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.At("once", base.Add(20*time.Second), runs.handler(0)))
		require.NoError(t, s.Every("bounded", 10*time.Second, runs.handler(0),
			scheduler.WithStartAt(base.Add(time.Minute)), scheduler.WithEndAt(base.Add(90*time.Second))))
		time.Sleep(5 * time.Minute)
		require.NoError(t, s.Start(t.Context()))
		res, err := s.Backfill(t.Context(), "once", base, base.Add(4*time.Minute))
		require.NoError(t, err)
		if assert.Len(t, res.Slots, 1) {
			assert.WithinDuration(t, base.Add(20*time.Second), res.Slots[0].Slot, 0)
			assert.Equal(t, scheduler.BackfillRan, res.Slots[0].Outcome)
		}
		res, err = s.Backfill(t.Context(), "bounded", base, base.Add(4*time.Minute))
		require.NoError(t, err)
		require.NoError(t, s.Stop(t.Context()))
		assert.Equal(t, map[int64]scheduler.BackfillOutcome{60: scheduler.BackfillRan, 70: scheduler.BackfillRan, 80: scheduler.BackfillRan}, outcomes(res, base))
	})
}

// Backfill's context ends the wait, not the runs: the slots not ended are
// reported pending, and run to their end.
func TestBackfillContextEndsOnlyTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var runs bfRuns
		base := time.Now()
		time.Sleep(time.Minute)
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("tick", 10*time.Second, runs.handler(10*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		res, err := s.Backfill(ctx, "tick", base, base.Add(30*time.Second))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, map[int64]scheduler.BackfillOutcome{0: scheduler.BackfillRan, 10: scheduler.BackfillPending, 20: scheduler.BackfillPending}, outcomes(res, base))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		for sec := int64(0); sec < 30; sec += 10 {
			assert.Len(t, runs.of(base.Unix()+sec), 1, "slot %d ran", sec)
		}
	})
}
