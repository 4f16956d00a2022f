package sqlbackend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/scheduler"
)

// killFirst is a handler whose first start kills its own replica, then hangs
// until its context ends. Every other start returns at once.
type killFirst struct {
	log   *startTimes
	mu    sync.Mutex
	kills map[string]func()
}

func (k *killFirst) handler(ctx context.Context, r scheduler.Run) error {
	if !k.log.add(r) {
		return nil
	}
	k.mu.Lock()
	kill := k.kills[r.Instance]
	k.mu.Unlock()
	go kill()
	<-ctx.Done()
	return context.Cause(ctx)
}

func (k *killFirst) replica(t *testing.T, r replicas, instance string) *scheduler.Scheduler {
	s, kill := r.replica(t, instance)
	k.mu.Lock()
	k.kills[instance] = kill
	k.mu.Unlock()
	return s
}

// A holder dies mid-run. History shows its attempt running, from the run
// store's Active, until a backup takes it over. The takeover records it lost
// in the same step: one record per attempt, written by no reader.
func TestDeadHolderRecordedLostByTheTakeoverSQL(t *testing.T) {
	onBoth(t, "deadholder", testDeadHolderRecordedLost)
}

func testDeadHolderRecordedLost(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	const job, every = "job", 5 * time.Second
	events := &eventTally{}
	r := replicas{open: open, onEvent: events.add}
	k := &killFirst{log: newStartTimes(), kills: map[string]func(){}}
	opts := []scheduler.JobOption{scheduler.WithLease(2 * time.Second), scheduler.WithJitter(0)}
	sa := k.replica(t, r, "a")
	require.NoError(t, sa.Every(job, every, k.handler, opts...))
	now := time.Now()
	sleepUntil(t, now.Truncate(every).Add(every+50*time.Millisecond)) // just after a slot
	require.NoError(t, sa.Start(ctx))
	first := k.log.firstRun(t, 15*time.Second)
	require.Equal(t, "a", first.Instance)

	sb := k.replica(t, r, "b")
	require.NoError(t, sb.Every(job, every, k.handler, opts...))
	hist, err := sb.History(ctx, job, 0)
	require.NoError(t, err)
	require.Len(t, hist, 1, "%+v", hist)
	assert.Equal(t, scheduler.StatusRunning, hist[0].Status, "the dead holder's attempt shows running")
	assert.Equal(t, "a", hist[0].Instance)
	require.NoError(t, sb.Start(ctx))
	finished := func(e scheduler.Event) bool {
		return e.Kind == scheduler.EventFinished && e.Instance == "b" && e.Slot.Equal(first.Slot)
	}
	require.Eventually(t, func() bool { return len(events.of(finished)) > 0 }, 20*time.Second, 10*time.Millisecond,
		"b takes the run over once a's lease expired, and finishes it")
	require.NoError(t, sb.Stop(ctx))
	reap(t, sa)

	assert.Len(t, k.log.of(first.Slot), 2, "the dead holder, then the takeover")
	var recs []scheduler.RunRecord
	all, err := sb.Backend().History(ctx, job, 0)
	require.NoError(t, err)
	for _, r := range all {
		if r.Slot.Equal(first.Slot) {
			recs = append(recs, r)
		}
	}
	require.Len(t, recs, 2, "one record per attempt: %+v", all)
	assert.Equal(t, []scheduler.Status{scheduler.StatusOK, scheduler.StatusLost}, []scheduler.Status{recs[0].Status, recs[1].Status})
	assert.Equal(t, []string{"b", "a"}, []string{recs[0].Instance, recs[1].Instance})
	assert.Equal(t, []int{2, 1}, []int{recs[0].Attempt, recs[1].Attempt})
	assert.Contains(t, recs[1].Error, "taken over by b")
}

// A cancel-other run's holder is killed. The next slot asks the run to end.
// Once its lease has expired, the next claim ends it cancelled, with its
// record, and the asking slot runs. The killed holder's slot stays in History:
// nobody has to read History in time.
//
// The lease is longer than the interval: the next slot asks a live run to end.
// Its max lateness leaves it 1.5 s after the dead lease's end.
func TestCancelOtherHolderKilledStaysInHistorySQL(t *testing.T) {
	onBoth(t, "cancelkilled", testCancelOtherHolderKilled)
}

func testCancelOtherHolderKilled(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	const job, every = "refresh", 4500 * time.Millisecond
	events := &eventTally{}
	r := replicas{open: open, onEvent: events.add}
	k := &killFirst{log: newStartTimes(), kills: map[string]func(){}}
	opts := []scheduler.JobOption{scheduler.WithOverlap(scheduler.OverlapCancelOther), scheduler.WithLease(5 * time.Second),
		scheduler.WithJitter(0), scheduler.WithMaxLate(4 * time.Second), scheduler.WithStartAt(time.Now().Add(time.Second))}
	var scheds []*scheduler.Scheduler
	for _, id := range []string{"a", "b"} {
		s := k.replica(t, r, id)
		require.NoError(t, s.Every(job, every, k.handler, opts...))
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		require.NoError(t, s.Start(ctx))
	}
	first := k.log.firstRun(t, 15*time.Second)
	victim, survivor := scheds[0], scheds[1]
	if first.Instance == "b" {
		victim, survivor = survivor, victim
	}
	third := first.Slot.Add(2 * every)
	finished := func(e scheduler.Event) bool {
		return e.Kind == scheduler.EventFinished && e.Instance == survivor.Instance() && e.Slot.Equal(third)
	}
	require.Eventually(t, func() bool { return len(events.of(finished)) > 0 }, 25*time.Second, 10*time.Millisecond,
		"the survivor runs the slot after next: %s", events.dump())
	require.NoError(t, survivor.Stop(ctx))
	reap(t, victim)
	assert.Empty(t, k.log.duplicates())

	recs, err := survivor.Backend().History(ctx, job, 0)
	require.NoError(t, err)
	bySlot := map[int64][]scheduler.RunRecord{}
	for _, r := range recs {
		bySlot[r.Slot.UnixMilli()] = append(bySlot[r.Slot.UnixMilli()], r)
	}
	killed := bySlot[first.Slot.UnixMilli()]
	require.Len(t, killed, 1, "the killed holder's slot is in History, once: %+v", recs)
	assert.Equal(t, scheduler.StatusCancelled, killed[0].Status)
	assert.Equal(t, first.Instance, killed[0].Instance)
	assert.Equal(t, first.Token, killed[0].Token)
	for n := 1; n <= 2; n++ {
		rs := bySlot[first.Slot.Add(time.Duration(n)*every).UnixMilli()]
		if assert.Len(t, rs, 1, "slot %d: one record: %+v", n, recs) {
			assert.Equal(t, scheduler.StatusOK, rs[0].Status, "slot %d ran: %+v", n, rs[0])
		}
	}
}
