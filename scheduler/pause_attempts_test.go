package scheduler_test

import (
	"context"
	"errors"
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

// failingFinish is one instance's view of a memory backend whose run store fails
// the first failPaused Finish calls that store a paused slot (the store never sees
// them), whose heartbeats hang once hang is set (a process whose clock stopped),
// and whose every run store call and result write hangs once dead is set (a
// process that died).
type failingFinish struct {
	*memory.Backend
	failPaused atomic.Int32
	hang       atomic.Bool
	dead       atomic.Bool
}

var errDead = errors.New("test: the process died")

// wait hangs a call of a dead process until its caller gives up.
func (f *failingFinish) wait(ctx context.Context) error {
	if !f.dead.Load() {
		return nil
	}
	<-ctx.Done()
	return errDead
}

func (f *failingFinish) SaveResult(ctx context.Context, job string, r backend.StoredResult, keep backend.Retention) error {
	if err := f.wait(ctx); err != nil {
		return err
	}
	return f.Backend.SaveResult(ctx, job, r, keep)
}

func (f *failingFinish) Runs() backend.RunStore {
	return finishRuns{RunStore: f.Backend.Runs().(*memory.RunStore), f: f}
}

type finishRuns struct {
	*memory.RunStore
	f *failingFinish
}

func (r finishRuns) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if err := r.f.wait(ctx); err != nil {
		return backend.ClaimResult{}, err
	}
	return r.RunStore.Claim(ctx, in)
}

func (r finishRuns) Release(ctx context.Context, key backend.RunKey) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if err := r.f.wait(ctx); err != nil {
		return err
	}
	return r.RunStore.Release(ctx, backend.RunKey{Job: job, Slot: slot, Token: token})
}

func (r finishRuns) Settle(ctx context.Context, st backend.Settlement) error {
	if err := r.f.wait(ctx); err != nil {
		return err
	}
	if st.Status == scheduler.StatusPaused && r.f.failPaused.Add(-1) >= 0 {
		return errors.New("test: finish lost")
	}
	return r.RunStore.Settle(ctx, st)
}

func (r finishRuns) Finish(ctx context.Context, key backend.RunKey, status scheduler.Status) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if err := r.f.wait(ctx); err != nil {
		return err
	}
	if status == scheduler.StatusPaused && r.f.failPaused.Add(-1) >= 0 {
		return errors.New("test: finish lost")
	}
	return r.RunStore.Finish(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}, status)
}

func (r finishRuns) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if r.f.hang.Load() || r.f.dead.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return r.RunStore.Heartbeat(ctx, backend.RunKey{Job: job, Slot: slot, Token: token}, lease)
}

// A slot that falls while its job is paused is never run, also when the winner's
// Finish(paused) fails (before, it released the lease and a backup ran the slot as
// attempt 2, so history held paused and ok for one slot).
func TestPausedSlotNeverRunsWhenItsFinishFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var ran atomic.Int32
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B", "C"} {
			v := &failingFinish{Backend: mem}
			v.failPaused.Store(1)
			s := newScheduler(t, v, id)
			require.NoError(t, s.Every("job", time.Minute, func(context.Context, scheduler.Run) error {
				ran.Add(1)
				return nil
			}, scheduler.WithLease(2*time.Second), scheduler.WithMaxLate(10*time.Second)))
			scheds = append(scheds, s)
		}
		require.NoError(t, scheds[0].Pause(t.Context(), "job", scheduler.PauseOptions{Reason: "freeze"}))
		for _, s := range scheds {
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(3*time.Minute + 30*time.Second) // past the 0:03 slot, not tied with it
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		assert.Zero(t, ran.Load(), "a paused job ran")
		hist, err := scheds[0].History(t.Context(), "job", 0)
		require.NoError(t, err)
		bySlot := map[int64][]scheduler.Status{}
		for _, r := range hist {
			bySlot[r.Slot.Unix()] = append(bySlot[r.Slot.Unix()], r.Status)
		}
		require.Len(t, bySlot, 4, "four slots fell (0:00 to 0:03): %v", bySlot)
		for slot, sts := range bySlot {
			assert.Equal(t, []scheduler.Status{scheduler.StatusPaused}, sts, "slot %d", slot)
		}
	})
}

// A takeover is checked against the pause like a first attempt: the holder of a
// run dies after the job was paused, and its backup records the slot paused
// instead of running it again.
func TestTakeoverOfAPausedJobIsNotRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var mu sync.Mutex
		var starts []scheduler.Run
		views := map[string]*failingFinish{}
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B"} {
			v := &failingFinish{Backend: mem}
			views[id] = v
			s := newScheduler(t, v, id)
			require.NoError(t, s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				mu.Lock()
				starts = append(starts, r)
				mu.Unlock()
				if r.Attempt == 1 {
					require.NoError(t, s.Pause(context.Background(), "job", scheduler.PauseOptions{Reason: "incident"}))
					views[r.Instance].hang.Store(true) // the holder dies
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}, scheduler.WithLease(2*time.Second)))
			scheds = append(scheds, s)
		}
		time.Sleep(30 * time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(time.Hour)
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, starts, 1, "only the first attempt ran: %+v", starts)
		hist, err := scheds[0].History(t.Context(), "job", 0)
		require.NoError(t, err)
		got := map[int]scheduler.Status{}
		for _, r := range hist {
			got[r.Attempt] = r.Status
		}
		assert.Equal(t, scheduler.StatusPaused, got[2], "%+v", hist)
		assert.Contains(t, []scheduler.Status{scheduler.StatusLost, scheduler.StatusSuperseded}, got[1], "%+v", hist)
	})
}
