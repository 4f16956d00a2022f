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

// The answers of every kind of store call lost, on every replica, while a
// fleet runs a job with a lease, a pause with an end, a run limit and a
// schedule entry, and a holder is killed and restarted: each slot still runs
// once.
func TestLostAnswersOfEveryOp(t *testing.T) {
	for _, op := range everyOp {
		t.Run(string(op), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(30 * time.Second)
				first := time.Now().Truncate(time.Minute).Add(time.Minute)
				noop := func(context.Context, scheduler.Run) error { return nil }
				f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
					if err := s.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
						select {
						case <-time.After(20 * time.Second):
							return nil
						case <-ctx.Done():
							return context.Cause(ctx)
						}
					}, scheduler.WithLease(10*time.Second)); err != nil {
						return err
					}
					if err := s.Every("limited", time.Minute, noop, scheduler.WithMaxRuns(3)); err != nil {
						return err
					}
					return s.Declare("tenant", noop)
				}})
				for _, r := range f.Replicas() {
					r.LoseAnswers(2, op)
				}
				s := f.Replica(1).Scheduler()
				ctx := t.Context()
				var err error
				for range 3 { // the caller retries a write whose answer it lost
					if _, err = s.AddEntry(ctx, "tenant", "acme", scheduler.EntrySpec{Every: time.Minute}); err == nil || errorsIsExists(err) {
						break
					}
				}
				require.True(t, err == nil || errorsIsExists(err), "%v", err)
				anarchontest.AdvanceTo(first.Add(10 * time.Second))
				holder := f.Holder("job", first)
				require.NotNil(t, holder)
				holder.Kill()
				for range 3 { // Start fails when the answer of its first call is lost
					if err = holder.Restart(ctx); err == nil {
						break
					}
				}
				require.NoError(t, err)
				anarchontest.Advance(time.Minute)
				_, _ = s.Preview(ctx, "limited", scheduler.PreviewOptions{N: 3})
				_, _ = s.Why(ctx, "job", scheduler.WhyOptions{Slot: first})
				anarchontest.Advance(5 * time.Minute)
				f.AssertRanOnce(t, "job", minutes(first, 6)...)
				limited, err := f.History(ctx, "limited")
				require.NoError(t, err)
				f.AssertRanOnce(t, "limited", minutes(limited[len(limited)-1].Slot, 3)...)
				recs, err := f.EntryHistory(ctx, "tenant", "acme")
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
			})
		})
	}
}

func errorsIsExists(err error) bool { return errors.Is(err, scheduler.ErrEntryExists) }

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
