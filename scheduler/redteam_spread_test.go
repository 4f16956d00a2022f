package scheduler_test

import (
	"context"
	"fmt"
	"math"
	"strings"
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

// The documented use of WithSpread: entries (or a job) every day at 09:00
// spread over 15 minutes. A daily cron's shortest gap is a day, so a 15-minute
// window fits; only a window above the cron's real gap is refused.
func TestRedteamSpreadDailyCronAccepted(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	ok := func(context.Context, scheduler.Run) error { return nil }
	assert.NoError(t, s.Cron("daily", "0 9 * * *", ok, scheduler.WithSpread(15*time.Minute)),
		"a daily cron spread over 15m")
	assert.NoError(t, s.Cron("fivemin", "*/5 * * * *", ok, scheduler.WithSpread(2*time.Minute)),
		"a 5-minute cron spread over 2m")
	assert.Error(t, s.Cron("toowide", "*/5 * * * *", ok, scheduler.WithSpread(10*time.Minute)),
		"a 5-minute cron spread over 10m is refused")
	require.NoError(t, s.Declare("tenants", ok, scheduler.WithSpread(15*time.Minute)))
	_, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Cron: "0 9 * * *", Zone: "Europe/Berlin"})
	assert.NoError(t, err, "a daily cron entry on a job spread over 15m")
}

// A one-time job with a spread is still a one-time job: what At accepts without
// a spread (a retry whose backoff is minutes) it accepts with one.
func TestRedteamSpreadOnceJobRetry(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	ok := func(context.Context, scheduler.Run) error { return nil }
	at := time.Now().Add(24 * time.Hour)
	retry := scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, Backoff: 5 * time.Minute})
	require.NoError(t, s.At("plain", at, ok, retry), "control: no spread")
	assert.NoError(t, s.At("spread", at, ok, retry, scheduler.WithSpread(time.Hour)),
		"the same one-time job spread over an hour")
}

// A one-time job's slot is remembered long (backend.DefaultRunKeep), so that a
// redeploy adding catch-up never runs it again. With a spread it must be too.
func TestRedteamSpreadOnceJobNotRerunByCatchUpRedeploy(t *testing.T) {
	for _, spread := range []bool{false, true} {
		t.Run(fmt.Sprintf("spread=%v", spread), func(t *testing.T) { onceNotRerun(t, spread) })
	}
}

func onceNotRerun(t *testing.T, spread bool) {
	opts := []scheduler.JobOption{}
	if spread {
		opts = append(opts, scheduler.WithSpread(time.Minute))
	}
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		at := time.Now().UTC().Add(10 * time.Minute).Truncate(time.Minute)
		var mu sync.Mutex
		var runs []scheduler.Run
		h := func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			return nil
		}
		s := newScheduler(t, b, "A")
		require.NoError(t, s.At("once", at, h, opts...))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Until(at.Add(2 * time.Minute)))
		require.NoError(t, s.Stop(t.Context()))
		mu.Lock()
		require.Len(t, runs, 1)
		mu.Unlock()

		// 40 minutes on, a redeploy adds catch-up over the last hour.
		time.Sleep(40 * time.Minute)
		s2 := newScheduler(t, b, "B")
		require.NoError(t, s2.At("once", at, h, append(opts,
			scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour))...))
		require.NoError(t, s2.Start(t.Context()))
		time.Sleep(5 * time.Minute)
		require.NoError(t, s2.Stop(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, runs, 1, "the one slot runs once: %v", runs)
	})
}

// spreadID is an entry id of job whose offset in window is at least min.
func spreadID(job string, window, atLeast time.Duration) (string, time.Duration) {
	for i := 0; ; i++ {
		id := fmt.Sprintf("e%d", i)
		if off := scheduler.SpreadOffset(backend.EntryRunName(job, id), window); off >= atLeast {
			return id, off
		}
	}
}

// An entry changed after its nominal slot but before its moved slot: the moved
// slot (the slot, per the docs) falls after the change, so it runs under the
// new schedule. Without a spread a change a second before a slot keeps that
// slot; with one, the slot must not vanish because the nominal time passed.
func TestRedteamSpreadEntryUpdateBeforeMovedSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 15 * time.Minute
		id, off := spreadID("tenants", window, 5*time.Minute)
		b := memory.New()
		var mu sync.Mutex
		var runs []scheduler.Run
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Declare("tenants", func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			return nil
		}, scheduler.WithSpread(window)))
		e, err := s.AddEntry(t.Context(), "tenants", id, scheduler.EntrySpec{Every: time.Hour, Payload: []byte("v1")})
		require.NoError(t, err)
		require.NoError(t, s.Start(t.Context()))
		hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
		// After the nominal slot, before the moved one.
		time.Sleep(time.Until(hour.Add(30 * time.Second)))
		_, err = s.UpdateEntry(t.Context(), "tenants", id, scheduler.EntrySpec{Every: time.Hour, Payload: []byte("v2")}, e.Revision)
		require.NoError(t, err)
		time.Sleep(time.Until(hour.Add(window + time.Minute)))
		require.NoError(t, s.Stop(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		var slots []time.Time
		for _, r := range runs {
			slots = append(slots, r.Slot)
		}
		// The entry was stored at 00:00: the moved slot of that hour is after it too.
		assert.Equal(t, []time.Time{hour.Add(off - time.Hour), hour.Add(off)}, slots,
			"slot %v (nominal %v) falls after the change at %v", hour.Add(off), hour, hour.Add(30*time.Second))
	})
}

// The same for an entry added after the nominal time: "slots begin after the
// entry is stored", and the moved slot does.
func TestRedteamSpreadEntryAddedBeforeMovedSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 15 * time.Minute
		id, off := spreadID("tenants", window, 5*time.Minute)
		var mu sync.Mutex
		var runs []scheduler.Run
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Declare("tenants", func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			return nil
		}, scheduler.WithSpread(window)))
		require.NoError(t, s.Start(t.Context()))
		hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
		time.Sleep(time.Until(hour.Add(30 * time.Second)))
		_, err := s.AddEntry(t.Context(), "tenants", id, scheduler.EntrySpec{Every: time.Hour})
		require.NoError(t, err)
		time.Sleep(time.Until(hour.Add(window + time.Minute)))
		require.NoError(t, s.Stop(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		var slots []time.Time
		for _, r := range runs {
			slots = append(slots, r.Slot)
		}
		assert.Equal(t, []time.Time{hour.Add(off)}, slots, "the first slot after the entry was stored")
	})
}

// DescribeSchedule puts a spread schedule in words like any other: the cron's
// words, and the spread beside them.
func TestRedteamSpreadDescribeSchedule(t *testing.T) {
	cron, err := scheduler.ParseCron("0 9 * * *", time.UTC)
	require.NoError(t, err)
	spread := scheduler.SpreadSchedule{Schedule: cron, Offset: 5 * time.Minute, Window: 15 * time.Minute}
	got := scheduler.DescribeSchedule(spread.String())
	assert.Contains(t, got, "at 09:00", "described: %q (from %q)", got, spread.String())
	assert.NotContains(t, got, "cron ", "described: %q", got)

	every, err := scheduler.NewIntervalSchedule(time.Hour)
	require.NoError(t, err)
	got = scheduler.DescribeSchedule(scheduler.SpreadSchedule{Schedule: every, Offset: 5 * time.Minute, Window: 15 * time.Minute}.String())
	assert.True(t, strings.HasPrefix(got, "every 1h0m0s (aligned to UTC)"), "described: %q", got)
}

// At refuses an instant outside the range of slots (milliseconds since 1970 in
// 64 bits). A spread must not move the one slot out of that range: the slot's
// millisecond (its identity in claims and history) would wrap around.
func TestRedteamSpreadMovesSlotOutOfRange(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	last := time.UnixMilli(math.MaxInt64 - 1).UTC()
	at := last.Add(-time.Hour)
	window := scheduler.MaxDuration
	name := "far"
	require.Greater(t, scheduler.SpreadOffset(name, window), time.Hour)
	err := s.At(name, at, okHandler, scheduler.WithSpread(window))
	if err != nil {
		return // refused: fine
	}
	jobs := s.Jobs()
	require.Len(t, jobs, 1)
	next := jobs[0].Next
	assert.True(t, next.IsZero() || time.UnixMilli(next.UnixMilli()).Equal(next),
		"the moved slot %v has a millisecond in range (UnixMilli %d)", next, next.UnixMilli())
}
