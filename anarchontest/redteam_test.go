package anarchontest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/scheduler"
)

// everyOp is every store call the faults name.
var everyOp = []anarchontest.Op{
	anarchontest.OpInit, anarchontest.OpPrepareJob, anarchontest.OpClaim, anarchontest.OpHeartbeat, anarchontest.OpSettle,
	anarchontest.OpFinish, anarchontest.OpRelease, anarchontest.OpRetry, anarchontest.OpRecordClaim, anarchontest.OpRecordManualRun,
	anarchontest.OpSaveResult, anarchontest.OpWriteRecords, anarchontest.OpRecordOnce, anarchontest.OpSetPause, anarchontest.OpClearPause,
	anarchontest.OpCreateEntry, anarchontest.OpUpdateEntry, anarchontest.OpDeleteEntry, anarchontest.OpHistory, anarchontest.OpPauses,
	anarchontest.OpActive, anarchontest.OpEntryRunNames, anarchontest.OpRunCount, anarchontest.OpGetEntry, anarchontest.OpListEntries,
	anarchontest.OpWatchRun, anarchontest.OpWatchPauses, anarchontest.OpWatchEntries,
}

// unreached are the store calls the scheduler makes only on stores without
// Settle (the memory store has it): no loss of theirs can be served here.
var unreached = map[anarchontest.Op]bool{
	anarchontest.OpFinish: true, anarchontest.OpSaveResult: true, anarchontest.OpRecordClaim: true, anarchontest.OpWriteRecords: true,
	anarchontest.OpRelease: true, anarchontest.OpRetry: true, anarchontest.OpRecordManualRun: true,
}

// The answers of every kind of store call lost, on every replica, while a
// fleet runs a job with a lease, a pause with an end, a run limit, a retry, a
// deadline, a manual run and schedule entries added, changed and removed, and
// a holder is killed and restarted: each slot still runs once, and each order
// is served (a lost answer is seen by the scheduler or by the caller).
func TestLostAnswersOfEveryOp(t *testing.T) {
	for _, op := range everyOp {
		t.Run(string(op), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(30 * time.Second)
				first := time.Now().Truncate(time.Minute).Add(time.Minute)
				noop := func(context.Context, scheduler.Run) error { return nil }
				f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
					return errors.Join(
						s.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
							select {
							case <-time.After(20 * time.Second):
								return nil
							case <-ctx.Done():
								return context.Cause(ctx)
							}
						}, scheduler.WithLease(10*time.Second)),
						s.Every("limited", time.Minute, noop, scheduler.WithMaxRuns(3)),
						s.Every("flaky", time.Minute, func(_ context.Context, r scheduler.Run) error {
							if r.Attempt == 1 {
								return errors.New("flaky")
							}
							return nil
						}, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: time.Second})),
						s.Every("judged", time.Minute, func(_ context.Context, r scheduler.Run) error {
							if r.Slot.Equal(first) {
								return errors.New("failed") // judged past its deadline
							}
							return nil
						}, scheduler.WithDeadline(30*time.Second)),
						s.Declare("tenant", noop),
					)
				}})
				for _, r := range f.Replicas() {
					r.LoseAnswers(2, op)
				}
				ctx := t.Context()
				up := func() *scheduler.Scheduler { // a replica's scheduler that runs
					for _, r := range f.Replicas() {
						if r.Up() {
							return r.Scheduler()
						}
					}
					t.Fatal("no replica up")
					return nil
				}
				lost := 0 // lost answers the callers saw
				// call calls fn again while its answer is lost: the write may
				// have been applied, so a repeat may find it done (ok).
				call := func(fn func() error, ok ...error) {
					t.Helper()
					for range 5 {
						err := fn()
						if errors.Is(err, anarchontest.ErrAnswerLost) {
							lost++
							continue
						}
						for _, o := range ok {
							if lost > 0 && errors.Is(err, o) {
								err = nil
							}
						}
						require.NoError(t, err)
						return
					}
					t.Fatal("five answers lost")
				}
				call(func() error {
					_, err := up().AddEntry(ctx, "tenant", "acme", scheduler.EntrySpec{Every: time.Minute})
					return err
				}, scheduler.ErrEntryExists)
				call(func() error {
					_, err := up().AddEntry(ctx, "tenant", "beta", scheduler.EntrySpec{Every: time.Hour})
					return err
				}, scheduler.ErrEntryExists)
				call(func() error {
					_, err := up().Preview(ctx, "limited", scheduler.PreviewOptions{N: 3})
					return err
				})
				anarchontest.AdvanceTo(first.Add(10 * time.Second))
				holder := f.Holder("job", first)
				require.NotNil(t, holder)
				holder.Kill()
				call(func() error { return holder.Restart(ctx) })
				anarchontest.Advance(time.Minute)

				call(func() error {
					e, err := up().GetEntry(ctx, "tenant", "beta")
					if err != nil {
						return err
					}
					_, err = up().UpdateEntry(ctx, "tenant", "beta", scheduler.EntrySpec{Every: 2 * time.Hour}, e.Revision)
					return err
				})
				call(func() error {
					e, err := up().GetEntry(ctx, "tenant", "beta")
					if err != nil {
						return err
					}
					return up().RemoveEntry(ctx, "tenant", "beta", e.Revision)
				}, scheduler.ErrEntryNotFound)
				call(func() error {
					_, err := up().RunNow(ctx, "limited")
					return err
				})
				call(func() error {
					_, err := up().Why(ctx, "job", scheduler.WhyOptions{Slot: first})
					return err
				})
				call(func() error {
					_, err := up().ListEntries(ctx, "tenant", "", "", 10)
					return err
				})
				paused := time.Now().Truncate(time.Minute).Add(time.Minute)
				call(func() error {
					return up().Pause(ctx, "job", scheduler.PauseOptions{Reason: "test", Until: paused.Add(90 * time.Second)})
				})
				anarchontest.AdvanceTo(paused.Add(10 * time.Second))
				call(func() error { return up().Resume(ctx, "job") })
				anarchontest.Advance(time.Minute)
				if live := f.Holder("job", paused.Add(time.Minute)); live != nil {
					call(func() error { return live.Restart(ctx) }) // hands the run over
				}
				anarchontest.Advance(5 * time.Minute)

				f.AssertRanOnce(t, "job")
				recs, err := f.History(ctx, "job")
				require.NoError(t, err)
				for _, r := range recs {
					assert.NotEqual(t, scheduler.StatusRunning, r.Status, "%s", anarchontest.Describe(recs))
				}
				f.AssertRanOnce(t, "limited")
				f.AssertRanOnce(t, "flaky", minutes(first, 5)...)
				f.AssertRanOnce(t, "judged", minutes(first.Add(time.Minute), 5)...)
				judged, err := f.RunsOf(ctx, "judged", first)
				require.NoError(t, err)
				deadlines := 0
				for _, r := range judged {
					if r.Status == scheduler.StatusDeadline {
						deadlines++
					}
				}
				assert.Equal(t, 1, deadlines, "one judgement:\n%s", anarchontest.Describe(judged))
				recs, err = f.EntryHistory(ctx, "tenant", "acme")
				require.NoError(t, err)
				ran := map[int64]int{}
				for _, r := range recs {
					if r.Status == scheduler.StatusOK {
						ran[r.Slot.UnixMilli()]++
					}
				}
				for _, slot := range minutes(first.Add(time.Minute), 5) {
					assert.Equal(t, 1, ran[slot.UnixMilli()], "entry slot %s:\n%s", slot, anarchontest.Describe(recs))
				}

				seen := lost
				for _, e := range f.Events(nil) {
					if errors.Is(e.Err, anarchontest.ErrAnswerLost) {
						seen++
					}
				}
				if unreached[op] {
					assert.Zero(t, seen, "the memory store has Settle: %s is not called", op)
				} else {
					assert.NotZero(t, seen, "a lost answer of %s is seen", op)
				}
			})
		})
	}
}

// A holder killed as its handler returns, before it stores the result: a
// backup runs the slot again, and it ends ok once. Killed after the store
// applied the result but before the holder read the answer: the slot ran once.
func TestKillAroundSettle(t *testing.T) {
	for _, stored := range []bool{false, true} {
		t.Run(fmt.Sprint("stored=", stored), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slot := time.Now()
				kill := make(chan string, 1)
				killed := make(chan struct{})
				cfg := anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
					return s.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
						time.Sleep(10 * time.Second)
						if !stored && r.Attempt == 1 && r.Slot.Equal(slot) {
							kill <- r.Instance // and return once killed
							<-killed
						}
						return nil
					}, scheduler.WithLease(15*time.Second))
				}}
				cfg.Scheduler.OnEvent = func(e scheduler.Event) {
					if stored && e.Kind == scheduler.EventBackendError && e.Op == "settle" && e.Slot.Equal(slot) {
						kill <- e.Instance // and go on, to store it again, once killed
						<-killed
					}
				}
				f := anarchontest.Start(t, cfg)
				if stored {
					for _, r := range f.Replicas() {
						r.LoseAnswers(1, anarchontest.OpSettle)
					}
				}
				anarchontest.Advance(5 * time.Second)
				holder := f.Holder("job", slot)
				require.NotNil(t, holder)
				anarchontest.Advance(6 * time.Second)
				require.Equal(t, holder.Name(), <-kill)
				holder.Kill()
				close(killed)
				anarchontest.Advance(3 * time.Minute)
				assert.False(t, holder.Up())
				runs, err := f.RunsOf(t.Context(), "job", slot)
				require.NoError(t, err)
				if stored {
					require.Len(t, runs, 1, anarchontest.Describe(runs))
				} else {
					require.Len(t, runs, 2, anarchontest.Describe(runs))
					assert.Equal(t, scheduler.StatusLost, runs[0].Status)
				}
				f.AssertRanOnce(t, "job", minutes(slot, 3)...)
			})
		})
	}
}

// Ten replicas, three of their holders killed in turn and restarted: each
// slot runs once.
func TestTenReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := time.Now()
		f := anarchontest.Start(t, anarchontest.Config{Replicas: 10, Setup: working(30*time.Second, nil, scheduler.WithLease(10*time.Second))})
		for i := range 3 {
			slot := first.Add(time.Duration(i) * time.Minute)
			anarchontest.AdvanceTo(slot.Add(5 * time.Second))
			holder := f.Holder("job", slot)
			require.NotNil(t, holder, "slot %d", i)
			holder.Kill()
			anarchontest.Advance(20 * time.Second)
			require.NoError(t, holder.Restart(t.Context()))
		}
		anarchontest.Advance(5 * time.Minute)
		f.AssertRanOnce(t, "job", minutes(first, 7)...)
		assert.Len(t, f.Events(anarchontest.Match("job", scheduler.EventTakeover)), 3)
	})
}
