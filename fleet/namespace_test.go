package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// verbNames are the fleet's verbs, in both cases, as job names.
var verbNames = func() []string {
	var out []string
	for _, v := range []string{"jobs", "pauseall", "resumeall", "trigger", "pause", "resume", "history", "active", "events", "backfill"} {
		out = append(out, v, strings.ToUpper(v))
	}
	return out
}()

// TestJobNamedLikeAVerbSwallowsNoRequest: every fleet verb, in either case, is a
// job of its own on the JetStream backend with leases, whose streams listen on
// anarchon.<job token>.>; the fleet's requests about other jobs are still answered
// by the fleet, each job's trigger runs it once, and a request about a job no
// replica declares gets no answer from a stream.
func TestJobNamedLikeAVerbSwallowsNoRequest(t *testing.T) {
	f := startFleet(t, fleetSetup{
		instances:  []string{"A", "B"},
		backendFor: leasedBackend,
		quiet:      true,
		jobs: func(string) []testJob {
			jobs := []testJob{every(jobReport, time.Hour)}
			for _, name := range verbNames {
				jobs = append(jobs, every(name, time.Hour))
			}
			return jobs
		},
	})
	ctx := requestCtx(t)

	r, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "ana", Wait: true})
	require.NoError(t, err)
	require.Equal(t, scheduler.StatusOK, r.Run.Status)
	for range 20 {
		h, err := f.client.History(ctx, jobReport, 10)
		require.NoError(t, err)
		assert.Equal(t, jobReport, h.Job)
		require.Len(t, h.Runs, 1, "the history of report, not a stream's publish acknowledgement")
		assert.Equal(t, r.Run.Token, h.Runs[0].Token)
		a, err := f.client.Active(ctx, jobReport)
		require.NoError(t, err)
		assert.Equal(t, jobReport, a.Job)
		assert.Contains(t, []string{"A", "B"}, a.Instance)
	}

	// A job nobody declares: nothing answers, not even a job stream.
	for _, call := range map[string]func() error{
		"pause":   func() error { _, err := f.client.Pause(ctx, "nobody", fleet.PauseRequest{Reason: "r"}); return err },
		"resume":  func() error { _, err := f.client.Resume(ctx, "nobody", fleet.ResumeRequest{}); return err },
		"trigger": func() error { _, err := f.client.Trigger(ctx, "nobody", fleet.TriggerRequest{}); return err },
		"history": func() error { _, err := f.client.History(ctx, "nobody", 1); return err },
		"active":  func() error { _, err := f.client.Active(ctx, "nobody"); return err },
	} {
		assert.ErrorIs(t, call(), fleet.ErrNoReplica)
	}
	pauses, err := f.replicas[0].s.Backend().(backend.Pauser).Pauses(ctx)
	require.NoError(t, err)
	assert.Empty(t, pauses, "no pause stored")

	// Every verb-named job runs once per trigger, and its history says so.
	for _, name := range verbNames {
		r, err := f.client.Trigger(ctx, name, fleet.TriggerRequest{Wait: true})
		require.NoError(t, err, name)
		require.NotNil(t, r.Run, name)
		assert.Equal(t, name, r.Job)
		assert.Equal(t, scheduler.StatusOK, r.Run.Status, name)
	}
	assert.Equal(t, 1+len(verbNames), f.manualRuns(), "each trigger ran its job once")
	for _, name := range verbNames {
		h, err := f.client.History(ctx, name, 10)
		require.NoError(t, err, name)
		require.Len(t, h.Runs, 1, name)
		assert.Equal(t, name, h.Runs[0].Job)
	}

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, fl.Replicas, 2)
	assert.Len(t, fl.Jobs, 1+len(verbNames))
	for _, j := range fl.Jobs {
		assert.Equal(t, []string{"A", "B"}, j.Replicas, j.Name)
		assert.Empty(t, j.Warnings, j.Name)
	}
}

// TestServeRefusesOverlappingSubjects: a replica whose backend's streams, run
// store, registry and fleet subjects could meet is refused at Serve, with both
// subjects named, before anything is served.
func TestServeRefusesOverlappingSubjects(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	js := natstest.JetStream(t, nc)
	newScheduler := func(t *testing.T, b backend.Backend, jobs ...string) *scheduler.Scheduler {
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: "A"})
		require.NoError(t, err)
		for _, j := range jobs {
			require.NoError(t, s.Every(j, time.Hour, func(context.Context, scheduler.Run) error { return nil }))
		}
		return s
	}
	runs, err := kvlease.New(js)
	require.NoError(t, err)
	t.Cleanup(runs.Close)
	plain, err := jetstream.New(js)
	require.NoError(t, err)
	leased, err := jetstream.NewLeased(js, runs)
	require.NoError(t, err)
	onRegistry, err := jetstream.New(js, jetstream.WithSubjectPrefix("$KV.anarchon_registry"))
	require.NoError(t, err)

	for _, c := range []struct {
		name    string
		backend backend.Backend
		jobs    []string
		opts    []fleet.Option
		want    []string
	}{
		{"a job named like the last token of the fleet's prefix", plain, []string{jobReport, "ops"}, []fleet.Option{fleet.WithPrefix("anarchon.ops")},
			[]string{"the fleet service (prefix anarchon.ops) listens on anarchon.ops.JOBS", "overlaps anarchon.ops.> of the backend jetstream", `(for job "ops")`}},
		{"the registry in the lease bucket", leased, []string{jobReport}, []fleet.Option{fleet.WithRegistryBucket(kvlease.DefaultBucket)},
			[]string{"the registry (bucket anarchon_leases) listens on $KV.anarchon_leases.>", "overlaps $KV.anarchon_leases.> of the backend jetstream"}},
		{"job streams in the registry's bucket", onRegistry, []string{jobReport}, nil,
			[]string{"the registry (bucket anarchon_registry) listens on $KV.anarchon_registry.>", "$KV.anarchon_registry.report.> of the backend jetstream", `(for job "report")`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := fleet.Serve(requestCtx(t), nc, newScheduler(t, c.backend, c.jobs...), c.opts...)
			require.ErrorIs(t, err, fleet.ErrSubjectsOverlap)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			_, err = nc.Request("anarchon.ops.JOBS", []byte(`{"v":1}`), 200*time.Millisecond)
			assert.ErrorIs(t, err, nats.ErrNoResponders, "nothing was served")
		})
	}

	// A subject prefix that spells a verb cannot reach the fleet's subjects (a job
	// stream's subjects have one token more than any endpoint's): served.
	verbPrefixed, err := jetstream.New(js, jetstream.WithSubjectPrefix("anarchon.HISTORY"))
	require.NoError(t, err)
	s := newScheduler(t, verbPrefixed, jobReport)
	svc, err := fleet.Serve(requestCtx(t), nc, s)
	require.NoError(t, err)
	require.NoError(t, svc.Stop(context.Background()))
}

// TestInstanceNamesOfAnyKind: instances named with dots, wildcards, white space,
// unicode and at the longest a name may be are each listed, registered and asked.
func TestInstanceNamesOfAnyKind(t *testing.T) {
	names := []string{"a.b", "*", ">", "ünï code", strings.Repeat("i", scheduler.MaxJobNameLen)}
	f := startFleet(t, fleetSetup{instances: names})
	ctx := requestCtx(t)
	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, fl.Replicas, len(names))
	require.Len(t, fl.Registered, len(names))
	assert.Empty(t, fl.Warnings)
	assert.Empty(t, fl.Unreadable)
	for _, j := range fl.Jobs {
		assert.Len(t, j.Replicas, len(names), j.Name)
		assert.Empty(t, j.Warnings, j.Name)
	}
	r, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{Wait: true})
	require.NoError(t, err)
	assert.Contains(t, names, r.Instance)
	for _, rep := range f.replicas {
		assert.Empty(t, rep.svc.Conflicts(), rep.s.Instance())
	}
}
