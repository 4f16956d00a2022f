package sqlbackend_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/internal/retrytest"
	"github.com/anarchon/anarchon/scheduler"
)

// Retries end to end on both dialects: a failed attempt's retry is stored in the
// runs table and claimed at its time by any replica. The same scenarios run on the
// memory store under synctest in package scheduler, and on NATS in integration/.

// retryInterval leaves room for attempts at 0, 1 s and 3 s (retryPolicy) after a
// slot that started up to retryLate after its time.
const (
	retryInterval = 5 * time.Second
	retryLate     = time.Second
)

var retryPolicy = scheduler.RetryPolicy{Attempts: 3, Backoff: time.Second}

// retryReplicas opens three replicas (a, b, c), each on its own pool, running p's
// job; their logs and events go to the test's output, shown when it fails. It
// returns the schedulers, not started, and the pools by instance.
func retryReplicas(t *testing.T, open opener, p *retrytest.Probe) ([]*scheduler.Scheduler, map[string]*sql.DB) {
	t.Helper()
	job := backendtest.JobName("retried")
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	logEvent := scheduler.LogEvents(log)
	dbs := map[string]*sql.DB{}
	var scheds []*scheduler.Scheduler
	for _, inst := range []string{"a", "b", "c"} {
		db, b := open(t)
		dbs[inst] = db
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: inst, Logger: log.With("instance", inst),
			OnEvent: func(e scheduler.Event) { logEvent(e); p.Hook(e) }})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		require.NoError(t, s.Every(job, retryInterval, p.Handler, scheduler.WithRetry(retryPolicy),
			scheduler.WithMaxLate(retryLate), scheduler.WithLease(scheduler.MinLease)))
		scheds = append(scheds, s)
	}
	return scheds, dbs
}

func startReplicas(t *testing.T, scheds []*scheduler.Scheduler) {
	t.Helper()
	for _, s := range scheds {
		require.NoError(t, s.Start(backendtest.Context(t)))
	}
}

// retryHistory reads the history of p's job through s.
func retryHistory(t *testing.T, s *scheduler.Scheduler, p *retrytest.Probe) []scheduler.RunRecord {
	t.Helper()
	starts := p.Starts()
	require.NotEmpty(t, starts)
	hist, err := s.History(backendtest.Context(t), starts[0].Job, 50)
	require.NoError(t, err)
	return hist
}

// TestRetryRunsOnAnotherReplica: a slot fails attempts 1 and 2 and succeeds on 3;
// the replica whose attempt 1 failed is killed (its pool closed: no Stop, no
// release) as soon as its retry is stored. The retry runs on another replica at
// its time, each attempt once with a bigger fence; history shows attempts 1 and 2
// error and 3 ok, none recorded lost; one retry event per retry, no final failure.
func TestRetryRunsOnAnotherReplica(t *testing.T) {
	t.Parallel()
	onBoth(t, "retryelsewhere", func(t *testing.T, open opener) {
		p := retrytest.New(retryPolicy, 2, retryLate)
		scheds, dbs := retryReplicas(t, open, p)
		var mu sync.Mutex
		var killed string
		p.OnFirstRetry(func(e scheduler.Event) {
			_ = dbs[e.Instance].Close()
			mu.Lock()
			killed = e.Instance
			mu.Unlock()
		})
		startReplicas(t, scheds)
		p.Wait(t, 3*retryInterval)
		mu.Lock()
		victim := killed
		mu.Unlock()
		for _, s := range scheds {
			err := s.Stop(backendtest.Context(t))
			if s.Instance() == victim {
				t.Logf("the killed replica %s stops: %v", victim, err)
				continue
			}
			require.NoError(t, err, "stop %s", s.Instance())
		}

		require.NotEmpty(t, victim, "the replica of attempt 1 was killed")
		starts := p.Starts()
		require.NotEmpty(t, starts)
		assert.Equal(t, victim, starts[0].Instance)
		for _, s := range starts[1:] {
			assert.NotEqual(t, victim, s.Instance, "attempt %d ran on a live replica", s.Attempt)
		}
		var alive *scheduler.Scheduler
		for _, s := range scheds {
			if s.Instance() != victim {
				alive = s
			}
		}
		p.Check(t, retryHistory(t, alive, p), retrytest.Leased, retryInterval)
		t.Logf("attempts %s", startsText(starts))
	})
}

// TestRetryGivesUp: a slot whose every attempt fails runs exactly Attempts
// attempts, then fails once for good.
func TestRetryGivesUp(t *testing.T) {
	t.Parallel()
	onBoth(t, "retrygivesup", func(t *testing.T, open opener) {
		p := retrytest.New(retryPolicy, retryPolicy.Attempts, retryLate)
		scheds, _ := retryReplicas(t, open, p)
		startReplicas(t, scheds)
		p.Wait(t, 3*retryInterval)
		for _, s := range scheds {
			require.NoError(t, s.Stop(backendtest.Context(t)), "stop %s", s.Instance())
		}
		p.Check(t, retryHistory(t, scheds[0], p), retrytest.Leased, retryInterval)
		t.Logf("attempts %s", startsText(p.Starts()))
	})
}

// startsText is the attempts for a log line: attempt@offset on replica (fence).
func startsText(starts []retrytest.Start) string {
	var out string
	for _, s := range starts {
		out += fmt.Sprintf(" %d@+%v on %s (fence %d)", s.Attempt, s.At.Sub(s.Slot).Round(time.Millisecond), s.Instance, s.Fence)
	}
	return out
}
