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
// before it ended, the scheduled slots after it still run (each once), and no
// buffered slot is left behind for ever.
func TestRedteamBufferedManualSlotOfADeadRequester(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		m := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Minute))) }
		scheds := startBuffered(t, b, longFirst(log, t0, 20*time.Second), []string{"A", "B"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(time.Second) // slot 0 runs

		// What a RunNow on instance Z stored before Z died: its manual slot,
		// buffered behind slot 0.
		manual := t0.Add(time.Second + 7*time.Millisecond)
		res, err := b.Runs().Claim(t.Context(), backend.RunClaim{
			Job: "job", Slot: manual, Token: "z-token", Instance: "Z", Lease: 3 * time.Second,
			Deadline: time.Now().Add(2 * time.Second), Overlap: backend.OverlapBufferOne, Keep: time.Hour,
		})
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeBuffered, res.Outcome, "%+v", res)

		time.Sleep(4*time.Minute + 10*time.Second)
		active, err := scheds[0].Active(t.Context(), "job")
		require.NoError(t, err)
		stopAll(t, scheds)

		assert.Equal(t, []int{1, 1, 1}, slotsStarted(log, m(2), m(3), m(4)),
			"the slots after the dead requester's buffered slot run, once each")
		for _, r := range active {
			assert.False(t, r.Buffered, "a buffered slot left behind for ever: %+v", r)
		}
	})
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
