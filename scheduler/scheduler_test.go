package scheduler_test

import (
	"context"
	"errors"
	"fmt"
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

func newScheduler(t *testing.T, b backend.Backend, instance string, opts ...func(*scheduler.Config)) *scheduler.Scheduler {
	t.Helper()
	cfg := scheduler.Config{Backend: b, Instance: instance}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := scheduler.New(cfg)
	require.NoError(t, err)
	return s
}

// runLog records which instance ran which slot.
type runLog struct {
	mu   sync.Mutex
	runs map[int64][]string
}

func newRunLog() *runLog { return &runLog{runs: map[int64][]string{}} }

func (l *runLog) handler(ctx context.Context, r scheduler.Run) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[r.Slot.UnixMilli()] = append(l.runs[r.Slot.UnixMilli()], r.Instance)
	return nil
}

func (l *runLog) snapshot() map[int64][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64][]string, len(l.runs))
	for k, v := range l.runs {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func TestThreeInstancesRunEachSlotOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		log := newRunLog()
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("tick", time.Second, log.handler, scheduler.WithJitter(200*time.Millisecond), scheduler.WithHistory(1000, 0)))
			scheds = append(scheds, s)
		}
		start := time.Now()
		for _, s := range scheds {
			require.NoError(t, s.Start(t.Context()))
		}
		const slots = 120
		time.Sleep(slots*time.Second + 500*time.Millisecond)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		runs := log.snapshot()
		byInstance := map[string]int{}
		for slot, who := range runs {
			assert.Len(t, who, 1, "slot %v ran on %v", slot, who)
			assert.Zero(t, slot%1000, "slot %v is not aligned to the epoch", slot)
			byInstance[who[0]]++
		}
		// Every slot from the first after start to the last before stop ran once.
		for k := 1; k <= slots; k++ {
			slot := start.Truncate(time.Second).Add(time.Duration(k) * time.Second)
			assert.Len(t, runs[slot.UnixMilli()], 1, "slot %v", slot)
		}
		assert.Len(t, byInstance, 3, "with jitter every instance wins some slots: %v", byInstance)

		hist, err := scheds[0].History(t.Context(), "tick", 1000)
		require.NoError(t, err)
		assert.Len(t, hist, len(runs), "history from any instance shows every run")
		for _, r := range hist {
			assert.Equal(t, scheduler.StatusOK, r.Status)
		}
	})
}

// slowClock fires every timer late by lag: an instance that keeps waking up too late.
type slowClock struct{ lag time.Duration }

func (slowClock) Now() time.Time { return time.Now() }
func (c slowClock) NewTimer(d time.Duration) scheduler.Timer {
	return scheduler.SystemClock{}.NewTimer(d + c.lag)
}

func TestLateInstanceDoesNotClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var mu sync.Mutex
		kinds := map[scheduler.EventKind]int{}
		late := newScheduler(t, b, "late", func(c *scheduler.Config) {
			c.Clock = slowClock{lag: 2 * time.Second}
			c.OnEvent = func(e scheduler.Event) {
				mu.Lock()
				kinds[e.Kind]++
				mu.Unlock()
			}
		})
		log := newRunLog()
		time.Sleep(1500 * time.Millisecond) // past the deadline of the slot at the bubble's start
		require.NoError(t, late.Every("job", 10*time.Second, log.handler, scheduler.WithMaxLate(time.Second)))
		require.NoError(t, late.Start(t.Context()))
		time.Sleep(45 * time.Second)
		require.NoError(t, late.Stop(t.Context()))
		assert.Empty(t, log.snapshot(), "a late instance must not run anything")
		hist, err := late.History(t.Context(), "job", 10)
		require.NoError(t, err)
		require.Len(t, hist, 4, "slots 10, 20, 30, 40 are each recorded once as missed")
		for _, r := range hist {
			assert.Equal(t, scheduler.StatusLate, r.Status, "nobody started the slot: recorded late, not run")
			assert.True(t, r.StartedAt.IsZero())
		}
		mu.Lock()
		defer mu.Unlock()
		assert.GreaterOrEqual(t, kinds[scheduler.EventLate], 4, "each slot is reported late: %v", kinds)
		assert.Zero(t, kinds[scheduler.EventClaimed])
	})
}

func TestLateInstanceWithoutLeasesDoesNotClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := struct{ backend.Backend }{memory.New()} // no leases
		var late atomic.Int32
		s := newScheduler(t, b, "late", func(c *scheduler.Config) {
			c.Clock = slowClock{lag: 2 * time.Second}
			c.OnEvent = func(e scheduler.Event) {
				if e.Kind == scheduler.EventLate {
					late.Add(1)
				}
			}
		})
		log := newRunLog()
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, s.Every("job", 10*time.Second, log.handler, scheduler.WithMaxLate(time.Second)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(45 * time.Second)
		require.NoError(t, s.Stop(t.Context()))
		assert.Empty(t, log.snapshot())
		hist, err := s.History(t.Context(), "job", 10)
		require.NoError(t, err)
		assert.Empty(t, hist, "without leases a late instance sends no claim at all")
		assert.GreaterOrEqual(t, late.Load(), int32(4))
	})
}

func TestPanickingHandlerIsRecordedAsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("panics", time.Second, func(context.Context, scheduler.Run) error {
			panic("kaboom")
		}))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2500 * time.Millisecond)
		require.NoError(t, s.Stop(t.Context()))
		hist, err := s.History(t.Context(), "panics", 10)
		require.NoError(t, err)
		require.NotEmpty(t, hist)
		for _, r := range hist {
			assert.Equal(t, scheduler.StatusError, r.Status)
			assert.Contains(t, r.Error, "kaboom")
			assert.Contains(t, r.Error, "handler panicked")
			assert.NotContains(t, r.Error, "goroutine", "the stack trace goes to the log, not to history")
		}
	})
}

var errDiskFull = errors.New("disk full")

// The event hook gets the handler's own error value, so errors.Is works there.
func TestFinishedEventKeepsTheHandlersError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []error
		s := newScheduler(t, memory.New(), "A", func(c *scheduler.Config) {
			c.OnEvent = func(e scheduler.Event) {
				if e.Kind == scheduler.EventFinished {
					mu.Lock()
					got = append(got, e.Err)
					mu.Unlock()
				}
			}
		})
		require.NoError(t, s.Every("fails", time.Hour, func(context.Context, scheduler.Run) error {
			return fmt.Errorf("write report: %w", errDiskFull)
		}))
		require.NoError(t, s.Every("panics", time.Hour, func(context.Context, scheduler.Run) error { panic("kaboom") }))
		time.Sleep(2 * time.Minute)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 2)
		var disk, panicked int
		for _, err := range got {
			if errors.Is(err, errDiskFull) {
				disk++
			}
			if errors.Is(err, scheduler.ErrHandlerPanic) {
				panicked++
			}
		}
		assert.Equal(t, 1, disk, "errors.Is finds the handler's sentinel: %v", got)
		assert.Equal(t, 1, panicked, "a panic matches ErrHandlerPanic: %v", got)
	})
}

func TestHandlerErrorAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("fails", time.Hour, func(context.Context, scheduler.Run) error {
			return errors.New("disk full")
		}))
		var cause error
		require.NoError(t, s.Every("slow", time.Hour, func(ctx context.Context, _ scheduler.Run) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		}, scheduler.WithTimeout(5*time.Second)))
		time.Sleep(2 * time.Minute) // past the deadline of the slot at the bubble's start
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		for job, want := range map[string]scheduler.Status{"fails": scheduler.StatusError, "slow": scheduler.StatusTimeout} {
			hist, err := s.History(t.Context(), job, 10)
			require.NoError(t, err)
			require.Len(t, hist, 1, job)
			assert.Equal(t, want, hist[0].Status, job)
		}
		hist, _ := s.History(t.Context(), "slow", 1)
		assert.Equal(t, 5*time.Second, hist[0].Duration, "timed out after exactly the timeout")
		assert.ErrorIs(t, cause, scheduler.ErrHandlerTimeout, "the context's cause says the job's timeout ended it")
	})
}

func TestStopWaitsThenCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		started := make(chan struct{})
		var cause error
		require.NoError(t, s.Every("long", time.Minute, func(ctx context.Context, _ scheduler.Run) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		}))
		require.NoError(t, s.Start(t.Context()))
		<-started
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		err := s.Stop(ctx)
		require.Error(t, err, "Stop reports that it had to cancel a handler")
		assert.Equal(t, 3*time.Second, time.Since(t0), "Stop waited for its context before cancelling")
		assert.ErrorIs(t, cause, scheduler.ErrStopped, "the handler is told why")
		hist, err := s.History(t.Context(), "long", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.Equal(t, scheduler.StatusCancelled, hist[0].Status)

		require.NoError(t, s.Stop(t.Context()), "a second Stop is a no-op")
		assert.ErrorIs(t, s.Start(t.Context()), scheduler.ErrStopped)
	})
}

func TestStopLetsAHandlerFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		started := make(chan struct{})
		require.NoError(t, s.Every("work", time.Minute, func(ctx context.Context, _ scheduler.Run) error {
			close(started)
			select {
			case <-time.After(2 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		require.NoError(t, s.Start(t.Context()))
		<-started
		require.NoError(t, s.Stop(t.Context()))
		hist, err := s.History(t.Context(), "work", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status)
	})
}

func TestLifecycleEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Hour) // between slots: no scheduled run races the checks
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Stop(t.Context()), "Stop without Start")
		_, err := s.RunNow(t.Context(), "nope")
		assert.ErrorIs(t, err, scheduler.ErrJobNotFound)

		s = newScheduler(t, memory.New(), "A")
		noop := func(context.Context, scheduler.Run) error { return nil }
		require.NoError(t, s.Every("j", time.Hour, noop))
		_, err = s.RunNow(t.Context(), "j")
		assert.ErrorIs(t, err, scheduler.ErrNotStarted)
		require.NoError(t, s.Start(t.Context()))
		assert.ErrorIs(t, s.Start(t.Context()), scheduler.ErrStarted)
		assert.NoError(t, s.Every("late-add", time.Hour, noop), "registered while started")
		require.NoError(t, s.Stop(t.Context()))
		require.NoError(t, s.Stop(t.Context()))
		_, err = s.RunNow(t.Context(), "j")
		assert.ErrorIs(t, err, scheduler.ErrNotStarted, "RunNow after Stop")
	})
}

func TestRunNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Hour) // between the daily slots: only manual runs happen
		b := memory.New()
		s := newScheduler(t, b, "A")
		var mu sync.Mutex
		var runs []scheduler.Run
		require.NoError(t, s.Every("report", 24*time.Hour, func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			return nil
		}))
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(t.Context())
		rec1, err := s.RunNow(t.Context(), "report")
		require.NoError(t, err)
		rec2, err := s.RunNow(t.Context(), "report")
		require.NoError(t, err)
		assert.True(t, rec1.Manual)
		assert.Equal(t, scheduler.StatusOK, rec1.Status)
		assert.NotEqual(t, rec1.Token, rec2.Token)
		mu.Lock()
		require.Len(t, runs, 2, "manual runs are never de-duplicated")
		assert.True(t, runs[0].Manual)
		mu.Unlock()
		hist, err := s.History(t.Context(), "report", 10)
		require.NoError(t, err)
		require.Len(t, hist, 2)
		for _, r := range hist {
			assert.True(t, r.Manual)
			assert.Equal(t, scheduler.StatusOK, r.Status)
		}
	})
}

// windowed is a memory backend that pretends to forget claims after window.
type windowed struct {
	*memory.Backend
	window time.Duration
}

func (w windowed) DedupeWindow() time.Duration { return w.window }

func TestInvalidInput(t *testing.T) {
	noop := func(context.Context, scheduler.Run) error { return nil }
	s := newScheduler(t, memory.New(), "A")
	require.NoError(t, s.Every("exists", time.Second, noop))
	win := newScheduler(t, windowed{memory.New(), 2 * time.Minute}, "A")
	plain := newScheduler(t, struct{ backend.Backend }{memory.New()}, "A") // no leases

	cases := []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"empty name", func() error { return s.Every("", time.Second, noop) }, scheduler.ErrInvalidJobName, "empty"},
		{"invalid utf8", func() error { return s.Every("bad\xff", time.Second, noop) }, scheduler.ErrInvalidJobName, "UTF-8"},
		{"control char", func() error { return s.Every("a\nb", time.Second, noop) }, scheduler.ErrInvalidJobName, "control"},
		{"too long", func() error { return s.Every(strings.Repeat("x", 1025), time.Second, noop) }, scheduler.ErrInvalidJobName, "1025 bytes"},
		{"zero interval", func() error { return s.Every("z", 0, noop) }, scheduler.ErrInvalidSchedule, "positive"},
		{"negative interval", func() error { return s.Every("n", -time.Second, noop) }, scheduler.ErrInvalidSchedule, "positive"},
		{"sub-ms interval", func() error { return s.Every("ns", time.Nanosecond, noop) }, scheduler.ErrInvalidSchedule, "milliseconds"},
		{"bad cron", func() error { return s.Cron("c", "61 * * * *", noop) }, scheduler.ErrInvalidSchedule, "61"},
		{"cron too few fields", func() error { return s.Cron("c", "* * *", noop) }, scheduler.ErrInvalidSchedule, "cron"},
		{"cron never fires", func() error { return s.Cron("c", "0 0 30 2 *", noop) }, scheduler.ErrInvalidSchedule, "never fires"},
		{"cron bad zone", func() error { return s.Cron("c", "CRON_TZ=Mars/Olympus 0 9 * * *", noop) }, scheduler.ErrInvalidSchedule, "Mars"},
		{"cron zone conflict", func() error {
			return s.Cron("c", "CRON_TZ=Europe/Athens 0 9 * * *", noop, scheduler.WithLocation(time.UTC))
		}, scheduler.ErrInvalidSchedule, "Athens"},
		{"duplicate", func() error { return s.Every("exists", time.Second, noop) }, scheduler.ErrJobExists, "exists"},
		{"nil handler", func() error { return s.Every("h", time.Second, nil) }, scheduler.ErrNilHandler, "h"},
		{"negative jitter", func() error { return s.Every("j", time.Second, noop, scheduler.WithJitter(-1)) }, scheduler.ErrInvalidOption, "jitter"},
		{"jitter above max late", func() error {
			return s.Every("j", time.Minute, noop, scheduler.WithJitter(2*time.Second), scheduler.WithMaxLate(time.Second))
		}, scheduler.ErrInvalidOption, "jitter"},
		{"zero max late", func() error { return s.Every("m", time.Second, noop, scheduler.WithMaxLate(0)) }, scheduler.ErrInvalidOption, "max lateness"},
		{"short lease", func() error { return s.Every("l", time.Second, noop, scheduler.WithLease(time.Millisecond)) }, scheduler.ErrInvalidOption, "lease"},
		{"history size zero", func() error { return s.Every("h0", time.Second, noop, scheduler.WithHistory(0, 0)) }, scheduler.ErrInvalidOption, "history size"},
		{"history size negative", func() error { return s.Every("h1", time.Second, noop, scheduler.WithHistory(-5, 0)) }, scheduler.ErrInvalidOption, "history size"},
		{"window too short", func() error {
			return win.Every("w", time.Hour, noop, scheduler.WithJitter(30*time.Second), scheduler.WithMaxLate(90*time.Second))
		}, scheduler.ErrWindowTooShort, "30s + max lateness 1m30s + clock skew allowance 2s = 2m2s is not below the memory backend's dedupe window 2m0s"},
		{"overlap without leases", func() error {
			return plain.Every("o", time.Second, noop, scheduler.WithOverlap(scheduler.OverlapSkip))
		}, scheduler.ErrInvalidOption, "leases"},
		{"catch-up without leases", func() error {
			return plain.Every("o", time.Second, noop, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour))
		}, scheduler.ErrInvalidOption, "leases"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
		})
	}
	// What was rejected was not registered: the names are still free.
	require.NoError(t, s.Every("j", time.Minute, noop))
	require.NoError(t, win.Every("w", time.Hour, noop, scheduler.WithMaxLate(time.Minute)))

	_, err := scheduler.New(scheduler.Config{})
	assert.ErrorIs(t, err, scheduler.ErrInvalidConfig)
	assert.Contains(t, fmt.Sprint(err), "Backend")
}

// A frequent cron job started mid-stream claims at most the slot just before Start,
// never a burst of past slots.
func TestFrequentCronDoesNotBurstAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		log := newRunLog()
		time.Sleep(time.Hour + 500*time.Millisecond)
		require.NoError(t, s.Cron("r", "*/2 * * * * *", log.handler))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, s.Stop(t.Context()))
		// Started at 01:00:00.5: the 01:00:00 slot is within its max lateness (the
		// 2s gap) and runs; no earlier slot does.
		assert.Len(t, log.snapshot(), 1, "%v", log.snapshot())
	})
}

func TestRunNowRecordsWhoAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Hour)
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("report", 24*time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(t.Context())
		rec, err := s.RunNow(t.Context(), "report", scheduler.RequestedBy("alice@example.com"))
		require.NoError(t, err)
		assert.Equal(t, "alice@example.com", rec.RequestedBy)
		hist, err := s.History(t.Context(), "report", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.Equal(t, "alice@example.com", hist[0].RequestedBy)
		_, err = s.RunNow(t.Context(), "report", scheduler.RequestedBy(string([]byte{0xff})))
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
	})
}

func TestJobsAndAccessors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(90 * time.Second)
		s := newScheduler(t, memory.New(), "A")
		assert.Equal(t, scheduler.SystemClock{}, s.Clock(), "the default clock")
		require.NoError(t, s.Every("tick", time.Minute, func(ctx context.Context, r scheduler.Run) error {
			return untilDone(ctx, 45*time.Second)
		}, scheduler.WithLease(5*time.Second)))
		require.NoError(t, s.Cron("report", "0 9 * * *", func(context.Context, scheduler.Run) error { return nil }))
		jobs := s.Jobs()
		require.Len(t, jobs, 2)
		assert.Equal(t, "tick", jobs[0].Job)
		assert.True(t, time.Unix(946684800+120, 0).Equal(jobs[0].Next), "the next minute, got %s", jobs[0].Next)
		assert.Equal(t, "report", jobs[1].Job)
		assert.NotEmpty(t, jobs[1].Schedule)
		assert.False(t, s.Running())
		require.NoError(t, s.Start(t.Context()))
		assert.True(t, s.Running())
		time.Sleep(40 * time.Second) // 00:02:10: the 00:01 run (within its max lateness at Start) and the 00:02 run are going
		active, err := s.Active(t.Context(), "tick")
		require.NoError(t, err)
		require.Len(t, active, 2)
		for _, a := range active {
			assert.True(t, a.Live)
			assert.Equal(t, "A", a.Instance)
		}
		_, err = s.Active(t.Context(), "nope")
		assert.ErrorIs(t, err, scheduler.ErrJobNotFound)
		require.NoError(t, s.Stop(t.Context()))
		assert.False(t, s.Running())
	})
}
