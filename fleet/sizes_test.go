package fleet_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// storeRuns stores n finished runs of job in b as another writer (an earlier
// version, another backend's tool) might have: straight into the backend, past
// the scheduler's cut of error texts, with an error of errLen bytes each.
func storeRuns(t testing.TB, b backend.Backend, job string, n, errLen int) {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(-time.Duration(n+1) * time.Minute).Truncate(time.Minute)
	for i := range n {
		slot := base.Add(time.Duration(i) * time.Minute)
		tok := "tok-" + strconv.Itoa(i)
		in := backend.ClaimInput{Job: job, Slot: slot, Token: tok, Instance: "A", Attempt: 1, At: slot, HistorySize: 2 * n}
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		msg := fmt.Sprintf("run %d failed: ", i) + strings.Repeat("e", errLen)
		require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{Slot: slot, Token: tok, Instance: "A", Attempt: 1,
			Status: scheduler.StatusError, StartedAt: slot, FinishedAt: slot.Add(time.Second), Error: msg[:errLen]},
			backend.Retention{Size: 2 * n}))
	}
}

// TestOneLongErrorHidesNoReplica: a job whose last failure carries an error of
// 1 MiB (more than a message holds) is shown by every replica, its error cut with
// the mark; history carries it cut at the scheduler's bound.
func TestOneLongErrorHidesNoReplica(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true})
	storeRuns(t, f.backend, jobReport, 1, 1<<20)
	ctx := requestCtx(t)

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	assert.Len(t, fl.Replicas, 3, "every replica answers")
	assert.Empty(t, fl.Warnings)
	rep := fl.Jobs[1]
	require.Equal(t, jobReport, rep.Name)
	require.NotNil(t, rep.LastFailure)
	assert.LessOrEqual(t, len(rep.LastFailure.Error), fleet.MaxViewError)
	assert.True(t, strings.HasPrefix(rep.LastFailure.Error, "run 0 failed: eee"))
	assert.True(t, strings.HasSuffix(rep.LastFailure.Error, " …[cut from 1048576 bytes]"), rep.LastFailure.Error[900:])
	require.NotNil(t, rep.LastRun)
	assert.LessOrEqual(t, len(rep.LastRun.Error), fleet.MaxViewError)

	h, err := f.client.History(ctx, jobReport, 10)
	require.NoError(t, err)
	require.Len(t, h.Runs, 1)
	assert.LessOrEqual(t, len(h.Runs[0].Error), scheduler.MaxErrorText)
	assert.True(t, strings.HasSuffix(h.Runs[0].Error, " …[cut from 1048576 bytes]"))
}

// TestHistoryOfLongErrors: 1,000 runs with errors of 64 KiB each (64 MiB in all)
// come back, all of them, in parts of at most the max payload; so do 4 of 300 KB.
func TestHistoryOfLongErrors(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, quiet: true, jobs: func(string) []testJob {
		j := every(jobReport, time.Hour)
		j.Opts = []scheduler.JobOption{scheduler.WithHistory(2000, 0)}
		return []testJob{j, every("four", time.Hour)}
	}})
	storeRuns(t, f.backend, jobReport, 1000, 64<<10)
	storeRuns(t, f.backend, "four", 4, 300_000)
	ctx := requestCtx(t)

	t0 := time.Now()
	h, err := f.client.History(ctx, jobReport, 1000)
	require.NoError(t, err)
	require.Len(t, h.Runs, 1000)
	assert.Equal(t, 1000, h.Limit)
	assert.Greater(t, h.Parts, 1)
	assert.Zero(t, h.Part)
	t.Logf("history of 1,000 runs with 64 KiB errors: %d parts in %v", h.Parts, time.Since(t0))
	for i, r := range h.Runs {
		assert.LessOrEqual(t, len(r.Error), scheduler.MaxErrorText)
		assert.Equal(t, "tok-"+strconv.Itoa(999-i), r.Token, "newest first, in order across parts")
	}
	h, err = f.client.History(ctx, "four", 0)
	require.NoError(t, err)
	assert.Len(t, h.Runs, 4)
}

// TestActiveWithManyUnfinishedRuns: a job with 3,000 unfinished runs held by an
// instance with a 1 KiB name is listed in full by active, in parts, and in the jobs
// view as MaxViewRunning runs and a count of the others.
func TestActiveWithManyUnfinishedRuns(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, quiet: true})
	runs := f.backend.Runs()
	holder := strings.Repeat("h", scheduler.MaxJobNameLen)
	base := time.Now().Truncate(time.Hour).Add(-24 * time.Hour)
	const n = 3000
	for i := range n {
		slot := base.Add(time.Duration(i) * time.Second)
		res, err := runs.Claim(context.Background(), backend.RunClaim{Job: jobReport, Slot: slot, Token: "tok-" + strconv.Itoa(i),
			Instance: holder, Lease: time.Hour, Deadline: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, scheduler.OutcomeWon, res.Outcome, "slot %d", i)
	}
	ctx := requestCtx(t)
	a, err := f.client.Active(ctx, jobReport)
	require.NoError(t, err)
	require.Len(t, a.Runs, n)
	assert.Greater(t, a.Parts, 1)
	for i, r := range a.Runs {
		assert.Equal(t, "tok-"+strconv.Itoa(i), r.Token, "oldest first, in order across parts")
	}

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	rep := fl.Jobs[1]
	require.Equal(t, jobReport, rep.Name)
	assert.Len(t, rep.Running, fleet.MaxViewRunning)
	assert.Equal(t, n-fleet.MaxViewRunning, rep.RunningMore)
}

// TestJobsOfTenThousandJobs: one replica that declares 10,000 jobs, with names up
// to 1 KiB, answers jobs in parts, and the client lists every job; its registry
// entry (about 2 MB of declarations) is written in parts, read back whole, and
// another replica that declares one of its jobs differently is told so. The
// schedulers are not started: Serve serves what they declare.
// bigCtx bounds the calls of a test of 10,000 jobs: what it checks is that
// they succeed, not how fast (the race detector and a loaded machine slow
// them many times over).
func bigCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestJobsOfTenThousandJobs(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	conflicts := make(chan scheduler.Event, 16)
	onConflict := func(e scheduler.Event) {
		if e.Kind == scheduler.EventJobConflict {
			conflicts <- e
		}
	}
	s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "big", OnEvent: onConflict})
	require.NoError(t, err)
	const n = 10_000
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("job-%05d", i)
		if i%10 == 0 { // one in ten at the longest a name may be
			names[i] += strings.Repeat("x", scheduler.MaxJobNameLen-len(names[i]))
		}
		require.NoError(t, s.Every(names[i], time.Hour, func(context.Context, scheduler.Run) error { return nil }))
	}
	t0 := time.Now()
	svc, err := fleet.Serve(bigCtx(t), natstest.Conn(t, srv), s)
	require.NoError(t, err)
	t.Logf("Serve of %d jobs: %v", n, time.Since(t0))
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })

	other, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "other"})
	require.NoError(t, err)
	require.NoError(t, other.Every(names[1], 2*time.Hour, func(context.Context, scheduler.Run) error { return nil }))
	osvc, err := fleet.Serve(bigCtx(t), natstest.Conn(t, srv), other)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, osvc.Stop(context.Background())) })
	select {
	case e := <-conflicts:
		assert.Equal(t, names[1], e.Job)
		assert.Equal(t, `schedule: "every 1h0m0s" on big; "every 2h0m0s" on other`, e.Conflict)
	case <-time.After(time.Minute):
		t.Fatal("the replica of 10,000 jobs saw no conflict")
	}

	// The view of 10,000 jobs takes about the default window to compute under the
	// race detector: a longer window, which the registry ends once both answered.
	c, err := fleet.NewClient(natstest.Conn(t, srv), fleet.WithGatherWindow(5*time.Second))
	require.NoError(t, err)
	t0 = time.Now()
	regs, bad, err := c.Registry(bigCtx(t))
	require.NoError(t, err)
	require.Empty(t, bad)
	require.Len(t, regs, 2)
	assert.Equal(t, "big", regs[0].Instance)
	assert.Equal(t, 2, regs[0].Format, "written in parts")
	assert.Greater(t, regs[0].Parts, 1)
	require.Len(t, regs[0].Jobs, n)
	for i, d := range regs[0].Jobs {
		assert.Equal(t, names[i], d.Name)
	}
	assert.Equal(t, 1, regs[1].Format)
	t.Logf("registry of %d jobs: %d parts read in %v", n, regs[0].Parts, time.Since(t0))

	t0 = time.Now()
	fl, err := c.Jobs(bigCtx(t))
	require.NoError(t, err)
	require.Len(t, fl.Replicas, 2)
	assert.Empty(t, fl.Warnings)
	require.Len(t, fl.Jobs, n)
	big := fl.Replicas[0]
	assert.Len(t, big.Jobs, n)
	assert.Greater(t, big.Parts, 1)
	t.Logf("jobs of %d jobs: %d parts in %v", n, big.Parts, time.Since(t0))
	assert.Equal(t, []string{"big", "other"}, fl.Jobs[1].Replicas)
	assert.Equal(t, []string{"big"}, fl.Jobs[2].Replicas)
}

// TestSmallMaxPayload: on a server whose max payload is 64 KiB, a replica of 1,000
// jobs writes its registry entry in parts and answers jobs in parts, and a history
// of 200 runs with errors of 8 KiB comes back whole.
func TestSmallMaxPayload(t *testing.T) {
	ns, err := server.NewServer(&server.Options{ServerName: "small", DontListen: true, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second), "the nats-server must start")
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	dial := func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect("", append([]nats.Option{nats.InProcessServer(ns)}, opts...)...)
	}
	f := startFleet(t, fleetSetup{instances: []string{"A"}, dial: dial, quiet: true, jobs: func(string) []testJob {
		jobs := []testJob{every(jobReport, time.Hour)}
		jobs[0].Opts = []scheduler.JobOption{scheduler.WithHistory(400, 0)}
		for i := range 1000 {
			jobs = append(jobs, every(fmt.Sprintf("job-%04d-%s", i, strings.Repeat("n", 30)), time.Hour))
		}
		return jobs
	}})
	require.EqualValues(t, 64<<10, f.nc.MaxPayload())
	storeRuns(t, f.backend, jobReport, 200, scheduler.MaxErrorText)
	ctx := requestCtx(t)

	regs, bad, err := f.client.Registry(ctx)
	require.NoError(t, err)
	require.Empty(t, bad)
	require.Len(t, regs, 1)
	assert.Equal(t, 2, regs[0].Format)
	assert.Len(t, regs[0].Jobs, 1001)
	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, fl.Replicas, 1)
	assert.Len(t, fl.Jobs, 1001)
	assert.Greater(t, fl.Replicas[0].Parts, 1)
	h, err := f.client.History(ctx, jobReport, 1000)
	require.NoError(t, err)
	assert.Len(t, h.Runs, 200)
	assert.Greater(t, h.Parts, 20)
}

// TestMissingPartsAreSaid: a replica whose reply stops after its first part (one
// that died while answering, or a slow consumer's dropped message) is no silent
// half: a history is an error that says how many parts came, a jobs answer a
// warning and the replica is not listed.
func TestMissingPartsAreSaid(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, serve: []fleet.Option{fleet.WithoutRegistry()}})
	half := natstest.Dial(t, f.dial)
	sub, err := half.Subscribe(f.client.Subject("history", "half"), func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"job":"half","instance":"H","limit":10,"runs":[{"job":"half","status":"ok"}],"part":1,"parts":3}`))
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	jobs, err := half.Subscribe("anarchon.JOBS", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"instance":"H","version":"` + fleet.Version + `","service_id":"h1","jobs":[{"name":"half"}],"part":1,"parts":2}`))
	})
	require.NoError(t, err)
	defer func() { _ = jobs.Unsubscribe() }()
	require.NoError(t, half.Flush())

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = f.client.History(ctx, "half", 10)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 of the 3 parts of the reply arrived")

	c, err := fleet.NewClient(f.nc, fleet.WithGatherWindow(200*time.Millisecond))
	require.NoError(t, err)
	fl, err := c.Jobs(requestCtx(t))
	require.NoError(t, err)
	require.Len(t, fl.Replicas, 1, "A, whole; not H")
	assert.Equal(t, "A", fl.Replicas[0].Instance)
	assert.Equal(t, []string{`replica "H" sent 1 of the 2 parts of its jobs answer (no part for 200ms, or the deadline): it is not listed; ask again`}, fl.Warnings)
}
