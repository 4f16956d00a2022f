package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// jobFeeds is a job of schedule entries only (Declare).
const jobFeeds = "feeds"

func declareFeeds(string) []testJob {
	return []testJob{{Name: jobFeeds}, every(jobReport, time.Hour)}
}

// storedEntries lists what the backend stores of job's entries, read past the
// fleet.
func storedEntries(t testing.TB, b *memory.Backend, job string) []backend.Entry {
	t.Helper()
	out, err := b.ListEntries(context.Background(), job, job, "", 1000)
	require.NoError(t, err)
	return out
}

// TestEntriesOverTheFleet: an operator adds an entry through one replica, reads it
// back in a page and alone (with its payload), updates it on its revision,
// removes it; each refusal says which it is, and matches the scheduler's
// sentinel.
func TestEntriesOverTheFleet(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds})
	ctx, c := requestCtx(t), f.client

	added, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "eu-west", By: "ana",
		EntrySpec: fleet.EntrySpec{Cron: "0 9 * * *", Zone: "Europe/Athens", Payload: []byte(`{"region":"eu-west"}`)}})
	require.NoError(t, err)
	assert.Equal(t, "ana", added.By)
	assert.Contains(t, []string{"A", "B", "C"}, added.Instance)
	assert.NotZero(t, added.Entry.Revision)
	assert.Equal(t, "0 9 * * *", added.Entry.Cron)
	assert.Equal(t, 20, added.Entry.PayloadSize)
	assert.Nil(t, added.Entry.Payload, "a change's reply carries the payload's size, not the payload")

	_, err = c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "eu-west", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.ErrorIs(t, err, fleet.ErrEntryExists)
	assert.ErrorIs(t, err, scheduler.ErrEntryExists)
	var se *fleet.ServiceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, fleet.CodeEntryExists, se.Code)

	// Every replica follows it within a second: the page says so.
	require.Eventually(t, func() bool {
		page, err := c.Entries(ctx, jobFeeds, fleet.EntriesRequest{})
		require.NoError(t, err)
		return len(page.Entries) == 1 && page.Entries[0].Followed
	}, 5*time.Second, 10*time.Millisecond)
	page, err := c.Entries(ctx, jobFeeds, fleet.EntriesRequest{})
	require.NoError(t, err)
	assert.Equal(t, fleet.DefaultEntriesLimit, page.Limit)
	assert.Empty(t, page.Next)
	e := page.Entries[0]
	assert.Equal(t, "eu-west", e.ID)
	assert.Equal(t, jobFeeds, e.Job)
	assert.Nil(t, e.Payload, "lists leave payloads out")
	assert.Equal(t, 20, e.PayloadSize)
	assert.Equal(t, added.Entry.Revision, e.Revision)
	assert.True(t, e.Next.After(time.Now()), "its next 09:00 in Athens")

	one, err := c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "eu-west"})
	require.NoError(t, err)
	assert.Equal(t, `{"region":"eu-west"}`, string(one.Entry.Payload))
	assert.Equal(t, fleet.DefaultEntryHistory, one.History)
	assert.Empty(t, one.Runs)

	// An update based on the revision read; then one based on that old revision.
	upd, err := c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "eu-west", Rev: e.Revision,
		EntrySpec: fleet.EntrySpec{Every: "90m", Paused: true}})
	require.NoError(t, err)
	assert.Greater(t, upd.Entry.Revision, e.Revision)
	assert.Equal(t, "1h30m0s", upd.Entry.Every)
	assert.True(t, upd.Entry.Paused)
	_, err = c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "eu-west", Rev: e.Revision,
		EntrySpec: fleet.EntrySpec{Every: "2h"}})
	require.ErrorIs(t, err, fleet.ErrEntryConflict)
	assert.ErrorIs(t, err, scheduler.ErrEntryConflict)
	_, err = c.RemoveEntry(ctx, jobFeeds, fleet.RemoveEntryRequest{ID: "eu-west", Rev: e.Revision})
	require.ErrorIs(t, err, scheduler.ErrEntryConflict)
	stored := storedEntries(t, f.backend, jobFeeds)
	require.Len(t, stored, 1)
	assert.Equal(t, 90*time.Minute, stored[0].Every, "the refused changes stored nothing")

	rm, err := c.RemoveEntry(ctx, jobFeeds, fleet.RemoveEntryRequest{ID: "eu-west", Rev: upd.Entry.Revision, By: "ana"})
	require.NoError(t, err)
	assert.Equal(t, "eu-west", rm.ID)
	assert.Empty(t, storedEntries(t, f.backend, jobFeeds))
	_, err = c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "eu-west"})
	require.ErrorIs(t, err, fleet.ErrEntryNotFound)
	assert.ErrorIs(t, err, scheduler.ErrEntryNotFound)
	_, err = c.RemoveEntry(ctx, jobFeeds, fleet.RemoveEntryRequest{ID: "eu-west"})
	require.ErrorIs(t, err, fleet.ErrEntryNotFound)
}

// TestEntryDSTOverTheFleet: an entry's DST policy travels to the store and back,
// in a page and alone, and a change that leaves it out returns it to the default.
func TestEntryDSTOverTheFleet(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, quiet: true, jobs: declareFeeds})
	ctx, c := requestCtx(t), f.client
	spec := fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DSTRepeated: "both", DSTMissing: "skip"}
	added, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "ny", EntrySpec: spec})
	require.NoError(t, err)
	assert.Equal(t, spec, added.Entry.EntrySpec)
	stored := storedEntries(t, f.backend, jobFeeds)
	require.Len(t, stored, 1)
	assert.Equal(t, scheduler.DSTPolicy{Repeated: scheduler.DSTBoth, Missing: scheduler.DSTSkip}, stored[0].DST)

	one, err := c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "ny"})
	require.NoError(t, err)
	assert.Equal(t, "both", one.Entry.DSTRepeated)
	assert.Equal(t, "skip", one.Entry.DSTMissing)
	page, err := c.Entries(ctx, jobFeeds, fleet.EntriesRequest{})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	assert.Equal(t, spec, page.Entries[0].EntrySpec)

	b, err := json.Marshal(spec)
	require.NoError(t, err)
	assert.JSONEq(t, `{"cron":"30 1 * * *","zone":"America/New_York","dst_repeated":"both","dst_missing":"skip"}`, string(b))

	upd, err := c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "ny", Rev: added.Entry.Revision,
		EntrySpec: fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DSTRepeated: "last"}})
	require.NoError(t, err)
	assert.Equal(t, "last", upd.Entry.DSTRepeated)
	assert.Empty(t, upd.Entry.DSTMissing)
	stored = storedEntries(t, f.backend, jobFeeds)
	require.Len(t, stored, 1)
	assert.Equal(t, scheduler.DSTPolicy{Repeated: scheduler.DSTLast}, stored[0].DST, "an update replaces the spec")
}

// TestEntryRunsShowInItsView: an entry's run (its slot every 100ms) shows in its
// page as its last run and in its own history, with the entry named.
func TestEntryRunsShowInItsView(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A", "B"}, jobs: func(string) []testJob { return []testJob{{Name: jobFeeds}} }})
	ctx, c := requestCtx(t), f.client
	_, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "fast", EntrySpec: fleet.EntrySpec{Every: "100ms"}})
	require.NoError(t, err)
	var one fleet.EntryReply
	require.Eventually(t, func() bool {
		one, err = c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "fast", History: 5})
		require.NoError(t, err)
		return one.Entry.LastSuccess != nil && len(one.Runs) > 0
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "fast", one.Entry.LastSuccess.Entry)
	assert.Equal(t, jobFeeds, one.Entry.LastSuccess.Job)
	assert.LessOrEqual(t, len(one.Runs), 5)
	for _, r := range one.Runs {
		assert.Equal(t, "fast", r.Entry)
		assert.Equal(t, jobFeeds, r.Job)
	}
}

// TestEntryConflictBetweenOperators: two operators update one entry at once, each
// on the revision they read: one change is stored, the other is refused with the
// conflict and stores nothing.
func TestEntryConflictBetweenOperators(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds})
	ctx := requestCtx(t)
	other, err := fleet.NewClient(f.replicas[0].nc) // a second operator, on another connection
	require.NoError(t, err)
	added, err := f.client.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "x", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.NoError(t, err)

	for round := range 5 {
		base := storedEntries(t, f.backend, jobFeeds)[0].Revision
		if round == 0 {
			require.Equal(t, added.Entry.Revision, base)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, c := range []*fleet.Client{f.client, other} {
			wg.Go(func() {
				<-start
				_, errs[i] = c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "x", Rev: base, By: fmt.Sprint("op", i),
					EntrySpec: fleet.EntrySpec{Every: fmt.Sprintf("%dh", 2+i)}})
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			assert.ErrorIs(t, err, fleet.ErrEntryConflict)
			assert.ErrorIs(t, err, scheduler.ErrEntryConflict)
		}
		require.Equal(t, 1, won, "one change wins: %v", errs)
		stored := storedEntries(t, f.backend, jobFeeds)[0]
		assert.Greater(t, stored.Revision, base)
		want := 2 * time.Hour
		if errs[0] == nil {
			assert.Equal(t, want, stored.Every, "the winner's change is the one stored")
		} else {
			assert.Equal(t, want+time.Hour, stored.Every, "the winner's change is the one stored")
		}
	}
}

// TestEntriesBadInput: an entry that cannot be is refused with 400 and a reason,
// and nothing is stored.
func TestEntriesBadInput(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, quiet: true, jobs: declareFeeds})
	ctx, c := requestCtx(t), f.client
	past := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name, want string
		spec       fleet.EntrySpec
		id         string
	}{
		{"no schedule", "exactly one of", fleet.EntrySpec{}, "x"},
		{"two schedules", "exactly one of", fleet.EntrySpec{Every: "1h", Cron: "0 9 * * *"}, "x"},
		{"bad interval", "every", fleet.EntrySpec{Every: "soon"}, "x"},
		{"negative interval", "not positive", fleet.EntrySpec{Every: "-1h"}, "x"},
		{"bad cron", "cron", fleet.EntrySpec{Cron: "61 * * * *"}, "x"},
		{"bad zone", "Mars/Olympus", fleet.EntrySpec{Cron: "0 9 * * *", Zone: "Mars/Olympus"}, "x"},
		{"zone without cron", "zone", fleet.EntrySpec{Every: "1h", Zone: "UTC"}, "x"},
		{"unknown DST repeated", `DST policy for a repeated wall time "twice": want first, last or both`, fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DSTRepeated: "twice"}, "x"},
		{"unknown DST missing", `DST policy for a missing wall time "later": want shift or skip`, fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DSTMissing: "later"}, "x"},
		{"DST without cron", "a DST policy applies to Cron only", fleet.EntrySpec{Every: "1h", DSTMissing: "skip"}, "x"},
		{"DST in UTC", "zone UTC never changes its clocks", fleet.EntrySpec{Cron: "30 1 * * *", DSTRepeated: "both"}, "x"},
		{"instant past", "no slot after now", fleet.EntrySpec{At: past}, "x"},
		{"end before start", "before start", fleet.EntrySpec{Every: "1h", Start: time.Now().Add(2 * time.Hour), End: time.Now().Add(time.Hour)}, "x"},
		{"huge payload", "payload", fleet.EntrySpec{Every: "1h", Payload: make([]byte, backend.MaxEntryPayload+1)}, "x"},
		{"empty ID", "empty ID", fleet.EntrySpec{Every: "1h"}, ""},
		{"control in ID", "control character", fleet.EntrySpec{Every: "1h"}, "a\x1bb"},
		{"long ID", "ID of", fleet.EntrySpec{Every: "1h"}, strings.Repeat("i", backend.MaxEntryIDLen+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: tc.id, EntrySpec: tc.spec})
			require.ErrorIs(t, err, fleet.ErrBadRequest)
			var se *fleet.ServiceError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, fleet.CodeBadRequest, se.Code)
			assert.Contains(t, se.Description, tc.want)
			assert.Empty(t, storedEntries(t, f.backend, jobFeeds))
		})
	}

	// An update without the revision, and one whose spec is bad, change nothing.
	added, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "ok", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.NoError(t, err)
	_, err = c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "ok", EntrySpec: fleet.EntrySpec{Every: "2h"}})
	require.ErrorIs(t, err, fleet.ErrBadRequest)
	assert.Contains(t, err.Error(), "rev")
	_, err = c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "ok", Rev: added.Entry.Revision,
		EntrySpec: fleet.EntrySpec{Every: "1h", Payload: make([]byte, 100<<10)}})
	require.ErrorIs(t, err, fleet.ErrBadRequest)
	stored := storedEntries(t, f.backend, jobFeeds)
	require.Len(t, stored, 1)
	assert.Equal(t, added.Entry.Revision, stored[0].Revision)
	assert.Equal(t, time.Hour, stored[0].Every)

	// Raw requests: an unknown field, a negative limit, no ID.
	for _, tc := range []struct{ verb, body, want string }{
		{"entries.ADD", `{"v":1,"id":"y","every":"1h","payloads":"x"}`, "unknown field"},
		{"entries.LIST", `{"v":1,"limit":-1}`, "negative"},
		{"entries.GET", `{"v":1}`, "empty ID"},
		{"entries.REMOVE", `{"v":1,"id":""}`, "empty ID"},
		{"entries.DROP", `{"v":1,"id":"ok"}`, "ADD, REMOVE, TRIGGER, UPDATE, GET, LIST"},
	} {
		verb, op, _ := strings.Cut(tc.verb, ".")
		m, err := f.nc.Request(c.Subject(verb, jobFeeds)+"."+op, []byte(tc.body), 5*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "400", m.Header.Get("Nats-Service-Error-Code"), tc.verb)
		assert.Contains(t, m.Header.Get("Nats-Service-Error"), tc.want, tc.verb)
	}
	assert.Len(t, storedEntries(t, f.backend, jobFeeds), 1)
}

// TestEntriesPagesUnderMaxPayload: on a server whose max payload is 64 KiB, 250
// entries with the longest IDs (each written six times as long in JSON) and a
// payload of 16 KiB each come back, every one once and in order, in pages that
// each fit in a message: fewer than the limit per page when they would not
// fit. One entry comes back with its payload whole.
func TestEntriesPagesUnderMaxPayload(t *testing.T) {
	ns, err := server.NewServer(&server.Options{ServerName: "small", DontListen: true, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second), "the nats-server must start")
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	dial := func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect("", append([]nats.Option{nats.InProcessServer(ns)}, opts...)...)
	}
	f := startFleet(t, fleetSetup{instances: []string{"A"}, dial: dial, quiet: true, jobs: declareFeeds})
	ctx, c, s := requestCtx(t), f.client, f.replicas[0].s
	payload := []byte(strings.Repeat("p", backend.MaxEntryPayload))
	const n = 250
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%03d", i) + strings.Repeat("<", backend.MaxEntryIDLen-3)
		_, err := s.AddEntry(ctx, jobFeeds, ids[i], scheduler.EntrySpec{Every: time.Hour, Payload: payload})
		require.NoError(t, err)
	}

	var got []string
	pages, after := 0, ""
	for {
		req := fleet.EntriesRequest{V: 1, After: after, Limit: 1000}
		data, err := json.Marshal(req)
		require.NoError(t, err)
		m, err := f.nc.Request(c.Subject("entries", jobFeeds)+".LIST", data, 5*time.Second)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get("Nats-Service-Error"))
		assert.LessOrEqual(t, len(m.Data), int(f.nc.MaxPayload()), "a page fits in a message")
		page, err := c.Entries(ctx, jobFeeds, req)
		require.NoError(t, err)
		assert.Equal(t, fleet.MaxEntriesLimit, page.Limit, "clamped")
		assert.Less(t, len(page.Entries), fleet.MaxEntriesLimit, "cut by size")
		require.NotEmpty(t, page.Entries)
		for _, e := range page.Entries {
			assert.Nil(t, e.Payload)
			assert.Equal(t, backend.MaxEntryPayload, e.PayloadSize)
			got = append(got, e.ID)
		}
		pages++
		if page.Next == "" {
			break
		}
		assert.Equal(t, page.Entries[len(page.Entries)-1].ID, page.Next)
		after = page.Next
	}
	assert.Equal(t, ids, got, "every entry once, in order")
	assert.Greater(t, pages, n/fleet.MaxEntriesLimit+1)

	one, err := c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: ids[7]})
	require.NoError(t, err)
	assert.Equal(t, payload, one.Entry.Payload)

	// A full page of the limit says there is more only when there is.
	page, err := c.Entries(ctx, jobFeeds, fleet.EntriesRequest{After: ids[n-4], Limit: 3})
	require.NoError(t, err)
	assert.Len(t, page.Entries, 3)
	assert.Empty(t, page.Next, "the last three: no more")
	page, err = c.Entries(ctx, jobFeeds, fleet.EntriesRequest{After: ids[n-5], Limit: 3})
	require.NoError(t, err)
	assert.Equal(t, ids[n-2], page.Next)
}

// TestEntriesOfAnUndeclaredJob: entries stored for a job no replica declares are
// run by none and reached through none: a request about the job gets a
// *NoReplicaError naming the replicas up, and the jobs reply counts the entries
// as orphaned on each replica.
func TestEntriesOfAnUndeclaredJob(t *testing.T) {
	b := memory.New()
	for _, id := range []string{"a", "b"} {
		_, err := b.CreateEntry(context.Background(), backend.Entry{Job: "ghost", ID: id, EntrySpec: backend.EntrySpec{Every: time.Hour}})
		require.NoError(t, err)
	}
	f := startFleet(t, fleetSetup{backend: b, quiet: true, jobs: declareFeeds})
	ctx, c := requestCtx(t), f.client
	for _, r := range f.replicas {
		require.NoError(t, r.s.EntriesLoaded(ctx))
	}
	_, err := c.Entries(ctx, "ghost", fleet.EntriesRequest{})
	var nr *fleet.NoReplicaError
	require.ErrorAs(t, err, &nr)
	assert.ErrorIs(t, err, fleet.ErrUnknownJob)
	assert.Equal(t, []string{"A", "B", "C"}, nr.Up)
	_, err = c.RemoveEntry(ctx, "ghost", fleet.RemoveEntryRequest{ID: "a"})
	require.ErrorIs(t, err, fleet.ErrUnknownJob)
	assert.Len(t, storedEntries(t, b, "ghost"), 2, "nothing removed")

	fl, err := c.Jobs(ctx)
	require.NoError(t, err)
	require.Len(t, fl.Replicas, 3)
	for _, r := range fl.Replicas {
		assert.Equal(t, 2, r.OrphanedEntries, r.Instance)
		assert.Zero(t, r.Entries, r.Instance)
	}
}

// TestEntriesRolesOnARealServer: with the permissions of each role, a viewer
// reads entries and is refused every change by the server; an operator adds,
// updates and removes them; a replica may not ask at all.
func TestEntriesRolesOnARealServer(t *testing.T) {
	s := startAuthServer(t, false)
	replica := newViolations()
	f := startFleet(t, fleetSetup{instances: []string{"A"}, dial: dialAs(s, fleet.RoleReplica, replica), quiet: true, jobs: declareFeeds})
	ctx := requestCtx(t)
	_, err := f.replicas[0].s.AddEntry(ctx, jobFeeds, "seed", scheduler.EntrySpec{Every: time.Hour})
	require.NoError(t, err)
	tok := fleet.JobToken(jobFeeds)

	for _, role := range fleet.Roles {
		t.Run(string(role), func(t *testing.T) {
			v := newViolations()
			nc := natstest.Dial(t, dialAs(s, role, v))
			c, err := fleet.NewClient(nc)
			require.NoError(t, err)
			// A refused request gets no answer: it is bounded short; an allowed one
			// has the time it takes.
			bound := func(allowed bool) context.Context {
				if allowed {
					return ctx
				}
				return short(t)
			}
			page, err := c.Entries(bound(role != fleet.RoleReplica), jobFeeds, fleet.EntriesRequest{})
			if role == fleet.RoleReplica {
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.ENTRIES."+tok+".LIST")
				_, err = c.Entry(short(t), jobFeeds, fleet.EntryRequest{ID: "seed"})
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.ENTRIES."+tok+".GET")
			} else {
				require.NoError(t, err)
				require.NotEmpty(t, page.Entries)
				assert.Equal(t, "seed", page.Entries[0].ID)
				one, err := c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "seed"})
				require.NoError(t, err)
				assert.Equal(t, "seed", one.Entry.ID)
			}

			id := "by-" + string(role)
			added, err := c.AddEntry(bound(role == fleet.RoleOperator), jobFeeds, fleet.AddEntryRequest{ID: id, EntrySpec: fleet.EntrySpec{Every: "1h"}})
			if role != fleet.RoleOperator {
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.ENTRIES."+tok+".ADD")
				_, err = c.UpdateEntry(short(t), jobFeeds, fleet.UpdateEntryRequest{ID: "seed", Rev: 1, EntrySpec: fleet.EntrySpec{Every: "2h"}})
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.ENTRIES."+tok+".UPDATE")
				_, err = c.RemoveEntry(short(t), jobFeeds, fleet.RemoveEntryRequest{ID: "seed"})
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.ENTRIES."+tok+".REMOVE")
				e, err := f.backend.GetEntry(ctx, jobFeeds, "seed")
				require.NoError(t, err)
				assert.Equal(t, time.Hour, e.Every, "unchanged")
				return
			}
			require.NoError(t, err)
			upd, err := c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: id, Rev: added.Entry.Revision, EntrySpec: fleet.EntrySpec{Every: "2h"}})
			require.NoError(t, err)
			_, err = c.RemoveEntry(ctx, jobFeeds, fleet.RemoveEntryRequest{ID: id, Rev: upd.Entry.Revision})
			require.NoError(t, err)
			assert.Empty(t, v.all())
		})
	}
	ids := []string{}
	for _, e := range storedEntries(t, f.backend, jobFeeds) {
		ids = append(ids, e.ID)
	}
	assert.Equal(t, []string{"seed"}, ids, "the operator's entry came and went; no other was stored")
	assert.Empty(t, replica.all(), "the replica, serving under its role, is refused nothing")
}
