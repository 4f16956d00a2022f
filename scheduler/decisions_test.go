package scheduler_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
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

// The tests of this file break the lease path's promises the way faults do: each is
// a scenario of "every slot's fate is decided once and stored". They run on the
// memory store under synctest; the stores' own versions run on kvlease over embedded
// NATS in package integration.

// faultView is one instance's view of a shared memory backend, with faults in its
// run store calls.
type faultView struct {
	*memory.Backend
	claims atomic.Int32
	// loseAnswerOf is the number (1-based) of this view's claim whose answer is lost:
	// the store applies it, the caller waits out its deadline and gets an error.
	loseAnswerOf atomic.Int32
	// unreachableUntil (Unix ns): claims fail without reaching the store before it.
	unreachableUntil atomic.Int64
	// delay is how long each claim takes to reach the store.
	delay atomic.Int64
	// hangHeartbeats makes heartbeats hang until their deadline (a paused process,
	// a cut link).
	hangHeartbeats atomic.Bool
}

func (f *faultView) Runs() backend.RunStore { return faultRuns{f.Backend.Runs(), f} }

type faultRuns struct {
	backend.RunStore
	f *faultView
}

var errUnreachable = errors.New("test: store unreachable")

func (r faultRuns) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	n := r.f.claims.Add(1)
	if d := r.f.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if time.Now().UnixNano() < r.f.unreachableUntil.Load() {
		return backend.ClaimResult{}, errUnreachable
	}
	res, err := r.RunStore.Claim(ctx, in)
	if err == nil && n == r.f.loseAnswerOf.Load() {
		<-ctx.Done()
		return backend.ClaimResult{}, ctx.Err()
	}
	return res, err
}

func (r faultRuns) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if r.f.hangHeartbeats.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return r.RunStore.Heartbeat(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}, lease)
}

func (r faultRuns) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	return r.RunStore.(backend.LeaseWatcher).WatchRun(ctx, job, slot)
}

// span is one handler execution.
type span struct {
	instance   string
	slot       time.Time
	attempt    int
	start, end time.Time
}

// spans records handler executions.
type spans struct {
	mu  sync.Mutex
	all []*span
	cur int
	max int
}

// run records a handler's execution around body.
func (s *spans) run(ctx context.Context, r scheduler.Run, body func(ctx context.Context) error) error {
	sp := &span{instance: r.Instance, slot: r.Slot, attempt: r.Attempt, start: time.Now()}
	s.mu.Lock()
	s.cur++
	s.max = max(s.max, s.cur)
	s.all = append(s.all, sp)
	s.mu.Unlock()
	err := body(ctx)
	s.mu.Lock()
	s.cur--
	sp.end = time.Now()
	s.mu.Unlock()
	return err
}

// get returns the executions so far, by start time; one still running has no end.
func (s *spans) get() []span {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]span, 0, len(s.all))
	for _, sp := range s.all {
		out = append(out, *sp)
	}
	slices.SortStableFunc(out, func(a, b span) int { return a.start.Compare(b.start) })
	return out
}

// assertNoOverlap checks that no two executions of one slot ever ran at once.
func assertNoOverlap(t *testing.T, all []span) {
	t.Helper()
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.slot.Equal(b.slot) {
				assert.False(t, a.end.IsZero() || b.start.Before(a.end), "two handlers of slot %s at once: %s (attempt %d) ran %s–%s, %s (attempt %d) started %s",
					a.slot.Format(time.TimeOnly), a.instance, a.attempt, a.start.Format(time.TimeOnly+".000"), a.end.Format(time.TimeOnly+".000"),
					b.instance, b.attempt, b.start.Format(time.TimeOnly+".000"))
			}
		}
	}
}

func untilDone(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func callTimeout(d time.Duration) func(*scheduler.Config) {
	return func(c *scheduler.Config) { c.CallTimeout = d }
}

// Scenario 1: a winning claim whose answer is lost. The lease counts from the first
// send of the winning token, so the holder, whose heartbeats fail too, is cancelled
// before the store can expire its lease, and a backup starts only after that.
func TestLostWinningAnswerCountsLeaseFromFirstSend(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lose is the instance whose claim answer is lost, and which claim.
		lose   string
		loseOf int32
	}{
		{"first claim", "A", 1},
		{"standby's takeover claim", "B", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				rec := &spans{}
				views := map[string]*faultView{}
				time.Sleep(90 * time.Second)
				var scheds []*scheduler.Scheduler
				for i, id := range []string{"A", "B", "C"} {
					v := &faultView{Backend: b}
					v.delay.Store(int64(time.Duration(i) * 200 * time.Millisecond)) // A claims first, then B, then C
					if id == tc.lose {
						v.loseAnswerOf.Store(tc.loseOf)
					}
					views[id] = v
					s := newScheduler(t, v, id, callTimeout(time.Second))
					require.NoError(t, s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
						return rec.run(ctx, r, func(ctx context.Context) error {
							if r.Instance == "C" {
								return nil
							}
							// A and B are cut off from the store as soon as they run: their
							// heartbeats hang, their work never ends by itself.
							views[r.Instance].hangHeartbeats.Store(true)
							return untilDone(ctx, time.Hour)
						})
					}, scheduler.WithLease(6*time.Second)))
					scheds = append(scheds, s)
				}
				for _, s := range scheds {
					require.NoError(t, s.Start(t.Context()))
				}
				time.Sleep(time.Hour)
				for _, s := range scheds {
					require.NoError(t, s.Stop(t.Context()))
				}
				all := rec.get()
				require.NotEmpty(t, all)
				assertNoOverlap(t, all)
				ok := false
				for _, sp := range all {
					ok = ok || sp.instance == "C"
				}
				assert.True(t, ok, "the last backup ran the slot: %+v", all)
			})
		})
	}
}

// Scenario 3: catch-up with OverlapSkip runs the missed slots oldest first, one at
// a time, and never beside another run of the job.
func TestCatchUpRunsOldestFirstWithoutOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		rec := &spans{}
		time.Sleep(4*time.Minute + 40*time.Second) // nobody was up for 00:00 … 00:04
		started := time.Now()
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
				return rec.run(ctx, r, func(ctx context.Context) error { return untilDone(ctx, 30*time.Second) })
			}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithCatchUp(scheduler.CatchUpAll, 5*time.Minute),
				scheduler.WithMaxLate(5*time.Second), scheduler.WithLease(5*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		time.Sleep(4 * time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		all := rec.get()
		assert.Equal(t, 1, rec.max, "never two runs of the job at once: %+v", all)
		var caught []time.Time
		for _, sp := range all {
			if sp.slot.Before(started) {
				caught = append(caught, sp.slot)
			}
		}
		assert.Len(t, caught, 5, "every missed slot ran: %v", caught)
		assert.True(t, slices.IsSortedFunc(caught, time.Time.Compare), "missed slots run oldest first: %v", caught)

		hist, err := scheds[0].History(t.Context(), "job", 100)
		require.NoError(t, err)
		seen := map[int64]scheduler.Status{}
		for _, r := range hist {
			_, dup := seen[r.Slot.Unix()]
			assert.False(t, dup, "one record per slot, slot %s: %+v", r.Slot, hist)
			seen[r.Slot.Unix()] = r.Status
		}
		assert.Contains(t, seen, time.Unix(946684800+5*60, 0).Unix(), "00:05 fell inside a catch-up run: recorded")
		assert.Equal(t, scheduler.StatusSkipped, seen[time.Unix(946684800+5*60, 0).Unix()])
	})
}

// Scenario 4: a slot one instance recorded skipped never runs on another.
func TestSkippedSlotNeverRunsElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		rec := &spans{}
		time.Sleep(5 * time.Second)
		var scheds []*scheduler.Scheduler
		for i, id := range []string{"A", "B"} {
			v := &faultView{Backend: b}
			v.delay.Store(int64(time.Duration(i) * 300 * time.Millisecond)) // B's claims arrive 300ms after A's
			s := newScheduler(t, v, id)
			require.NoError(t, s.Every("job", 10*time.Second, func(ctx context.Context, r scheduler.Run) error {
				return rec.run(ctx, r, func(ctx context.Context) error {
					if r.Slot.Unix()%60 == 10 {
						return untilDone(ctx, 10100*time.Millisecond) // slot 10 runs until 20.1
					}
					return nil
				})
			}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(3*time.Second), scheduler.WithMaxLate(time.Second)))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		time.Sleep(20 * time.Second) // 00:00:25
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		for _, sp := range rec.get() {
			assert.NotEqual(t, int64(20), sp.slot.Unix()%60, "slot 20 was recorded skipped, then ran on %s", sp.instance)
		}
		hist, err := scheds[0].History(t.Context(), "job", 10)
		require.NoError(t, err)
		var at20 []scheduler.RunRecord
		for _, r := range hist {
			if r.Slot.Unix()%60 == 20 {
				at20 = append(at20, r)
			}
		}
		require.Len(t, at20, 1, "one record for slot 20: %+v", hist)
		assert.Equal(t, scheduler.StatusSkipped, at20[0].Status)
	})
}

// Scenario 4: a slot recorded late never runs afterwards, not even by catch-up.
func TestLateSlotNeverRunsByCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		rec := &spans{}
		register := func(s *scheduler.Scheduler) {
			require.NoError(t, s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				return rec.run(ctx, r, func(context.Context) error { return nil })
			}, scheduler.WithMaxLate(time.Second), scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour), scheduler.WithLease(2*time.Second)))
		}
		time.Sleep(90 * time.Second)
		slot := time.Unix(946684800+3600, 0)
		v := &faultView{Backend: b}
		v.unreachableUntil.Store(slot.Add(1500 * time.Millisecond).UnixNano()) // back after the deadline
		a := newScheduler(t, v, "A")
		register(a)
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(time.Hour) // 01:01:30
		require.NoError(t, a.Stop(t.Context()))

		c := newScheduler(t, b, "C") // starts later, catching up the last hour
		register(c)
		require.NoError(t, c.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, c.Stop(t.Context()))

		for _, sp := range rec.get() {
			assert.False(t, sp.slot.Equal(slot), "slot 01:00 was recorded late, then %s ran it (attempt %d)", sp.instance, sp.attempt)
		}
		hist, err := c.History(t.Context(), "job", 10)
		require.NoError(t, err)
		var at []scheduler.RunRecord
		for _, r := range hist {
			if r.Slot.Equal(slot) {
				at = append(at, r)
			}
		}
		require.Len(t, at, 1, "one record for 01:00: %+v", hist)
		assert.Equal(t, scheduler.StatusMissed, at[0].Status, "its only instance was cut off from the store past its deadline: %+v", at[0])
	})
}

// plainView hides a backend's leases: the scheduler decides with Claim alone.
type plainView struct{ backend.Backend }

// Scenario 7: an instance whose clock is 2s behind the store's. Lateness is judged
// on the instance's clock in both modes, the store allowing MaxClockSkew: every slot
// runs, with leases and without.
func TestReplicaClockBehindTheStore(t *testing.T) {
	for _, leased := range []bool{true, false} {
		name := "without leases"
		if leased {
			name = "with leases"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var b backend.Backend = memory.New()
				if !leased {
					b = plainView{b}
				}
				var late atomic.Int32
				rec := &spans{}
				s := newScheduler(t, b, "behind", func(c *scheduler.Config) {
					c.Clock = scheduler.OffsetClock{Offset: -2 * time.Second}
					c.OnEvent = func(e scheduler.Event) {
						if e.Kind == scheduler.EventLate {
							late.Add(1)
						}
					}
				})
				require.NoError(t, s.Every("job", time.Second, func(ctx context.Context, r scheduler.Run) error {
					return rec.run(ctx, r, func(context.Context) error { return nil })
				}))
				time.Sleep(10 * time.Second)
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(10*time.Second + 500*time.Millisecond)
				require.NoError(t, s.Stop(t.Context()))
				assert.Zero(t, late.Load(), "no slot is late")
				assert.GreaterOrEqual(t, len(rec.get()), 10, "every slot ran")
			})
		})
	}
}

// Scenario 8: a hand-over nobody was waiting for. The backups are replaced first, the
// holder last: the instances started after the slot adopt the released run, whether
// the store reads every job's unfinished runs at once (backend.ActiveLister) or job
// by job.
func TestHandOverToInstancesStartedAfterTheSlot(t *testing.T) {
	for name, b := range map[string]func() backend.Backend{
		"one reading": func() backend.Backend { return memory.New() },
		"job by job":  func() backend.Backend { return perJobActive{memory.New()} },
	} {
		t.Run(name, func(t *testing.T) { handOverToLaterInstances(t, b) })
	}
}

// perJobActive is a memory backend whose run store is no backend.ActiveLister.
type perJobActive struct{ *memory.Backend }

func (b perJobActive) Runs() backend.RunStore {
	r := b.Backend.Runs()
	return struct {
		backend.RunStore
		backend.LeaseWatcher
	}{r, r.(backend.LeaseWatcher)}
}

func handOverToLaterInstances(t *testing.T, newBackend func() backend.Backend) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend()
		rec := &spans{}
		start := func(id string) *scheduler.Scheduler {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("report", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				return rec.run(ctx, r, func(ctx context.Context) error { return untilDone(ctx, 20*time.Minute) })
			}, scheduler.WithLease(10*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			return s
		}
		time.Sleep(90 * time.Second)
		old := map[string]*scheduler.Scheduler{"A": start("A"), "B": start("B"), "C": start("C")}
		time.Sleep(time.Hour) // 01:01:30; one of them runs the 01:00 slot
		all := rec.get()
		require.Len(t, all, 1)
		holder := all[0].instance
		var fresh []*scheduler.Scheduler
		for id, s := range old { // a rolling deploy: the backups first
			if id != holder {
				require.NoError(t, s.Stop(t.Context()))
				fresh = append(fresh, start(id+"2"))
				time.Sleep(time.Minute)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_ = old[holder].Stop(ctx) // the holder last: its run is cancelled and released
		cancel()
		time.Sleep(30 * time.Minute)
		for _, s := range fresh {
			require.NoError(t, s.Stop(t.Context()))
		}
		hist, err := fresh[0].History(t.Context(), "report", 10)
		require.NoError(t, err)
		require.NotEmpty(t, hist)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status, "the released run was taken over and finished: %+v", hist)
		assert.Equal(t, 2, hist[0].Attempt)
		assert.Contains(t, []string{"A2", "B2", "C2"}, hist[0].Instance)
		assertNoOverlap(t, rec.get())
	})
}

// Scenario 9: CatchUpAll after an hour down, Every(1s): catch-up runs one slot at a
// time, at most MaxCatchUpSlots of them, and records the older missed slots late.
func TestCatchUpAllAfterLongOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var caughtUp, cur, maxCur atomic.Int32
		time.Sleep(2*time.Hour + 500*time.Millisecond)
		started := time.Now()
		s := newScheduler(t, b, "solo")
		require.NoError(t, s.Every("tick", time.Second, func(ctx context.Context, r scheduler.Run) error {
			if r.Slot.Before(started.Add(-time.Second)) {
				caughtUp.Add(1)
				n := cur.Add(1)
				defer cur.Add(-1)
				for m := maxCur.Load(); n > m && !maxCur.CompareAndSwap(m, n); m = maxCur.Load() {
				}
			}
			return untilDone(ctx, 10*time.Millisecond)
		}, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour), scheduler.WithHistory(5000, 0)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))

		assert.EqualValues(t, scheduler.MaxCatchUpSlots, caughtUp.Load(), "the newest MaxCatchUpSlots missed slots ran")
		assert.EqualValues(t, 1, maxCur.Load(), "catch-up runs one slot at a time by default")
		hist, err := s.History(t.Context(), "tick", 5000)
		require.NoError(t, err)
		byStatus := map[scheduler.Status]int{}
		seen := map[int64]bool{}
		for _, r := range hist {
			if !r.Slot.Before(started.Add(-time.Second)) {
				continue
			}
			assert.False(t, seen[r.Slot.UnixMilli()], "one record per slot: %s", r.Slot)
			seen[r.Slot.UnixMilli()] = true
			byStatus[r.Status]++
		}
		// Slots 01:00:01 … 01:59:59 were missed: 3599 of them. Those catch-up
		// does not run are recorded missed: the newest MaxMissedRecords one by
		// one, the others in one record that says how many.
		assert.Equal(t, scheduler.MaxCatchUpSlots, byStatus[scheduler.StatusOK])
		assert.Equal(t, scheduler.MaxMissedRecords+1, byStatus[scheduler.StatusMissed])
		assert.True(t, slices.ContainsFunc(hist, func(r scheduler.RunRecord) bool {
			return strings.HasPrefix(r.Error, "one record for "+strconv.Itoa(3599-scheduler.MaxCatchUpSlots-scheduler.MaxMissedRecords)+" slots due from ")
		}), "the range's record says how many")
	})
}

// Scenario 10: Stop cancels a RunNow handler like any other.
func TestStopCancelsRunNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "solo")
		running := make(chan struct{})
		require.NoError(t, s.Every("job", 24*time.Hour, func(ctx context.Context, r scheduler.Run) error {
			if r.Manual {
				close(running)
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}))
		time.Sleep(time.Hour) // between slots
		require.NoError(t, s.Start(t.Context()))
		done := make(chan scheduler.RunRecord, 1)
		go func() {
			rec, err := s.RunNow(context.Background(), "job")
			assert.NoError(t, err)
			done <- rec
		}()
		<-running
		begin := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		assert.Error(t, s.Stop(ctx), "the handler had to be cancelled")
		assert.Equal(t, time.Second, time.Since(begin), "Stop returned at its deadline")
		rec := <-done
		assert.Equal(t, scheduler.StatusCancelled, rec.Status)
		assert.True(t, rec.Manual)
	})
}

// plainWindowed is a backend without leases whose dedupe window is window.
type plainWindowed struct {
	backend.Backend
	window time.Duration
}

func (w plainWindowed) DedupeWindow() time.Duration { return w.window }

// Scenario 5: the window check leaves room for clock skew, and names every term.
func TestWindowCheckIncludesClockSkew(t *testing.T) {
	b := plainWindowed{plainView{memory.New()}, time.Second}
	s := newScheduler(t, b, "a")
	err := s.Every("job", time.Second, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxLate(900*time.Millisecond))
	require.ErrorIs(t, err, scheduler.ErrWindowTooShort)
	assert.Contains(t, err.Error(), "jitter 0s + max lateness 900ms + clock skew allowance 2s = 2.9s is not below the memory backend's dedupe window 1s")

	s = newScheduler(t, plainWindowed{plainView{memory.New()}, 3 * time.Second}, "a")
	assert.NoError(t, s.Every("job", time.Second, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxLate(900*time.Millisecond)))

	s = newScheduler(t, b, "a", func(c *scheduler.Config) { c.MaxClockSkew = 50 * time.Millisecond })
	assert.NoError(t, s.Every("job", time.Second, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxLate(900*time.Millisecond)),
		"a fleet that promises tighter clocks may use a tighter window")

	_, err = scheduler.New(scheduler.Config{Backend: b, MaxClockSkew: -time.Second})
	assert.ErrorIs(t, err, scheduler.ErrInvalidConfig)
}

// Scenario 5, at run time: without leases, a claim's call ends at the slot's
// deadline, so a claim retried inside the backend (or one that waits for its
// answer) cannot reach the backend once the window may have closed; the one repeat
// that learns whether an unanswered claim was stored ends within the skew allowance.
func TestNoPlainClaimPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowClaims{Backend: plainView{memory.New()}}
		s := newScheduler(t, b, "a", callTimeout(10*time.Second))
		require.NoError(t, s.Every("job", time.Hour, func(context.Context, scheduler.Run) error { return nil }, scheduler.WithMaxLate(2*time.Second)))
		time.Sleep(90 * time.Second)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		slot := time.Unix(946684800+3600, 0)
		require.NotZero(t, b.latest.Load(), "a claim was made")
		// Claims end at the deadline (slot + 2s); one repeat after it, to learn
		// whether an unanswered claim was stored, ends within the clock skew
		// allowance (2s), inside the window the registration check keeps.
		assert.LessOrEqual(t, b.latest.Load(), slot.Add(2*time.Second+scheduler.DefaultMaxClockSkew).UnixNano(),
			"a claim's call could still be sending at %s, past the deadline and the skew allowance", time.Unix(0, b.latest.Load()).UTC().Format(time.TimeOnly+".000"))
		assert.Equal(t, 1, b.after(slot.Add(2*time.Second)), "one claim after the deadline: the repeat of the unanswered one")
	})
}

// slowClaims is a backend whose claims hang until their context ends; latest is the
// latest context deadline a claim was given (Unix ns).
type slowClaims struct {
	backend.Backend
	latest atomic.Int64
	mu     sync.Mutex
	sent   []time.Time
}

// after counts the claims sent after t.
func (b *slowClaims) after(t time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, at := range b.sent {
		if at.After(t) {
			n++
		}
	}
	return n
}

func (b *slowClaims) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	if d, ok := ctx.Deadline(); ok && d.UnixNano() > b.latest.Load() {
		b.latest.Store(d.UnixNano())
	}
	b.mu.Lock()
	b.sent = append(b.sent, time.Now())
	b.mu.Unlock()
	<-ctx.Done()
	return false, ctx.Err()
}
