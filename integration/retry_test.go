package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/internal/retrytest"
	"github.com/anarchon/anarchon/scheduler"
)

// Retries on a real server. With leases (kvlease) a failed attempt's retry is
// stored in the lease bucket and claimed at its time by any instance, so it
// survives the death of the instance that failed; without leases the winner
// retries in its own process. The same scenarios run on the memory store under
// synctest in package scheduler (retry_test.go).

// retryInterval is the jobs' interval: room for attempts at 0, 1 s and 3 s
// (retryPolicy) after a slot that started up to retryLate after its time.
const (
	retryInterval = 5 * time.Second
	retryLate     = time.Second
)

var retryPolicy = scheduler.RetryPolicy{Attempts: 3, Backoff: time.Second}

// retryScheds starts one scheduler per backend, named inst-a, inst-b…, each
// reporting to p and running p's job every interval (max lateness retryLate
// unless opts say otherwise). Their logs and events go to the test's output, shown
// when it fails.
func retryScheds(t *testing.T, p *retrytest.Probe, backends []backend.Backend, interval time.Duration, opts ...scheduler.JobOption) []*scheduler.Scheduler {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	logEvent := scheduler.LogEvents(log)
	var scheds []*scheduler.Scheduler
	for i, b := range backends {
		name := fmt.Sprintf("inst-%c", 'a'+i)
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: name, Logger: log.With("instance", name),
			OnEvent: func(e scheduler.Event) { logEvent(e); p.Hook(e) }})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		require.NoError(t, s.Every("retried", interval, p.Handler, append([]scheduler.JobOption{
			scheduler.WithRetry(retryPolicy), scheduler.WithMaxLate(retryLate)}, opts...)...))
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	}
	return scheds
}

// crashOnFirstRetry makes the instance whose attempt 1 of the probe's slot failed
// die as soon as its retry is stored: its connection is closed under it (no Stop,
// no release). It returns the crashed instance's name, once it crashed.
func crashOnFirstRetry(p *retrytest.Probe, conns map[string]*nats.Conn, also func()) func() string {
	var mu sync.Mutex
	var crashed string
	p.OnFirstRetry(func(e scheduler.Event) {
		conns[e.Instance].Close()
		if also != nil {
			also()
		}
		mu.Lock()
		crashed = e.Instance
		mu.Unlock()
	})
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return crashed
	}
}

// stopRetried stops the schedulers; the crashed one's Stop may fail (what it had
// to store it cannot), the others' may not.
func stopRetried(t *testing.T, scheds []*scheduler.Scheduler, crashed string) {
	t.Helper()
	for _, s := range scheds {
		err := s.Stop(ctxT(t, 10*time.Second))
		if s.Instance() == crashed {
			t.Logf("the crashed instance %s stops: %v", crashed, err)
			continue
		}
		require.NoError(t, err, "stop %s", s.Instance())
	}
}

// historyOf reads the job's history through s.
func historyOf(t *testing.T, s *scheduler.Scheduler) []scheduler.RunRecord {
	t.Helper()
	hist, err := s.History(ctxT(t, 10*time.Second), "retried", 50)
	require.NoError(t, err)
	return hist
}

// A slot fails attempts 1 and 2 and succeeds on 3; the instance whose attempt 1
// failed crashes as soon as its retry is stored. The retry runs on another
// instance at its time, each attempt once with a bigger fence; history shows
// attempts 1 and 2 error and 3 ok (none recorded lost); one retry event per retry
// and no final failure.
func TestRetryRunsOnAnotherInstanceNATS(t *testing.T) {
	t.Parallel() // the retry tests on one server wait on the clock, mostly
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	p := retrytest.New(retryPolicy, 2, retryLate)
	conns := map[string]*nats.Conn{}
	var backends []backend.Backend
	for i := range 3 {
		nc := dial(t, srv.ClientURL())
		conns[fmt.Sprintf("inst-%c", 'a'+i)] = nc
		backends = append(backends, leased(t, nc, 1))
	}
	crashed := crashOnFirstRetry(p, conns, nil)
	scheds := retryScheds(t, p, backends, retryInterval, scheduler.WithLease(scheduler.MinLease))
	p.Wait(t, 3*retryInterval)
	stopRetried(t, scheds, crashed())

	require.NotEmpty(t, crashed(), "the instance of attempt 1 crashed")
	starts := p.Starts()
	require.NotEmpty(t, starts)
	assert.Equal(t, crashed(), starts[0].Instance)
	for _, s := range starts[1:] {
		assert.NotEqual(t, crashed(), s.Instance, "attempt %d ran on a live instance", s.Attempt)
	}
	alive := scheds[(index(scheds, crashed())+1)%len(scheds)]
	p.Check(t, historyOf(t, alive), retrytest.Leased, retryInterval)
	t.Logf("attempts %s", startsText(starts))
}

// A slot whose every attempt fails runs exactly Attempts attempts, then fails once
// for good, with leases and without.
func TestRetryGivesUpNATS(t *testing.T) {
	t.Parallel()
	for _, withLeases := range []bool{true, false} {
		name := map[bool]string{true: "leases", false: "plain"}[withLeases]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
			p := retrytest.New(retryPolicy, retryPolicy.Attempts, retryLate)
			var backends []backend.Backend
			var opts []scheduler.JobOption
			for range 3 {
				nc := dial(t, srv.ClientURL())
				if withLeases {
					backends = append(backends, leased(t, nc, 1))
				} else {
					backends = append(backends, plainBackend(t, nc))
				}
			}
			mode := retrytest.InProcess
			if withLeases {
				mode, opts = retrytest.Leased, []scheduler.JobOption{scheduler.WithLease(scheduler.MinLease)}
			}
			scheds := retryScheds(t, p, backends, retryInterval, opts...)
			p.Wait(t, 3*retryInterval)
			stopRetried(t, scheds, "")
			p.Check(t, historyOf(t, scheds[0]), mode, retryInterval)
			t.Logf("attempts %s", startsText(p.Starts()))
		})
	}
}

// Without leases the winner of a slot retries it in its own process: attempts 1
// and 2 fail, 3 succeeds, all on the winner; history shows each attempt once.
func TestRetryInProcessNATS(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	p := retrytest.New(retryPolicy, 2, retryLate)
	var backends []backend.Backend
	for range 3 {
		backends = append(backends, plainBackend(t, dial(t, srv.ClientURL())))
	}
	scheds := retryScheds(t, p, backends, retryInterval)
	p.Wait(t, 3*retryInterval)
	stopRetried(t, scheds, "")
	p.Check(t, historyOf(t, scheds[0]), retrytest.InProcess, retryInterval)
	t.Logf("attempts %s", startsText(p.Starts()))
}

// On a 3-node cluster (R3 job streams and lease bucket), the instance whose attempt
// 1 failed crashes once its retry is stored, and the node leading the lease bucket
// is stopped with it: the retry, replicated, is claimed from the other nodes by
// another instance, and the slot ends as on one server.
//
// The failover holds up the claims in flight for about a second. The lease is
// longer than MinLease because the scheduler counts a won lease from the claim's
// send time: a 1 s lease would be spent before its answer came, and the winner
// would release the retry unrun (safe, but an attempt of the slot is used up by a
// takeover). The job's max lateness is longer too, for the retry to be claimed
// within its window after the failover; the interval leaves room for it.
func TestRetrySurvivesCrashOnCluster(t *testing.T) {
	c := faultCluster(t)
	urls := strings.Join(c.ClientURLs(), ",")
	p := retrytest.New(retryPolicy, 2, retryLate)
	conns := map[string]*nats.Conn{}
	var backends []backend.Backend
	for i := range 3 {
		name := fmt.Sprintf("inst-%c", 'a'+i)
		nc := faultDial(t, name, urls)
		conns[name] = nc
		backends = append(backends, leased(t, nc, 3))
	}
	var stopped struct {
		sync.Mutex
		node int
		at   time.Time
	}
	crashed := crashOnFirstRetry(p, conns, func() {
		leader, err := c.StreamLeader("", faultBucketStream)
		if err != nil {
			t.Errorf("the lease bucket's leader: %v", err)
			return
		}
		if err := c.StopNode(leader); err != nil {
			t.Errorf("stop node %d: %v", leader, err)
		}
		stopped.Lock()
		stopped.node, stopped.at = leader, time.Now()
		stopped.Unlock()
	})
	const interval = 8 * time.Second
	scheds := retryScheds(t, p, backends, interval, scheduler.WithLease(5*time.Second), scheduler.WithMaxLate(3*time.Second))
	p.Wait(t, 3*interval)
	stopRetried(t, scheds, crashed())

	require.NotEmpty(t, crashed(), "the instance of attempt 1 crashed")
	starts := p.Starts()
	require.GreaterOrEqual(t, len(starts), 2)
	for _, s := range starts[1:] {
		assert.NotEqual(t, crashed(), s.Instance, "attempt %d ran on a live instance", s.Attempt)
	}
	stopped.Lock()
	node, at := stopped.node, stopped.at
	stopped.Unlock()
	assert.True(t, starts[1].At.After(at), "the retry was claimed after the bucket's leader (node %d) stopped", node)
	alive := scheds[(index(scheds, crashed())+1)%len(scheds)]
	p.Check(t, historyOf(t, alive), retrytest.Leased, interval)
	t.Logf("node %d stopped %v after attempt 1 started; attempts %s", node, at.Sub(starts[0].At).Round(time.Millisecond), startsText(starts))
}

func index(scheds []*scheduler.Scheduler, instance string) int {
	for i, s := range scheds {
		if s.Instance() == instance {
			return i
		}
	}
	return -1
}

// startsText is the attempts for a log line: attempt@offset on instance (fence).
func startsText(starts []retrytest.Start) string {
	var b strings.Builder
	for _, s := range starts {
		fmt.Fprintf(&b, " %d@+%v on %s (fence %d)", s.Attempt, s.At.Sub(s.Slot).Round(time.Millisecond), s.Instance, s.Fence)
	}
	return b.String()
}
