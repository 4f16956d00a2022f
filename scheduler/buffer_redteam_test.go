package scheduler_test

import (
	"context"
	"errors"
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

// Red-team cases of the buffer overlap policies, scheduler side.

// slotsStarted reports, for each of want, how many times the handler started it.
func slotsStarted(log *startLog, want ...time.Time) []int {
	starts, _ := log.get()
	out := make([]int, len(want))
	for _, r := range starts {
		for i, w := range want {
			if r.Slot.Equal(w) {
				out[i]++
			}
		}
	}
	return out
}

// A RunNow buffered behind a long run whose process then dies (it never claims
// its slot again, never withdraws it) leaves a buffered manual slot that no
// other instance stands by for. The job must not be wedged by it: once the run
// before it ended, the scheduled slots after it still run (each once; under
// buffer-one the first may be skipped, the buffer being full), and no buffered
// slot is left behind for ever.
func TestRedteamBufferedManualSlotOfADeadRequester(t *testing.T) {
	for name, tc := range map[string]struct {
		opts []scheduler.JobOption
		want []float64 // the slots (minutes) that run once each
	}{
		"buffer-one": {[]scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapBufferOne)}, []float64{2, 3, 4}},
		"buffer-all": {[]scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapBufferAll), scheduler.WithBufferCap(2)}, []float64{1, 2, 3, 4}},
		// Slots 0, 2, 3 and 4 run: the manual slot ended by another instance is
		// not counted.
		"buffer-one, at most 4 runs": {[]scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithMaxRuns(4)}, []float64{2, 3, 4}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { deadRequester(t, tc.opts, tc.want) })
		})
	}
}

func deadRequester(t *testing.T, opts []scheduler.JobOption, want []float64) {
	b, log := memory.New(), &startLog{}
	t0 := time.Now()
	scheds := startBuffered(t, b, longFirst(log, t0, 20*time.Second), []string{"A", "B"},
		append(opts, scheduler.WithJitter(0))...)
	time.Sleep(time.Second) // slot 0 runs

	// What a RunNow on instance Z stored before Z died: its manual slot,
	// buffered behind slot 0.
	manual := t0.Add(time.Second + 7*time.Millisecond)
	res, err := b.Runs().Claim(t.Context(), backend.RunClaim{
		Job: "job", Slot: manual, Token: "z-token", Instance: "Z", Lease: 3 * time.Second, Manual: true,
		Deadline: time.Now().Add(2 * time.Second), Overlap: backend.OverlapBufferOne, Keep: time.Hour,
	})
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeBuffered, res.Outcome, "%+v", res)

	time.Sleep(4*time.Minute + 10*time.Second)
	active, err := scheds[0].Active(t.Context(), "job")
	require.NoError(t, err)
	stopAll(t, scheds)

	var slots []time.Time
	ones := make([]int, len(want))
	for i, k := range want {
		slots, ones[i] = append(slots, t0.Add(time.Duration(k*float64(time.Minute)))), 1
	}
	assert.Equal(t, ones, slotsStarted(log, slots...), "the slots after the dead requester's buffered slot run, once each")
	assert.Equal(t, []int{0}, slotsStarted(log, manual), "the dead requester's slot is not run by another instance")
	for _, r := range active {
		assert.False(t, r.Buffered, "a buffered slot left behind for ever: %+v", r)
	}
}

// manualAnswersLost is a memory backend whose run store applies every first
// claim of a slot off the job's minute schedule (a manual run's) and loses the
// answer: the caller sees an error.
type manualAnswersLost struct {
	*memory.Backend
	lost *atomic.Int32
}

func (b manualAnswersLost) Runs() backend.RunStore {
	return manualLost{b.Backend.Runs().(*memory.RunStore), b.lost}
}

type manualLost struct {
	*memory.RunStore
	lost *atomic.Int32
}

func (s manualLost) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	res, err := s.RunStore.Claim(ctx, in)
	if err == nil && !in.TakeoverOnly && in.Slot.UnixMilli()%60_000 != 0 {
		s.lost.Add(1)
		return backend.ClaimResult{}, errors.New("claim answer lost")
	}
	return res, err
}

// A RunNow whose claims were stored buffered but every answer lost gives up
// (an error) and ends what the store may have given it (endUnrun). What it
// stored was a buffered slot: that must be ended too, not left buffered ahead
// of every later slot of the job, which would then never run.
func TestRedteamRunNowBufferedAnswerLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, lost, log := memory.New(), &atomic.Int32{}, &startLog{}
		t0 := time.Now()
		m := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Minute))) }
		scheds := startBuffered(t, manualAnswersLost{mem, lost}, longFirst(log, t0, 20*time.Second), []string{"A", "B"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(time.Second) // slot 0 runs

		_, err := scheds[1].RunNow(t.Context(), "job")
		require.Error(t, err, "no claim was answered")
		require.Positive(t, lost.Load())

		time.Sleep(4*time.Minute + 10*time.Second)
		active, err := scheds[0].Active(t.Context(), "job")
		require.NoError(t, err)
		stopAll(t, scheds)

		assert.Equal(t, []int{1, 1, 1, 1}, slotsStarted(log, m(1), m(2), m(3), m(4)),
			"the slots after the abandoned manual claim run, once each")
		for _, r := range active {
			assert.False(t, r.Buffered, "the abandoned manual slot is left buffered: %+v", r)
		}
	})
}

// Six instances each call RunNow at the same instant on a buffer-one job whose
// run is long. As documented (docs/concepts.md, Overlap), one waits buffered
// and runs once the run ended; with a slot buffered already the others return
// ErrJobBusy.
func TestRedteamRunNowStormBufferOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		ids := []string{"A", "B", "C", "D", "E", "F"}
		scheds := startBuffered(t, b, longFirst(log, t0, 20*time.Second), ids,
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(time.Second) // slot 0 runs

		var wg sync.WaitGroup
		errs := make([]error, len(scheds))
		for i, s := range scheds {
			wg.Go(func() {
				_, errs[i] = s.RunNow(t.Context(), "job")
			})
		}
		wg.Wait()
		stopAll(t, scheds)

		ran, busy := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ran++
			case errors.Is(err, scheduler.ErrJobBusy):
				busy++
			default:
				t.Errorf("RunNow: %v", err)
			}
		}
		assert.Equal(t, 1, ran, "one RunNow runs: %v", errs)
		assert.Equal(t, len(scheds)-1, busy, "the others are busy: %v", errs)
		starts, _ := log.get()
		assert.Len(t, starts, 2, "slot 0 and one manual run: %+v", starts)
	})
}

// Thirty instances, their clocks skewed within the allowance, on a buffer-all
// job (cap 5) whose every run takes two and a half intervals: the runs never
// overlap, start oldest slot first, each slot starts at most once, at most 5
// slots are buffered at any time, and every due slot is either recorded once
// (ok or skipped) or still buffered or running.
func TestRedteamBufferAllFleetOf30(t *testing.T) {
	for name, offsets := range map[string][]time.Duration{
		"no skew": {0},
		"±2s":     {-2 * time.Second, -time.Second, 0, time.Second, 2 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { fleetOf30(t, offsets) })
		})
	}
}

func fleetOf30(t *testing.T, offsets []time.Duration) {
	b, log := memory.New(), &startLog{}
	t0 := time.Now()
	// Started between two slots: at a slot's instant, an instance whose clock
	// is behind still owes the slot before (its max lateness has not passed by
	// its clock) while the others do not, and its claim of that older slot,
	// made after the newer one started, is buffered behind it.
	time.Sleep(30 * time.Second)
	h := func(ctx context.Context, r scheduler.Run) error {
		log.add(r)
		select {
		case <-time.After(150 * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var scheds []*scheduler.Scheduler
	for i := range 30 {
		s := newScheduler(t, b, string(rune('A'+i%26))+string(rune('0'+i/26)), func(c *scheduler.Config) {
			c.Clock = backend.OffsetClock{Offset: offsets[i%len(offsets)]}
		})
		require.NoError(t, s.Every("job", time.Minute, h, scheduler.WithLease(3*time.Second),
			scheduler.WithOverlap(scheduler.OverlapBufferAll), scheduler.WithBufferCap(5)))
		require.NoError(t, s.Start(t.Context()))
		scheds = append(scheds, s)
	}
	maxBuffered := 0
	for range 8 * 6 {
		time.Sleep(10 * time.Second)
		active, err := scheds[0].Active(t.Context(), "job")
		require.NoError(t, err)
		n := 0
		for _, r := range active {
			if r.Buffered {
				n++
			}
		}
		maxBuffered = max(maxBuffered, n)
	}
	active, err := scheds[0].Active(t.Context(), "job")
	require.NoError(t, err)
	hist, err := scheds[0].History(t.Context(), "job", 0)
	require.NoError(t, err)
	stopping := time.Now()
	stopAll(t, scheds) // hands the run in progress over from one to the next: not counted

	assert.LessOrEqual(t, maxBuffered, 5, "never more than the cap buffered")
	starts, at := log.get()
	seen := map[int64]int{}
	for i, r := range starts {
		if !at[i].Before(stopping) {
			break
		}
		seen[r.Slot.UnixMilli()]++
		if i > 0 {
			assert.True(t, r.Slot.After(starts[i-1].Slot), "oldest first: %v after %v", r.Slot, starts[i-1].Slot)
			assert.GreaterOrEqual(t, at[i].Sub(at[i-1]), 150*time.Second, "no overlap: slot %v started %v after the one before", r.Slot, at[i].Sub(at[i-1]))
		}
	}
	for ms, n := range seen {
		assert.Equal(t, 1, n, "slot %v started %d times", time.UnixMilli(ms).UTC(), n)
	}
	records := map[int64]int{}
	for _, r := range hist {
		if !r.Manual {
			records[r.Slot.UnixMilli()]++
			assert.Contains(t, []scheduler.Status{scheduler.StatusOK, scheduler.StatusSkipped, scheduler.StatusRunning}, r.Status, "%+v", r)
		}
	}
	open := map[int64]bool{}
	for _, r := range active {
		open[r.Slot.UnixMilli()] = true
	}
	for k := 0; k < 8; k++ {
		ms := t0.Add(time.Duration(k) * time.Minute).UnixMilli()
		switch {
		case records[ms] == 1:
		case records[ms] == 0 && open[ms]:
		default:
			t.Errorf("slot %d: %d records, open %v", k, records[ms], open[ms])
		}
	}
	assert.Greater(t, len(starts), 2, "the runs follow one another: %d", len(starts))
}

// The other side of the dead requester: a RunNow that waits, buffered, behind a
// run that outlasts several slots (skipped, the buffer being full) is not taken
// for gone: it runs once that run ended.
func TestRedteamBufferedManualSlotOfALiveRequester(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		scheds := startBuffered(t, b, longFirst(log, t0, 150*time.Second), []string{"A", "B"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(time.Second) // slot 0 runs
		var buffered []scheduler.Run
		var bufferedAt time.Time
		rec, err := scheds[1].RunNow(t.Context(), "job", scheduler.OnBuffered(func(r scheduler.Run) {
			buffered, bufferedAt = append(buffered, r), time.Now()
		}))
		require.NoError(t, err)
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		assert.True(t, rec.StartedAt.Equal(t0.Add(150*time.Second)), "started once slot 0 ended: %v", rec.StartedAt.Sub(t0))
		require.Len(t, buffered, 1, "OnBuffered is called once")
		assert.True(t, buffered[0].Slot.Equal(rec.Slot) && buffered[0].Token == rec.Token, "with the run's slot and token: %+v", buffered[0])
		assert.True(t, bufferedAt.Equal(t0.Add(time.Second)), "at once: %v", bufferedAt.Sub(t0))
		stopAll(t, scheds)
	})
}

// pausable is a memory backend whose run store calls wait while its process is
// paused (a stopped VM, a long GC pause): none reaches the store until resumed.
type pausable struct {
	*memory.Backend
	p *pause
}

type pause struct {
	paused  atomic.Bool
	resumed chan struct{}
}

func (p *pause) wait() {
	if p.paused.Load() {
		<-p.resumed
	}
}

func (b pausable) Runs() backend.RunStore {
	return pausedStore{b.Backend.Runs().(*memory.RunStore), b.p}
}

type pausedStore struct {
	*memory.RunStore
	p *pause
}

func (s pausedStore) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	s.p.wait()
	return s.RunStore.Claim(ctx, in)
}

func (s pausedStore) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	s.p.wait()
	return s.RunStore.Heartbeat(ctx, key, lease)
}

func (s pausedStore) Finish(ctx context.Context, key backend.RunKey, st backend.Status) error {
	s.p.wait()
	return s.RunStore.Finish(ctx, key, st)
}

func (s pausedStore) Settle(ctx context.Context, st backend.Settlement) error {
	s.p.wait()
	return s.RunStore.Settle(ctx, st)
}

func (s pausedStore) Release(ctx context.Context, key backend.RunKey) error {
	s.p.wait()
	return s.RunStore.Release(ctx, key)
}

func (s pausedStore) Active(ctx context.Context, job string) ([]backend.ActiveRun, error) {
	s.p.wait()
	return s.RunStore.Active(ctx, job)
}

// A process paused while it holds the run that blocks a buffered slot: its
// lease expires, a backup takes the run over, and the buffered slot runs once,
// after the backup's attempt ended. The process, resumed much later, runs
// neither again.
func TestRedteamBufferPausedHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, log := memory.New(), &startLog{}
		p := &pause{resumed: make(chan struct{})}
		t0 := time.Now()
		h := func(ctx context.Context, r scheduler.Run) error {
			log.add(r)
			switch {
			case r.Instance == "A" && r.Slot.Equal(t0):
				<-p.resumed // paused with its process, ignoring its context
				return nil
			case r.Slot.Equal(t0):
				select { // the backup's attempt: 90 s
				case <-time.After(90 * time.Second):
				case <-ctx.Done():
				}
			}
			return nil
		}
		opts := []scheduler.JobOption{scheduler.WithLease(3 * time.Second), scheduler.WithJitter(0),
			scheduler.WithOverlap(scheduler.OverlapBufferOne)}
		a := newScheduler(t, pausable{mem, p}, "A")
		require.NoError(t, a.Every("job", time.Minute, h, opts...))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(time.Second) // A runs slot 0
		p.paused.Store(true)
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"B", "C"} {
			s := newScheduler(t, mem, id)
			require.NoError(t, s.Every("job", time.Minute, h, opts...))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		time.Sleep(3 * time.Minute) // B or C took slot 0 over; slot 1 buffered behind it
		p.paused.Store(false)
		close(p.resumed)
		time.Sleep(3 * time.Minute)
		stopAll(t, append(scheds, a))

		starts, at := log.get()
		var zero, one []time.Time
		for i, r := range starts {
			switch {
			case r.Slot.Equal(t0):
				zero = append(zero, at[i])
			case r.Slot.Equal(t0.Add(time.Minute)):
				one = append(one, at[i])
				assert.NotEqual(t, "A", r.Instance, "the paused process never claimed slot 1")
			}
		}
		require.Len(t, zero, 2, "slot 0: A's attempt and the backup's: %+v", starts)
		require.Len(t, one, 1, "slot 1 runs once: %+v", starts)
		assert.False(t, one[0].Before(zero[1].Add(90*time.Second)), "slot 1 after the backup's attempt of slot 0 ended: %v", one[0].Sub(t0))
	})
}
