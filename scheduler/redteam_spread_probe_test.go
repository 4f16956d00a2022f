package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// Probe: missed slots recorded by a restarted replica land on the moved slots.
func TestRedteamSpreadProbeMissedOnMovedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every, window = 10 * time.Minute, 10 * time.Minute
		off := scheduler.SpreadOffset("job", window)
		t.Logf("offset %v", off)
		b := memory.New()
		base := time.Now().UTC()
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("job", every, okHandler, scheduler.WithSpread(window)))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(25 * time.Minute)
		require.NoError(t, a.Stop(t.Context()))
		time.Sleep(40 * time.Minute) // 0:25 .. 1:05 down
		s := newScheduler(t, b, "B")
		require.NoError(t, s.Every("job", every, okHandler, scheduler.WithSpread(window)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		recs := records(t, s, "job")
		for k, rs := range recs {
			slot := time.Unix(k, 0).UTC()
			assert.Equal(t, off, time.Duration(rs[0].Slot.Sub(base)%every), "slot %v on the moved grid", slot)
			assert.Len(t, rs, 1, "slot %v", slot)
		}
		for m := off; m < 65*time.Minute; m += every {
			rs := recs[base.Add(m).Unix()]
			if assert.Len(t, rs, 1, "slot %v", base.Add(m)) {
				t.Logf("%v %v", base.Add(m), rs[0].Status)
			}
		}
	})
}

// Probe: Backfill over a range takes the moved slots in it, with Nominal.
func TestRedteamSpreadProbeBackfill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 15 * time.Minute
		off := scheduler.SpreadOffset("job", window)
		var mu sync.Mutex
		var runs []scheduler.Run
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("job", time.Hour, func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			return nil
		}, scheduler.WithSpread(window)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(3*time.Hour + 30*time.Minute)
		base := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		res, err := s.Backfill(t.Context(), "job", base, base.Add(3*time.Hour), scheduler.BackfillRerun())
		require.NoError(t, err)
		var got []time.Time
		for _, sl := range res.Slots {
			got = append(got, sl.Slot)
		}
		assert.Equal(t, []time.Time{base.Add(off), base.Add(time.Hour + off), base.Add(2*time.Hour + off)}, got)
		require.NoError(t, s.Stop(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		for _, r := range runs {
			assert.Equal(t, r.Slot.Add(-off), r.Nominal, "%+v", r)
		}
	})
}

// Probe: an end bound lets the moved slot of a nominal slot before the end run
// (documented: bounds hold the nominal slots); Jobs shows the moved slot as next.
func TestRedteamSpreadProbeEndBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = time.Hour
		off := scheduler.SpreadOffset("job", window)
		base := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		end := base.Add(2*time.Hour + time.Second)
		var mu sync.Mutex
		var runs []time.Time
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("job", time.Hour, func(_ context.Context, r scheduler.Run) error {
			mu.Lock()
			runs = append(runs, r.Slot)
			mu.Unlock()
			return nil
		}, scheduler.WithSpread(window), scheduler.WithEndAt(end), scheduler.WithStartAt(base.Add(time.Second))))
		require.NoError(t, s.Start(t.Context()))
		t.Logf("offset %v next %v sched %q", off, s.Jobs()[0].Next, s.Jobs()[0].Schedule)
		time.Sleep(5 * time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		// The bounds hold the moved slots: 00:00+off and 01:00+off are within
		// [00:00:01, 02:00:01), 02:00+off is past the end.
		var want []time.Time
		for h := range 3 {
			if slot := base.Add(time.Duration(h)*time.Hour + off); !slot.Before(base.Add(time.Second)) && slot.Before(end) {
				want = append(want, slot)
			}
		}
		assert.Equal(t, want, runs)
		t.Logf("describe %q", scheduler.DescribeSchedule(s.Jobs()[0].Schedule))
	})
}
