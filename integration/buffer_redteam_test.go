package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// Red-team cases of the buffer policies on a real server (kvlease).

// gatedRuns is a handler whose first run lasts until release is closed; the
// others return at once. It counts the runs by slot.
type gatedRuns struct {
	mu      sync.Mutex
	runs    []scheduler.Run
	started chan struct{} // closed when the first run starts
	release chan struct{}
	first   atomic.Bool
}

func newGatedRuns() *gatedRuns {
	return &gatedRuns{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedRuns) handler(ctx context.Context, r scheduler.Run) error {
	g.mu.Lock()
	g.runs = append(g.runs, r)
	g.mu.Unlock()
	if g.first.CompareAndSwap(false, true) {
		close(g.started)
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	}
	return nil
}

func (g *gatedRuns) get() []scheduler.Run {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]scheduler.Run(nil), g.runs...)
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "waited 30s for "+what)
	}
}

// Twelve RunNow calls from four instances at once on a buffer-one job whose
// manual run is long: one waits buffered and runs once that run ended; the
// others return ErrJobBusy; nothing is left buffered.
func TestRedteamBufferRunNowStormNATS(t *testing.T) {
	t.Parallel()
	url := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"}).ClientURL()
	g := newGatedRuns()
	var scheds []*scheduler.Scheduler
	for i := range 4 {
		s, err := scheduler.New(scheduler.Config{Backend: leased(t, dial(t, url), 1), Instance: fmt.Sprintf("storm-%d", i)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		require.NoError(t, s.Every("storm", time.Hour, g.handler, scheduler.WithLease(2*time.Second),
			scheduler.WithStartAt(time.Now().Add(24*time.Hour)), scheduler.WithOverlap(scheduler.OverlapBufferOne)))
		require.NoError(t, s.Start(ctxT(t, 30*time.Second)))
		scheds = append(scheds, s)
	}

	first := make(chan error, 1)
	go func() {
		_, err := scheds[0].RunNow(ctxT(t, time.Minute), "storm")
		first <- err
	}()
	waitFor(t, g.started, "the first manual run")

	type answer struct{ err error }
	answers := make(chan answer, 12)
	for i := range 12 {
		go func() {
			_, err := scheds[i%4].RunNow(ctxT(t, time.Minute), "storm")
			answers <- answer{err}
		}()
	}
	busy := 0
	for range 11 {
		select {
		case a := <-answers:
			require.ErrorIs(t, a.err, scheduler.ErrJobBusy, "all but one are busy")
			busy++
		case <-time.After(30 * time.Second):
			require.FailNow(t, "eleven RunNow calls answered busy", "%d did", busy)
		}
	}
	active, err := scheds[1].Active(ctxT(t, 10*time.Second), "storm")
	require.NoError(t, err)
	buffered := 0
	for _, r := range active {
		if r.Buffered {
			buffered++
		}
	}
	assert.Equal(t, 1, buffered, "one buffered: %+v", active)
	close(g.release)
	require.NoError(t, <-first)
	select {
	case a := <-answers:
		require.NoError(t, a.err, "the buffered RunNow runs")
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the buffered RunNow ran")
	}
	assert.Len(t, g.get(), 2, "the first manual run and the buffered one: %+v", g.get())
	active, err = scheds[2].Active(ctxT(t, 10*time.Second), "storm")
	require.NoError(t, err)
	assert.Empty(t, active)
	stopAll(t, scheds)
}

// A RunNow buffered behind a long scheduled run on a real server, whose process
// then dies (its buffered slot stored, never claimed or withdrawn): once the run
// ended, the job's later slots run, and the dead RunNow's slot is ended unrun.
func TestRedteamBufferDeadRequesterNATS(t *testing.T) {
	t.Parallel()
	url := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"}).ClientURL()
	g := newGatedRuns()
	const interval = 2 * time.Second
	var scheds []*scheduler.Scheduler
	var runs backend.RunStore
	for i := range 2 {
		b := leased(t, dial(t, url), 1)
		runs = b.Runs()
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: fmt.Sprintf("dead-%d", i)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		require.NoError(t, s.Every("dead", interval, g.handler, scheduler.WithLease(time.Second),
			scheduler.WithOverlap(scheduler.OverlapBufferOne)))
		require.NoError(t, s.Start(ctxT(t, 30*time.Second)))
		scheds = append(scheds, s)
	}
	waitFor(t, g.started, "the first scheduled run")
	blocking := g.get()[0].Slot
	manual := blocking.Add(interval/2 + 7*time.Millisecond)
	res, err := runs.Claim(ctxT(t, 10*time.Second), backend.RunClaim{
		Job: "dead", Slot: manual, Token: "dead-token", Instance: "dead-requester", Lease: time.Second, Manual: true,
		Deadline: time.Now().Add(2 * time.Second), Overlap: backend.OverlapBufferOne, Keep: time.Hour,
	})
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeBuffered, res.Outcome, "%+v", res)
	close(g.release)

	deadline := time.Now().Add(30 * time.Second)
	for {
		var later int
		for _, r := range g.get() {
			require.False(t, r.Slot.Equal(manual), "the dead RunNow's slot is not run: %+v", r)
			if r.Slot.After(manual) {
				later++
			}
		}
		if later >= 3 {
			break
		}
		require.True(t, time.Now().Before(deadline), "three later slots run within 30s: %+v", g.get())
		time.Sleep(100 * time.Millisecond)
	}
	active, err := scheds[0].Active(ctxT(t, 10*time.Second), "dead")
	require.NoError(t, err)
	for _, r := range active {
		assert.False(t, r.Buffered && r.Slot.Equal(manual), "the dead RunNow's slot is ended: %+v", r)
	}
	stopAll(t, scheds)
}
