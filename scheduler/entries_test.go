package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// entryRuns counts handler starts by entry and slot, and what each run carried.
type entryRuns struct {
	mu       sync.Mutex
	runs     map[string]map[int64][]string // entry → slot ms → instances
	payloads map[string]string
	jobs     map[string]bool
}

func newEntryRuns() *entryRuns {
	return &entryRuns{runs: map[string]map[int64][]string{}, payloads: map[string]string{}, jobs: map[string]bool{}}
}

func (r *entryRuns) handler(ctx context.Context, run scheduler.Run) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[run.Entry] == nil {
		r.runs[run.Entry] = map[int64][]string{}
	}
	r.runs[run.Entry][run.Slot.UnixMilli()] = append(r.runs[run.Entry][run.Slot.UnixMilli()], run.Instance)
	r.payloads[run.Entry] = string(run.Payload)
	r.jobs[run.Job] = true
	return nil
}

func (r *entryRuns) slots(entry string) map[int64][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64][]string{}
	for k, v := range r.runs[entry] {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func startFleet(t *testing.T, b backend.Backend, n int, declare func(s *scheduler.Scheduler)) []*scheduler.Scheduler {
	t.Helper()
	var out []*scheduler.Scheduler
	for i := range n {
		s := newScheduler(t, b, fmt.Sprint("i", i))
		declare(s)
		require.NoError(t, s.Start(t.Context()))
		require.NoError(t, s.EntriesLoaded(t.Context()))
		out = append(out, s)
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
	}
	return out
}

func TestEntriesRunOncePerSlotAcrossInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		fleet := startFleet(t, b, 3, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("report", runs.handler, scheduler.WithOverlap(scheduler.OverlapSkip)))
		})
		time.Sleep(time.Millisecond)
		added := time.Now()
		const n = 40
		for i := range n {
			every := time.Duration(1+i%3) * time.Second
			_, err := fleet[i%3].AddEntry(t.Context(), "report", fmt.Sprint("tenant-", i), scheduler.EntrySpec{Every: every, Payload: []byte(fmt.Sprint("p", i))})
			require.NoError(t, err)
		}
		synctest.Wait()
		for _, s := range fleet {
			followed, orphaned := s.EntryCounts()
			assert.Equal(t, n, followed, "%s follows every entry", s.Instance())
			assert.Zero(t, orphaned)
		}
		time.Sleep(6*time.Second + 500*time.Millisecond)
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}
		for i := range n {
			id := fmt.Sprint("tenant-", i)
			every := time.Duration(1+i%3) * time.Second
			got := runs.slots(id)
			want := 0
			for k := added.Truncate(every).Add(every); !k.After(added.Add(6 * time.Second)); k = k.Add(every) {
				want++
				assert.Len(t, got[k.UnixMilli()], 1, "%s slot %s ran once: %v", id, k.Format(time.TimeOnly), got[k.UnixMilli()])
			}
			assert.Len(t, got, want, "%s ran its slots after it was added, and only those", id)
			assert.Equal(t, fmt.Sprint("p", i), runs.payloads[id], "the run carries the entry's payload")
		}
		assert.Equal(t, map[string]bool{"report": true}, runs.jobs, "the run's Job is the declared job")
		hist, err := fleet[0].EntryHistory(t.Context(), "report", "tenant-0", 100)
		require.NoError(t, err)
		require.Len(t, hist, 6)
		for _, r := range hist {
			assert.Equal(t, "report", r.Job)
			assert.Equal(t, "tenant-0", r.Entry)
			assert.Equal(t, scheduler.StatusOK, r.Status)
		}
		own, err := fleet[0].History(t.Context(), "report", 100)
		require.NoError(t, err)
		assert.Empty(t, own, "the job's own history holds no entry's runs")
	})
}

func TestEntryChangeAndRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		release := make(chan struct{})
		var mu sync.Mutex
		var seen []string // entry@slot:payload, in order
		var ended []string
		h := func(ctx context.Context, run scheduler.Run) error {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s@%d:%s", run.Entry, run.Slot.Unix()%100, run.Payload))
			mu.Unlock()
			if string(run.Payload) == "slow" {
				<-release
			}
			mu.Lock()
			ended = append(ended, run.Entry)
			mu.Unlock()
			return nil
		}
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", h)) })
		base := time.Now().Unix() // 00:00:00
		e, err := fleet[0].AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: 10 * time.Second, Payload: []byte("a")})
		require.NoError(t, err)
		time.Sleep(10*time.Second + 100*time.Millisecond) // slot 10 runs with "a"
		_, err = fleet[1].UpdateEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: 5 * time.Second, Payload: []byte("b")}, e.Revision)
		require.NoError(t, err)
		_, err = fleet[0].UpdateEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Second}, e.Revision)
		require.ErrorIs(t, err, scheduler.ErrEntryConflict, "a change based on an old revision")
		time.Sleep(5 * time.Second) // slot 15 runs with "b" (the new schedule)
		cur, err := fleet[0].GetEntry(t.Context(), "j", "x")
		require.NoError(t, err)
		_, err = fleet[0].UpdateEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: 5 * time.Second, Payload: []byte("slow")}, cur.Revision)
		require.NoError(t, err)
		time.Sleep(5 * time.Second) // slot 20 starts, slow
		synctest.Wait()
		require.NoError(t, fleet[1].RemoveEntry(t.Context(), "j", "x", 0))
		synctest.Wait()
		for _, s := range fleet {
			followed, _ := s.EntryCounts()
			assert.Zero(t, followed, "%s no longer follows the removed entry", s.Instance())
		}
		close(release) // the run in progress finishes
		time.Sleep(20 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"x@10:a", "x@15:b", "x@20:slow"}, seen, "base %d", base)
		assert.Equal(t, []string{"x", "x", "x"}, ended, "the run in progress at the removal finished")
		hist, err := fleet[0].EntryHistory(t.Context(), "j", "x", 10)
		require.NoError(t, err)
		require.Len(t, hist, 3)
		assert.Equal(t, scheduler.StatusOK, hist[0].Status, "the removed entry's last run is recorded")
	})
}

func TestEntryRefusedAtTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Declare("j", func(context.Context, scheduler.Run) error { return nil }, scheduler.WithJitter(2*time.Second)))
		require.NoError(t, s.Every("plain", time.Minute, func(context.Context, scheduler.Run) error { return nil }))
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(context.Background())
		ctx := t.Context()
		for name, c := range map[string]struct {
			job  string
			id   string
			spec scheduler.EntrySpec
			want error
		}{
			"undeclared job":     {"nope", "x", scheduler.EntrySpec{Every: time.Minute}, scheduler.ErrJobNotFound},
			"no schedule":        {"j", "x", scheduler.EntrySpec{}, scheduler.ErrInvalidEntry},
			"bad cron":           {"j", "x", scheduler.EntrySpec{Cron: "61 * * * *"}, scheduler.ErrInvalidEntry},
			"bad zone":           {"j", "x", scheduler.EntrySpec{Cron: "0 9 * * *", Zone: "Mars/Olympus"}, scheduler.ErrInvalidEntry},
			"instant past":       {"j", "x", scheduler.EntrySpec{At: time.Now().Add(-time.Second)}, scheduler.ErrInvalidEntry},
			"end past":           {"j", "x", scheduler.EntrySpec{Every: time.Minute, End: time.Now().Add(-time.Second)}, scheduler.ErrInvalidEntry},
			"jitter beyond gap":  {"j", "x", scheduler.EntrySpec{Every: time.Second}, scheduler.ErrInvalidOption},
			"sub-millisecond":    {"j", "x", scheduler.EntrySpec{Every: time.Microsecond}, scheduler.ErrInvalidEntry},
			"control char in ID": {"j", "a\x1fb", scheduler.EntrySpec{Every: time.Minute}, scheduler.ErrInvalidEntry},
			"payload too big":    {"j", "x", scheduler.EntrySpec{Every: time.Minute, Payload: make([]byte, backend.MaxEntryPayload+1)}, scheduler.ErrInvalidEntry},
		} {
			_, err := s.AddEntry(ctx, c.job, c.id, c.spec)
			assert.ErrorIs(t, err, c.want, name)
		}
		_, err := s.AddEntry(ctx, "j", "ok", scheduler.EntrySpec{Cron: "0 9 * * MON-FRI", Zone: "Europe/Athens"})
		require.NoError(t, err)
		_, err = s.AddEntry(ctx, "j", "ok", scheduler.EntrySpec{Every: time.Minute})
		assert.ErrorIs(t, err, scheduler.ErrEntryExists)
		_, err = s.AddEntry(ctx, "plain", "also", scheduler.EntrySpec{Every: time.Hour})
		assert.NoError(t, err, "a job with a schedule of its own may have entries too")
		page, err := s.ListEntries(ctx, "j", "", "", 10)
		require.NoError(t, err)
		require.Len(t, page, 1)
		assert.Equal(t, "ok", page[0].ID)

		plain := newScheduler(t, noEntries{memory.New()}, "B")
		require.NoError(t, plain.Declare("j", func(context.Context, scheduler.Run) error { return nil }))
		_, err = plain.AddEntry(ctx, "j", "x", scheduler.EntrySpec{Every: time.Minute})
		assert.ErrorIs(t, err, scheduler.ErrEntriesNotSupported)
	})
}

// noEntries hides the memory backend's entry store.
type noEntries struct{ *memory.Backend }

func (noEntries) CreateEntry() {} // hides the EntryStore method set (different signature)

func TestEntriesOnlyWhereTheJobIsDeclared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		ops := newScheduler(t, b, "ops")
		require.NoError(t, ops.Declare("report", runs.handler))
		require.NoError(t, ops.Declare("ghost", runs.handler))
		require.NoError(t, ops.Start(t.Context()))
		// Workers declare "report" only: "ghost"'s entries are orphaned there.
		workers := startFleet(t, b, 2, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("report", runs.handler)) })
		require.NoError(t, ops.Stop(t.Context())) // the only instance declaring "ghost" is gone
		_, err := workers[0].AddEntry(t.Context(), "ghost", "g", scheduler.EntrySpec{Every: time.Second})
		require.ErrorIs(t, err, scheduler.ErrJobNotFound, "an entry is added where its job is declared")
		_, err = b.CreateEntry(t.Context(), backend.Entry{Job: "ghost", ID: "g", EntrySpec: backend.EntrySpec{Every: time.Second}})
		require.NoError(t, err, "stored by an operator, or by an instance that declared it")
		_, err = workers[1].AddEntry(t.Context(), "report", "r", scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
		synctest.Wait()
		for _, s := range workers {
			followed, orphaned := s.EntryCounts()
			assert.Equal(t, 1, followed)
			assert.Equal(t, 1, orphaned, "%s lists the undeclared job's entry as orphaned", s.Instance())
		}
		time.Sleep(3*time.Second + 500*time.Millisecond)
		assert.Empty(t, runs.slots("g"), "nobody runs the entry of a job nobody declares")
		assert.Len(t, runs.slots("r"), 3)
	})
}

func TestEntryPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", runs.handler)) })
		a, err := fleet[0].AddEntry(t.Context(), "j", "a", scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
		_, err = fleet[0].AddEntry(t.Context(), "j", "b", scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
		time.Sleep(2*time.Second + 500*time.Millisecond) // slots 1, 2 of both
		spec := a.EntrySpec
		spec.Paused = true
		_, err = fleet[1].UpdateEntry(t.Context(), "j", "a", spec, a.Revision)
		require.NoError(t, err)
		time.Sleep(2 * time.Second) // slots 3, 4: b only
		require.NoError(t, fleet[0].Pause(t.Context(), "j", scheduler.PauseOptions{Reason: "maintenance"}))
		synctest.Wait()
		time.Sleep(2 * time.Second) // slots 5, 6: neither (b recorded paused)
		require.NoError(t, fleet[0].Resume(t.Context(), "j"))
		synctest.Wait()
		time.Sleep(time.Second) // slot 7: b
		assert.Len(t, runs.slots("a"), 2, "a paused entry runs no slot")
		assert.Len(t, runs.slots("b"), 5, "the job's pause pauses its entries")
		hist, err := fleet[0].EntryHistory(t.Context(), "j", "b", 100)
		require.NoError(t, err)
		paused := 0
		for _, r := range hist {
			if r.Status == scheduler.StatusPaused {
				paused++
			}
		}
		assert.Equal(t, 2, paused, "the slots that fell while the job was paused are recorded paused")
	})
}

func TestEntryOverlapIsPerEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		h := func(ctx context.Context, run scheduler.Run) error {
			_ = runs.handler(ctx, run)
			if run.Entry == "slow" {
				time.Sleep(2500 * time.Millisecond)
			}
			return nil
		}
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("j", h, scheduler.WithOverlap(scheduler.OverlapSkip)))
		})
		for _, id := range []string{"slow", "fast"} {
			_, err := fleet[0].AddEntry(t.Context(), "j", id, scheduler.EntrySpec{Every: time.Second})
			require.NoError(t, err)
		}
		time.Sleep(6*time.Second + 500*time.Millisecond)
		assert.Len(t, runs.slots("fast"), 6, "another entry's long run is no overlap")
		assert.Len(t, runs.slots("slow"), 2, "the slow entry skips its own slots while it runs")
	})
}

func TestEntriesFollowedByAnInstanceStartedLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		first := startFleet(t, b, 1, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", runs.handler)) })
		for i := range 5 {
			_, err := first[0].AddEntry(t.Context(), "j", fmt.Sprint("e", i), scheduler.EntrySpec{Every: time.Second})
			require.NoError(t, err)
		}
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, first[0].Stop(t.Context()))
		later := startFleet(t, b, 1, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", runs.handler)) })
		followed, _ := later[0].EntryCounts()
		assert.Equal(t, 5, followed, "the stored entries are read at start")
		time.Sleep(2 * time.Second)
		for i := range 5 {
			got := runs.slots(fmt.Sprint("e", i))
			assert.Len(t, got, 3, "e%d: its slots before and after the restart, each once", i)
			for slot, who := range got {
				assert.Len(t, who, 1, "slot %d", slot)
			}
		}
	})
}

func TestEntryViews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		fail := func(ctx context.Context, run scheduler.Run) error {
			if run.Entry == "bad" {
				return errors.New("boom")
			}
			return nil
		}
		fleet := startFleet(t, b, 1, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", fail)) })
		s := fleet[0]
		for _, id := range []string{"bad", "good"} {
			_, err := s.AddEntry(t.Context(), "j", id, scheduler.EntrySpec{Every: 10 * time.Second})
			require.NoError(t, err)
		}
		paused, err := s.AddEntry(t.Context(), "j", "paused", scheduler.EntrySpec{Every: 10 * time.Second, Paused: true})
		require.NoError(t, err)
		time.Sleep(15 * time.Second)
		views, err := s.EntryViews(t.Context(), "j", "", 2)
		require.NoError(t, err)
		require.Len(t, views, 2, "a page")
		assert.Equal(t, "bad", views[0].ID)
		assert.True(t, views[0].Followed)
		assert.True(t, views[0].Next.After(time.Now()), "its next slot")
		assert.Zero(t, views[0].Next.UnixMilli()%10_000, "on its schedule")
		require.NotNil(t, views[0].Last.Failure, "its last failure")
		assert.Equal(t, "boom", views[0].Last.Failure.Error)
		assert.Equal(t, "bad", views[0].Last.Failure.Entry)
		assert.Nil(t, views[0].Last.Success)
		require.NotNil(t, views[1].Last.Success)
		assert.Equal(t, "good", views[1].Last.Success.Entry)
		more, err := s.EntryViews(t.Context(), "j", views[1].ID, 2)
		require.NoError(t, err)
		require.Len(t, more, 1, "the next page")
		assert.Equal(t, paused.ID, more[0].ID)
		assert.True(t, more[0].Followed)
		assert.True(t, more[0].Next.IsZero(), "a paused entry has no next slot")
		_, err = s.EntryViews(t.Context(), "j", "", scheduler.MaxEntryViewsPage+1)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption)

		// One entry's view is what its page shows.
		one, err := s.EntryView(t.Context(), "j", "bad")
		require.NoError(t, err)
		assert.Equal(t, views[0], one)
		_, err = s.EntryView(t.Context(), "j", "none")
		assert.ErrorIs(t, err, scheduler.ErrEntryNotFound)
	})
}

// The run limit counts each entry apart from its job: the job's own slots
// reaching its limit end its own loop, not its entries' slots.
func TestEntryRunLimitIsTheEntrysOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Every("j", time.Second, runs.handler, scheduler.WithMaxRuns(2)))
		})
		time.Sleep(3*time.Second + 500*time.Millisecond) // the job's slots 1, 2 count; slot 3 reaches the limit
		require.Len(t, runs.slots(""), 2, "the job runs its own limit")
		_, err := fleet[0].AddEntry(t.Context(), "j", "e", scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		assert.Len(t, runs.slots("e"), 2, "the entry runs its own limit, though the job reached its own")
	})
}

// resendingStore sends every create twice, as a store client does that resends
// a request whose answer was lost: the second answer is ErrEntryExists.
type resendingStore struct{ *memory.Backend }

func (r resendingStore) CreateEntry(ctx context.Context, e backend.Entry) (uint64, error) {
	if _, err := r.Backend.CreateEntry(ctx, e); err != nil {
		return 0, err
	}
	return r.Backend.CreateEntry(ctx, e)
}

func TestAddEntryFindsItsOwnResentWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		s := newScheduler(t, resendingStore{mem}, "A")
		require.NoError(t, s.Declare("j", func(context.Context, scheduler.Run) error { return nil }))
		e, err := s.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute, Payload: []byte("p")})
		require.NoError(t, err, "the entry stored is this call's own write")
		assert.NotZero(t, e.Revision)
		assert.Equal(t, "p", string(e.Payload))
		time.Sleep(time.Millisecond)
		_, err = s.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute, Payload: []byte("p")})
		assert.ErrorIs(t, err, scheduler.ErrEntryExists, "another call's entry, even with the same content")
	})
}

func TestStopFinishesTheRunOfARemovedEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		started := make(chan string, 4)
		h := func(ctx context.Context, run scheduler.Run) error {
			started <- run.Instance
			if run.Attempt > 1 {
				return nil // a takeover: the test fails below
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}
		fleet := startFleet(t, mem, 2, func(s *scheduler.Scheduler) { require.NoError(t, s.Declare("j", h)) })
		_, err := fleet[0].AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		holder := <-started
		require.NoError(t, fleet[1].RemoveEntry(t.Context(), "j", "x", 0))
		synctest.Wait()
		for _, s := range fleet {
			if s.Instance() != holder {
				continue
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			err := s.Stop(ctx)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "the run was cancelled by Stop")
		}
		synctest.Wait()
		active, err := mem.Runs().Active(t.Context(), backend.EntryRunName("j", "x"))
		require.NoError(t, err)
		assert.Empty(t, active, "nobody follows the removed entry to take its run over: it is finished, not left unfinished")
		hist, err := fleet[0].EntryHistory(t.Context(), "j", "x", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.Equal(t, scheduler.StatusCancelled, hist[0].Status)
		select {
		case who := <-started:
			t.Fatalf("the run was taken over by %s", who)
		default:
		}
	})
}

func TestDeclaredJobBoundsItsEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runs := newEntryRuns()
		start, end := time.Now().Add(3*time.Second), time.Now().Add(6*time.Second)
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Declare("j", runs.handler, scheduler.WithStartAt(start), scheduler.WithEndAt(end)), "a job of entries only may be bounded")
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(context.Background())
		for _, info := range s.Jobs() {
			assert.True(t, info.EntriesOnly)
			assert.True(t, info.Next.IsZero())
		}
		_, err := s.AddEntry(t.Context(), "j", "x", scheduler.EntrySpec{Every: time.Second})
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		got := runs.slots("x")
		assert.Len(t, got, 3, "the job's bounds hold its entries: slots 3, 4, 5: %v", got)
		_, err = s.AddEntry(t.Context(), "j", "late", scheduler.EntrySpec{Every: time.Second})
		assert.ErrorIs(t, err, scheduler.ErrInvalidEntry, "past the job's end, an entry has no slot")
	})
}

func TestDescribeAJobOfEntries(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	require.NoError(t, s.Declare("j", func(context.Context, scheduler.Run) error { return nil }))
	assert.Equal(t, "its schedule entries", scheduler.DescribeSchedule(s.Jobs()[0].Schedule))
}

// failingHistory fails the history of one job.
type failingHistory struct {
	*memory.Backend
	job string
}

func (f failingHistory) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	if job == f.job {
		return nil, errors.New("unreadable")
	}
	return f.Backend.History(ctx, job, limit)
}

func TestLastRunsOfTheOtherJobsDespiteOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, failingHistory{memory.New(), "bad"}, "A")
		ok := func(context.Context, scheduler.Run) error { return nil }
		require.NoError(t, s.Every("bad", time.Second, ok))
		require.NoError(t, s.Every("good", time.Second, ok))
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(context.Background())
		time.Sleep(1500 * time.Millisecond)
		last, err := s.LastRuns(t.Context())
		require.Error(t, err, "one job could not be read")
		_, read := last["bad"]
		assert.False(t, read)
		require.NotNil(t, last["good"].Run, "the other job's last runs are read and returned")
	})
}

func TestEntriesCatchUpAFewAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var (
			mu            sync.Mutex
			now, most     int
			caughtUp      = map[string]bool{}
			restartedAt   time.Time
			restartedOnce bool
		)
		h := func(ctx context.Context, run scheduler.Run) error {
			mu.Lock()
			old := restartedOnce && run.Slot.Before(restartedAt)
			if old {
				caughtUp[run.Entry] = true
				now++
				most = max(most, now)
			}
			mu.Unlock()
			if old {
				time.Sleep(time.Second)
				mu.Lock()
				now--
				mu.Unlock()
			}
			return nil
		}
		declare := func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("j", h, scheduler.WithCatchUp(scheduler.CatchUpLatest, time.Hour)))
		}
		first := startFleet(t, mem, 1, declare)
		const n = 200
		for i := range n {
			_, err := first[0].AddEntry(t.Context(), "j", fmt.Sprint("e", i), scheduler.EntrySpec{Every: time.Minute})
			require.NoError(t, err)
		}
		require.NoError(t, first[0].Stop(t.Context()))
		time.Sleep(3 * time.Minute) // every entry misses slots
		mu.Lock()
		restartedAt, restartedOnce = time.Now(), true
		mu.Unlock()
		later := startFleet(t, mem, 1, declare)
		time.Sleep(30 * time.Second)
		require.NoError(t, later[0].Stop(t.Context()))
		mu.Lock()
		defer mu.Unlock()
		assert.Len(t, caughtUp, n, "every entry ran its latest missed slot")
		assert.LessOrEqual(t, most, 32, "a few entries catch up at a time")
		assert.Greater(t, most, 1, "in parallel")
	})
}

func TestAnEntryThatCannotRunIsReportedToAHookThatReadsEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		var s *scheduler.Scheduler
		reported := make(chan int, 1)
		s = newScheduler(t, mem, "A", func(c *scheduler.Config) {
			c.OnEvent = func(e scheduler.Event) {
				if e.Kind == scheduler.EventBackendError && e.Op == "entry" {
					followed, _ := s.EntryCounts() // a hook may read the entries
					reported <- followed
				}
			}
		})
		require.NoError(t, s.Declare("j", func(context.Context, scheduler.Run) error { return nil }))
		_, err := mem.CreateEntry(t.Context(), backend.Entry{Job: "j", ID: "x", EntrySpec: backend.EntrySpec{Cron: "0 9 * * *", Zone: "Nowhere/Atlantis"}})
		require.NoError(t, err, "stored by a host that knows the zone")
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(context.Background())
		require.NoError(t, s.EntriesLoaded(t.Context()))
		assert.Equal(t, 0, <-reported, "reported, and not followed")
	})
}

// An entry gets a random non-zero Incarnation when it is added, keeps it
// through its changes, and gets another when it is removed and added again.
func TestEntryIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		s := newScheduler(t, mem, "A")
		require.NoError(t, s.Declare("j", func(context.Context, scheduler.Run) error { return nil }))
		spec := scheduler.EntrySpec{Every: time.Minute}
		e, err := s.AddEntry(t.Context(), "j", "x", spec)
		require.NoError(t, err)
		require.NotZero(t, e.Incarnation)
		stored, err := mem.GetEntry(t.Context(), "j", "x")
		require.NoError(t, err)
		assert.Equal(t, e.Incarnation, stored.Incarnation)
		spec.Payload = []byte("v2")
		_, err = s.UpdateEntry(t.Context(), "j", "x", spec, stored.Revision)
		require.NoError(t, err)
		changed, err := mem.GetEntry(t.Context(), "j", "x")
		require.NoError(t, err)
		assert.Equal(t, e.Incarnation, changed.Incarnation, "a change keeps the incarnation")
		require.NoError(t, s.RemoveEntry(t.Context(), "j", "x", 0))
		again, err := s.AddEntry(t.Context(), "j", "x", spec)
		require.NoError(t, err)
		assert.NotZero(t, again.Incarnation)
		assert.NotEqual(t, e.Incarnation, again.Incarnation, "added again: another incarnation")
	})
}
