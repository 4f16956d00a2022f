package backendtest

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// testFarPauses: a pause until 2300-01-01 or the end of year 9999 — past 2262,
// where a time.Duration from now saturates and a TTL in nanoseconds overflows — is
// stored, listed and watched by another backend of the store with its Until, and a
// scheduler there records the job's slots paused and never runs it. (kvlease once
// stored it with an overflowed TTL: the reply said paused, the job ran.)
func testFarPauses(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	for _, until := range []time.Time{
		time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
	} {
		t.Run(until.Format("2006"), func(t *testing.T) {
			pauserOf := func(b backend.Backend) backend.Pauser {
				p, ok := b.(backend.Pauser)
				require.True(t, ok, "%T is not a backend.Pauser", b)
				return p
			}
			a, b := setup(t, newBackend), setup(t, newBackend)
			ctx := Context(t)
			job := JobName("far")
			want := backend.Pause{Job: job, Reason: "until " + until.Format("2006"), By: "ops",
				At: time.Now().Truncate(time.Millisecond).UTC(), Until: until}
			require.NoError(t, pauserOf(a).SetPause(ctx, want))

			listed, err := pauserOf(b).Pauses(ctx)
			require.NoError(t, err)
			var got *backend.Pause
			for i := range listed {
				if listed[i].Job == job {
					got = &listed[i]
				}
			}
			require.NotNil(t, got, "another backend lists the pause: %+v", listed)
			assert.True(t, until.Equal(got.Until), "until %s, want %s", got.Until, until)
			assert.True(t, got.InForce(time.Now()))

			changes := make(chan []backend.Pause, 16)
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() { _ = pauserOf(b).WatchPauses(wctx, func(all []backend.Pause) { changes <- all }) }()
			seen := waitPause(t, changes, job, want.Reason)
			assert.True(t, until.Equal(seen.Until), "watched until %s, want %s", seen.Until, until)

			// An instance on b: its slots are recorded paused, nothing runs.
			var ran atomic.Int32
			s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "far-b"})
			require.NoError(t, err)
			require.NoError(t, s.Every(job, 250*time.Millisecond, func(context.Context, scheduler.Run) error {
				ran.Add(1)
				return nil
			}, scheduler.WithMaxLate(10*time.Second)))
			require.NoError(t, s.Start(ctx))
			defer func() { assert.NoError(t, s.Stop(context.Background())) }()
			_, paused := s.Paused(job)
			assert.True(t, paused, "the instance sees the pause once started")
			// Slots for 2.5s after the pause was stored: a store that expires it by
			// a TTL that overflowed drops it within a second (nats-server's sweep).
			var hist []backend.RunRecord
			require.Eventually(t, func() bool {
				hist, err = s.History(ctx, job, 100)
				require.NoError(t, err)
				return len(hist) > 0 && hist[0].Slot.After(want.At.Add(2500*time.Millisecond))
			}, 15*time.Second, 20*time.Millisecond, "slots are recorded")
			require.GreaterOrEqual(t, len(hist), 5)
			pausedSlots := 0
			for _, r := range hist {
				// A slot claimed past its lateness is late, paused or not: a loaded
				// machine may claim one that late.
				assert.Contains(t, []backend.Status{backend.StatusPaused, backend.StatusLate}, r.Status, "slot %s", r.Slot)
				if r.Status == backend.StatusPaused {
					pausedSlots++
				}
			}
			assert.Positive(t, pausedSlots, "slots are recorded paused: %v", hist)
			assert.Zero(t, ran.Load(), "nothing ran")
			listed, err = pauserOf(a).Pauses(ctx)
			require.NoError(t, err)
			assert.True(t, slices.ContainsFunc(listed, func(p backend.Pause) bool { return p.Job == job && p.Until.Equal(until) }),
				"still stored: %+v", listed)
		})
	}
}
