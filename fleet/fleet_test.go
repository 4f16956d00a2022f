package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

func TestTriggerRunsOnceAcrossReplicas(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true})
	ctx := requestCtx(t)

	r, err := f.client.Trigger(ctx, jobBackup, fleet.TriggerRequest{By: "ana", Wait: true})
	require.NoError(t, err)
	assert.Equal(t, fleet.StateFinished, r.State)
	assert.Equal(t, jobBackup, r.Job)
	assert.Equal(t, "ana", r.By)
	assert.Contains(t, []string{"A", "B", "C"}, r.Instance)
	require.NotNil(t, r.Run)
	assert.True(t, r.Run.Manual)
	assert.Equal(t, scheduler.StatusOK, r.Run.Status)
	assert.Equal(t, r.Instance, r.Run.Instance, "the replica that accepted ran it")
	assert.Equal(t, 1, f.manualRuns(), "one run across three replicas")

	h, err := f.client.History(ctx, jobBackup, 0)
	require.NoError(t, err)
	require.Len(t, h.Runs, 1)
	assert.Equal(t, r.Run.Token, h.Runs[0].Token)
	assert.True(t, h.Runs[0].Manual)
	assert.Equal(t, "ana", h.Runs[0].RequestedBy, "who asked is recorded with the run")
	assert.Equal(t, "ana", r.Run.RequestedBy)

	// Without wait: the accepted reply only; the run follows on that replica.
	r, err = f.client.Trigger(ctx, jobBackup, fleet.TriggerRequest{By: "bo"})
	require.NoError(t, err)
	assert.Equal(t, fleet.StateAccepted, r.State)
	assert.Nil(t, r.Run)
	require.Eventually(t, func() bool { return f.manualRuns() == 2 }, 5*time.Second, 5*time.Millisecond)
}

func TestPauseReachesEveryReplicaAndResume(t *testing.T) {
	f := startFleet(t, fleetSetup{})
	ctx := requestCtx(t)

	t0 := time.Now()
	p, err := f.client.Pause(ctx, jobReport, fleet.PauseRequest{Reason: "migrating the table", By: "ana"})
	require.NoError(t, err)
	replied := time.Since(t0)
	propagation := f.waitView(t, jobReport, true, t0)
	t.Logf("pause: reply after %v, every replica paused after %v", replied, propagation)
	assert.Equal(t, fleet.PauseInfo{Job: jobReport, Reason: "migrating the table", By: "ana", At: p.Pause.At}, p.Pause)
	for _, r := range f.replicas {
		got, ok := r.s.Paused(jobReport)
		require.True(t, ok, "%s sees the pause", r.s.Instance())
		assert.Equal(t, "migrating the table", got.Reason)
		assert.Equal(t, "ana", got.By)
		_, ok = r.s.Paused(jobBackup)
		assert.False(t, ok, "%s: the other job runs", r.s.Instance())
	}

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, fl.Jobs, 2)
	assert.Equal(t, "CRON_TZ=UTC 0 3 * * *", fl.Jobs[0].Schedule)
	assert.Equal(t, "at 03:00 every day (UTC)", fl.Jobs[0].ScheduleText)
	rep := fl.Jobs[1]
	require.Equal(t, jobReport, rep.Name)
	assert.Equal(t, []string{"A", "B", "C"}, rep.PausedOn)
	require.NotNil(t, rep.Pause)
	assert.Equal(t, "migrating the table", rep.Pause.Reason)
	assert.Empty(t, rep.Warnings)

	t0 = time.Now()
	res, err := f.client.Resume(ctx, jobReport, fleet.ResumeRequest{By: "ana"})
	require.NoError(t, err)
	assert.Nil(t, res.StillPaused)
	assert.False(t, res.NotPaused, "a pause was in force")
	t.Logf("resume: every replica running again after %v", f.waitView(t, jobReport, false, t0))
	for _, r := range f.replicas {
		_, ok := r.s.Paused(jobReport)
		assert.False(t, ok, "%s runs the job again", r.s.Instance())
	}

	// Again: nothing to resume, and the reply says so.
	res, err = f.client.Resume(ctx, jobReport, fleet.ResumeRequest{By: "ana"})
	require.NoError(t, err)
	assert.True(t, res.NotPaused)
	res, err = f.client.Resume(ctx, jobBackup, fleet.ResumeRequest{By: "ana"})
	require.NoError(t, err)
	assert.True(t, res.NotPaused, "never paused")
	res, err = f.client.ResumeAll(ctx, fleet.ResumeRequest{By: "ana"})
	require.NoError(t, err)
	assert.True(t, res.NotPaused, "no all-jobs pause")
}

func TestPauseForAndUntilEndByThemselves(t *testing.T) {
	f := startFleet(t, fleetSetup{})
	ctx := requestCtx(t)

	_, err := f.client.Pause(ctx, jobReport, fleet.PauseRequest{Reason: "short", For: "400ms"})
	require.NoError(t, err)
	until := time.Now().Add(600 * time.Millisecond).UTC()
	p, err := f.client.Pause(ctx, jobBackup, fleet.PauseRequest{Reason: "shorter", Until: until})
	require.NoError(t, err)
	assert.True(t, p.Pause.Until.Equal(until))
	assert.Equal(t, p.Instance, p.Pause.By, "no by: the pausing instance, the scheduler's default")
	f.waitView(t, jobBackup, true, time.Time{})
	f.waitView(t, jobReport, true, time.Time{})
	for _, r := range f.replicas {
		got, ok := r.s.Paused(jobReport)
		require.True(t, ok)
		assert.WithinDuration(t, time.Now().Add(400*time.Millisecond), got.Until, 400*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		for _, r := range f.replicas {
			for _, job := range []string{jobReport, jobBackup} {
				if _, ok := r.s.Paused(job); ok {
					return false
				}
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "the pauses end by themselves on every replica")
	assert.False(t, time.Now().Before(until), "not before until")
}

func TestPauseAllAndResumeAll(t *testing.T) {
	f := startFleet(t, fleetSetup{})
	ctx := requestCtx(t)

	t0 := time.Now()
	p, err := f.client.PauseAll(ctx, fleet.PauseRequest{Reason: "freeze", By: "ops"})
	require.NoError(t, err)
	assert.Empty(t, p.Pause.Job)
	t.Logf("pauseall: every replica paused after %v", f.waitView(t, "", true, t0))
	for _, r := range f.replicas {
		for _, job := range []string{jobReport, jobBackup} {
			got, ok := r.s.Paused(job)
			require.True(t, ok, "%s %s", r.s.Instance(), job)
			assert.Equal(t, "freeze", got.Reason)
		}
	}
	// Resuming one job does not end the all-jobs pause, and the reply says so.
	res, err := f.client.Resume(ctx, jobReport, fleet.ResumeRequest{})
	require.NoError(t, err)
	require.NotNil(t, res.StillPaused)
	assert.Equal(t, "freeze", res.StillPaused.Reason)
	assert.True(t, res.NotPaused, "the job had no pause of its own")

	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	for _, j := range fl.Jobs {
		assert.Equal(t, []string{"A", "B", "C"}, j.PausedOn, j.Name)
		assert.Empty(t, j.Pause.Job, "the all-jobs pause")
	}

	t0 = time.Now()
	_, err = f.client.ResumeAll(ctx, fleet.ResumeRequest{By: "ops"})
	require.NoError(t, err)
	f.waitView(t, "", false, t0)
	for _, r := range f.replicas {
		_, ok := r.s.Paused(jobBackup)
		assert.False(t, ok)
	}
}

func TestJobsListsReplicasAndDisagreements(t *testing.T) {
	f := startFleet(t, fleetSetup{
		jobs: func(id string) []testJob {
			jobs := []testJob{every(jobReport, time.Hour)}
			if id == "C" {
				jobs = []testJob{every(jobReport, 2*time.Hour), every("only-c", time.Hour)}
			}
			return jobs
		},
		client: []fleet.Option{fleet.WithGatherWindow(300 * time.Millisecond)},
	})
	t0 := time.Now()
	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	assert.Less(t, time.Since(t0), 2*time.Second, "bounded by the window")
	require.Len(t, fl.Replicas, 3)
	for i, id := range []string{"A", "B", "C"} {
		assert.Equal(t, id, fl.Replicas[i].Instance)
		assert.Equal(t, fleet.Version, fl.Replicas[i].Version)
		assert.Equal(t, "memory", fl.Replicas[i].Backend)
		assert.True(t, fl.Replicas[i].PauseSupported)
	}
	assert.Empty(t, fl.Warnings)
	require.Len(t, fl.Jobs, 2)
	c, rep := fl.Jobs[0], fl.Jobs[1]
	assert.Equal(t, "only-c", c.Name)
	assert.Equal(t, []string{"C"}, c.Replicas)
	assert.Equal(t, []string{"not declared on A, B"}, c.Warnings)
	assert.Equal(t, jobReport, rep.Name)
	assert.Empty(t, rep.Schedule, "no one schedule")
	assert.Empty(t, rep.ScheduleText)
	assert.Equal(t, "every 1h0m0s (aligned to UTC)", c.ScheduleText)
	assert.Equal(t, map[string][]string{"every 1h0m0s": {"A", "B"}, "every 2h0m0s": {"C"}}, rep.Schedules)
	assert.Equal(t, []string{"replicas disagree on the schedule: every 1h0m0s (A, B); every 2h0m0s (C)"}, rep.Warnings)
	assert.False(t, rep.Agree())
}

func TestHistoryLimit(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, quiet: true})
	ctx := requestCtx(t)
	for range 3 {
		_, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{Wait: true})
		require.NoError(t, err)
	}
	for _, c := range []struct{ ask, applied, runs int }{{0, fleet.DefaultHistoryLimit, 3}, {2, 2, 2}, {5000, fleet.MaxHistoryLimit, 3}} {
		h, err := f.client.History(ctx, jobReport, c.ask)
		require.NoError(t, err)
		assert.Equal(t, c.applied, h.Limit, "limit %d", c.ask)
		assert.Len(t, h.Runs, c.runs, "limit %d", c.ask)
	}
}

// rawRequest sends body to subject and returns the reply, failing on no reply.
func rawRequest(t *testing.T, nc *nats.Conn, subject, body string) *nats.Msg {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), 5*time.Second)
	require.NoError(t, err, subject)
	return m
}

func TestBadRequestsChangeNothing(t *testing.T) {
	f := startFleet(t, fleetSetup{})
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	long := strings.Repeat("x", scheduler.MaxPauseText+1)
	for _, c := range []struct {
		name, verb, body, want string
	}{
		{"malformed JSON", "pause", `{"reason":`, "bad request: invalid JSON"},
		{"not an object", "pause", `["x"]`, "bad request: invalid JSON"},
		{"two values", "resume", `{"v":1} {}`, "bad request: invalid JSON"},
		{"unknown field", "pause", `{"v":1,"reason":"r","reson":"x"}`, `unknown field "reson"`},
		{"no reason", "pause", `{"v":1,"by":"ana"}`, "bad request: a pause needs a reason"},
		{"until in the past", "pause", `{"v":1,"reason":"r","until":"` + past + `"}`, "bad request: until " + past + " is in the past"},
		{"until and for", "pause", `{"v":1,"reason":"r","until":"` + future + `","for":"1h"}`, "bad request: give until or for, not both"},
		{"for not a duration", "pause", `{"v":1,"reason":"r","for":"soon"}`, "bad request: for: "},
		{"for negative", "pause", `{"v":1,"reason":"r","for":"-1m"}`, "bad request: for -1m is not positive"},
		{"reason too long", "pause", `{"v":1,"reason":"` + long + `"}`, "bad request: reason must be valid UTF-8 of at most 1024 bytes"},
		{"trigger by too long", "trigger", `{"v":1,"by":"` + long + `"}`, "bad request: by must be"},
		{"trigger malformed", "trigger", `{"v":1,"wait":"yes"}`, "bad request: invalid JSON"},
		{"history limit negative", "history", `{"v":1,"limit":-1}`, "bad request: limit -1 is negative"},
		{"history malformed", "history", `limit=3`, "bad request: invalid JSON"},
		{"deeply nested", "trigger", `{"v":1,"by":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, "bad request: invalid JSON"},
		// Every request is a versioned JSON object: an empty body (what a key-value
		// purge marker carries), null, {} and a newer format are refused with what
		// to send.
		{"trigger empty", "trigger", ``, `bad request: an empty body is not a request: send a JSON object with "v":1`},
		{"resume empty", "resume", "  \n", `bad request: an empty body is not a request`},
		{"trigger null", "trigger", `null`, `bad request: the request has no "v": send "v":1`},
		{"trigger without v", "trigger", `{"wait":true}`, `bad request: the request has no "v"`},
		{"active without v", "active", `{}`, `bad request: the request has no "v"`},
		{"history v not a number", "history", `{"v":"1"}`, `bad request: "v" is "1", not a number: send "v":1`},
		{"pause v zero", "pause", `{"v":0,"reason":"r"}`, `bad request: request format 0 does not exist`},
		{"trigger newer", "trigger", `{"v":2,"by":"ana","wait":true,"priority":"high"}`,
			`bad request: request format 2 is newer than this replica's (1, fleet ` + fleet.Version + `): upgrade the replica`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := rawRequest(t, f.nc, f.client.Subject(c.verb, jobReport), c.body)
			assert.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
			assert.Contains(t, m.Header.Get(micro.ErrorHeader), c.want)
			var body fleet.ErrorBody
			require.NoError(t, json.Unmarshal(m.Data, &body))
			assert.Equal(t, 400, body.Code)
			assert.Contains(t, []string{"A", "B", "C"}, body.Instance)
		})
	}
	for _, verb := range []string{"PAUSEALL", "RESUMEALL"} {
		for _, body := range []string{`{"v":1,"nope":1}`, ``, `{}`, `{"v":3}`} {
			m := rawRequest(t, f.nc, "anarchon."+verb, body)
			assert.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader), "%s %s", verb, body)
		}
	}
	for _, body := range []string{`{`, ``, `{}`, `{"v":2}`} {
		m := rawRequest(t, f.nc, "anarchon.JOBS", body)
		assert.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader), body)
	}

	// The client's view of the same refusal.
	_, err := f.client.Trigger(requestCtx(t), jobReport, fleet.TriggerRequest{V: fleet.RequestVersion + 1})
	require.ErrorIs(t, err, fleet.ErrBadRequest)
	assert.Contains(t, err.Error(), "upgrade the replica")
	_, err = f.client.Pause(requestCtx(t), jobReport, fleet.PauseRequest{Reason: "r", Until: time.Now().Add(-time.Second)})
	require.ErrorIs(t, err, fleet.ErrBadRequest)
	var se *fleet.ServiceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, fleet.CodeBadRequest, se.Code)
	assert.Contains(t, se.Error(), "is in the past")

	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pauses, "no bad request stored a pause")
	assert.Zero(t, f.manualRuns(), "no bad request ran a job")
}

func TestUnknownJob(t *testing.T) {
	// The service serves the jobs its scheduler declares (s.Jobs()), so a job no
	// replica declares has no subscriber at all.
	f := startFleet(t, fleetSetup{instances: []string{"B", "A", "C"}})
	ctx := requestCtx(t)

	// A job no replica serves: no responders, at once, and the replicas that are
	// up named.
	t0 := time.Now()
	_, err := f.client.Trigger(ctx, "nobody declares this", fleet.TriggerRequest{Wait: true})
	require.ErrorIs(t, err, fleet.ErrNoReplica)
	require.ErrorIs(t, err, fleet.ErrUnknownJob, "replicas are up: none declares it")
	assert.Equal(t, `fleet: no replica declares job "nobody declares this" (replicas up: A, B, C)`, err.Error())
	var nre *fleet.NoReplicaError
	require.ErrorAs(t, err, &nre)
	assert.Equal(t, []string{"A", "B", "C"}, nre.Up)
	assert.True(t, nre.Checked)
	assert.Less(t, time.Since(t0), time.Second, "every registered replica answered: no gather window waited out")
	for _, call := range []func() error{
		func() error { _, err := f.client.Pause(ctx, "nope", fleet.PauseRequest{Reason: "r"}); return err },
		func() error { _, err := f.client.Resume(ctx, "nope", fleet.ResumeRequest{}); return err },
		func() error { _, err := f.client.History(ctx, "nope", 1); return err },
		func() error { _, err := f.client.Active(ctx, "nope"); return err },
	} {
		err := call()
		assert.ErrorIs(t, err, fleet.ErrUnknownJob)
		assert.ErrorContains(t, err, `no replica declares job "nope" (replicas up: A, B, C)`)
	}

	pauses, err := f.backend.Pauses(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pauses)
}

// noPauses is a backend that cannot store pauses (no Pauser).
type noPauses struct{ backend.Backend }

func TestPauseNotSupported(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, backend: noPauses{memory.New()}})
	ctx := requestCtx(t)
	_, err := f.client.Pause(ctx, jobReport, fleet.PauseRequest{Reason: "r"})
	require.ErrorIs(t, err, fleet.ErrNotSupported)
	require.ErrorIs(t, err, scheduler.ErrPauseNotSupported)
	_, err = f.client.ResumeAll(ctx, fleet.ResumeRequest{})
	require.ErrorIs(t, err, fleet.ErrNotSupported)
	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	assert.False(t, fl.Replicas[0].PauseSupported)
	// Triggers and history work without pauses.
	_, err = f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{Wait: true})
	require.NoError(t, err)
}

func TestStoppedServiceNoLongerAnswers(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}})
	ctx := requestCtx(t)
	require.NoError(t, f.replicas[0].svc.Stop(ctx))
	require.NoError(t, f.replicas[0].svc.Stop(ctx), "a second Stop")
	_, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{})
	require.ErrorIs(t, err, fleet.ErrNoReplica)
	assert.NotErrorIs(t, err, fleet.ErrUnknownJob, "no replica is up: the job may well exist")
	assert.ErrorContains(t, err, "fleet: no replica is up (no responders on anarchon.TRIGGER.")
	_, err = f.client.Jobs(ctx)
	require.ErrorIs(t, err, fleet.ErrNoReplica)
}

func TestPrefixesSeparateFleets(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, serve: []fleet.Option{fleet.WithPrefix("ops.billing")}})
	ctx := requestCtx(t)
	_, err := f.client.Jobs(ctx)
	require.ErrorIs(t, err, fleet.ErrNoReplica, "the default prefix finds nothing")
	c, err := fleet.NewClient(f.nc, fleet.WithPrefix("ops.billing"))
	require.NoError(t, err)
	fl, err := c.Jobs(ctx)
	require.NoError(t, err)
	assert.Len(t, fl.Replicas, 1)
	assert.Equal(t, "ops.billing.TRIGGER."+fleet.JobToken(jobReport), c.Subject("trigger", jobReport))
}

func TestInvalidOptions(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	s, err := scheduler.New(scheduler.Config{Backend: memory.New()})
	require.NoError(t, err)
	for name, opts := range map[string][]fleet.Option{
		"empty prefix":    {fleet.WithPrefix("")},
		"wildcard prefix": {fleet.WithPrefix("a.*")},
		"empty token":     {fleet.WithPrefix("a..b")},
		"space":           {fleet.WithPrefix("a b")},
		"nil logger":      {fleet.WithLogger(nil)},
		"client option":   {fleet.WithGatherWindow(time.Second)},
		"client timeout":  {fleet.WithTimeout(time.Second)},
		"heartbeat < 1s":  {fleet.WithHeartbeat(500 * time.Millisecond)},
		"heartbeat > max": {fleet.WithHeartbeat(fleet.MaxHeartbeat + time.Second)},
		"heartbeat huge":  {fleet.WithHeartbeat(1 << 62)},
		"bucket name":     {fleet.WithRegistryBucket("a.b")},
		"empty bucket":    {fleet.WithRegistryBucket("")},
		"replicas 0":      {fleet.WithRegistryReplicas(0)},
		"replicas 6":      {fleet.WithRegistryReplicas(6)},
	} {
		_, err := fleet.Serve(context.Background(), nc, s, opts...)
		assert.ErrorIs(t, err, fleet.ErrInvalidOption, name)
	}
	_, err = fleet.Serve(context.Background(), nil, s)
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.Serve(context.Background(), nc, nil)
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.NewClient(nc, fleet.WithLogger(slog.Default()))
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.Events(nc, fleet.WithLogger(slog.Default()))
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.Events(nc, fleet.WithPrefix("a.>"))
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.Events(nil)
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
	_, err = fleet.NewClient(nc, fleet.WithTimeout(0))
	assert.ErrorIs(t, err, fleet.ErrInvalidOption)
}

// TestPausedSlotsAreNotRun checks the effect, not only the view: slots that fall
// while a job is paused through the service run nowhere (recorded paused), and
// slots run again after resume. It runs on real time, so it waits for what it
// needs to see (a slot recorded paused, then a slot after resume run ok), within
// a generous bound, and asserts what holds however slow the machine: no slot
// inside the pause ran, none after it is paused, every slot has one record.
func TestPausedSlotsAreNotRun(t *testing.T) {
	const tick = 200 * time.Millisecond
	f := startFleet(t, fleetSetup{jobs: func(string) []testJob { return []testJob{every("tick", tick)} }})
	ctx := requestCtx(t)

	t0 := time.Now()
	_, err := f.client.Pause(ctx, "tick", fleet.PauseRequest{Reason: "quiet", By: "ana"})
	require.NoError(t, err)
	f.waitView(t, "tick", true, t0)
	pausedAt := time.Now()
	f.waitHistory(t, "tick", "a slot recorded paused", func(r fleet.Run) bool {
		return r.Slot.After(pausedAt) && r.Status == scheduler.StatusPaused
	})
	resumeAsked := time.Now()
	_, err = f.client.Resume(ctx, "tick", fleet.ResumeRequest{By: "ana"})
	require.NoError(t, err)
	f.waitView(t, "tick", false, resumeAsked)
	resumedAt := time.Now()
	h := f.waitHistory(t, "tick", "a slot run after resume", func(r fleet.Run) bool {
		return r.Slot.After(resumedAt) && r.Status == scheduler.StatusOK
	})

	count := map[scheduler.Status]int{}
	slots := map[int64]int{}
	for _, r := range h.Runs {
		slots[r.Slot.UnixMilli()]++
		switch {
		case r.Slot.After(pausedAt) && r.Slot.Before(resumeAsked):
			assert.NotEqual(t, scheduler.StatusOK, r.Status, "slot %s fell while paused and ran", r.Slot)
			count[r.Status]++
		case r.Slot.After(resumedAt):
			assert.NotEqual(t, scheduler.StatusPaused, r.Status, "slot %s fell after resume", r.Slot)
			count[r.Status]++
		}
	}
	t.Logf("statuses of the slots inside and after the pause: %v", count)
	for slot, n := range slots {
		assert.Equal(t, 1, n, "one record per slot across three replicas: %d", slot)
	}
}

func TestNoReplicaErrorText(t *testing.T) {
	up := []string{"r01", "r02", "r03", "r04", "r05", "r06", "r07", "r08", "r09", "r10", "r11", "r12"}
	for _, c := range []struct {
		name    string
		err     *fleet.NoReplicaError
		want    string
		unknown bool
	}{
		{"replicas up", &fleet.NoReplicaError{Subject: "s", Job: "x", Up: []string{"a", "b"}, Checked: true},
			`fleet: no replica declares job "x" (replicas up: a, b)`, true},
		{"many up", &fleet.NoReplicaError{Subject: "s", Job: "x", Up: up, Checked: true},
			`fleet: no replica declares job "x" (replicas up: r01, r02, r03, r04, r05, r06, r07, r08, r09, r10 and 2 more)`, true},
		{"none up", &fleet.NoReplicaError{Subject: "s", Job: "x", Checked: true},
			"fleet: no replica is up (no responders on s, nor on the fleet's jobs subject)", false},
		{"not known who is up", &fleet.NoReplicaError{Subject: "s", Job: "x"},
			`fleet: no replica answers: none that declares job "x" is up (no responders on s)`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.err.Error())
			assert.ErrorIs(t, c.err, fleet.ErrNoReplica)
			assert.Equal(t, c.unknown, errors.Is(c.err, fleet.ErrUnknownJob))
		})
	}
}
