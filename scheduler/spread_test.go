package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// The offset of a run name is fixed by the release: a new hash would move every
// spread slot (a change of schedule across a rolling upgrade).
func TestSpreadOffsetIsStable(t *testing.T) {
	assert.Equal(t, 318_923*time.Millisecond, scheduler.SpreadOffset("report", 15*time.Minute))
	assert.Equal(t, 23_197*time.Millisecond, scheduler.SpreadOffset(backend.EntryRunName("tenants", "acme"), time.Minute))
	assert.Zero(t, scheduler.SpreadOffset("report", 0))
	for _, name := range []string{"a", "b", "report", "tenants/acme"} {
		off := scheduler.SpreadOffset(name, time.Second)
		assert.True(t, off >= 0 && off < time.Second, "%s: %v", name, off)
	}
}

// 300 entries every hour, all at the top of the hour, on a job spread over 15
// minutes, followed by two replicas: each entry's slot is the hour plus its run
// name's offset (Run.Nominal is the hour), each runs once an hour, and the runs
// of one hour are spread over the window instead of falling in one second.
func TestSpreadEntriesRunOnceAtTheirOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		const window = 15 * time.Minute
		var mu sync.Mutex
		runs := map[string][]scheduler.Run{}
		var fleet []*scheduler.Scheduler
		for _, name := range []string{"A", "B"} {
			s := newScheduler(t, b, name)
			require.NoError(t, s.Declare("tenants", func(_ context.Context, r scheduler.Run) error {
				mu.Lock()
				runs[r.Entry] = append(runs[r.Entry], r)
				mu.Unlock()
				return nil
			}, scheduler.WithSpread(window)))
			fleet = append(fleet, s)
		}
		for i := range 300 {
			_, err := fleet[0].AddEntry(t.Context(), "tenants", fmt.Sprintf("t%03d", i), scheduler.EntrySpec{Every: time.Hour})
			require.NoError(t, err)
		}
		for _, s := range fleet {
			require.NoError(t, s.Start(t.Context()))
		}
		hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
		time.Sleep(time.Until(hour.Add(window)))
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}

		minutes := map[int]int{}
		for i := range 300 {
			id := fmt.Sprintf("t%03d", i)
			rs := runs[id]
			off := scheduler.SpreadOffset(backend.EntryRunName("tenants", id), window)
			// Stored at 00:00: the slots of both hours are after it.
			require.Len(t, rs, 2, "entry %s runs once an hour", id)
			assert.Equal(t, hour.Add(off-time.Hour), rs[0].Slot, "entry %s at its offset", id)
			assert.Equal(t, hour.Add(off), rs[1].Slot, "entry %s at its offset", id)
			assert.Equal(t, hour, rs[1].Nominal, "entry %s", id)
			minutes[int(off/time.Minute)]++
		}
		assert.Len(t, minutes, 15, "runs in every minute of the window: %v", minutes)
		for m, n := range minutes {
			assert.Less(t, n, 45, "minute %d holds %d of 300 runs", m, n)
		}
	})
}

// A job's own slots move by its name's offset: Jobs' next slot, the run's slot
// and its lag (measured from the moved slot) say so.
func TestSpreadJobSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 10 * time.Minute
		off := scheduler.SpreadOffset("report", window)
		events := newEventLog(scheduler.EventStarted)
		s := newScheduler(t, memory.New(), "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		got := make(chan scheduler.Run, 1)
		require.NoError(t, s.Every("report", time.Hour, func(_ context.Context, r scheduler.Run) error {
			select {
			case got <- r:
			default:
			}
			return nil
		}, scheduler.WithSpread(window)))
		require.NoError(t, s.Start(t.Context()))
		hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
		if time.Now().Before(hour.Add(off - time.Hour)) {
			hour = hour.Add(-time.Hour)
		}
		jobs := s.Jobs()
		require.Len(t, jobs, 1)
		assert.Equal(t, hour.Add(off), jobs[0].Next)
		r := <-got
		require.NoError(t, s.Stop(t.Context()))
		assert.Equal(t, hour.Add(off), r.Slot)
		assert.Equal(t, hour, r.Nominal)
		started := events.of(scheduler.EventStarted)
		require.NotEmpty(t, started)
		assert.Less(t, started[0].Lag, time.Second, "lag from the moved slot")
	})
}

// A spread window that is zero, above the schedule's shortest gap or above
// MaxDuration is refused at registration; an entry whose gap is below the
// job's window is refused at AddEntry.
func TestSpreadRefusesBadWindows(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	ok := func(context.Context, scheduler.Run) error { return nil }
	assert.ErrorIs(t, s.Every("zero", time.Hour, ok, scheduler.WithSpread(0)), scheduler.ErrInvalidOption)
	err := s.Every("wide", time.Hour, ok, scheduler.WithSpread(2*time.Hour))
	assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
	assert.ErrorContains(t, err, "above the shortest gap 1h0m0s")
	assert.ErrorIs(t, s.Every("huge", time.Hour, ok, scheduler.WithSpread(scheduler.MaxDuration+time.Hour)), scheduler.ErrInvalidOption)
	require.NoError(t, s.Every("fits", time.Hour, ok, scheduler.WithSpread(time.Hour)))
	require.NoError(t, s.Declare("tenants", ok, scheduler.WithSpread(15*time.Minute)))
	_, err = s.AddEntry(t.Context(), "tenants", "fast", scheduler.EntrySpec{Every: 5 * time.Minute})
	assert.ErrorIs(t, err, scheduler.ErrInvalidEntry)
	assert.ErrorContains(t, err, "spread window 15m0s is above the shortest gap 5m0s")
	_, err = s.AddEntry(t.Context(), "tenants", "hourly", scheduler.EntrySpec{Every: time.Hour})
	require.NoError(t, err)
}

// A one-time job whose spread moves its slot past its end bound has no slot: it
// is refused at registration, not left to never run.
func TestSpreadOnceJobMovedPastItsEndIsRefused(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	ok := func(context.Context, scheduler.Run) error { return nil }
	const window = time.Hour
	off := scheduler.SpreadOffset("once", window)
	require.Greater(t, off, time.Minute)
	at := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	err := s.At("once", at, ok, scheduler.WithSpread(window), scheduler.WithEndAt(at.Add(off-time.Second)))
	assert.ErrorIs(t, err, scheduler.ErrInvalidSchedule)
	require.NoError(t, s.At("once", at, ok, scheduler.WithSpread(window), scheduler.WithEndAt(at.Add(off+time.Second))))
}
