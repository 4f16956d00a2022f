package scheduler_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// longFirst is a handler that runs d in the job's slot first (or until its
// context ends) and returns at once in every other slot.
func longFirst(log *startLog, first time.Time, d time.Duration) scheduler.Handler {
	return func(ctx context.Context, r scheduler.Run) error {
		log.add(r)
		if !r.Slot.Equal(first) {
			return nil
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// startBuffered starts one scheduler per instance on b with the job "job" every
// minute under p, lease 3s, and returns them.
func startBuffered(t *testing.T, b backend.Backend, h scheduler.Handler, instances []string, opts ...scheduler.JobOption) []*scheduler.Scheduler {
	t.Helper()
	var scheds []*scheduler.Scheduler
	for _, id := range instances {
		s := newScheduler(t, b, id)
		require.NoError(t, s.Every("job", time.Minute, h, append([]scheduler.JobOption{scheduler.WithLease(3 * time.Second)}, opts...)...))
		require.NoError(t, s.Start(t.Context()))
		scheds = append(scheds, s)
	}
	return scheds
}

// requireStarts requires the handler to have started once per slot of want, in
// that order, at the times given.
func requireStarts(t *testing.T, log *startLog, want, at []time.Time) {
	t.Helper()
	starts, when := log.get()
	require.Len(t, starts, len(want), "one start per slot: %+v", starts)
	for i := range want {
		assert.True(t, starts[i].Slot.Equal(want[i]), "start %d is slot %v, not %v", i, starts[i].Slot, want[i])
		assert.True(t, when[i].Equal(at[i]), "slot %v started at %v, not %v", want[i], when[i], at[i])
	}
}

// Under OverlapBufferOne a slot due while the run before it runs, on any of
// three instances, runs once that run ended, on one instance; the slot due
// while one is buffered is skipped, saying why; the slot after runs on time.
func TestBufferOneRunsWhenTheRunEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		scheds := startBuffered(t, b, longFirst(log, t0, 150*time.Second), []string{"A", "B", "C"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne))
		m := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Minute))) }
		time.Sleep(4*time.Minute + 10*time.Second)
		stopAll(t, scheds)

		requireStarts(t, log, []time.Time{t0, m(1), m(3), m(4)}, []time.Time{t0, m(2.5), m(3), m(4)})
		hist := historyOf(t, scheds[0], "job")
		for _, k := range []float64{0, 1, 3, 4} {
			assert.Equal(t, scheduler.StatusOK, hist[m(k).UnixMilli()].Status, "slot %v", k)
		}
		skipped := hist[m(2).UnixMilli()]
		assert.Equal(t, scheduler.StatusSkipped, skipped.Status, "%+v", skipped)
		assert.Contains(t, skipped.Error, "1 were buffered already (overlap policy buffer-one)")
	})
}

// Under OverlapBufferAll the slots due while a run runs are buffered up to the
// cap and run one after the other, oldest first, once it ended; past the cap
// they are skipped.
func TestBufferAllRunsOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		m := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Minute))) }
		scheds := startBuffered(t, b, longFirst(log, t0, 210*time.Second), []string{"A", "B"},
			scheduler.WithOverlap(scheduler.OverlapBufferAll), scheduler.WithBufferCap(2))
		time.Sleep(4*time.Minute + 10*time.Second)
		stopAll(t, scheds)

		requireStarts(t, log, []time.Time{t0, m(1), m(2), m(4)}, []time.Time{t0, m(3.5), m(3.5), m(4)})
		hist := historyOf(t, scheds[0], "job")
		assert.Equal(t, scheduler.StatusSkipped, hist[m(3).UnixMilli()].Status, "past the cap of 2")
		assert.Equal(t, scheduler.StatusOK, hist[m(2).UnixMilli()].Status)
	})
}

// A buffered slot is a stored decision: when every instance that buffered it
// has stopped, an instance started later finds it (Active) and runs it once
// the run before it ended (here taken over from the last instance to stop),
// however late.
func TestBufferedSlotOutlivesItsInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		holder := startBuffered(t, b, longFirst(log, t0, 10*time.Minute), []string{"A"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(time.Second) // A runs slot 0
		bufferers := startBuffered(t, b, longFirst(log, t0, 10*time.Minute), []string{"B", "C"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(time.Minute) // slot 1 is buffered by A, B and C
		active, err := bufferers[0].Active(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, active, 2, "the run and the buffered slot: %+v", active)
		assert.True(t, active[1].Buffered && active[1].Slot.Equal(t0.Add(time.Minute)), "%+v", active[1])
		stopAll(t, bufferers)
		time.Sleep(5 * time.Minute)
		// A stops too and hands its run of slot 0 over; the buffered slot stays.
		stopAll(t, holder)
		late := startBuffered(t, b, longFirst(log, t0, 0), []string{"D"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0))
		time.Sleep(5 * time.Second) // a claim that meets slot 0 between its holders polls (lease/2)
		stopAll(t, late)

		starts, _ := log.get()
		var ones []scheduler.Run
		for _, r := range starts {
			if r.Slot.Equal(t0.Add(time.Minute)) {
				ones = append(ones, r)
			}
		}
		require.Len(t, ones, 1, "slot 1 ran once: %+v", starts)
		assert.Equal(t, "D", ones[0].Instance, "on the instance started after its bufferers stopped")
	})
}

// RunNow follows a buffer policy: it waits behind the run in progress and runs
// once that ended; one whose context ends while it waits withdraws its slot,
// which then neither runs nor holds the job's buffer.
func TestBufferRunNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, log := memory.New(), &startLog{}
		t0 := time.Now()
		scheds := startBuffered(t, b, longFirst(log, t0, 20*time.Second), []string{"A", "B"},
			scheduler.WithOverlap(scheduler.OverlapBufferOne))
		time.Sleep(time.Second)

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := scheds[1].RunNow(ctx, "job")
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "gave up waiting")
		assert.Contains(t, err.Error(), "buffered behind the run of slot "+t0.UTC().Format(time.RFC3339Nano))
		synctest.Wait()
		active, err := scheds[0].Active(t.Context(), "job")
		require.NoError(t, err)
		require.Len(t, active, 1, "the withdrawn slot is gone: %+v", active)

		rec, err := scheds[1].RunNow(t.Context(), "job")
		require.NoError(t, err, "a second RunNow waits its turn")
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		assert.True(t, rec.StartedAt.Equal(t0.Add(20*time.Second)), "started once the run ended: %v", rec.StartedAt)
		stopAll(t, scheds)
		starts, _ := log.get()
		assert.Len(t, starts, 2, "slot 0 and one manual run: %+v", starts)
	})
}

// A buffer policy is refused without a store that buffers, and WithBufferCap
// without OverlapBufferAll.
func TestBufferRefused(t *testing.T) {
	noop := func(context.Context, scheduler.Run) error { return nil }
	s := newScheduler(t, noBuffers{memory.New()}, "A")
	err := s.Every("job", time.Minute, noop, scheduler.WithOverlap(scheduler.OverlapBufferOne))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "backend.OverlapBufferer")

	s = newScheduler(t, memory.New(), "A")
	err = s.Every("job", time.Minute, noop, scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithBufferCap(3))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "WithBufferCap needs overlap policy buffer-all")
	for _, n := range []int{0, -1, scheduler.MaxBufferCap + 1} {
		err = s.Every("capped", time.Minute, noop, scheduler.WithOverlap(scheduler.OverlapBufferAll), scheduler.WithBufferCap(n))
		require.ErrorIs(t, err, scheduler.ErrInvalidOption, "cap %d", n)
	}

	s = newScheduler(t, withoutLeases{memory.New()}, "A")
	err = s.Every("job", time.Minute, noop, scheduler.WithOverlap(scheduler.OverlapBufferAll))
	require.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.Contains(t, err.Error(), "needs a backend with leases")
}

// noBuffers is a leased backend whose run store does not buffer slots.
type noBuffers struct{ *memory.Backend }

func (n noBuffers) Runs() backend.RunStore {
	return struct{ backend.RunStore }{n.Backend.Runs()}
}
