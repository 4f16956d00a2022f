package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// The combinations of policies and faults a review found broken, in real time.
// The scheduler's combinations_test.go and records_test.go hold them on memory.

// node is how a test's instances reach the server. It holds the URLs, the
// replicas of the bucket and streams, a lease store wrapper and an event hook.
type node struct {
	url      string
	replicas int
	wrap     func(*kvlease.Store) backend.RunStore
	onEvent  func(scheduler.Event)
	// turns: the schedulers take turns (scheduler.Config.Turns).
	turns bool
}

// singleNode starts a server that listens on a local port.
func singleNode(t *testing.T) node {
	return node{url: natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"}).ClientURL(), replicas: 1}
}

// clusterNode starts a 3-node cluster; the bucket and streams have 3 replicas.
func clusterNode(t *testing.T) node {
	return node{url: strings.Join(faultCluster(t).ClientURLs(), ","), replicas: 3}
}

// onR1AndR3 runs fn on a single server and on a 3-node cluster.
func onR1AndR3(t *testing.T, fn func(t *testing.T, n node)) {
	t.Run("R1", func(t *testing.T) { fn(t, singleNode(t)) })
	t.Run("R3", func(t *testing.T) { fn(t, clusterNode(t)) })
}

// open returns a scheduler on a connection of its own, and its kill. A kill
// closes the lease store and the connection under it, with no Stop.
func (n node) open(t *testing.T, instance string) (*scheduler.Scheduler, func()) {
	t.Helper()
	nc := dial(t, n.url)
	j := natstest.JetStream(t, nc)
	store, err := kvlease.New(j, kvlease.WithReplicas(n.replicas))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	var runs backend.RunStore = store
	if n.wrap != nil {
		runs = n.wrap(store)
	}
	b, err := jetstream.NewLeased(j, runs, jetstream.WithReplicas(n.replicas))
	require.NoError(t, err)
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: instance, OnEvent: n.onEvent, Turns: n.turns})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, func() { store.Close(); nc.Close() }
}

// reap stops a killed instance, which cannot store what it did.
func reap(t *testing.T, s *scheduler.Scheduler) {
	_ = s.Stop(ctxT(t, 200*time.Millisecond))
}

// eventTally keeps every event of the instances it hooks.
type eventTally struct {
	mu  sync.Mutex
	evs []scheduler.Event
}

func (e *eventTally) add(ev scheduler.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

// of returns the events that match.
func (e *eventTally) of(match func(scheduler.Event) bool) []scheduler.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []scheduler.Event
	for _, ev := range e.evs {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func (e *eventTally) dump() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.evs {
		fmt.Fprintf(&b, "\n%s %s %s/%s slot %s #%d %v %s %v", ev.At.Format("15:04:05.000"), ev.Instance, ev.Job, ev.Entry, ev.Slot.Format("15:04:05.000"), ev.Attempt, ev.Kind, ev.Outcome, ev.Err)
	}
	return b.String()
}

// startTimes is a handler's log of starts: which run, and when.
type startTimes struct {
	mu    sync.Mutex
	runs  []scheduler.Run
	at    []time.Time
	first chan struct{} // closed at the first start
}

func newStartTimes() *startTimes { return &startTimes{first: make(chan struct{})} }

func (l *startTimes) add(r scheduler.Run) (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, r)
	l.at = append(l.at, time.Now())
	if len(l.runs) == 1 {
		close(l.first)
		return true
	}
	return false
}

// String lists the starts, by slot and time.
func (l *startTimes) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i, r := range l.runs {
		fmt.Fprintf(&b, "\n%s #%d on %s at %s", r.Slot.Format("15:04:05.000"), r.Attempt, r.Instance, l.at[i].Format("15:04:05.000"))
	}
	return b.String()
}

// of returns the start times of slot.
func (l *startTimes) of(slot time.Time) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for i, r := range l.runs {
		if r.Slot.Equal(slot) {
			out = append(out, l.at[i])
		}
	}
	return out
}

// firstRun waits for the first start and returns it.
func (l *startTimes) firstRun(t *testing.T, within time.Duration) scheduler.Run {
	t.Helper()
	select {
	case <-l.first:
	case <-time.After(within):
		require.FailNow(t, "no run started", "within %v", within)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[0]
}

// slotsAfter counts the distinct slots after t that started.
func (l *startTimes) slotsAfter(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[int64]bool{}
	for _, r := range l.runs {
		if r.Slot.After(t) {
			seen[r.Slot.UnixMilli()] = true
		}
	}
	return len(seen)
}

// duplicates lists the slots that started twice with the same attempt.
func (l *startTimes) duplicates() []scheduler.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	type key struct {
		slot    int64
		attempt int
	}
	seen := map[key]bool{}
	var out []scheduler.Run
	for _, r := range l.runs {
		k := key{r.Slot.UnixMilli(), r.Attempt}
		if seen[k] {
			out = append(out, r)
		}
		seen[k] = true
	}
	return out
}

// longFirstRun is a handler whose first start lasts d, or until its context
// ends. Every other start returns at once.
func longFirstRun(l *startTimes, d time.Duration) scheduler.Handler {
	return func(ctx context.Context, r scheduler.Run) error {
		if !l.add(r) {
			return nil
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// recordsBySlot returns the job's records by slot, oldest attempt first.
func recordsBySlot(t *testing.T, s *scheduler.Scheduler, job string) map[int64][]scheduler.RunRecord {
	t.Helper()
	hist, err := s.History(ctxT(t, 10*time.Second), job, 1000)
	require.NoError(t, err)
	out := map[int64][]scheduler.RunRecord{}
	for i := len(hist) - 1; i >= 0; i-- {
		out[hist[i].Slot.UnixMilli()] = append(out[hist[i].Slot.UnixMilli()], hist[i])
	}
	return out
}

var errAttemptFailed = errors.New("test: attempt failed")

// A backfilled slot whose attempts fail is retried as the job's policy says.
// Its next slot is long past, and does not bound its retries.
func TestBackfilledSlotIsRetriedNATS(t *testing.T) {
	n := singleNode(t)
	events := &eventTally{}
	n.onEvent = events.add
	s, _ := n.open(t, "a")
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	backfilled := func(slot time.Time) bool { return slot.Equal(base) || slot.Equal(base.Add(time.Hour)) }
	var starts atomic.Int32
	require.NoError(t, s.Every("hourly", time.Hour, func(_ context.Context, r scheduler.Run) error {
		if backfilled(r.Slot) { // the hour's own slot may fall in the test
			starts.Add(1)
		}
		return errAttemptFailed
	}, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: 100 * time.Millisecond})))
	require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	res, err := s.Backfill(ctxT(t, 30*time.Second), "hourly", base, base.Add(2*time.Hour))
	require.NoError(t, err)
	require.Len(t, res.Slots, 2)
	for _, sl := range res.Slots {
		assert.Equal(t, scheduler.BackfillRan, sl.Outcome)
		assert.Equal(t, 3, sl.Attempt, "slot %s ran every attempt of the policy", sl.Slot)
		assert.Equal(t, scheduler.StatusError, sl.Status)
	}
	assert.EqualValues(t, 6, starts.Load(), "three attempts of each slot")
	var recs map[int64][]scheduler.RunRecord
	require.Eventually(t, func() bool {
		recs = recordsBySlot(t, s, "hourly")
		return len(recs[base.UnixMilli()]) >= 3 && len(recs[base.Add(time.Hour).UnixMilli()]) >= 3
	}, 10*time.Second, 50*time.Millisecond, "three records of each slot")
	require.NoError(t, s.Stop(ctxT(t, 10*time.Second)))
	for _, slot := range []time.Time{base, base.Add(time.Hour)} {
		rs := recs[slot.UnixMilli()]
		require.Len(t, rs, 3, "one record per attempt of %s: %+v", slot, rs)
		for i, r := range rs {
			assert.Equal(t, scheduler.StatusError, r.Status)
			assert.Equal(t, i+1, r.Attempt)
			assert.True(t, r.Backfill)
		}
	}
	of := func(k scheduler.EventKind) func(scheduler.Event) bool {
		return func(e scheduler.Event) bool { return e.Kind == k && backfilled(e.Slot) }
	}
	assert.Len(t, events.of(of(scheduler.EventRetry)), 4, "two retries of each slot")
	assert.Len(t, events.of(of(scheduler.EventFailed)), 2, "one final failure of each slot")
}

// Buffer-one on two instances. The slot after the first is buffered behind
// its run, which lasts five slots. A pause from the middle of the third slot
// to the middle of the seventh holds it. It runs once the pause ends, as the
// slots the pause held do (catch-up all).
func TestBufferedSlotCaughtByAPauseRunsAfterItNATS(t *testing.T) {
	n := singleNode(t)
	const job, every = "buffered", time.Second
	log := newStartTimes()
	var scheds []*scheduler.Scheduler
	begin := time.Now() // no slot before: catch-up is of the slots the pause held
	for _, id := range []string{"a", "b"} {
		s, _ := n.open(t, id)
		require.NoError(t, s.Every(job, every, longFirstRun(log, 5*every), scheduler.WithLease(3*time.Second),
			scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0),
			scheduler.WithCatchUp(scheduler.CatchUpAll, time.Minute), scheduler.WithStartAt(begin)))
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	}
	first := log.firstRun(t, 15*time.Second).Slot
	slot := func(k int) time.Time { return first.Add(time.Duration(k) * every) }
	sleepCtx(t, time.Until(first.Add(2*every+every/2)))
	until := first.Add(6*every + every/2)
	require.NoError(t, scheds[0].Pause(ctxT(t, 5*time.Second), job, scheduler.PauseOptions{Reason: "maintenance", Until: until}))
	require.Eventually(t, func() bool {
		return len(log.of(slot(1))) > 0 && len(log.of(slot(4))) > 0 && len(log.of(slot(5))) > 0 && len(log.of(slot(6))) > 0
	}, 20*time.Second, 20*time.Millisecond, "the buffered slot and the slots the pause held ran: %s", log)
	stopAll(t, scheds)

	assert.Empty(t, log.duplicates(), "no slot ran twice")
	if at := log.of(slot(1)); assert.Len(t, at, 1, "the slot buffered behind the long run") {
		assert.False(t, at[0].Before(until), "the buffered slot ran after the pause, at %v", at[0].Sub(until))
	}
	recs := recordsBySlot(t, scheds[0], job)
	held := 0
	for k := 1; k <= 6; k++ {
		rs := recs[slot(k).UnixMilli()]
		if !assert.NotEmpty(t, rs, "slot %d is in History", k) {
			continue
		}
		assert.NotEqual(t, scheduler.StatusPaused, rs[len(rs)-1].Status, "slot %d does not end paused: %+v", k, rs)
		if rs[0].Status != scheduler.StatusPaused {
			continue
		}
		held++
		if at := log.of(slot(k)); assert.Len(t, at, 1, "slot %d, held by the pause, ran once", k) {
			assert.False(t, at[0].Before(until), "slot %d ran after the pause", k)
		}
	}
	assert.GreaterOrEqual(t, held, 3, "the pause held slots 3 (or 4) to 6: %+v", recs)
}

// failOneClaimNATS is a kvlease store that fails one claim of a slot, once
// past a time. The slot is the one buffered behind the first run.
type failOneClaimNATS struct {
	*kvlease.Store
	slot func() (time.Time, bool) // the slot, once known
	at   func() time.Time         // from when
	done *atomic.Bool
}

func (s failOneClaimNATS) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if slot, ok := s.slot(); ok && in.Slot.Equal(slot) && !time.Now().Before(s.at()) && s.done.CompareAndSwap(false, true) {
		return backend.ClaimResult{}, errors.New("test: no answer")
	}
	return s.Store.Claim(ctx, in)
}

// The lost answer's long run, and when its buffered slot's claim goes
// unanswered. That is past the slot's deadline (1 s) and its keep (1 min, the
// lease of 2 s and max lateness of 1 s).
const (
	lostAnswerRun   = 70 * time.Second
	lostAnswerAfter = 66 * time.Second
)

// A stand-by waits behind a run over a minute long. Its store fails to answer
// one claim of the buffered slot, past the slot's deadline and its keep (where
// the previous design gave up). The buffered slot still runs once the run ends,
// and is not recorded late. The slots after the long run run too: the store's
// state, not a local timer, says what is still possible.
func TestOneLostAnswerInALongWaitDecidesNothingNATS(t *testing.T) {
	t.Parallel() // it mostly waits
	n := singleNode(t)
	const job, every = "waits", time.Second
	log := newStartTimes()
	buffered := func() (time.Time, bool) {
		select {
		case <-log.first:
		default:
			return time.Time{}, false
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.runs[0].Slot.Add(every), true
	}
	done := &atomic.Bool{}
	n.wrap = func(s *kvlease.Store) backend.RunStore {
		return failOneClaimNATS{Store: s, slot: buffered, done: done, at: func() time.Time {
			b, _ := buffered()
			return b.Add(lostAnswerAfter)
		}}
	}
	s, _ := n.open(t, "a")
	// No slot before the start bound: the first slot to run is the earliest,
	// and the one after it is the buffered one.
	require.NoError(t, s.Every(job, every, longFirstRun(log, lostAnswerRun), scheduler.WithLease(2*time.Second),
		scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0),
		scheduler.WithStartAt(time.Now())))
	require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	first := log.firstRun(t, 15*time.Second).Slot
	require.Eventually(t, func() bool {
		return len(log.of(first.Add(every))) > 0 && log.slotsAfter(first.Add(lostAnswerRun)) >= 3
	}, lostAnswerRun+20*time.Second, 20*time.Millisecond, "the buffered slot ran, and the slots after the long run: %s", log)
	require.NoError(t, s.Stop(ctxT(t, 10*time.Second)))
	require.True(t, done.Load(), "a claim of the buffered slot went unanswered")

	assert.Empty(t, log.duplicates(), "no slot ran twice")
	assert.Len(t, log.of(first.Add(every)), 1, "the slot buffered behind the long run ran once")
	for _, r := range recordsBySlot(t, s, job)[first.Add(every).UnixMilli()] {
		assert.NotEqual(t, scheduler.StatusLate, r.Status, "the buffered slot ran, and is not recorded late: %+v", r)
	}
}

// The holder of entry x's slot dies; x is removed and added again at once.
// The slot belongs to the removed incarnation: it is ended cancelled, never run
// again. The instance that stood by for it does not run it. Nor does one
// started after the re-add, which adopts the run with the new x in its view.
func TestReAddedEntryDoesNotRunItsOldSlotNATS(t *testing.T) {
	n := singleNode(t)
	events := &eventTally{}
	n.onEvent = events.add
	const job = "tenants"
	var mu sync.Mutex
	var starts []scheduler.Run
	var kill func()
	handler := func(ctx context.Context, r scheduler.Run) error {
		mu.Lock()
		starts = append(starts, r)
		dies := len(starts) == 1
		mu.Unlock()
		if !dies {
			return nil
		}
		go kill() // the holder dies: no heartbeat, no result
		<-ctx.Done()
		return context.Cause(ctx)
	}
	start := func(instance string) (*scheduler.Scheduler, func()) {
		s, k := n.open(t, instance)
		require.NoError(t, s.Declare(job, handler, scheduler.WithLease(5*time.Second), scheduler.WithJitter(0)))
		require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
		require.NoError(t, s.EntriesLoaded(ctxT(t, 15*time.Second)))
		return s, k
	}
	sa, killA := start("a")
	kill = killA
	// x runs once a minute, at the second of at: its slot at at is the one
	// slot of the test.
	at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	every := fmt.Sprintf("%d * * * * *", at.Second())
	_, err := sa.AddEntry(ctxT(t, 5*time.Second), job, "x", scheduler.EntrySpec{Cron: every, Payload: []byte("old")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(starts) == 1 }, 15*time.Second, 10*time.Millisecond,
		"a won the slot")

	on := func(instance string, standby bool) func(scheduler.Event) bool {
		return func(e scheduler.Event) bool {
			return e.Instance == instance && e.Entry == "x" && e.Slot.Equal(at) && (e.Kind == scheduler.EventStandby) == standby &&
				e.Kind != scheduler.EventBackendError
		}
	}
	sb, _ := start("b")
	require.Eventually(t, func() bool { return len(events.of(on("b", true))) > 0 }, 15*time.Second, 10*time.Millisecond,
		"b follows the old x and stands by for its run")
	require.NoError(t, sb.RemoveEntry(ctxT(t, 5*time.Second), job, "x", 0))
	_, err = sb.AddEntry(ctxT(t, 5*time.Second), job, "x", scheduler.EntrySpec{Cron: every, Payload: []byte("new")})
	require.NoError(t, err)
	sc, _ := start("c")
	require.Eventually(t, func() bool { return len(events.of(on("c", true))) > 0 }, 15*time.Second, 10*time.Millisecond,
		"c follows the new x and stands by for the old x's run, whose lease lives: %s", events.dump())

	name := backend.EntryRunName(job, "x")
	runs := sb.Backend().(backend.LeaseBackend).Runs()
	require.Eventually(t, func() bool {
		active, err := runs.Active(ctxT(t, 5*time.Second), name)
		return err == nil && len(active) == 0 && len(events.of(on("c", false))) > 0
	}, 20*time.Second, 20*time.Millisecond, "the dead holder's run is ended once its lease expired, and c is told: %s", events.dump())
	stopAll(t, []*scheduler.Scheduler{sb, sc})
	reap(t, sa)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, starts, 1, "the slot ran once, on a: %+v", starts)
	recs, err := sb.Backend().History(ctxT(t, 5*time.Second), name, 0)
	require.NoError(t, err)
	require.Len(t, recs, 1, "%+v", recs)
	assert.True(t, recs[0].Slot.Equal(at))
	assert.Equal(t, scheduler.StatusCancelled, recs[0].Status)
	assert.Equal(t, 1, recs[0].Attempt)
	assert.Equal(t, "a", recs[0].Instance)
}
