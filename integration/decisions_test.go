package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// The stored-decision scenarios (every slot's fate is decided once and stored) on
// the real stores: kvlease over an embedded server. The scheduler package runs them
// on the memory store under synctest.

// untilSlot waits until just after the next multiple of interval that is at least
// minWait away, and returns that slot.
func untilSlot(t *testing.T, interval, minWait time.Duration) time.Time {
	t.Helper()
	slot := time.Now().Add(minWait).Truncate(interval).Add(interval)
	sleepCtx(t, time.Until(slot))
	return slot
}

// nextSlot is the first multiple of interval at least minWait from now.
func nextSlot(interval, minWait time.Duration) time.Time {
	return time.Now().Add(minWait).Truncate(interval).Add(interval)
}

// Scenario 7: an instance whose clock is 2s behind the server's, Every(1s). Lateness
// is judged on the instance's clock, the store allowing the clock skew allowance:
// every slot runs once, with leases and without.
func TestReplicaClockBehindServer(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	for _, leases := range []bool{false, true} {
		name := map[bool]string{false: "without leases", true: "with leases"}[leases]
		t.Run(name, func(t *testing.T) {
			nc := natstest.Conn(t, srv)
			var b backend.Backend = plainBackend(t, nc)
			if leases {
				b = leased(t, nc, 1)
			}
			var mu sync.Mutex
			var late []time.Time
			s, err := scheduler.New(scheduler.Config{
				Backend: b, Instance: "behind", Clock: scheduler.OffsetClock{Offset: -2 * time.Second},
				OnEvent: func(e scheduler.Event) {
					if e.Kind == scheduler.EventLate {
						mu.Lock()
						late = append(late, e.Slot)
						mu.Unlock()
						t.Logf("late: slot %s at %s (instance clock), outcome %s, err %v", e.Slot.Format(time.TimeOnly+".000"), e.At.Format(time.TimeOnly+".000"), e.Outcome, e.Err)
					}
				},
			})
			require.NoError(t, err)
			l := newLedger()
			job := "behind-" + strconv.FormatBool(leases)
			require.NoError(t, s.Every(job, time.Second, l.handler))
			require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
			from := time.Now().Add(-2 * time.Second).Truncate(time.Second).Add(time.Second) // the instance's next slot
			sleepCtx(t, 5*time.Second)
			require.NoError(t, s.Stop(ctxT(t, 10*time.Second)))
			c := l.count(job, time.Second, from, from.Add(2*time.Second))
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%s: %v, %d late", name, c, len(late))
			for _, slot := range late {
				// The first slot, due as Start returns, may be late on a loaded machine.
				assert.True(t, slot.Before(from), "slot %s late", slot)
			}
			assert.Equal(t, 0, c.missed, "%v", c)
			assert.Equal(t, 0, c.dups, "%v", c)
		})
	}
}

// Scenario 2 on the scheduler: a lease key whose claimer died before writing the run
// record. The instances stand by until it expires, then run the slot once if its
// deadline allows, or record it late once; never forget it.
func TestOrphanLeaseKeyOnTheScheduler(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	for _, tc := range []struct {
		name    string
		maxLate time.Duration
		want    scheduler.Status
	}{{"run within its deadline", 4 * time.Second, scheduler.StatusOK}, {"late past its deadline", 1500 * time.Millisecond, scheduler.StatusLate}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := "orphan-" + strconv.Itoa(int(tc.maxLate.Milliseconds()))
			l := newLedger()
			var scheds []*scheduler.Scheduler
			for _, id := range []string{"a", "b"} {
				s := newSched(t, leased(t, natstest.Conn(t, srv), 1), id, nil)
				require.NoError(t, s.Every(job, 10*time.Second, l.handler, scheduler.WithMaxLate(tc.maxLate), scheduler.WithLease(2*time.Second)))
				require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
				scheds = append(scheds, s)
			}
			slot := nextSlot(10*time.Second, time.Second)
			// The orphan: a lease key for the slot, written by a claimer that died
			// before the run record; it lives 2s.
			j := natstest.JetStream(t, natstest.Conn(t, srv))
			key := "lease." + base64.RawURLEncoding.EncodeToString([]byte(job)) + "." + strconv.FormatInt(slot.UnixMilli(), 10)
			data, _ := json.Marshal(map[string]any{"v": 1, "token": "dead", "instance": "dead", "lease_ms": 2000})
			sleepCtx(t, time.Until(slot.Add(-200*time.Millisecond)))
			m := nats.NewMsg("$KV." + kvlease.DefaultBucket + "." + key)
			m.Data = data
			_, err := j.PublishMsg(ctxT(t, 5*time.Second), m, natsjs.WithExpectLastSequencePerSubject(0), natsjs.WithMsgTTL(2*time.Second))
			require.NoError(t, err)
			sleepCtx(t, time.Until(slot.Add(5*time.Second)))
			stopAll(t, scheds)

			runs := l.runs[job][slot.UnixMilli()]
			hist, err := scheds[0].History(ctxT(t, 5*time.Second), job, 10)
			require.NoError(t, err)
			var at []scheduler.RunRecord
			for _, r := range hist {
				if r.Slot.Equal(slot) {
					at = append(at, r)
				}
			}
			require.Len(t, at, 1, "one record for the orphaned slot: %+v", hist)
			assert.Equal(t, tc.want, at[0].Status)
			if tc.want == scheduler.StatusOK {
				assert.Len(t, runs, 1, "ran once")
			} else {
				assert.Empty(t, runs, "a late slot does not run")
			}
		})
	}
}

// Scenario 8 on kvlease: a rolling deploy replaces the backups first and the holder
// last; an instance started after the slot adopts the released run.
func TestHandOverToLaterInstancesNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	const job = "handover-later"
	l := newLedger()
	var mu sync.Mutex
	holder := ""
	h := func(ctx context.Context, r scheduler.Run) error {
		l.record(r)
		if r.Attempt > 1 {
			return nil
		}
		mu.Lock()
		holder = r.Instance
		mu.Unlock()
		<-ctx.Done() // a long run, cut by its instance's Stop
		return context.Cause(ctx)
	}
	start := func(id string) *scheduler.Scheduler {
		s := newSched(t, leased(t, natstest.Conn(t, srv), 1), id, nil)
		require.NoError(t, s.Every(job, 10*time.Second, h, scheduler.WithLease(3*time.Second), scheduler.WithMaxLate(time.Second)))
		require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
		return s
	}
	old := map[string]*scheduler.Scheduler{"a": start("a"), "b": start("b"), "c": start("c")}
	slot := untilSlot(t, 10*time.Second, time.Second)
	sleepCtx(t, 1500*time.Millisecond) // past the slot's deadline
	mu.Lock()
	running := holder
	mu.Unlock()
	require.NotEmpty(t, running, "a holder runs the slot")
	var fresh []*scheduler.Scheduler
	for id, s := range old {
		if id != running {
			require.NoError(t, s.Stop(ctxT(t, 5*time.Second)))
			fresh = append(fresh, start(id+"2"))
		}
	}
	stopCtx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_ = old[running].Stop(stopCtx) // the holder last: cancelled, released
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		n := len(l.runs[job][slot.UnixMilli()])
		l.mu.Unlock()
		if n >= 2 {
			break
		}
		sleepCtx(t, 50*time.Millisecond)
	}
	stopAll(t, fresh)
	l.mu.Lock()
	runs := append([]scheduler.Run(nil), l.runs[job][slot.UnixMilli()]...)
	l.mu.Unlock()
	require.Len(t, runs, 2, "the released run was taken over: %+v", runs)
	assert.Equal(t, 2, runs[1].Attempt)
	assert.Contains(t, []string{"a2", "b2", "c2"}, runs[1].Instance)
	assert.Greater(t, runs[1].Fence, runs[0].Fence)
}

// Scenario 5 on JetStream without leases: a tight duplicate window that passes the
// check (jitter + max lateness + clock skew allowance below it) with one instance
// 600ms behind: every slot runs once.
func TestTightWindowWithSkewedInstance(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	const job = "tight"
	l := newLedger()
	var scheds []*scheduler.Scheduler
	for i, off := range []time.Duration{0, -600 * time.Millisecond} {
		b := plainBackend(t, natstest.Conn(t, srv), jetstream.WithDedupeWindow(3*time.Second))
		s := newSched(t, b, "i"+strconv.Itoa(i), scheduler.OffsetClock{Offset: off})
		require.NoError(t, s.Every(job, time.Second, l.handler, scheduler.WithMaxLate(900*time.Millisecond)))
		scheds = append(scheds, s)
	}
	// The window a review used (1s) is refused, naming every term.
	tooTight := newSched(t, plainBackend(t, natstest.Conn(t, srv), jetstream.WithDedupeWindow(time.Second)), "x", nil)
	err := tooTight.Every(job, time.Second, l.handler, scheduler.WithMaxLate(900*time.Millisecond))
	require.ErrorIs(t, err, scheduler.ErrWindowTooShort)
	assert.Contains(t, err.Error(), "clock skew allowance 2s")

	for _, s := range scheds {
		require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
	}
	from := time.Now().Truncate(time.Second).Add(2 * time.Second)
	sleepCtx(t, 6*time.Second)
	stopAll(t, scheds)
	c := l.count(job, time.Second, from, from.Add(3*time.Second))
	t.Logf("tight window, one instance 600ms behind: %v", c)
	assert.Empty(t, l.duplicates(job))
	assert.Equal(t, 0, c.missed, "%v", c)
}
