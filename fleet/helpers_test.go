package fleet_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// The jobs every test replica declares: one hourly, one on a cron (at 03:00 UTC)
// with a name that is no subject token. A slot of either falls during a test only in
// the first minute of an hour, or of 03:00: a test that counts runs makes its fleet
// quiet (fleetSetup.quiet).
const (
	jobReport = "report"
	jobBackup = "nightly backup.db > *"
)

func backupSchedule(t testing.TB) scheduler.Schedule {
	t.Helper()
	s, err := scheduler.ParseCron("0 3 * * *", nil)
	require.NoError(t, err)
	return s
}

// testJob is a job a test replica registers: Every for an IntervalSchedule, Cron
// "0 3 * * *" for a cron schedule, Declare (a job of schedule entries) for none.
type testJob struct {
	Name     string
	Schedule scheduler.Schedule
	Opts     []scheduler.JobOption
}

func every(name string, d time.Duration) testJob {
	return testJob{Name: name, Schedule: scheduler.IntervalSchedule{Interval: d}}
}

// replica is one scheduler with its fleet service on its own connection.
type replica struct {
	s      *scheduler.Scheduler
	svc    *fleet.Service
	nc     *nats.Conn
	manual atomic.Int32 // manual runs of any job on this replica

	mu       sync.Mutex
	pausedAt map[string]time.Time // job → when this replica's view changed to paused
	resumed  map[string]time.Time // job → when it changed to running
	conflict map[string]string    // job → the last job_conflict event's Conflict
	changed  chan struct{}        // the fleet's: any replica's view changed
}

// testFleet is three replicas sharing a memory backend, served over one embedded
// server, and a client on a connection of its own.
type testFleet struct {
	dial     func(...nats.Option) (*nats.Conn, error)
	backend  *memory.Backend
	replicas []*replica
	client   *fleet.Client
	nc       *nats.Conn // the client's connection
	changed  chan struct{}
	start    time.Time // the jobs' first slot is at or after it (fleetSetup.quiet); zero: unbounded
}

type fleetSetup struct {
	instances []string
	backend   backend.Backend                 // defaults to the shared memory backend
	jobs      func(instance string) []testJob // defaults to report and backup
	serve     []fleet.Option
	events    bool // each replica publishes its events (fleet.Events, with eventOpts)
	eventOpts []fleet.Option
	client    []fleet.Option
	server    embedded.Options
	handler   scheduler.Handler // wrapped to count manual runs
	// dial connects replicas and the client; nil: to a new embedded server.
	dial func(...nats.Option) (*nats.Conn, error)
	// backendFor gives each replica a backend of its own on its connection, as
	// separate processes have; nil: the shared backend.
	backendFor func(t testing.TB, nc *nats.Conn) backend.Backend
	// quiet gives every job a start an hour after startFleet (testFleet.start,
	// scheduler.WithStartAt, the same on every replica, so they agree): no
	// scheduled slot runs during the test whatever the time of day, for a test
	// that counts runs or asserts there are none.
	quiet bool
}

func startFleet(t testing.TB, setup fleetSetup) *testFleet {
	t.Helper()
	if setup.instances == nil {
		setup.instances = []string{"A", "B", "C"}
	}
	f := &testFleet{dial: setup.dial, backend: memory.New(), changed: make(chan struct{}, 1)}
	if setup.quiet {
		f.start = time.Now().Add(time.Hour)
	}
	if f.dial == nil {
		f.dial = natstest.Server(t, setup.server).Connect
	}
	if setup.backend == nil {
		setup.backend = f.backend
	}
	if setup.jobs == nil {
		setup.jobs = func(string) []testJob {
			return []testJob{every(jobReport, time.Hour), {Name: jobBackup, Schedule: backupSchedule(t)}}
		}
	}
	for _, id := range setup.instances {
		f.replicas = append(f.replicas, f.startReplica(t, setup, id))
	}
	f.nc = natstest.Dial(t, f.dial)
	c, err := fleet.NewClient(f.nc, setup.client...)
	require.NoError(t, err)
	f.client = c
	return f
}

func (f *testFleet) startReplica(t testing.TB, setup fleetSetup, id string) *replica {
	t.Helper()
	r := &replica{pausedAt: map[string]time.Time{}, resumed: map[string]time.Time{}, conflict: map[string]string{}, changed: f.changed}
	nc := natstest.Dial(t, f.dial)
	r.nc = nc
	backend := setup.backend
	if setup.backendFor != nil {
		backend = setup.backendFor(t, nc)
	}
	hook := r.onEvent
	if setup.events {
		events, err := fleet.Events(nc, setup.eventOpts...)
		require.NoError(t, err)
		hook = scheduler.Chain(r.onEvent, events)
	}
	s, err := scheduler.New(scheduler.Config{Backend: backend, Instance: id, OnEvent: hook})
	require.NoError(t, err)
	r.s = s
	jobs := setup.jobs(id)
	for _, j := range jobs {
		if !f.start.IsZero() && j.Schedule != nil { // an entries-only job takes no start: its entries begin when stored
			j.Opts = append(slices.Clip(j.Opts), scheduler.WithStartAt(f.start))
		}
		h := func(ctx context.Context, run scheduler.Run) error {
			if run.Manual {
				r.manual.Add(1)
			}
			if setup.handler != nil {
				return setup.handler(ctx, run)
			}
			return nil
		}
		switch sched := j.Schedule.(type) {
		case scheduler.IntervalSchedule:
			require.NoError(t, s.Every(j.Name, sched.Interval, h, j.Opts...))
		case *scheduler.CronSchedule:
			require.NoError(t, s.Cron(j.Name, "0 3 * * *", h, j.Opts...))
		case nil:
			require.NoError(t, s.Declare(j.Name, h, j.Opts...))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	svc, err := fleet.Serve(ctx, nc, s, setup.serve...)
	require.NoError(t, err)
	r.svc = svc
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	return r
}

// onEvent records when this replica's view of a job's pause changed, and the
// conflicts its registry reports.
func (r *replica) onEvent(e scheduler.Event) {
	if e.Kind != scheduler.EventPauseChanged && e.Kind != scheduler.EventJobConflict {
		return
	}
	r.mu.Lock()
	if e.Kind == scheduler.EventJobConflict {
		r.conflict[e.Job] = e.Conflict
	} else if e.Pause != nil {
		r.pausedAt[e.Job] = time.Now()
	} else {
		r.resumed[e.Job] = time.Now()
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitView waits until every replica's view of job's pause changed (to paused, or to
// running) at or after since, and returns the longest delay.
func (f *testFleet) waitView(t testing.TB, job string, paused bool, since time.Time) time.Duration {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		var longest time.Duration
		all := true
		for _, r := range f.replicas {
			r.mu.Lock()
			at, ok := r.resumed[job]
			if paused {
				at, ok = r.pausedAt[job]
			}
			r.mu.Unlock()
			if !ok || at.Before(since) {
				all = false
				break
			}
			longest = max(longest, at.Sub(since))
		}
		if all {
			return longest
		}
		select {
		case <-f.changed:
		case <-deadline:
			t.Fatalf("the pause change of %q did not reach every replica within 5s", job)
		}
	}
}

func (f *testFleet) manualRuns() int {
	n := 0
	for _, r := range f.replicas {
		n += int(r.manual.Load())
	}
	return n
}

// requestCtx is a context for one request in a test.
func requestCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitConflict waits until the replica's last job_conflict event for job says
// want (a substring; "" waits for the conflict to clear).
func (f *testFleet) waitConflict(t testing.TB, r *replica, job, want string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		r.mu.Lock()
		got, seen := r.conflict[job]
		r.mu.Unlock()
		if seen && (want == "" && got == "" || want != "" && strings.Contains(got, want)) {
			return
		}
		select {
		case <-f.changed:
		case <-deadline:
			t.Fatalf("replica %s: conflict of %q is %q (reported: %v), want %q within %v", r.s.Instance(), job, got, seen, want, within)
		}
	}
}

// waitHistory asks the fleet for job's last 100 runs until one satisfies want
// (what, for the failure message), within a bound far above the few ticks it takes
// on a quiet machine, and returns the history that showed it.
func (f *testFleet) waitHistory(t testing.TB, job, what string, want func(fleet.Run) bool) fleet.HistoryReply {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		h, err := f.client.History(requestCtx(t), job, 100)
		require.NoError(t, err)
		for _, r := range h.Runs {
			if want(r) {
				return h
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in the history of %q within 15s: %+v", what, job, h.Runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
