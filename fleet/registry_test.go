package fleet_test

import (
	"context"
	"encoding/json"
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

// disagreeing declares report hourly on A and B, every two hours on C.
func disagreeing(instance string) []testJob {
	d := time.Hour
	if instance == "C" {
		d = 2 * time.Hour
	}
	return []testJob{every(jobReport, d)}
}

// TestRegistryReportsConflicts: replicas that declare a job differently each get
// a job_conflict event naming who declares what, and the event that clears it
// once the odd replica is gone; clients list every registered replica.
func TestRegistryReportsConflicts(t *testing.T) {
	f := startFleet(t, fleetSetup{jobs: disagreeing})
	a, c := f.replicas[0], f.replicas[2]
	want := `schedule: "every 1h0m0s" on A, B; "every 2h0m0s" on C`
	for _, r := range f.replicas {
		f.waitConflict(t, r, jobReport, "schedule: ", 5*time.Second)
	}
	f.waitConflict(t, a, jobReport, want, 5*time.Second)
	assert.Equal(t, map[string]string{jobReport: want}, a.svc.Conflicts())

	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	require.Len(t, fl.Registered, 3)
	assert.Equal(t, []string{"A", "B", "C"}, []string{fl.Registered[0].Instance, fl.Registered[1].Instance, fl.Registered[2].Instance})
	assert.Equal(t, "every 2h0m0s", fl.Registered[2].Jobs[0].Schedule)
	assert.Equal(t, 1, fl.Registered[2].Format, "a small entry is one value, which the previous version reads too")
	assert.Empty(t, fl.Unreadable)

	// C stops: its entry is removed at once, A and B agree again.
	require.NoError(t, c.svc.Stop(context.Background()))
	f.waitConflict(t, a, jobReport, "", 5*time.Second)
	f.waitConflict(t, f.replicas[1], jobReport, "", 5*time.Second)
	assert.Empty(t, a.svc.Conflicts())
	regs, bad, err := f.client.Registry(requestCtx(t))
	require.NoError(t, err)
	assert.Empty(t, bad)
	assert.Len(t, regs, 2)
}

// TestRegistryEntryOfADeadReplicaExpires: a replica that dies without Stop (its
// connection closed) stops rewriting its entry; the entry expires after three
// heartbeats and the server's marker clears the others' conflict.
func TestRegistryEntryOfADeadReplicaExpires(t *testing.T) {
	f := startFleet(t, fleetSetup{jobs: disagreeing, serve: []fleet.Option{fleet.WithHeartbeat(time.Second)}})
	a, c := f.replicas[0], f.replicas[2]
	f.waitConflict(t, a, jobReport, "schedule: ", 5*time.Second)
	c.nc.Close() // no Stop: the entry stays until it expires
	killed := time.Now()
	f.waitConflict(t, a, jobReport, "", 10*time.Second)
	t.Logf("conflict cleared %v after the kill (entry TTL 3s)", time.Since(killed).Round(time.Millisecond))
	regs, _, err := f.client.Registry(requestCtx(t))
	require.NoError(t, err)
	assert.Len(t, regs, 2)
}

// putEntry writes a registry entry as another replica would.
func putEntry(t *testing.T, f *testFleet, instance string, entry map[string]any) {
	t.Helper()
	js := natstest.JetStream(t, f.nc)
	kv, err := js.KeyValue(requestCtx(t), fleet.DefaultRegistryBucket)
	require.NoError(t, err)
	data, err := json.Marshal(entry)
	require.NoError(t, err)
	_, err = kv.Put(requestCtx(t), fleet.JobToken(fleet.DefaultPrefix)+"."+fleet.JobToken(instance), data)
	require.NoError(t, err)
}

// TestRegistryEntryOfANewerFormat: an entry written by a newer version is named
// as unreadable (the client's view is incomplete: the CLI fails), and no replica
// takes it for a declaration: nothing changes on them.
func TestRegistryEntryOfANewerFormat(t *testing.T) {
	f := startFleet(t, fleetSetup{})
	putEntry(t, f, "future", map[string]any{"format": fleet.RegistryFormat + 1, "instance": "future", "version": "9.0.0",
		"jobs": []map[string]any{{"name": jobReport, "schedule": "something new"}}})

	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	require.Len(t, fl.Unreadable, 1)
	assert.Contains(t, fl.Unreadable[0], `replica "future" (version 9.0.0) wrote format 3; this version (`+fleet.Version+`) reads format 2: upgrade it`)
	assert.Len(t, fl.Registered, 3)
	_, bad, err := f.client.Registry(requestCtx(t))
	require.NoError(t, err)
	require.Len(t, bad, 1)
	assert.ErrorIs(t, bad[0], fleet.ErrRegistryFormat)
	for _, r := range f.replicas {
		assert.Empty(t, r.svc.Conflicts(), r.s.Instance())
	}
}

// TestRegisteredReplicaThatDoesNotAnswer: a replica in the registry that does not
// answer the jobs request (stuck, or cut off from the service subjects) is a
// warning, not silence.
func TestRegisteredReplicaThatDoesNotAnswer(t *testing.T) {
	f := startFleet(t, fleetSetup{})
	putEntry(t, f, "ghost", map[string]any{"format": 1, "instance": "ghost", "version": fleet.Version,
		"at": time.Now(), "jobs": []map[string]any{}})
	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	assert.Len(t, fl.Replicas, 3)
	assert.Len(t, fl.Registered, 4)
	require.Len(t, fl.Warnings, 1)
	assert.Contains(t, fl.Warnings[0], `replica "ghost" is registered`)
}

// TestServeWithoutJetStream: the registry needs JetStream; without it Serve fails
// at once with an error that names the way out, and WithoutRegistry serves.
func TestServeWithoutJetStream(t *testing.T) {
	ctx := requestCtx(t)
	srv := natstest.Server(t, embedded.Options{DisableJetStream: true})
	nc := natstest.Conn(t, srv)
	s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "solo"})
	require.NoError(t, err)
	require.NoError(t, s.Every(jobReport, time.Hour, func(context.Context, scheduler.Run) error { return nil }))

	t0 := time.Now()
	_, err = fleet.Serve(ctx, nc, s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WithoutRegistry")
	assert.Less(t, time.Since(t0), 5*time.Second, "refused at once, not after retries")

	svc, err := fleet.Serve(ctx, nc, s, fleet.WithoutRegistry())
	require.NoError(t, err)
	require.NoError(t, svc.Stop(context.Background()))
}

// TestJobsEndsWhenEveryRegisteredReplicaAnswered: with a gather window of an hour,
// Jobs returns once the three registered replicas have answered, long before the
// window (or the caller's deadline) ends.
func TestJobsEndsWhenEveryRegisteredReplicaAnswered(t *testing.T) {
	f := startFleet(t, fleetSetup{client: []fleet.Option{fleet.WithGatherWindow(time.Hour)}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fl, err := f.client.Jobs(ctx)
	require.NoError(t, err)
	require.NoError(t, ctx.Err(), "Jobs returned before the caller's deadline: it did not wait out the window")
	assert.Len(t, fl.Replicas, 3)
	assert.Len(t, fl.Registered, 3)
	assert.Empty(t, fl.Warnings)
}

// A job's policies beyond schedule and overlap are declared too: describe shows
// them, and replicas that declare them differently are a conflict.
func TestRegistryDeclaresEveryPolicy(t *testing.T) {
	f := startFleet(t, fleetSetup{jobs: func(instance string) []testJob {
		j := every(jobReport, time.Hour)
		attempts := 3
		if instance == "C" {
			attempts = 4
		}
		j.Opts = []scheduler.JobOption{scheduler.WithRetry(scheduler.RetryPolicy{Attempts: attempts, Backoff: time.Second}),
			scheduler.WithMaxManualRuns(2), scheduler.WithHistory(30, 48*time.Hour), scheduler.WithCatchUp(scheduler.CatchUpLatest, 2*time.Hour)}
		return []testJob{j}
	}})
	a := f.replicas[0]
	f.waitConflict(t, a, jobReport, `retry: "3 attempts, backoff 1s" on A, B; "4 attempts, backoff 1s" on C`, 5*time.Second)
	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	require.Len(t, fl.Registered, 3)
	d := fl.Registered[0].Jobs[0]
	require.NotNil(t, d.Policies)
	assert.Equal(t, fleet.Policies{CatchUpWindowMS: (2 * time.Hour).Milliseconds(), DedupeWindowMS: fleet.ForeverMS, HistorySize: 30,
		HistoryTTLMS: (48 * time.Hour).Milliseconds(), MaxManual: 2,
		Retry: &fleet.RetryPolicy{Attempts: 3, BackoffMS: 1000}}, *d.Policies)
	assert.Equal(t, "30 records for 48h0m0s", fleet.PolicyText("retention", d))
	assert.Equal(t, "forever", fleet.PolicyText("dedupe window", d))

}

// A cron job's DST policy is declared: describe says it, and replicas that
// declare different policies conflict on the schedule.
func TestRegistryDeclaresDSTPolicy(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	f := startFleet(t, fleetSetup{jobs: func(instance string) []testJob {
		p := scheduler.DSTPolicy{Repeated: scheduler.DSTBoth}
		if instance == "C" {
			p = scheduler.DSTPolicy{Repeated: scheduler.DSTLast}
		}
		cron := testJob{Name: jobBackup, Schedule: backupSchedule(t), Opts: []scheduler.JobOption{scheduler.WithLocation(ny), scheduler.WithDST(p)}}
		return []testJob{every(jobReport, time.Hour), cron}
	}})
	f.waitConflict(t, f.replicas[0], jobBackup, `schedule: "CRON_TZ=America/New_York 0 3 * * *; DST repeated=both" on A, B; "CRON_TZ=America/New_York 0 3 * * *; DST repeated=last" on C`, 5*time.Second)
	fl, err := f.client.Jobs(requestCtx(t))
	require.NoError(t, err)
	decls := map[string]map[string]fleet.Declaration{}
	for _, r := range fl.Registered {
		decls[r.Instance] = map[string]fleet.Declaration{}
		for _, d := range r.Jobs {
			decls[r.Instance][d.Name] = d
		}
	}
	a, c := decls["A"][jobBackup], decls["C"][jobBackup]
	require.NotNil(t, a.Policies)
	assert.Equal(t, &scheduler.DSTPolicy{Repeated: scheduler.DSTBoth, Missing: scheduler.DSTShift}, a.Policies.DST)
	assert.Equal(t, "repeated both, missing shift: a wall time clocks repeat runs at both occurrences; one they skip runs later by the jump",
		fleet.PolicyText("daylight saving", a))
	assert.Equal(t, "repeated last, missing shift: a wall time clocks repeat runs once, at its second occurrence; one they skip runs later by the jump",
		fleet.PolicyText("daylight saving", c))
	report := decls["A"][jobReport]
	assert.Nil(t, report.Policies.DST)
	assert.Equal(t, "none: no cron schedule of its own", fleet.PolicyText("daylight saving", report))
	assert.Empty(t, f.replicas[0].svc.Conflicts()[jobReport])

	// A replica of an earlier version declares no DST policy: its cron job had the default.
	old := a
	old.Schedule, old.Policies = "CRON_TZ=America/New_York 0 3 * * *", &fleet.Policies{}
	assert.Equal(t, "repeated first, missing shift: a wall time clocks repeat runs once, at its first occurrence; one they skip runs later by the jump",
		fleet.PolicyText("daylight saving", old))
}
