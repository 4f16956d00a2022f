package anarchontest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// causes records the context causes the handlers of a job saw, by instance.
type causes struct {
	mu  sync.Mutex
	got map[string][]error
}

func (c *causes) add(instance string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string][]error{}
	}
	c.got[instance] = append(c.got[instance], err)
}

func (c *causes) of(instance string) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.got[instance]...)
}

// working returns the setup of a job every minute whose handler works for d
// (or until its context ends, noting the cause in c).
func working(d time.Duration, c *causes, opts ...scheduler.JobOption) func(*scheduler.Scheduler) error {
	return func(s *scheduler.Scheduler) error {
		return s.Every("job", time.Minute, func(ctx context.Context, run scheduler.Run) error {
			select {
			case <-time.After(d):
				return nil
			case <-ctx.Done():
				if c != nil {
					c.add(run.Instance, context.Cause(ctx))
				}
				return context.Cause(ctx)
			}
		}, opts...)
	}
}

// quickly is the setup of a job every minute whose handler returns at once.
func quickly(opts ...scheduler.JobOption) func(*scheduler.Scheduler) error {
	return working(0, nil, opts...)
}

// minutes returns the n slots from first, a minute apart.
func minutes(first time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = first.Add(time.Duration(i) * time.Minute)
	}
	return out
}

// recordsOf returns the records of job whose instance is name.
func recordsOf(t *testing.T, f *anarchontest.Fleet, job, name string) []scheduler.RunRecord {
	t.Helper()
	recs, err := f.History(t.Context(), job)
	require.NoError(t, err)
	var out []scheduler.RunRecord
	for _, r := range recs {
		if r.Instance == name {
			out = append(out, r)
		}
	}
	return out
}

// from returns a match of the events of kind reported by instance.
func from(instance string, kinds ...scheduler.EventKind) func(scheduler.Event) bool {
	k := anarchontest.Match("", kinds...)
	return func(e scheduler.Event) bool { return e.Instance == instance && k(e) }
}

// A killed holder's handler is cancelled with ErrKilled, the process reports
// nothing more, and a backup takes the run over the instant its lease expires
// in the store.
func TestKillTakesOverAtLeaseExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slot := time.Now()
		var c causes
		f := anarchontest.Start(t, anarchontest.Config{Setup: working(2*time.Minute, &c, scheduler.WithLease(30*time.Second),
			scheduler.WithOverlap(scheduler.OverlapSkip))})
		anarchontest.Advance(17 * time.Second)
		holder := f.Holder("job", slot)
		require.NotNil(t, holder)
		active, err := f.Store().Runs().Active(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, active, 1)
		expires := active[0].Expires
		reported := len(f.Events(from(holder.Name())))
		holder.Kill()
		assert.False(t, holder.Up())

		anarchontest.Advance(time.Second)
		require.Len(t, c.of(holder.Name()), 1)
		assert.ErrorIs(t, c.of(holder.Name())[0], anarchontest.ErrKilled)
		assert.Same(t, holder, f.Holder("job", slot), "the dead holder keeps its lease until it expires")

		anarchontest.AdvanceTo(expires)
		takeovers := f.Events(anarchontest.Match("job", scheduler.EventTakeover))
		require.Len(t, takeovers, 1)
		assert.Equal(t, expires, takeovers[0].At, "taken over at the lease's expiry")
		assert.NotEqual(t, holder.Name(), takeovers[0].Instance)
		assert.Len(t, f.Events(from(holder.Name())), reported, "a dead process reports nothing")

		anarchontest.Advance(3 * time.Minute)
		runs, err := f.RunsOf(t.Context(), "job", slot)
		require.NoError(t, err)
		require.Len(t, runs, 2, anarchontest.Describe(runs))
		assert.Equal(t, scheduler.StatusLost, runs[0].Status)
		assert.Equal(t, scheduler.StatusOK, runs[1].Status)
		f.AssertRanOnce(t, "job", slot)
	})
}

// A partitioned replica claims nothing while the others run every slot once;
// once healed its claims are answered again.
func TestPartitionedReplicaClaimsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(30 * time.Second) // start between two slots
		first := time.Now().Truncate(time.Minute).Add(time.Minute)
		f := anarchontest.Start(t, anarchontest.Config{Setup: quickly(scheduler.WithMaxLate(10 * time.Second))})
		cut := f.Replica(1)
		cut.Partition()

		slots := minutes(first, 5)
		anarchontest.AdvanceTo(slots[4].Add(30 * time.Second))
		f.AssertRanOnce(t, "job", slots...)
		assert.Empty(t, recordsOf(t, f, "job", cut.Name()), "no record of the cut replica")
		assert.Empty(t, f.Events(from(cut.Name(), scheduler.EventClaimed, scheduler.EventLost, scheduler.EventStandby)), "no claim answered")
		failed := f.Events(from(cut.Name(), scheduler.EventBackendError))
		require.NotEmpty(t, failed)
		assert.ErrorIs(t, failed[0].Err, anarchontest.ErrPartitioned)

		cut.Heal()
		anarchontest.Advance(3 * time.Minute)
		assert.NotEmpty(t, f.Events(from(cut.Name(), scheduler.EventClaimed, scheduler.EventLost)), "claims answered again")
		f.AssertRanOnce(t, "job", minutes(first, 8)...)
	})
}

// Clocks skewed within the default allowance still run every slot once, and
// none late.
func TestSkewWithinAllowanceRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := time.Now()
		f := anarchontest.Start(t, anarchontest.Config{Setup: quickly(scheduler.WithMaxLate(5 * time.Second))})
		skew := scheduler.DefaultMaxClockSkew - 100*time.Millisecond
		f.Replica(0).Skew(skew)
		f.Replica(2).Skew(-skew)
		assert.Equal(t, time.Now().Add(skew), f.Replica(0).Scheduler().Clock().Now())
		assert.Equal(t, time.Now().Add(-skew), f.Replica(2).Scheduler().Clock().Now())

		anarchontest.Advance(10*time.Minute + 30*time.Second)
		f.AssertRanOnce(t, "job", minutes(first, 11)...)
		assert.Empty(t, f.Events(anarchontest.Match("job", scheduler.EventLate, scheduler.EventMissed)))
	})
}

// Claims applied with their answers lost are asked again with the same token:
// the slot runs once, as attempt 1.
func TestLostClaimAnswersRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(30 * time.Second)
		slot := time.Now().Truncate(time.Minute).Add(time.Minute)
		f := anarchontest.Start(t, anarchontest.Config{Setup: quickly()})
		for _, r := range f.Replicas() {
			r.LoseAnswers(1, anarchontest.OpClaim)
		}
		anarchontest.AdvanceTo(slot.Add(30 * time.Second))

		lost := f.Events(anarchontest.Match("job", scheduler.EventBackendError))
		require.Len(t, lost, 3, "each replica's first claim")
		for _, e := range lost {
			assert.Equal(t, "claim", e.Op)
			assert.ErrorIs(t, e.Err, anarchontest.ErrAnswerLost)
		}
		runs, err := f.RunsOf(t.Context(), "job", slot)
		require.NoError(t, err)
		require.Len(t, runs, 1, anarchontest.Describe(runs))
		assert.Equal(t, 1, runs[0].Attempt)
		f.AssertRanOnce(t, "job", slot)
	})
}

// Every write of every replica losing its answer for a while (claims,
// heartbeats, settles, records): each slot still runs once.
func TestLostWriteAnswersRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := time.Now()
		f := anarchontest.Start(t, anarchontest.Config{Setup: working(40*time.Second, nil, scheduler.WithLease(15*time.Second))})
		for i := range 5 {
			for _, r := range f.Replicas() {
				r.LoseAnswers(2)
			}
			anarchontest.Advance(time.Duration(10+i*7) * time.Second)
		}
		anarchontest.Advance(5 * time.Minute)
		assert.NotEmpty(t, f.Events(anarchontest.Match("job", scheduler.EventBackendError)))
		f.AssertRanOnce(t, "job", minutes(first, 5)...)
	})
}

// A watch's answer can be lost too: the replica's next watch of the kind
// fails with ErrAnswerLost, and it watches again.
func TestLostWatchAnswer(t *testing.T) {
	for _, op := range []anarchontest.Op{anarchontest.OpWatchPauses, anarchontest.OpWatchEntries} {
		t.Run(string(op), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
					return s.Declare("tenant", func(context.Context, scheduler.Run) error { return nil })
				}})
				r := f.Replica(0)
				r.LoseAnswers(1, op)
				require.NoError(t, r.Restart(t.Context()))
				anarchontest.Advance(time.Second)
				var lost []scheduler.Event
				for _, e := range f.Events(from(r.Name(), scheduler.EventBackendError)) {
					if errors.Is(e.Err, anarchontest.ErrAnswerLost) {
						lost = append(lost, e)
					}
				}
				require.Len(t, lost, 1, "the first watch's answer is lost")
				assert.Equal(t, map[anarchontest.Op]string{anarchontest.OpWatchPauses: "watch_pauses", anarchontest.OpWatchEntries: "watch_entries"}[op], lost[0].Op)

				_, err := f.Replica(1).Scheduler().AddEntry(t.Context(), "tenant", "acme", scheduler.EntrySpec{Every: time.Minute})
				require.NoError(t, err)
				require.NoError(t, f.Replica(1).Scheduler().Pause(t.Context(), "tenant", scheduler.PauseOptions{Reason: "maintenance"}))
				anarchontest.Advance(time.Minute)
				_, paused := r.Scheduler().Paused("tenant")
				assert.True(t, paused, "it watches again")
				followed, _ := r.Scheduler().EntryCounts()
				assert.Equal(t, 1, followed)
			})
		})
	}
}

// A settle applied with its answer lost is written again; the store takes
// the repeat, and the slot has one record.
func TestLostSettleAnswerIsWrittenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slot := time.Now()
		f := anarchontest.Start(t, anarchontest.Config{Setup: working(10*time.Second, nil)})
		anarchontest.Advance(time.Second)
		holder := f.Holder("job", slot)
		require.NotNil(t, holder)
		holder.LoseAnswers(1, anarchontest.OpSettle)

		anarchontest.Advance(30 * time.Second)
		lost := f.Events(from(holder.Name(), scheduler.EventBackendError))
		require.Len(t, lost, 1)
		assert.ErrorIs(t, lost[0].Err, anarchontest.ErrAnswerLost)
		runs, err := f.RunsOf(t.Context(), "job", slot)
		require.NoError(t, err)
		require.Len(t, runs, 1, anarchontest.Describe(runs))
		assert.Equal(t, scheduler.StatusOK, runs[0].Status)
	})
}

// A holder frozen past its lease: its clock stands still, a backup takes the
// run over at the lease's expiry, and once the holder thaws it finds its
// lease gone and cancels its handler.
func TestFrozenHolderLosesItsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slot := time.Now()
		var c causes
		f := anarchontest.Start(t, anarchontest.Config{Setup: working(2*time.Minute, &c, scheduler.WithLease(30*time.Second),
			scheduler.WithOverlap(scheduler.OverlapSkip))})
		anarchontest.Advance(12 * time.Second)
		holder := f.Holder("job", slot)
		require.NotNil(t, holder)
		frozenAt := time.Now()
		holder.Freeze(time.Minute)

		anarchontest.Advance(40 * time.Second)
		assert.Equal(t, frozenAt, holder.Scheduler().Clock().Now(), "its clock stands still")
		takeovers := f.Events(anarchontest.Match("job", scheduler.EventTakeover))
		require.Len(t, takeovers, 1)
		assert.Equal(t, slot.Add(40*time.Second), takeovers[0].At, "at the expiry of the lease its last heartbeat (0:10) renewed")
		assert.Empty(t, c.of(holder.Name()), "a frozen process sees nothing")

		anarchontest.Advance(30 * time.Second) // thawed at 1:12
		assert.Equal(t, time.Now(), holder.Scheduler().Clock().Now(), "its clock jumped to the present")
		require.Len(t, c.of(holder.Name()), 1)
		assert.ErrorIs(t, c.of(holder.Name())[0], scheduler.ErrLeaseLost)
		assert.True(t, holder.Up())

		anarchontest.Advance(3 * time.Minute)
		runs, err := f.RunsOf(t.Context(), "job", slot)
		require.NoError(t, err)
		require.Len(t, runs, 2, anarchontest.Describe(runs))
		assert.Equal(t, scheduler.StatusLost, runs[0].Status)
		assert.Equal(t, scheduler.StatusOK, runs[1].Status)
		f.AssertRanOnce(t, "job", slot)
	})
}

// A graceful Stop hands the run over at once; a killed replica restarted
// claims again under its name.
func TestStopHandsOverAndRestartRejoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slot := time.Now()
		f := anarchontest.Start(t, anarchontest.Config{Setup: working(30*time.Second, nil, scheduler.WithLease(time.Minute))})
		anarchontest.Advance(5 * time.Second)
		holder := f.Holder("job", slot)
		require.NotNil(t, holder)
		now, cancel := context.WithTimeout(t.Context(), 0) // no time to finish: hand the run over
		defer cancel()
		assert.ErrorIs(t, holder.Stop(now), context.DeadlineExceeded, "its handler was cancelled")
		assert.False(t, holder.Up())
		synctest.Wait()
		takeovers := f.Events(anarchontest.Match("job", scheduler.EventTakeover))
		require.Len(t, takeovers, 1)
		assert.Equal(t, slot.Add(5*time.Second), takeovers[0].At, "at once")

		other := f.Holder("job", slot)
		require.NotNil(t, other)
		other.Kill()
		old := other.Scheduler()
		require.NoError(t, other.Restart(t.Context()))
		assert.True(t, other.Up())
		assert.NotSame(t, old, other.Scheduler())
		require.NoError(t, holder.Restart(t.Context()))

		anarchontest.Advance(10 * time.Minute)
		f.AssertRanOnce(t, "job")
		for _, r := range f.Replicas() {
			assert.NotEmpty(t, f.Events(from(r.Name(), scheduler.EventClaimed, scheduler.EventLost, scheduler.EventStandby)), r.Name())
		}
	})
}

// A replica restarted while partitioned cannot start: its store is out of
// reach.
func TestRestartWhilePartitionedFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := anarchontest.Start(t, anarchontest.Config{Replicas: 1, Setup: quickly()})
		r := f.Replica(0)
		r.Partition()
		err := r.Restart(t.Context())
		require.ErrorIs(t, err, anarchontest.ErrPartitioned)
		assert.False(t, r.Up())
		r.Heal()
		require.NoError(t, r.Restart(t.Context()))
		assert.True(t, r.Up())
	})
}

// The fleet refuses what it sets itself, and needs Setup.
func TestConfigIsChecked(t *testing.T) {
	for name, cfg := range map[string]anarchontest.Config{
		"no setup":    {},
		"negative":    {Replicas: -1, Setup: quickly()},
		"a backend":   {Setup: quickly(), Scheduler: scheduler.Config{Backend: memory.New()}},
		"an instance": {Setup: quickly(), Scheduler: scheduler.Config{Instance: "x"}},
		"a clock":     {Setup: quickly(), Scheduler: scheduler.Config{Clock: scheduler.SystemClock{}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := anarchontest.New(t.Context(), cfg)
			assert.ErrorIs(t, err, scheduler.ErrInvalidConfig)
		})
	}
	t.Run("setup fails", func(t *testing.T) {
		boom := errors.New("boom")
		_, err := anarchontest.New(t.Context(), anarchontest.Config{Setup: func(*scheduler.Scheduler) error { return boom }})
		assert.ErrorIs(t, err, boom)
	})
}

// Pauses and schedule entries reach every replica through its view; a
// partition cuts a replica's watches, which it takes again once healed.
func TestWatchesFollowTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(30 * time.Second)
		f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
			return s.Declare("tenant", func(context.Context, scheduler.Run) error { return nil })
		}})
		cut := f.Replica(0)
		cut.Partition()
		_, err := f.Replica(1).Scheduler().AddEntry(t.Context(), "tenant", "acme", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		require.NoError(t, f.Replica(2).Scheduler().Pause(t.Context(), "tenant", scheduler.PauseOptions{Reason: "maintenance"}))
		anarchontest.Advance(time.Second)
		_, paused := cut.Scheduler().Paused("tenant")
		assert.False(t, paused, "the cut replica does not see the pause")
		_, paused = f.Replica(1).Scheduler().Paused("tenant")
		assert.True(t, paused)

		cut.Heal()
		anarchontest.Advance(30 * time.Second)
		_, paused = cut.Scheduler().Paused("tenant")
		assert.True(t, paused, "it watches again")
		followed, _ := cut.Scheduler().EntryCounts()
		assert.Equal(t, 1, followed, "and follows the entry")

		require.NoError(t, f.Replica(1).Scheduler().Resume(t.Context(), "tenant"))
		start := time.Now().Truncate(time.Minute).Add(time.Minute)
		anarchontest.AdvanceTo(start.Add(3*time.Minute + 30*time.Second))
		recs, err := f.EntryHistory(t.Context(), "tenant", "acme")
		require.NoError(t, err)
		ran := map[int64]int{}
		for _, r := range recs {
			if r.Status == scheduler.StatusOK {
				ran[r.Slot.UnixMilli()]++
			}
		}
		for _, slot := range minutes(start, 4) {
			assert.Equal(t, 1, ran[slot.UnixMilli()], "slot %s:\n%s", slot, anarchontest.Describe(recs))
		}
	})
}

// A killed process neither logs nor calls the configuration's OnEvent.
func TestKilledReplicaIsSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var logged strings.Builder
		events := 0
		f := anarchontest.Start(t, anarchontest.Config{Replicas: 1, Setup: quickly(), Scheduler: scheduler.Config{
			Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, &slog.HandlerOptions{Level: slog.LevelDebug})),
			OnEvent: func(scheduler.Event) {
				mu.Lock()
				defer mu.Unlock()
				events++
			},
		}})
		anarchontest.Advance(90 * time.Second)
		mu.Lock()
		before, seen := logged.Len(), events
		mu.Unlock()
		require.NotZero(t, before, "it logs while it lives")
		require.NotZero(t, seen)

		f.Replica(0).Kill()
		anarchontest.Advance(5 * time.Minute)
		require.NoError(t, f.Replica(0).Stop(t.Context())) // reaps it
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, before, logged.Len(), "nothing logged by the dead process, its reaping included")
		assert.Equal(t, seen, events)
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A scenario run again comes to the same records at the same instants,
// whichever replicas win. (The events of the backups that lost may differ: a
// backup that watches a run as it ends at that instant learns of it at its
// next poll.)
func TestSameInstantsEveryRun(t *testing.T) {
	scenario := func(t *testing.T) []string {
		var seen []string
		synctest.Test(t, func(t *testing.T) {
			slot := time.Now()
			f := anarchontest.Start(t, anarchontest.Config{Setup: setupReport})
			anarchontest.Advance(20 * time.Second)
			f.Holder("report", slot).Kill()
			anarchontest.Advance(3 * time.Minute)
			recs, err := f.History(t.Context(), "report")
			require.NoError(t, err)
			for _, r := range recs {
				seen = append(seen, fmt.Sprintf("%s attempt %d %s claimed %s started %s finished %s", r.Slot.Format(time.TimeOnly), r.Attempt, r.Status,
					r.ClaimedAt.Format(time.TimeOnly), r.StartedAt.Format(time.TimeOnly), r.FinishedAt.Format(time.TimeOnly)))
			}
			for _, e := range f.Events(anarchontest.Match("report", scheduler.EventClaimed, scheduler.EventStarted, scheduler.EventFinished, scheduler.EventTakeover)) {
				seen = append(seen, fmt.Sprintf("%s %s attempt %d %s", e.At.Format(time.TimeOnly), e.Kind, e.Attempt, e.Slot.Format(time.TimeOnly)))
			}
		})
		return seen
	}
	first := scenario(t)
	require.NotEmpty(t, first)
	for range 5 {
		assert.ElementsMatch(t, first, scenario(t))
	}
}
