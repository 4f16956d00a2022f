package scheduler_test

import (
	"context"
	"errors"
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

// Red-team of missed slots. Each test asserts the
// behaviour docs/concepts.md "Missed slots" promises: a slot due while no
// replica could claim it is recorded missed, once, never left without a trace.

func okHandler(context.Context, scheduler.Run) error { return nil }

// assertOneRecordEach asserts that every minute slot base+from … base+to has
// exactly one record, with status want.
func assertOneRecordEach(t *testing.T, s *scheduler.Scheduler, base time.Time, from, to int, want scheduler.Status) {
	t.Helper()
	recs := records(t, s, "job")
	for m := from; m <= to; m++ {
		rs := recs[base.Add(time.Duration(m)*time.Minute).Unix()]
		if assert.Len(t, rs, 1, "slot 0:%02d has one record: %+v", m, rs) {
			assert.Equal(t, want, rs[0].Status, "slot 0:%02d", m)
		}
	}
}

// Operators ran the job by hand 20 times (RunNow) after its last scheduled slot,
// then every replica went down. Manual runs are off the schedule and ignored by
// the Start's reading of the newest recorded slot, but they fill the 20 newest
// history records it reads (missedMarkDepth), so it finds no scheduled slot,
// treats the job as new and records nothing: slots 0:05 … 0:14 stay without a
// record (a silent gap), which the docs say never happens.
func TestRedteamMissedManualRunsHideTheLastSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now()
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("job", time.Minute, okHandler))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(4*time.Minute + 10*time.Second)
		for range 20 {
			_, err := a.RunNow(t.Context(), "job")
			require.NoError(t, err)
			time.Sleep(time.Second)
		}
		require.NoError(t, a.Stop(t.Context())) // 0:04:30
		time.Sleep(11 * time.Minute)            // 0:05 … 0:15 fall with no replica up

		s := newScheduler(t, b, "B")
		require.NoError(t, s.Every("job", time.Minute, okHandler))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		assertOneRecordEach(t, s, base, 5, 14, scheduler.StatusMissed)
	})
}

// A replica comes back at 0:16:01 after an outage and is stopped two seconds
// later (a crash loop, a deploy rolled back). Its loop claimed and ran 0:16 at
// once (within the max lateness); its missed claim of 0:15 waits until 0:15 +
// max lateness + 2×MaxClockSkew = 0:16:04 and is dropped by Stop. The next
// replica reads 0:16 as the newest recorded slot and never records 0:15: a
// slot nobody ran stays without a record for good.
func TestRedteamMissedStopBeforeTheNewestIsRecorded(t *testing.T) {
	t.Skip("known gap: a missed claim waits out twice the clock skew allowance; a record of a later slot written meanwhile hides the slot from the next Start")
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := fleetGone(t, b) // 0:00 … 0:04 ran, nobody up until 0:15:30
		time.Sleep(31 * time.Second)

		s := newScheduler(t, b, "B") // 0:16:01
		require.NoError(t, s.Every("job", time.Minute, okHandler))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2 * time.Second)
		require.NoError(t, s.Stop(t.Context())) // 0:16:03

		time.Sleep(4*time.Minute + 27*time.Second)
		c := newScheduler(t, b, "C") // 0:20:30
		require.NoError(t, c.Every("job", time.Minute, okHandler))
		require.NoError(t, c.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, c.Stop(t.Context()))
		assertOneRecordEach(t, c, base, 5, 15, scheduler.StatusMissed)
		assertOneRecordEach(t, c, base, 17, 19, scheduler.StatusMissed)
	})
}

// A job every second with catch-up all over a 3 h window, every replica down for
// 3 h: catch-up runs the newest MaxCatchUpSlots (1000); the ~9,800 older slots
// of the window (capped) are claimed and recorded missed one by one, outside
// the MaxMissedRecords bound that the same outage honours under CatchUpNone (a
// record each for the newest MaxMissedRecords, one record for the rest). Claims, records
// and EventMissed grow with the outage.
func TestRedteamMissedCappedCatchUpIsUnbounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		opt := scheduler.WithCatchUp(scheduler.CatchUpAll, 3*time.Hour)
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("job", time.Second, okHandler, opt))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(10*time.Second + 500*time.Millisecond)
		require.NoError(t, a.Stop(t.Context()))
		time.Sleep(3 * time.Hour)

		events := newEventLog(scheduler.EventMissed)
		s := newScheduler(t, b, "B", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("job", time.Second, okHandler, opt))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(10 * time.Second)
		require.NoError(t, s.Stop(t.Context()))
		total := 0
		for _, e := range events.of(scheduler.EventMissed) {
			total += e.Count
		}
		assert.Greater(t, total, 9000, "the slots past the cap are counted")
		assert.LessOrEqual(t, len(events.of(scheduler.EventMissed)), scheduler.MaxMissedRecords+1,
			"missed records of one job's outage are bounded, as with CatchUpNone")
	})
}

// slowRunClaims is a memory backend whose run store takes d (of the bubble's
// clock) to answer each claim, as a store over a network does.
type slowRunClaims struct {
	*memory.Backend
	d time.Duration
}

func (b slowRunClaims) Runs() backend.RunStore {
	return slowRunClaimStore{b.Backend.Runs().(*memory.RunStore), b.d}
}

type slowRunClaimStore struct {
	*memory.RunStore
	d time.Duration
}

func (s slowRunClaimStore) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	time.Sleep(s.d)
	return s.RunStore.Claim(ctx, in)
}

// Two replicas back from a 2 h outage of a job every second, C starting 1.5 ms
// after B on a store whose claims take 1 ms. B records the range of the oldest
// slots (one record at the first slot nobody ran, count N) and then, one claim
// later, its newest MaxMissedRecords one by one. C reads the history between those two
// claims: its newest recorded slot is B's range record, so C records a second
// range record, from the next slot, for N-1 slots. The older slots are counted
// twice (EventMissed Count, anarchon_missed_slots_total) and two records claim
// to stand for them.
func TestRedteamMissedRangeRecordedTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := slowRunClaims{memory.New(), time.Millisecond}
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("job", time.Second, okHandler))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(10*time.Second + 500*time.Millisecond)
		require.NoError(t, a.Stop(t.Context()))
		last := time.Now().Truncate(time.Second) // the slot it ran last
		time.Sleep(2 * time.Hour)

		events := newEventLog(scheduler.EventMissed)
		var fleet []*scheduler.Scheduler
		for i, name := range []string{"B", "C"} {
			if i > 0 {
				time.Sleep(1500 * time.Microsecond)
			}
			s := newScheduler(t, b, name, func(c *scheduler.Config) { c.OnEvent = events.hook })
			require.NoError(t, s.Every("job", time.Second, okHandler, scheduler.WithHistory(1000, 0)))
			require.NoError(t, s.Start(t.Context()))
			fleet = append(fleet, s)
		}
		time.Sleep(10 * time.Second)
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}
		total, ranges := 0, 0
		for _, e := range events.of(scheduler.EventMissed) {
			total += e.Count
			if e.Count > 1 {
				ranges++
			}
		}
		fell := int(2 * time.Hour / time.Second)
		assert.Equal(t, 1, ranges, "one record for the oldest slots")
		assert.InDelta(t, fell, total, 3, "each slot that fell (%d after %s) is counted once", fell, last)
	})
}

// rtHistoryOutage is a memory backend whose History fails while failing is set.
type rtHistoryOutage struct {
	*memory.Backend
	failing *atomic.Bool
}

func (b rtHistoryOutage) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	if b.failing.Load() {
		return nil, errors.New("history unavailable")
	}
	return b.Backend.History(ctx, job, limit)
}

// The store fails History reads (claims work) when a replica comes back after
// an outage of a job with catch-up all. Before the change catch-up claimed its
// slots at once; now the Start's reading of the newest recorded slot comes
// first and is asked again until answered, so catch-up waits for it: no
// missed slot runs for as long as History fails, however long that is, though
// the claims it needs would all be answered.
func TestRedteamMissedHistoryFailureBlocksCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		b := rtHistoryOutage{memory.New(), &failing}
		opt := scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour)
		base := fleetGone(t, b, opt)
		failing.Store(true)
		runs := newRunLog()
		s := newScheduler(t, b, "B")
		require.NoError(t, s.Every("job", time.Minute, runs.handler, opt))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(5 * time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		failing.Store(false)
		runs.mu.Lock()
		defer runs.mu.Unlock()
		for m := 5; m <= 14; m++ {
			assert.Len(t, runs.runs[base.Add(time.Duration(m)*time.Minute).UnixMilli()], 1, "catch-up ran slot 0:%02d", m)
		}
	})
}

// cutOff is a memory backend whose run store fails every claim while down is
// set: every replica cut off from the run store.
type cutOff struct {
	*memory.Backend
	down *atomic.Bool
}

func (b cutOff) Runs() backend.RunStore {
	return cutOffRuns{b.Backend.Runs().(*memory.RunStore), b.down}
}

type cutOffRuns struct {
	*memory.RunStore
	down *atomic.Bool
}

func (s cutOffRuns) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if s.down.Load() {
		return backend.ClaimResult{}, errors.New("run store unreachable")
	}
	return s.RunStore.Claim(ctx, in)
}

// Two replicas stay up while the run store is unreachable from 0:04:30 to
// 0:15:30 (no replica restarts). Each slot's claim is sent, fails, and is sent
// again; but a claim is given up once the store would have forgotten the slot
// (slot + keep: max lateness + lease + 1 min, about 2.5 min here), with only a
// local EventLate. So slots 0:05 … 0:12 end with no record at all once the
// store is back, and no Start ever comes to record them: a silent gap the
// docs' "cut off from the run store" case promises never happens. Only 0:13
// and 0:14, whose claims were still being sent, are recorded missed.
func TestRedteamMissedLongCutOffLeavesNoRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		b := cutOff{memory.New(), &down}
		base := time.Now()
		var fleet []*scheduler.Scheduler
		for _, name := range []string{"A", "B"} {
			s := newScheduler(t, b, name)
			require.NoError(t, s.Every("job", time.Minute, okHandler))
			require.NoError(t, s.Start(t.Context()))
			fleet = append(fleet, s)
		}
		time.Sleep(4*time.Minute + 30*time.Second)
		down.Store(true)
		time.Sleep(11 * time.Minute)
		down.Store(false) // 0:15:30
		time.Sleep(2 * time.Minute)
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}
		assertOneRecordEach(t, fleet[0], base, 0, 4, scheduler.StatusOK)
		assertOneRecordEach(t, fleet[0], base, 5, 14, scheduler.StatusMissed)
		assertOneRecordEach(t, fleet[0], base, 15, 17, scheduler.StatusOK)
	})
}

// One replica of two is cut off from the run store from 0:04:30 to 0:15:30,
// longer than the store remembers a slot; the other runs every slot. Once the
// store answers the cut-off replica again, it finds each slot it gave up in the
// history: nothing is recorded missed, each slot has its one record.
func TestMissedPartialCutOffRecordsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		mem := memory.New()
		base := time.Now()
		events := newEventLog(scheduler.EventMissed)
		a := newScheduler(t, cutOff{mem, &down}, "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		b := newScheduler(t, mem, "B")
		for _, s := range []*scheduler.Scheduler{a, b} {
			require.NoError(t, s.Every("job", time.Minute, okHandler))
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(4*time.Minute + 30*time.Second)
		down.Store(true)
		time.Sleep(11 * time.Minute)
		down.Store(false) // 0:15:30
		time.Sleep(2 * time.Minute)
		for _, s := range []*scheduler.Scheduler{a, b} {
			require.NoError(t, s.Stop(t.Context()))
		}
		assertOneRecordEach(t, a, base, 0, 17, scheduler.StatusOK)
		assert.Empty(t, events.of(scheduler.EventMissed))
	})
}
