package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// leased returns a JetStream backend with a kvlease store on nc.
func leased(t *testing.T, nc *nats.Conn, replicas int) *jetstream.LeasedBackend {
	t.Helper()
	j := natstest.JetStream(t, nc)
	store, err := kvlease.New(j, kvlease.WithReplicas(replicas))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	b, err := jetstream.NewLeased(j, store, jetstream.WithReplicas(replicas))
	require.NoError(t, err)
	return b
}

// fleet is three instances on one server, each with its own connection.
type fleet struct {
	scheds []*scheduler.Scheduler
	conns  []*nats.Conn
}

func (f *fleet) index(instance string) int {
	for i, s := range f.scheds {
		if s.Instance() == instance {
			return i
		}
	}
	return -1
}

func startFleet(t *testing.T, url string, register func(s *scheduler.Scheduler) error) *fleet {
	t.Helper()
	f := &fleet{}
	for i := range 3 {
		nc := dial(t, url)
		s := newSched(t, leased(t, nc, 1), fmt.Sprintf("inst-%c", 'a'+i), nil)
		require.NoError(t, register(s))
		f.scheds = append(f.scheds, s)
		f.conns = append(f.conns, nc)
	}
	for _, s := range f.scheds {
		require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	}
	return f
}

// waitSlotBoundary waits until just after a multiple of d, so a test's first slot
// is a known distance away.
func waitSlotBoundary(t *testing.T, d time.Duration) {
	now := time.Now()
	sleepCtx(t, now.Truncate(d).Add(d).Sub(now)+50*time.Millisecond)
}

// The winner dies mid-run (its connection is cut; it never calls Stop): exactly one
// backup runs the slot, within lease + 1 s, and history shows two attempts.
func TestCrashedWinnerIsTakenOver(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	const lease = 2 * time.Second
	log := newLedger()
	var f *fleet
	var crashed atomic.Bool
	var mu sync.Mutex
	var first scheduler.Run
	var firstAt, backupAt time.Time
	ready := make(chan struct{})
	backup := make(chan struct{})
	waitSlotBoundary(t, 5*time.Second)
	f = startFleet(t, srv.ClientURL(), func(s *scheduler.Scheduler) error {
		return s.Every("crash", 5*time.Second, func(ctx context.Context, r scheduler.Run) error {
			<-ready
			log.record(r)
			mu.Lock()
			if crashed.CompareAndSwap(false, true) {
				first, firstAt = r, time.Now()
				mu.Unlock()
				f.conns[f.index(r.Instance)].Close() // the process "dies": no heartbeat, no result
				<-ctx.Done()
				return context.Cause(ctx)
			}
			if first.Slot.Equal(r.Slot) && backupAt.IsZero() {
				backupAt = time.Now()
				close(backup)
			}
			mu.Unlock()
			return nil
		}, scheduler.WithLease(lease), scheduler.WithMaxLate(time.Second))
	})
	close(ready)
	select {
	case <-backup:
	case <-time.After(20 * time.Second):
		t.Fatal("no backup took over")
	}
	for _, s := range f.scheds {
		err := s.Stop(ctxT(t, 10*time.Second))
		if s.Instance() == first.Instance {
			// The dead process's result could not be stored: Stop says so.
			assert.ErrorIs(t, err, scheduler.ErrNotStored)
			continue
		}
		require.NoError(t, err)
	}
	mu.Lock()
	delay := backupAt.Sub(firstAt)
	mu.Unlock()
	t.Logf("takeover delay with a %v lease: %v (winner's death → backup's handler start)", lease, delay.Round(time.Millisecond))
	assert.LessOrEqual(t, delay, lease+time.Second)
	assert.Empty(t, log.duplicates("crash"))
	runs := log.runs["crash"][first.Slot.UnixMilli()]
	require.Len(t, runs, 2, "the dead winner, then exactly one backup")
	assert.Equal(t, 2, runs[1].Attempt)
	assert.NotEqual(t, runs[0].Instance, runs[1].Instance)
	assert.Greater(t, runs[1].Fence, runs[0].Fence)

	alive := f.scheds[(f.index(first.Instance)+1)%3]
	require.Eventually(t, func() bool {
		hist, err := alive.History(ctxT(t, 5*time.Second), "crash", 20)
		if err != nil {
			return false
		}
		var attempts []scheduler.RunRecord
		for _, r := range hist {
			if r.Slot.Equal(first.Slot) {
				attempts = append(attempts, r)
			}
		}
		return len(attempts) == 2 && attempts[0].Attempt == 2 && attempts[0].Status == scheduler.StatusOK &&
			attempts[1].Attempt == 1 && attempts[1].Instance == first.Instance
	}, 5*time.Second, 100*time.Millisecond, "history shows both attempts with their instances")
}

// A graceful Stop mid-run releases the lease: a backup starts within 1 s, not after
// the lease expires.
func TestGracefulStopHandsOverNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	log := newLedger()
	started := make(chan scheduler.Run, 10)
	waitSlotBoundary(t, 5*time.Second)
	f := startFleet(t, srv.ClientURL(), func(s *scheduler.Scheduler) error {
		return s.Every("handover", 5*time.Second, func(ctx context.Context, r scheduler.Run) error {
			log.record(r)
			started <- r
			if r.Attempt == 1 {
				<-ctx.Done()
				return context.Cause(ctx)
			}
			return nil
		}, scheduler.WithLease(30*time.Second), scheduler.WithMaxLate(time.Second))
	})
	var first scheduler.Run
	select {
	case first = <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("no run started")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := f.scheds[f.index(first.Instance)].Stop(ctx)
	assert.Error(t, err, "the running handler had to be cancelled")
	var second scheduler.Run
	select {
	case second = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no backup took over after the hand-over")
	}
	delay := time.Since(t0)
	t.Logf("hand-over: Stop → backup's handler start %v (lease 30s)", delay.Round(time.Millisecond))
	assert.Less(t, delay, time.Second+200*time.Millisecond)
	assert.True(t, second.Slot.Equal(first.Slot))
	assert.Equal(t, 2, second.Attempt)
	assert.NotEqual(t, first.Instance, second.Instance)
	stopAll(t, f.scheds)
	assert.Empty(t, log.duplicates("handover"))
}

// A long run with overlap forbidden: the next slots are recorded as skipped, never
// run concurrently.
func TestOverlapSkippedNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	log := newLedger()
	var running, most atomic.Int32
	waitSlotBoundary(t, time.Second)
	f := startFleet(t, srv.ClientURL(), func(s *scheduler.Scheduler) error {
		return s.Every("long", time.Second, func(ctx context.Context, r scheduler.Run) error {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			log.record(r)
			select {
			case <-time.After(2500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithLease(2*time.Second), scheduler.WithMaxLate(900*time.Millisecond))
	})
	sleepCtx(t, 6500*time.Millisecond)
	stopAll(t, f.scheds)
	assert.EqualValues(t, 1, most.Load(), "never two runs of the job at once")
	hist, err := f.scheds[0].History(ctxT(t, 5*time.Second), "long", 50)
	require.NoError(t, err)
	statuses := map[scheduler.Status]int{}
	perSlot := map[int64]int{}
	for _, r := range hist {
		statuses[r.Status]++
		perSlot[r.Slot.UnixMilli()]++
	}
	for slot, n := range perSlot {
		assert.Equal(t, 1, n, "slot %v has one record", time.UnixMilli(slot))
	}
	assert.GreaterOrEqual(t, statuses[scheduler.StatusSkipped], 2, "%v", statuses)
	assert.Empty(t, log.duplicates("long"))
	t.Logf("overlap forbidden: %v", statuses)
}

// All instances are down for 3 slots; at Start the catch-up policy decides what runs,
// once each.
func TestCatchUpNATS(t *testing.T) {
	for _, tc := range []struct {
		policy scheduler.CatchUpPolicy
		want   int
	}{{scheduler.CatchUpLatest, 1}, {scheduler.CatchUpAll, 3}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
			log := newLedger()
			job := "catchup-" + tc.policy.String()
			register := func(s *scheduler.Scheduler) error {
				return s.Every(job, 2*time.Second, log.handler, scheduler.WithCatchUp(tc.policy, time.Minute),
					scheduler.WithMaxLate(500*time.Millisecond), scheduler.WithLease(2*time.Second))
			}
			waitSlotBoundary(t, 2*time.Second)
			f := startFleet(t, srv.ClientURL(), register)
			sleepCtx(t, 2*time.Second) // one slot while up
			stopAll(t, f.scheds)
			down := time.Now()
			sleepCtx(t, 6600*time.Millisecond) // three slots while all are down, the last one's deadline passed
			up := time.Now()
			f = startFleet(t, srv.ClientURL(), register)
			sleepCtx(t, 1500*time.Millisecond)
			stopAll(t, f.scheds)
			assert.Empty(t, log.duplicates(job))
			missed := log.count(job, 2*time.Second, down.Add(500*time.Millisecond), up.Add(-600*time.Millisecond))
			assert.Equal(t, 3, missed.slots, "three slots fell in the outage")
			assert.Equal(t, tc.want, missed.ran, "policy %s: %v", tc.policy, missed)
			t.Logf("catch-up %s after 3 missed slots: %v", tc.policy, missed)
		})
	}
}

// The winner is paused: its heartbeats are blocked while its handler keeps running.
// Its context is cancelled with a lease-lost cause, a backup runs the slot, the stale
// Finish is rejected (its result is recorded as superseded), and a downstream write
// guarded by the fencing token refuses the stale holder.
func TestPausedWinnerIsFenced(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	const lease = 2 * time.Second
	down := &fencedStore{}
	var mu sync.Mutex
	var target time.Time // the slot under test: the first one any instance starts
	var staleCause, staleWrite error
	staleDone := make(chan struct{})
	backupDone := make(chan struct{})
	var scheds []*scheduler.Scheduler
	waitSlotBoundary(t, 5*time.Second)
	for i := range 3 {
		nc := dial(t, srv.ClientURL())
		j := natstest.JetStream(t, nc)
		store, err := kvlease.New(j)
		require.NoError(t, err)
		t.Cleanup(store.Close)
		paused := &atomic.Bool{}
		b, err := jetstream.NewLeased(j, pausable{store, paused})
		require.NoError(t, err)
		s := newSched(t, b, fmt.Sprintf("p%d", i), nil)
		require.NoError(t, s.Every("fenced", 5*time.Second, func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			if target.IsZero() {
				target = r.Slot
			}
			mine := r.Slot.Equal(target)
			mu.Unlock()
			if !mine {
				return nil
			}
			if r.Attempt == 1 {
				paused.Store(true) // frozen: no heartbeat gets through any more
				<-ctx.Done()
				<-backupDone // it ignores the cancellation and carries on with its write
				err := down.write(r.Fence, r.Instance)
				mu.Lock()
				staleCause, staleWrite = context.Cause(ctx), err
				mu.Unlock()
				close(staleDone)
				return nil // it believes it succeeded: its Finish must be refused
			}
			err := down.write(r.Fence, r.Instance)
			close(backupDone)
			return err
		}, scheduler.WithLease(lease), scheduler.WithMaxLate(time.Second)))
		require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
		scheds = append(scheds, s)
	}
	select {
	case <-staleDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the paused winner never got past its write")
	}
	stopAll(t, scheds)
	mu.Lock()
	defer mu.Unlock()
	assert.ErrorIs(t, staleCause, scheduler.ErrLeaseLost, "the paused handler is told it lost its lease")
	assert.ErrorIs(t, staleWrite, errStaleFence, "the downstream write of the stale holder is refused")
	require.Len(t, down.refused, 1)
	assert.NotEqual(t, down.refused[0], down.writer, "the backup's write stands")

	hist, err := scheds[0].History(ctxT(t, 5*time.Second), "fenced", 20)
	require.NoError(t, err)
	var attempts []scheduler.RunRecord
	for _, r := range hist {
		if r.Slot.Equal(target) {
			attempts = append(attempts, r)
		}
	}
	require.Len(t, attempts, 2, "%+v", attempts)
	assert.Equal(t, 2, attempts[0].Attempt)
	assert.Equal(t, scheduler.StatusOK, attempts[0].Status, "the backup's result is the run's result")
	assert.Equal(t, 1, attempts[1].Attempt)
	assert.Equal(t, scheduler.StatusLost, attempts[1].Status, "the stale settle was rejected: the takeover recorded the attempt lost, once")
	t.Logf("paused winner: stale holder %s refused downstream (fence %d < %d), backup %s won", down.refused[0], attempts[1].Fence, down.fence, down.writer)
}

// fencedStore is a downstream system that accepts a write only from a fence at least
// as new as the newest it has seen.
type fencedStore struct {
	mu      sync.Mutex
	fence   uint64
	writer  string
	refused []string
}

var errStaleFence = errors.New("downstream: stale fencing token")

func (d *fencedStore) write(fence uint64, who string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if fence < d.fence {
		d.refused = append(d.refused, who)
		return fmt.Errorf("%w: %d < %d", errStaleFence, fence, d.fence)
	}
	d.fence, d.writer = fence, who
	return nil
}

// pausable blocks heartbeats while paused, as if the process were frozen.
type pausable struct {
	*kvlease.Store
	paused *atomic.Bool
}

func (p pausable) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if p.paused.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Store.Heartbeat(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}, lease)
}
