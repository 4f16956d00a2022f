package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// payloads records the payload each manual run of an entry carried.
type payloads struct {
	mu   sync.Mutex
	seen map[string]string
}

func (p *payloads) handler(_ context.Context, run scheduler.Run) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if run.Entry != "" && run.Manual {
		p.seen[run.Entry] = string(run.Payload)
	}
	return nil
}

func (p *payloads) of(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[id]
}

// An operator triggers one entry: it runs with its payload on one replica, as a
// manual run of the entry, recorded in the entry's history; its events name the
// entry, so it is told apart from the job's own manual run of the same moment.
func TestTriggerEntry(t *testing.T) {
	p := &payloads{seen: map[string]string{}}
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds, events: true, handler: p.handler})
	ctx, c := requestCtx(t), f.client
	_, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "eu-west", By: "ana",
		EntrySpec: fleet.EntrySpec{Every: "1h", Start: time.Now().Add(time.Hour), Payload: []byte(`{"region":"eu-west"}`)}})
	require.NoError(t, err)

	wctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var events []fleet.Event
	watched := make(chan error, 1)
	go func() {
		watched <- c.Watch(wctx, jobFeeds, func(e fleet.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	}()
	finished := func(entry string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Kind == scheduler.EventFinished && e.Manual && e.Entry == entry {
				return true
			}
		}
		return false
	}
	var r fleet.TriggerReply
	require.Eventually(t, func() bool { // the watch subscribes meanwhile
		r, err = c.TriggerEntry(ctx, jobFeeds, fleet.TriggerEntryRequest{ID: "eu-west", By: "bo", Wait: true})
		require.NoError(t, err)
		_, err = c.Trigger(ctx, jobFeeds, fleet.TriggerRequest{By: "bo", Wait: true})
		require.NoError(t, err)
		return finished("eu-west") && finished("")
	}, 10*time.Second, 50*time.Millisecond)
	stop()
	require.NoError(t, <-watched)

	assert.Equal(t, fleet.StateFinished, r.State)
	assert.Equal(t, jobFeeds, r.Job)
	assert.Equal(t, "eu-west", r.Entry)
	assert.Equal(t, "bo", r.By)
	require.NotNil(t, r.Run)
	assert.Equal(t, "eu-west", r.Run.Entry)
	assert.True(t, r.Run.Manual)
	assert.Equal(t, "bo", r.Run.RequestedBy)
	assert.Equal(t, scheduler.StatusOK, r.Run.Status)
	assert.Equal(t, `{"region":"eu-west"}`, p.of("eu-west"), "the handler gets the entry's payload")

	one, err := c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "eu-west"})
	require.NoError(t, err)
	require.NotEmpty(t, one.Runs)
	assert.True(t, one.Runs[0].Manual, "the entry's history holds its manual runs")
	own, err := c.History(ctx, jobFeeds, 100)
	require.NoError(t, err)
	for _, run := range own.Runs {
		assert.Empty(t, run.Entry, "the job's history holds its own runs only")
	}
	mu.Lock()
	for _, e := range events {
		assert.Equal(t, jobFeeds, e.Job)
		if e.Token == r.Run.Token {
			assert.Equal(t, "eu-west", e.Entry, "%s", e.Kind)
		}
	}
	mu.Unlock()

	// Refusals: nothing runs.
	_, err = c.TriggerEntry(ctx, jobFeeds, fleet.TriggerEntryRequest{ID: "nobody"})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound)
	assert.ErrorIs(t, err, scheduler.ErrEntryNotFound)
	_, err = c.TriggerEntry(ctx, jobFeeds, fleet.TriggerEntryRequest{ID: "bad\x1fid"})
	assert.ErrorIs(t, err, fleet.ErrBadRequest)
	_, err = c.TriggerEntry(ctx, jobFeeds, fleet.TriggerEntryRequest{ID: "eu-west", By: strings.Repeat("x", 2000)})
	assert.ErrorIs(t, err, fleet.ErrBadRequest)
	_, err = c.TriggerEntry(ctx, "no such job", fleet.TriggerEntryRequest{ID: "eu-west"})
	assert.ErrorIs(t, err, fleet.ErrNoReplica)
}

// Who changed an entry is stored with it and read back: the by given, and the
// replica that stored it; a by an entry cannot hold is refused.
func TestEntryWhoChangedOverTheFleet(t *testing.T) {
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds})
	ctx, c := requestCtx(t), f.client
	added, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: "x", By: "ana", EntrySpec: fleet.EntrySpec{Every: "1h"}})
	require.NoError(t, err)
	assert.Equal(t, "ana", added.Entry.By)
	assert.Equal(t, added.Instance, added.Entry.Instance)
	assert.Empty(t, added.Entry.User, "no user: the replica does not trust the request info header (WithRequestInfo)")
	got, err := c.Entry(ctx, jobFeeds, fleet.EntryRequest{ID: "x"})
	require.NoError(t, err)
	assert.Equal(t, "ana", got.Entry.By)
	assert.Equal(t, added.Instance, got.Entry.Instance)

	up, err := c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "x", Rev: added.Entry.Revision, EntrySpec: fleet.EntrySpec{Every: "2h"}})
	require.NoError(t, err)
	assert.Equal(t, up.Instance, up.Entry.By, "no by: the replica's name")
	_, err = c.UpdateEntry(ctx, jobFeeds, fleet.UpdateEntryRequest{ID: "x", Rev: up.Entry.Revision, By: strings.Repeat("b", backend.MaxEntryText+1),
		EntrySpec: fleet.EntrySpec{Every: "3h"}})
	assert.ErrorIs(t, err, fleet.ErrBadRequest)
	assert.ErrorContains(t, err, "256 bytes")
}

// An entry's backfill over the fleet: the slots the job's pause held are run,
// once, and the reply names each slot's entry.
func TestBackfillEntryOverTheFleet(t *testing.T) {
	f := startFleet(t, fleetSetup{jobs: declareFeeds, instances: []string{"A", "B"}})
	ctx, c := requestCtx(t), f.client
	for _, id := range []string{"a", "b"} {
		_, err := c.AddEntry(ctx, jobFeeds, fleet.AddEntryRequest{ID: id, EntrySpec: fleet.EntrySpec{Every: "200ms"}})
		require.NoError(t, err)
	}
	_, err := c.Pause(ctx, jobFeeds, fleet.PauseRequest{Reason: "hold the entries"})
	require.NoError(t, err)
	f.waitView(t, jobFeeds, true, time.Time{})
	from := time.Now()
	time.Sleep(time.Second) // about five slots of each entry are recorded paused
	to := time.Now()
	_, err = c.Resume(ctx, jobFeeds, fleet.ResumeRequest{})
	require.NoError(t, err)

	_, err = c.Backfill(ctx, jobFeeds, fleet.BackfillRequest{From: from, To: to})
	assert.ErrorIs(t, err, fleet.ErrBadRequest, "a job of entries has no slots of its own")
	_, err = c.Backfill(ctx, jobFeeds, fleet.BackfillRequest{From: from, To: to, Entry: "a", AllEntries: true})
	assert.ErrorIs(t, err, fleet.ErrBadRequest)
	_, err = c.Backfill(ctx, jobFeeds, fleet.BackfillRequest{From: from, To: to, Entry: "nobody"})
	assert.ErrorIs(t, err, fleet.ErrEntryNotFound)

	one, err := c.Backfill(ctx, jobFeeds, fleet.BackfillRequest{From: from, To: to, Entry: "a", Wait: true, By: "ana"})
	require.NoError(t, err)
	assert.Equal(t, "a", one.Entry)
	require.NotEmpty(t, one.Slots)
	assert.Positive(t, one.Counts[string(scheduler.BackfillRan)], "%+v", one.Counts)
	for _, s := range one.Slots {
		assert.Equal(t, "a", s.Entry)
	}
	all, err := c.Backfill(ctx, jobFeeds, fleet.BackfillRequest{From: from, To: to, AllEntries: true, Wait: true})
	require.NoError(t, err)
	assert.True(t, all.AllEntries)
	seen := map[string]int{}
	for _, s := range all.Slots {
		seen[s.Entry]++
		if s.Entry == "a" {
			assert.NotEqual(t, string(scheduler.BackfillRan), s.Outcome, "a's slots ran already")
		}
	}
	assert.Equal(t, len(one.Slots), seen["a"])
	assert.Positive(t, seen["b"])
	assert.Positive(t, all.Counts[string(scheduler.BackfillRan)], "b's slots ran: %+v", all.Counts)
}

// A history request filters on the replica: the one error among the newest
// 1,100 records is found (the CLI once filtered the newest 1,000 itself), an
// entry's runs are read by the same request, and a status no run can have is a
// bad request.
func TestHistoryFiltersOnTheReplica(t *testing.T) {
	keep := backend.Retention{Size: 2000}
	f := startFleet(t, fleetSetup{quiet: true, instances: []string{"A"}, jobs: func(string) []testJob {
		j := every(jobReport, time.Hour)
		j.Opts = []scheduler.JobOption{scheduler.WithHistory(keep.Size, 0)}
		return []testJob{j, {Name: jobFeeds}}
	}})
	ctx := requestCtx(t)
	base := time.Now().Add(-48 * time.Hour).Truncate(time.Hour)
	save := func(job string, i int, status scheduler.Status) {
		slot := base.Add(time.Duration(i) * time.Minute)
		require.NoError(t, f.backend.SaveResult(ctx, job, backend.StoredResult{Slot: slot, Token: fmt.Sprint("t", i), Instance: "A", Attempt: 1,
			Status: status, StartedAt: slot, FinishedAt: slot.Add(time.Second)}, keep))
	}
	save(jobReport, 0, scheduler.StatusError)
	for i := 1; i <= 1100; i++ {
		save(jobReport, i, scheduler.StatusOK)
	}
	h, err := f.client.HistoryOf(ctx, jobReport, fleet.HistoryRequest{Status: []scheduler.Status{scheduler.StatusError}})
	require.NoError(t, err)
	require.Len(t, h.Runs, 1, "the error older than the newest 1,000")
	assert.True(t, base.Equal(h.Runs[0].Slot))
	assert.Equal(t, 1101, h.Scanned)
	assert.False(t, h.ScanLimited)

	h, err = f.client.HistoryOf(ctx, jobReport, fleet.HistoryRequest{Since: base.Add(1095 * time.Minute), Limit: 3})
	require.NoError(t, err)
	require.Len(t, h.Runs, 3)
	assert.True(t, base.Add(1100*time.Minute).Equal(h.Runs[0].Slot), "newest first")

	save(backend.EntryRunName(jobFeeds, "eu-west"), 1, scheduler.StatusTimeout)
	h, err = f.client.HistoryOf(ctx, jobFeeds, fleet.HistoryRequest{Entry: "eu-west", Status: []scheduler.Status{scheduler.StatusTimeout}})
	require.NoError(t, err)
	require.Len(t, h.Runs, 1)
	assert.Equal(t, "eu-west", h.Runs[0].Entry)
	assert.Equal(t, "eu-west", h.Entry)

	_, err = f.client.HistoryOf(ctx, jobReport, fleet.HistoryRequest{Status: []scheduler.Status{"exploded"}})
	assert.ErrorIs(t, err, fleet.ErrBadRequest)
	_, err = f.client.HistoryOf(ctx, jobFeeds, fleet.HistoryRequest{Entry: "a\x00b"})
	assert.ErrorIs(t, err, fleet.ErrBadRequest)
}

// A job of entries has a row like any job's: its entries by state, the failing
// ones, the newest run of any entry (whichever replica ran it) and the earliest
// next slot, instead of nothing.
func TestJobsRowOfAJobOfEntries(t *testing.T) {
	f := startFleet(t, fleetSetup{jobs: declareFeeds, instances: []string{"A", "B"}, handler: func(_ context.Context, run scheduler.Run) error {
		if run.Entry == "broken" {
			return errors.New("tenant broken")
		}
		return nil
	}})
	ctx, c := requestCtx(t), f.client
	for _, e := range []fleet.AddEntryRequest{
		{ID: "broken", EntrySpec: fleet.EntrySpec{Every: "200ms"}},
		{ID: "fine", EntrySpec: fleet.EntrySpec{Every: "300ms"}},
		{ID: "held", EntrySpec: fleet.EntrySpec{Every: "200ms", Paused: true}},
	} {
		_, err := c.AddEntry(ctx, jobFeeds, e)
		require.NoError(t, err)
	}
	var row fleet.JobSummary
	require.Eventually(t, func() bool {
		fl, err := c.Jobs(ctx)
		require.NoError(t, err)
		for _, j := range fl.Jobs {
			if j.Name == jobFeeds {
				row = j
			}
		}
		return row.Entries != nil && len(row.Entries.Failing) == 1 && row.LastSuccess != nil && row.LastFailure != nil
	}, 10*time.Second, 100*time.Millisecond)
	assert.True(t, row.EntriesOnly)
	assert.Equal(t, fleet.EntriesState{Active: 2, Paused: 1, Failing: []string{"broken"}}, *row.Entries)
	assert.Equal(t, fleet.JobActive, row.State)
	require.NotNil(t, row.LastRun)
	assert.NotEmpty(t, row.LastRun.Entry, "the newest run is an entry's")
	assert.WithinDuration(t, time.Now(), row.LastRun.Slot, 2*time.Second)
	assert.Equal(t, "broken", row.LastFailure.Entry)
	assert.Equal(t, "fine", row.LastSuccess.Entry)
	assert.False(t, row.Next.IsZero(), "its entries' next slot")
	assert.WithinDuration(t, time.Now(), row.Next, time.Second)
}
