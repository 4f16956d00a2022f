package fleet_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestEntryOpsByRoleOnARealServer: on a nats-server whose users have the roles'
// permissions, only an operator triggers or backfills one entry; a viewer and a
// replica's user are refused by the server, and nothing runs.
func TestEntryOpsByRoleOnARealServer(t *testing.T) {
	rf := startRoleFleet(t)
	ctx := requestCtx(t)
	job := jobReport
	_, err := rf.clients[fleet.RoleOperator].AddEntry(ctx, job, fleet.AddEntryRequest{ID: "acme", By: "ana",
		EntrySpec: fleet.EntrySpec{Every: "1h", Start: time.Now().Add(time.Hour)}})
	require.NoError(t, err)
	entryRuns := func() int {
		t.Helper()
		e, err := rf.clients[fleet.RoleViewer].Entry(ctx, job, fleet.EntryRequest{ID: "acme", History: 100})
		require.NoError(t, err)
		return len(e.Runs)
	}
	require.Eventually(t, func() bool {
		e, err := rf.clients[fleet.RoleViewer].Entries(ctx, job, fleet.EntriesRequest{})
		require.NoError(t, err)
		return len(e.Entries) == 1 && e.Entries[0].Followed
	}, 10*time.Second, 20*time.Millisecond)
	subject := "anarchon.ENTRIES." + fleet.JobToken(job) + ".TRIGGER"
	for _, role := range []fleet.Role{fleet.RoleViewer, fleet.RoleReplica} {
		c, v := rf.clients[role], rf.seen[role]
		_, err := c.TriggerEntry(short(t), job, fleet.TriggerEntryRequest{ID: "acme", Wait: true})
		require.Error(t, err, role)
		v.refused(t, "Publish", subject)
		now := time.Now()
		_, err = c.Backfill(short(t), job, fleet.BackfillRequest{From: now.Add(-time.Hour), To: now, Entry: "acme"})
		require.Error(t, err, role)
		v.refused(t, "Publish", "anarchon.BACKFILL."+fleet.JobToken(job))
	}
	assert.Zero(t, entryRuns(), "nothing ran")

	r, err := rf.clients[fleet.RoleOperator].TriggerEntry(ctx, job, fleet.TriggerEntryRequest{ID: "acme", By: "ana", Wait: true})
	require.NoError(t, err)
	assert.Equal(t, scheduler.StatusOK, r.Run.Status)
	assert.Equal(t, "acme", r.Run.Entry)
	now := time.Now()
	bf, err := rf.clients[fleet.RoleOperator].Backfill(ctx, job, fleet.BackfillRequest{From: now.Add(-time.Minute), To: now.Add(-time.Second),
		Entry: "acme", Wait: true})
	require.NoError(t, err)
	assert.Equal(t, "acme", bf.Entry)
	assert.Equal(t, 1, entryRuns())
	assert.Empty(t, rf.replica.all(), "the replica was refused nothing")
}

// TestEntryTriggerIgnoresWhatJetStreamDelivers: an account's admin has
// JetStream send stored messages to an entry's trigger subject (a stream that
// republishes there, direct gets whose reply subject it is): the replica drops
// each, and no entry runs. (A push consumer delivering there is not tried: the
// server delivers to no subject whose only interest is a wildcard queue
// subscription, which the entry subjects are.)
func TestEntryTriggerIgnoresWhatJetStreamDelivers(t *testing.T) {
	logs := newLogCount()
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds, instances: []string{"A"}, serve: []fleet.Option{fleet.WithLogger(slog.New(logs))}})
	ctx := requestCtx(t)
	_, err := f.client.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "acme", EntrySpec: fleet.EntrySpec{Every: "1h", Start: time.Now().Add(time.Hour)}})
	require.NoError(t, err)
	trigger := f.client.Subject("entries", jobFeeds) + ".TRIGGER"
	js := natstest.JetStream(t, f.nc)
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "FORGED", Subjects: []string{"forged.>"}, Storage: natsjs.MemoryStorage,
		AllowDirect: true, RePublish: &natsjs.RePublish{Source: "forged.req", Destination: trigger}})
	require.NoError(t, err)
	for _, body := range []string{`{"v":1,"id":"acme"}`, `{"v":1,"id":"acme","wait":true,"by":"eve"}`} {
		_, err := js.Publish(ctx, "forged.req", []byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, f.nc.PublishMsg(&nats.Msg{Subject: "$JS.API.DIRECT.GET.FORGED", Reply: trigger, Data: []byte(`{"last_by_subj":"forged.req"}`)}))
	logs.wait(t, 3, logIgnored)
	e, err := f.client.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "acme"})
	require.NoError(t, err)
	assert.Empty(t, e.Runs, "nothing ran")
	assert.Zero(t, f.manualRuns())
	r, err := f.client.TriggerEntry(ctx, jobFeeds, fleet.TriggerEntryRequest{ID: "acme", Wait: true})
	require.NoError(t, err, "what an operator asks still runs")
	assert.Equal(t, scheduler.StatusOK, r.Run.Status)
}
