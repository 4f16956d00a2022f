package scheduler_test

import (
	"context"
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

// RunEntryNow runs the entry's handler with its payload as a manual run, records
// it in the entry's history (not the job's), and names the entry in the record,
// the handler's Run and the events.
func TestRunEntryNowRunsTheEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var got atomic.Pointer[scheduler.Run]
		var events []scheduler.Event
		handler := func(ctx context.Context, r scheduler.Run) error {
			got.Store(&r)
			return nil
		}
		s := newScheduler(t, b, "A", func(c *scheduler.Config) {
			c.OnEvent = func(e scheduler.Event) {
				if e.Manual {
					events = append(events, e)
				}
			}
		})
		require.NoError(t, s.Declare("tenants", handler, scheduler.WithOverlap(scheduler.OverlapSkip)))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		_, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Hour, Payload: []byte("p-acme"), Paused: true})
		require.NoError(t, err)

		rec, err := s.RunEntryNow(t.Context(), "tenants", "acme", scheduler.RequestedBy("ana"))
		require.NoError(t, err, "a paused entry runs when asked, as a paused job's RunNow does")
		assert.Equal(t, "tenants", rec.Job)
		assert.Equal(t, "acme", rec.Entry)
		assert.True(t, rec.Manual)
		assert.Equal(t, "ana", rec.RequestedBy)
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		r := got.Load()
		require.NotNil(t, r)
		assert.Equal(t, "tenants", r.Job)
		assert.Equal(t, "acme", r.Entry)
		assert.Equal(t, "p-acme", string(r.Payload))
		assert.True(t, r.Manual)

		hist, err := s.EntryHistory(t.Context(), "tenants", "acme", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.True(t, hist[0].Manual)
		assert.Equal(t, "ana", hist[0].RequestedBy)
		assert.Equal(t, "acme", hist[0].Entry)
		own, err := s.History(t.Context(), "tenants", 10)
		require.NoError(t, err)
		assert.Empty(t, own, "the job's own history holds none of its entries' runs")
		require.NotEmpty(t, events)
		for _, e := range events {
			assert.Equal(t, "tenants", e.Job)
			assert.Equal(t, "acme", e.Entry, "event %s", e.Kind)
		}
	})
}

func TestRunEntryNowRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		release := make(chan struct{})
		var manual atomic.Int32
		handler := func(ctx context.Context, r scheduler.Run) error {
			if r.Manual {
				manual.Add(1)
				<-release
			}
			return nil
		}
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Declare("tenants", handler, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithMaxManualRuns(2)))
		require.NoError(t, s.Every("other", time.Hour, handler))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		for _, id := range []string{"a", "b", "c"} {
			_, err := s.AddEntry(t.Context(), "tenants", id, scheduler.EntrySpec{Every: time.Hour})
			require.NoError(t, err)
		}

		_, err := s.RunEntryNow(t.Context(), "tenants", "nobody")
		assert.ErrorIs(t, err, scheduler.ErrEntryNotFound)
		_, err = s.RunEntryNow(t.Context(), "nojob", "a")
		assert.ErrorIs(t, err, scheduler.ErrJobNotFound)
		_, err = s.RunEntryNow(t.Context(), "tenants", "bad\x00id")
		assert.ErrorIs(t, err, scheduler.ErrInvalidEntry)
		_, err = s.RunEntryNow(t.Context(), "other", "a")
		assert.ErrorIs(t, err, scheduler.ErrEntryNotFound, "a job without that entry")

		done := make(chan error, 3)
		go func() { _, err := s.RunEntryNow(context.Background(), "tenants", "a"); done <- err }()
		synctest.Wait()
		_, err = s.RunEntryNow(t.Context(), "tenants", "a")
		assert.ErrorIs(t, err, scheduler.ErrJobBusy, "the entry's own run holds its lease (overlap skip)")
		assert.ErrorContains(t, err, `entry "a" of "tenants"`)
		go func() { _, err := s.RunEntryNow(context.Background(), "tenants", "b"); done <- err }()
		synctest.Wait()
		assert.Equal(t, int32(2), manual.Load(), "another entry's run is not kept out by the first: overlap is per entry")
		_, err = s.RunEntryNow(t.Context(), "tenants", "c")
		assert.ErrorIs(t, err, scheduler.ErrTooManyManualRuns, "the job's manual-run limit counts its entries' manual runs")
		close(release)
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})
}

// An entry added on one instance is run at once on another: RunEntryNow waits
// for the view to follow an entry the store has.
func TestRunEntryNowWaitsForTheViewToFollowANewEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("tenants", runs.handler))
		})
		_, err := fleet[0].AddEntry(t.Context(), "tenants", "new", scheduler.EntrySpec{Every: time.Hour, Payload: []byte("x")})
		require.NoError(t, err)
		rec, err := fleet[1].RunEntryNow(t.Context(), "tenants", "new")
		require.NoError(t, err)
		assert.Equal(t, "i1", rec.Instance)
		assert.Equal(t, "x", runs.payloads["new"])
	})
}

// Backfill of one entry, and of every entry, runs the slots the entries missed
// while no instance was up, each once across two instances that backfill at the
// same time; the slots that ran are reported already run, and each slot names
// its entry.
func TestBackfillEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		declare := func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("tenants", runs.handler))
			require.NoError(t, s.Every("own", time.Minute, func(context.Context, scheduler.Run) error { return nil }))
		}
		first := startFleet(t, b, 1, declare)
		time.Sleep(time.Second)
		added := time.Now()
		for _, e := range []struct {
			id    string
			every time.Duration
		}{{"a", time.Minute}, {"b", 2 * time.Minute}} {
			_, err := first[0].AddEntry(t.Context(), "tenants", e.id, scheduler.EntrySpec{Every: e.every, Payload: []byte("p-" + e.id)})
			require.NoError(t, err)
		}
		time.Sleep(4 * time.Minute) // a ran 00:01 to 00:04, b 00:02 and 00:04
		require.NoError(t, first[0].Stop(t.Context()))
		time.Sleep(6 * time.Minute) // nobody up: a misses 00:05 to 00:09, b 00:06 and 00:08
		fleet := startFleet(t, b, 2, declare)
		to := time.Now().Truncate(time.Minute)

		_, err := fleet[0].Backfill(t.Context(), "tenants", added, to)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "a job of entries has no slots of its own")
		assert.ErrorContains(t, err, "BackfillAllEntries")
		_, err = fleet[0].Backfill(t.Context(), "tenants", added, to, scheduler.BackfillEntry("nobody"))
		assert.ErrorIs(t, err, scheduler.ErrEntryNotFound)
		_, err = fleet[0].Backfill(t.Context(), "tenants", added, to, scheduler.BackfillEntry("a"), scheduler.BackfillAllEntries())
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption)

		one, err := fleet[0].Backfill(t.Context(), "tenants", added, to, scheduler.BackfillEntry("b"))
		require.NoError(t, err)
		assert.Equal(t, "b", one.Entry)
		assert.Equal(t, 2, one.Count(scheduler.BackfillRan), "%+v", one.Slots)
		assert.Equal(t, 2, one.Count(scheduler.BackfillAlreadyRan))
		for _, sl := range one.Slots {
			assert.Equal(t, "b", sl.Entry)
		}

		var wg sync.WaitGroup
		results := make([]scheduler.BackfillResult, 2)
		for i, s := range fleet {
			wg.Go(func() {
				var err error
				results[i], err = s.Backfill(t.Context(), "tenants", added, to, scheduler.BackfillAllEntries(), scheduler.BackfillConcurrency(4))
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		ran, already := 0, 0
		for _, r := range results {
			assert.True(t, r.AllEntries)
			require.Len(t, r.Slots, 13, "a: 9 slots, b: 4")
			for i, sl := range r.Slots {
				assert.Contains(t, []string{"a", "b"}, sl.Entry)
				if i > 0 {
					assert.False(t, sl.Slot.Before(r.Slots[i-1].Slot), "oldest first")
				}
			}
			ran += r.Count(scheduler.BackfillRan)
			already += r.Count(scheduler.BackfillAlreadyRan)
		}
		assert.Equal(t, 5, ran, "a's 5 missed slots ran once, on one of the two")
		assert.GreaterOrEqual(t, already, 2*8, "a's 4 and b's 4 slots that ran, on both")
		for _, id := range []string{"a", "b"} {
			for slot, on := range runs.slots(id) {
				assert.Len(t, on, 1, "entry %s slot %v ran once", id, time.UnixMilli(slot))
			}
		}
		assert.Len(t, runs.slots("a"), 10, "9 in the range, and 00:10, due as the two started")
		assert.Len(t, runs.slots("b"), 5)
		hist, err := fleet[1].EntryHistory(t.Context(), "tenants", "a", 0)
		require.NoError(t, err)
		backfilled := 0
		for _, r := range hist {
			if r.Backfill {
				backfilled++
			}
		}
		assert.Equal(t, 5, backfilled)
	})
}

// An entry's manual run buffered behind the entry's long run, whose process
// then dies (its RunEntryNow never claims the slot again): the entry is not
// wedged by it. The store says the buffered slot is manual (an entry's manual
// slot cannot be told from its schedule, which may have changed): it is ended,
// never run, and the entry's later slots run once each.
func TestRedteamBufferedEntryManualSlotOfADeadRequester(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var mu sync.Mutex
		starts := map[int64]int{}
		t0 := time.Now()
		first := t0.Add(time.Minute).Truncate(time.Minute)
		handler := func(ctx context.Context, r scheduler.Run) error {
			mu.Lock()
			starts[r.Slot.UnixMilli()]++
			mu.Unlock()
			if r.Slot.Equal(first) {
				time.Sleep(20 * time.Second)
			}
			return nil
		}
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("tenants", handler, scheduler.WithOverlap(scheduler.OverlapBufferOne), scheduler.WithJitter(0)))
		})
		e, err := fleet[0].AddEntry(t.Context(), "tenants", "e", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		time.Sleep(time.Until(first) + time.Second) // the entry's first slot runs for 20s

		// What a RunEntryNow on instance Z stored before Z died: the entry's
		// manual slot, buffered behind its first slot.
		manual := first.Add(time.Second + 7*time.Millisecond)
		res, err := b.Runs().Claim(t.Context(), backend.RunClaim{
			Job: backend.EntryRunName("tenants", "e"), Slot: manual, Token: "z-token", Instance: "Z", Lease: 3 * time.Second,
			Manual: true, Incarnation: e.Incarnation, Deadline: time.Now().Add(2 * time.Second), Overlap: backend.OverlapBufferOne,
			Keep: time.Hour,
		})
		require.NoError(t, err)
		require.Equal(t, backend.OutcomeBuffered, res.Outcome, "%+v", res)

		time.Sleep(4*time.Minute + 10*time.Second)
		synctest.Wait()
		active, err := b.Runs().Active(t.Context(), backend.EntryRunName("tenants", "e"))
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		for k := 2; k <= 4; k++ {
			assert.Equal(t, 1, starts[first.Add(time.Duration(k)*time.Minute).UnixMilli()], "slot +%dm runs once", k)
		}
		assert.Zero(t, starts[manual.UnixMilli()], "the dead requester's slot is not run by another instance")
		for _, r := range active {
			assert.False(t, r.Buffered, "a buffered slot left behind for ever: %+v", r)
		}
	})
}

// Six instances run one entry now at the same instant: each run is its own
// manual slot, run once, none lost to another's.
func TestRunEntryNowAtTheSameInstantOnSixInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		fleet := startFleet(t, b, 6, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("tenants", runs.handler))
		})
		_, err := fleet[0].AddEntry(t.Context(), "tenants", "e", scheduler.EntrySpec{Every: time.Hour})
		require.NoError(t, err)
		synctest.Wait()
		var wg sync.WaitGroup
		for _, s := range fleet {
			wg.Go(func() {
				rec, err := s.RunEntryNow(context.Background(), "tenants", "e")
				assert.NoError(t, err)
				assert.Equal(t, s.Instance(), rec.Instance)
			})
		}
		wg.Wait()
		slots := runs.slots("e")
		assert.Len(t, slots, 6, "six manual slots")
		for slot, on := range slots {
			assert.Len(t, on, 1, "slot %d ran once", slot)
		}
	})
}
