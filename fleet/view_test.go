package fleet_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestJobsView checks each job's view in the jobs reply: state, next slot, last
// run, last success and last failure, read from the shared history.
func TestJobsView(t *testing.T) {
	var fail sync.Mutex
	failing := false
	f := startFleet(t, fleetSetup{quiet: true, handler: func(context.Context, scheduler.Run) error {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			return errors.New("disk full")
		}
		return nil
	}})
	ctx := requestCtx(t)

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, fl.Jobs, 2)
	rep := fl.Jobs[1]
	require.Equal(t, jobReport, rep.Name)
	assert.Equal(t, fleet.JobActive, rep.State)
	assert.True(t, rep.Next.After(time.Now()), "next slot in the future: %v", rep.Next)
	assert.WithinRange(t, rep.Next, f.start, f.start.Add(time.Hour), "the first hourly slot from the job's start")
	assert.Nil(t, rep.LastRun)
	assert.Equal(t, "A", rep.ViewFrom)

	ok, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "ana", Wait: true})
	require.NoError(t, err)
	fail.Lock()
	failing = true
	fail.Unlock()
	bad, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "bob", Wait: true})
	require.NoError(t, err)
	require.Equal(t, scheduler.StatusError, bad.Run.Status)
	_, err = f.client.Pause(ctx, jobReport, fleet.PauseRequest{Reason: "quarter close", By: "ana", For: "1h"})
	require.NoError(t, err)
	f.waitView(t, jobReport, true, time.Now().Add(-time.Second))

	fl, err = f.client.Jobs(ctx)
	require.NoError(t, err)
	rep = fl.Jobs[1]
	assert.Equal(t, fleet.JobPaused, rep.State)
	require.NotNil(t, rep.Pause)
	assert.Equal(t, "quarter close", rep.Pause.Reason)
	require.NotNil(t, rep.LastRun)
	assert.Equal(t, "bob", rep.LastRun.RequestedBy, "the newest run")
	assert.Equal(t, scheduler.StatusError, rep.LastRun.Status)
	require.NotNil(t, rep.LastFailure)
	assert.Equal(t, "disk full", rep.LastFailure.Error)
	require.NotNil(t, rep.LastSuccess)
	assert.Equal(t, ok.Run.Token, rep.LastSuccess.Token)
	assert.GreaterOrEqual(t, rep.LastSuccess.LagMS, 0.0)
	assert.Empty(t, rep.Running)
	for _, r := range fl.Replicas {
		for _, j := range r.Jobs {
			assert.Empty(t, j.ViewError, "%s %s", r.Instance, j.Name)
		}
	}
}

// TestActive shows a scheduled run in progress: through the active endpoint and in
// the jobs view, with its lease live, then gone once it ends. (A manual run holds
// no lease, so it is not listed.)
func TestActive(t *testing.T) {
	release := make(chan struct{})
	started := make(chan scheduler.Run, 1)
	var once sync.Once
	f := startFleet(t, fleetSetup{
		instances: []string{"A", "B"},
		jobs: func(string) []testJob {
			j := every("slow", 300*time.Millisecond)
			j.Opts = []scheduler.JobOption{scheduler.WithLease(2 * time.Second)}
			return []testJob{j}
		},
		handler: func(ctx context.Context, run scheduler.Run) error {
			first := false
			once.Do(func() { first = true })
			if !first {
				return nil
			}
			started <- run
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		},
	})
	var closeOnce sync.Once
	t.Cleanup(func() { closeOnce.Do(func() { close(release) }) }) // before the replicas stop
	ctx := requestCtx(t)

	var run scheduler.Run
	select {
	case run = <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("no slot started")
	}
	a, err := f.client.Active(ctx, "slow")
	require.NoError(t, err)
	var mine *fleet.ActiveRun
	for i := range a.Runs {
		if a.Runs[i].Token == run.Token {
			mine = &a.Runs[i]
		}
	}
	require.NotNil(t, mine, "the blocked run is listed: %+v", a.Runs)
	assert.Equal(t, run.Instance, mine.Instance)
	assert.Equal(t, 1, mine.Attempt)
	assert.True(t, mine.Live)
	assert.True(t, mine.Expires.After(time.Now()))
	assert.Equal(t, "slow", mine.Job)
	assert.True(t, mine.Slot.Equal(run.Slot))

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, fl.Jobs, 1)
	found := false
	for _, r := range fl.Jobs[0].Running {
		found = found || r.Token == run.Token
	}
	assert.True(t, found, "the jobs view lists the run: %+v", fl.Jobs[0].Running)

	closeOnce.Do(func() { close(release) })
	require.Eventually(t, func() bool {
		a, err := f.client.Active(ctx, "slow")
		if err != nil {
			return false
		}
		for _, r := range a.Runs {
			if r.Token == run.Token {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "the run leaves the active list when it ends")
}

// TestTriggerBeforeStart: a replica whose scheduler has not started refuses a
// trigger at once (503), and runs nothing.
func TestTriggerBeforeStart(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "early"})
	require.NoError(t, err)
	ran := make(chan struct{}, 1)
	require.NoError(t, s.Every(jobReport, time.Hour, func(context.Context, scheduler.Run) error {
		ran <- struct{}{}
		return nil
	}))
	svc, err := fleet.Serve(requestCtx(t), nc, s)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	c, err := fleet.NewClient(natstest.Conn(t, srv))
	require.NoError(t, err)

	t0 := time.Now()
	_, err = c.Trigger(requestCtx(t), jobReport, fleet.TriggerRequest{Wait: true})
	require.ErrorIs(t, err, fleet.ErrUnavailable)
	assert.Contains(t, err.Error(), "not running")
	assert.Less(t, time.Since(t0), time.Second, "refused at once")
	select {
	case <-ran:
		t.Fatal("a refused trigger ran the job")
	case <-time.After(100 * time.Millisecond):
	}
	// The jobs reply still lists the job, from s.Jobs().
	f, err := c.Jobs(requestCtx(t))
	require.NoError(t, err)
	require.Len(t, f.Jobs, 1)
	assert.Equal(t, "every 1h0m0s", f.Jobs[0].Schedule)
}

// TestWatch: replicas that publish their events (fleet.Events) are seen by
// Client.Watch, for one job or all, until its context ends.
func TestWatch(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A", "B"}, events: true})
	ctx, cancel := context.WithCancel(requestCtx(t))
	var mu sync.Mutex
	var one, all []fleet.Event
	done := make(chan error, 2)
	go func() {
		done <- f.client.Watch(ctx, jobReport, func(e fleet.Event) { mu.Lock(); one = append(one, e); mu.Unlock() })
	}()
	go func() {
		done <- f.client.Watch(ctx, "", func(e fleet.Event) { mu.Lock(); all = append(all, e); mu.Unlock() })
	}()
	finished := func(evs []fleet.Event, job string) bool {
		for _, e := range evs {
			if e.Kind == scheduler.EventFinished && e.Job == job && e.Status == scheduler.StatusOK && e.Manual {
				return true
			}
		}
		return false
	}
	// The watchers subscribe asynchronously: trigger until both have seen a run end.
	require.Eventually(t, func() bool {
		_, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{Wait: true})
		require.NoError(t, err)
		_, err = f.client.Trigger(ctx, jobBackup, fleet.TriggerRequest{Wait: true})
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		return finished(one, jobReport) && finished(all, jobReport) && finished(all, jobBackup)
	}, 5*time.Second, 50*time.Millisecond)
	_, err := f.client.PauseAll(ctx, fleet.PauseRequest{Reason: "maintenance"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range all {
			if e.Kind == scheduler.EventPauseChanged && e.Job == "" && e.Pause != nil && e.Pause.Reason == "maintenance" {
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "the all-jobs pause reaches a watcher of every job")
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	for _, e := range one {
		assert.Equal(t, jobReport, e.Job, "a watcher of one job sees only it")
	}
	for _, e := range all {
		if e.Kind == scheduler.EventStarted {
			assert.GreaterOrEqual(t, e.LagMS, 0.0)
			assert.NotEmpty(t, e.Instance)
		}
	}
}
