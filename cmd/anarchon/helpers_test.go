package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// testFleet is replicas sharing a memory backend, each serving the fleet endpoints
// on its own connection to one server, which the command reaches at url.
type testFleet struct {
	url       string
	backend   *memory.Backend
	scheds    []*scheduler.Scheduler
	manual    atomic.Int32
	failNext  atomic.Bool            // the next run returns an error
	failWith  atomic.Pointer[string] // that error's text, when not errDisk
	failEntry atomic.Pointer[string] // every run of this entry fails (errDisk)
	// block, when set, holds every manual run until it is closed (or the run's
	// context ends).
	block chan struct{}
	// start is every job's start (scheduler.WithStartAt): an hour after the first
	// replica started, the same on every replica so that they agree. No scheduled
	// slot of the hourly and daily jobs runs during a test, whatever the time of
	// day: the runs a test sees are the ones it triggers.
	start time.Time
	// jobOpts, when set, gives the options of each job on each replica.
	jobOpts func(instance, job string) []scheduler.JobOption
	// past: the jobs have no start, so that their past slots exist (backfill); a
	// slot due when the replicas start may then run.
	past bool
	// more, when set, registers more jobs on each replica, after its jobs.
	more func(t *testing.T, instance string, s *scheduler.Scheduler)
}

// startText is start as a schedule's bound is written ("every 1h0m0s from T").
func (f *testFleet) startText() string { return f.start.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// fleetJob is a job a replica declares: every interval, or (interval 0) a job of
// schedule entries (scheduler.Declare).
type fleetJob struct {
	name     string
	interval time.Duration
}

// startFleet starts an embedded server listening on loopback (the command connects
// by URL, as it would to a real server) and replicas declaring jobs. It fails, never
// skips, when the server cannot start.
func startFleet(t *testing.T, jobs func(instance string) []fleetJob, instances ...string) *testFleet {
	t.Helper()
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	f := &testFleet{url: srv.ClientURL(), backend: memory.New()}
	f.startReplicas(t, srv.Connect, jobs, instances...)
	return f
}

func (f *testFleet) startReplicas(t *testing.T, dial func(...nats.Option) (*nats.Conn, error), jobs func(string) []fleetJob, instances ...string) {
	t.Helper()
	if jobs == nil {
		jobs = func(string) []fleetJob { return []fleetJob{{"report", time.Hour}, {"nightly backup", 24 * time.Hour}} }
	}
	if len(instances) == 0 {
		instances = []string{"A", "B", "C"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if f.start.IsZero() {
		f.start = time.Now().Add(time.Hour).Truncate(time.Second)
	}
	for _, id := range instances {
		nc := natstest.Dial(t, dial)
		events, err := fleet.Events(nc)
		require.NoError(t, err)
		s, err := scheduler.New(scheduler.Config{Backend: f.backend, Instance: id, OnEvent: events})
		require.NoError(t, err)
		for _, j := range jobs(id) {
			if j.interval == 0 { // a job of schedule entries
				require.NoError(t, s.Declare(j.name, f.handler))
				continue
			}
			var opts []scheduler.JobOption
			if f.jobOpts != nil {
				opts = f.jobOpts(id, j.name)
			}
			if !f.past {
				opts = append(opts, scheduler.WithStartAt(f.start))
			}
			require.NoError(t, s.Every(j.name, j.interval, f.handler, opts...))
		}
		if f.more != nil {
			f.more(t, id, s)
		}
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
		svc, err := fleet.Serve(ctx, nc, s)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
		f.scheds = append(f.scheds, s)
	}
}

func (f *testFleet) handler(ctx context.Context, run scheduler.Run) error {
	if run.Manual {
		f.manual.Add(1)
		if f.block != nil {
			select {
			case <-f.block:
			case <-ctx.Done():
			}
		}
	}
	if id := f.failEntry.Load(); id != nil && run.Entry == *id {
		return errDisk
	}
	if f.failNext.CompareAndSwap(true, false) {
		if text := f.failWith.Load(); text != nil {
			return handlerError(*text)
		}
		return errDisk
	}
	return nil
}

type handlerError string

func (e handlerError) Error() string { return string(e) }

const errDisk = handlerError("disk full")

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// anarchon runs the command in-process with args.
func anarchon(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	t0 := time.Now()
	code := run(ctx, args, os.Getenv, &out, &errb)
	r := result{code: code, stdout: out.String(), stderr: errb.String(), took: time.Since(t0)}
	t.Logf("anarchon %s → %d\n%s%s", strings.Join(args, " "), code, r.stdout, r.stderr)
	return r
}

// (f *testFleet) paused reports whether every replica sees job paused.
func (f *testFleet) paused(job string) (all, any bool) {
	all = true
	for _, s := range f.scheds {
		_, ok := s.Paused(job)
		all = all && ok
		any = any || ok
	}
	return all, any
}
