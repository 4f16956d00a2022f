package anarchontest_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// Keep TestTakeover in step with the package documentation.

// setupReport is the service under test: a report every minute whose handler
// runs 45 seconds, under a 15-second lease.
func setupReport(s *scheduler.Scheduler) error {
	return s.Every("report", time.Minute, func(ctx context.Context, run scheduler.Run) error {
		select {
		case <-time.After(45 * time.Second): // the work
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, scheduler.WithLease(15*time.Second))
}

// The holder of a slot is killed mid-run; a backup takes the run over once
// its lease expires, and the slot runs to completion once.
func TestTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slot := time.Now() // a bubble starts at 2000-01-01 00:00 UTC: a slot of the job
		f := anarchontest.Start(t, anarchontest.Config{Replicas: 3, Setup: setupReport})

		anarchontest.Advance(20 * time.Second)
		holder := f.Holder("report", slot)
		require.NotNil(t, holder, "a replica runs the slot")
		holder.Kill()

		anarchontest.Advance(2 * time.Minute)
		runs, err := f.RunsOf(t.Context(), "report", slot)
		require.NoError(t, err)
		require.Len(t, runs, 2)
		assert.Equal(t, scheduler.StatusLost, runs[0].Status)
		assert.Equal(t, holder.Name(), runs[0].Instance)
		assert.Equal(t, scheduler.StatusOK, runs[1].Status)
		assert.Equal(t, 2, runs[1].Attempt)
		assert.NotEqual(t, holder.Name(), runs[1].Instance)
		// The last heartbeat was at 0:20: the lease expired at 0:35.
		takeovers := f.Events(anarchontest.Match("report", scheduler.EventTakeover))
		require.Len(t, takeovers, 1)
		assert.Equal(t, slot.Add(35*time.Second), takeovers[0].At)
		f.AssertRanOnce(t, "report", slot)
	})
}

// A fleet on a clock of its own, for where testing/synctest cannot serve: a
// replica cut off from the store claims nothing, and the others run each slot
// once.
func Example() {
	ctx := context.Background()
	noon := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := stepclock.New(noon.Add(-30 * time.Second))
	f, err := anarchontest.New(ctx, anarchontest.Config{
		Replicas: 3,
		Clock:    clock,
		Setup: func(s *scheduler.Scheduler) error {
			return s.Every("report", time.Minute, func(context.Context, scheduler.Run) error { return nil },
				scheduler.WithMaxLate(10*time.Second))
		},
	})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	cut := f.Replica(2)
	cut.Partition()

	slots := []time.Time{noon, noon.Add(time.Minute)}
	for i, slot := range slots {
		clock.AdvanceTo(slot, 3) // once the three replicas wait for the slot
		if _, err := f.WaitEvents(ctx, i+1, anarchontest.Match("report", scheduler.EventFinished)); err != nil {
			panic(err)
		}
	}
	for _, slot := range slots {
		runs, err := f.RunsOf(ctx, "report", slot)
		if err != nil {
			panic(err)
		}
		fmt.Println(slot.Format("15:04"), len(runs), "run:", runs[0].Status, "on", cut.Name()+":", runs[0].Instance == cut.Name())
	}
	failed := f.Events(func(e scheduler.Event) bool {
		return e.Instance == cut.Name() && e.Kind == scheduler.EventBackendError && e.Op == "claim"
	})
	fmt.Println(cut.Name(), "could not claim:", len(failed) > 0)
	// Output:
	// 12:00 1 run: ok on replica-3: false
	// 12:01 1 run: ok on replica-3: false
	// replica-3 could not claim: true
}
