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

// Three replicas on one database: a job bounded by WithStartAt and WithEndAt runs
// the slots between them once each and no other, and a job At an instant runs once.
func TestBoundsAndAtSQL(t *testing.T) {
	t.Parallel()
	onBoth(t, "bounds", testBoundsAndAt)
}

func testBoundsAndAt(t *testing.T, open opener) {
	ctx := backendtest.Context(t)
	bounded, once := backendtest.JobName("bounded"), backendtest.JobName("once")
	var mu sync.Mutex
	ran := map[string]map[int64]int{bounded: {}, once: {}}
	handler := func(_ context.Context, r scheduler.Run) error {
		mu.Lock()
		defer mu.Unlock()
		ran[r.Job][r.Slot.UnixMilli()]++
		return nil
	}
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	end := start.Add(3 * time.Second)
	at := start.Add(1500 * time.Millisecond)
	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b", "c"} {
		_, b := open(t)
		sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst})
		require.NoError(t, err)
		require.NoError(t, sc.Every(bounded, time.Second, handler, scheduler.WithStartAt(start), scheduler.WithEndAt(end)))
		require.NoError(t, sc.At(once, at, handler))
		scheds = append(scheds, sc)
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Start(ctx))
	}
	select {
	case <-time.After(time.Until(end.Add(2 * time.Second))):
	case <-ctx.Done():
	}
	for _, sc := range scheds {
		require.NoError(t, sc.Stop(ctx))
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[int64]int{}
	for k := range 3 {
		want[start.Add(time.Duration(k)*time.Second).UnixMilli()] = 1
	}
	assert.Equal(t, want, ran[bounded], "the slots from the start until the end, once each, no other")
	assert.Equal(t, map[int64]int{at.UnixMilli(): 1}, ran[once], "the instant, once")
}
