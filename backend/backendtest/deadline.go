package backendtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// RunDeadlines runs three schedulers, each on a backend of its own from
// newBackend (one store), with a job every second whose deadline is 2 s and
// whose even seconds' slots run 3 s. Each slow slot gets one deadline record,
// and no slot that ended ok by its deadline gets one. On a backend that is a
// backend.OnceRecorder the replica that stored each record, and no other,
// sends its EventDeadlineMissed.
func RunDeadlines(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	const deadline = 2 * time.Second
	ctx := Context(t)
	job := JobName("deadline")
	slow := func(slot time.Time) bool { return slot.Unix()%2 == 0 }
	handler := func(ctx context.Context, r scheduler.Run) error {
		if slow(r.Slot) {
			select {
			case <-ctx.Done():
			case <-time.After(deadline + time.Second):
			}
		}
		return nil
	}
	var mu sync.Mutex
	told := map[int64][]string{}
	onEvent := func(e scheduler.Event) {
		if e.Kind == scheduler.EventDeadlineMissed {
			mu.Lock()
			defer mu.Unlock()
			told[e.Slot.UnixMilli()] = append(told[e.Slot.UnixMilli()], e.Instance)
		}
	}
	var fleet []*scheduler.Scheduler
	once := false
	for _, name := range []string{"dl-a", "dl-b", "dl-c"} {
		b := setup(t, newBackend)
		_, once = b.(backend.OnceRecorder)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: name, OnEvent: onEvent})
		require.NoError(t, err)
		require.NoError(t, s.Every(job, time.Second, handler, scheduler.WithDeadline(deadline)))
		fleet = append(fleet, s)
	}
	start := time.Now()
	for _, s := range fleet {
		require.NoError(t, s.Start(ctx))
	}
	time.Sleep(4 * time.Second)
	last := time.Now() // the slots judged: those due by now, judged 4 s later
	time.Sleep(deadline + scheduler.DefaultMaxClockSkew + 2*time.Second)
	for _, s := range fleet {
		require.NoError(t, s.Stop(ctx))
	}

	hist, err := fleet[0].History(ctx, job, 1000)
	require.NoError(t, err)
	judged := map[int64]backend.RunRecord{}
	okBy := map[int64]bool{}
	for _, r := range hist {
		ms := r.Slot.UnixMilli()
		switch {
		case r.Status == backend.StatusDeadline:
			_, dup := judged[ms]
			assert.False(t, dup, "one deadline record per slot: %+v", r)
			judged[ms] = r
		case r.Status == backend.StatusOK && !r.FinishedAt.After(r.Slot.Add(deadline)):
			okBy[ms] = true
		}
	}
	slows := 0
	for slot := start.Truncate(time.Second).Add(time.Second); slot.Before(last); slot = slot.Add(time.Second) {
		ms := slot.UnixMilli()
		r, ok := judged[ms]
		if slow(slot) {
			slows++
			if assert.True(t, ok, "slow slot %v judged: %v", slot, hist) {
				assert.Regexp(t, `^not ended ok by its deadline \S+ \(2s after the slot\): (still running on dl-[abc] \(attempt 1\)|ended ok on dl-[abc] \(attempt 1\) at \S+, after its deadline)$`, r.Error)
				assert.Contains(t, []string{"dl-a", "dl-b", "dl-c"}, r.Instance)
			}
		}
		assert.False(t, ok && okBy[ms], "slot %v ended ok by its deadline, yet judged: %+v", slot, r)
	}
	require.Positive(t, slows)
	mu.Lock()
	defer mu.Unlock()
	for ms, r := range judged {
		if once {
			assert.Equal(t, []string{r.Instance}, told[ms], "slot %v: told once, by the replica that stored it", time.UnixMilli(ms))
		} else {
			assert.NotEmpty(t, told[ms], "slot %v told", time.UnixMilli(ms))
		}
	}
	for ms := range told {
		assert.Contains(t, judged, ms, "an event of a slot whose record is stored")
	}
}
