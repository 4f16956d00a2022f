package scheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// deadlineRecords returns the deadline records of name's history by slot.
func deadlineRecords(t *testing.T, s *scheduler.Scheduler, name string) map[time.Time]scheduler.RunRecord {
	t.Helper()
	hist, err := s.History(t.Context(), name, 1000)
	require.NoError(t, err)
	out := map[time.Time]scheduler.RunRecord{}
	for _, r := range hist {
		if r.Status == scheduler.StatusDeadline {
			_, dup := out[r.Slot]
			assert.False(t, dup, "one deadline record per slot: %+v", r)
			out[r.Slot.UTC()] = r
		}
	}
	return out
}

// Three replicas judge every slot: a slot that ended ok in time has no deadline
// record, one still running at its deadline and one that failed each have one,
// stored and told once across the fleet, saying what the slot had come to.
func TestDeadlineMissedIsRecordedOnceAcrossTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now().UTC()
		events := newEventLog(scheduler.EventDeadlineMissed)
		handler := func(ctx context.Context, r scheduler.Run) error {
			switch r.Slot.Sub(base) {
			case time.Minute: // runs past its deadline
				time.Sleep(45 * time.Second)
			case 2 * time.Minute:
				return errors.New("boom")
			}
			return nil
		}
		var fleet []*scheduler.Scheduler
		for _, name := range []string{"A", "B", "C"} {
			s := newScheduler(t, b, name, func(c *scheduler.Config) { c.OnEvent = events.hook })
			require.NoError(t, s.Every("job", time.Minute, handler, scheduler.WithDeadline(30*time.Second)))
			require.NoError(t, s.Start(t.Context()))
			fleet = append(fleet, s)
		}
		time.Sleep(3*time.Minute + 40*time.Second)
		for _, s := range fleet {
			require.NoError(t, s.Stop(t.Context()))
		}

		recs := deadlineRecords(t, fleet[0], "job")
		require.Len(t, recs, 2, "%v", recs)
		running := recs[base.Add(time.Minute)]
		assert.Contains(t, running.Error, "still running on ")
		assert.Contains(t, running.Error, "(attempt 1)")
		assert.Contains(t, []string{"A", "B", "C"}, running.Instance)
		failed := recs[base.Add(2*time.Minute)]
		assert.Contains(t, failed.Error, "ended error on ")
		assert.Contains(t, failed.Error, "boom")
		assert.Contains(t, failed.Error, "not ended ok by its deadline "+base.Add(2*time.Minute+30*time.Second).Format(time.RFC3339Nano))

		evs := events.of(scheduler.EventDeadlineMissed)
		require.Len(t, evs, 2, "one event per slot across the fleet")
		for _, e := range evs {
			assert.Equal(t, e.Slot.Add(30*time.Second), e.Next, "Next is the deadline")
			assert.Equal(t, scheduler.StatusDeadline, e.Status)
			assert.Equal(t, recs[e.Slot.UTC()].Instance, e.Instance, "told by the instance that stored it")
			require.Error(t, e.Err)
		}
	})
}

// A retry that ends ok within the deadline meets it; the slot's later success
// does not undo a judgement already made.
func TestDeadlineRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now().UTC()
		var calls atomic.Int32
		handler := func(ctx context.Context, r scheduler.Run) error {
			calls.Add(1)
			if r.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			if r.Slot.Sub(base) == 2*time.Minute {
				time.Sleep(40 * time.Second) // the retry ends ok after the deadline
			}
			return nil
		}
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", time.Minute, handler, scheduler.WithDeadline(30*time.Second),
			scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: time.Second})))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2*time.Minute + 50*time.Second)
		require.NoError(t, s.Stop(t.Context()))

		recs := deadlineRecords(t, s, "job")
		require.Len(t, recs, 1, "%v", recs)
		late := recs[base.Add(2*time.Minute)]
		assert.Contains(t, late.Error, "still running on A (attempt 2)")
	})
}

// A paused job's slots are not judged: the operator decided they do not run.
func TestDeadlineNotJudgedWhilePaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		events := newEventLog(scheduler.EventDeadlineMissed)
		s := newScheduler(t, b, "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Every("job", time.Minute, func(context.Context, scheduler.Run) error { return nil },
			scheduler.WithDeadline(30*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		require.NoError(t, s.Pause(t.Context(), "job", scheduler.PauseOptions{Reason: "maintenance"}))
		time.Sleep(3*time.Minute + 40*time.Second)
		require.NoError(t, s.Stop(t.Context()))
		assert.Empty(t, deadlineRecords(t, s, "job"))
		assert.Empty(t, events.of(scheduler.EventDeadlineMissed))
	})
}

// Every replica down: the first back judges the slots that fell meanwhile,
// recorded missed, and the slot whose judgement the stop cut off.
func TestDeadlineJudgedWhenTheFleetIsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now().UTC()
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
			if r.Slot.Sub(base) == 4*time.Minute {
				return errors.New("the last slot before the outage fails")
			}
			return nil
		}, scheduler.WithDeadline(40*time.Second)))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(4*time.Minute + 10*time.Second) // 0:04's deadline (0:04:40) comes after the stop
		require.NoError(t, a.Stop(t.Context()))
		time.Sleep(11 * time.Minute) // 0:05 … 0:15 fall with no replica up

		events := newEventLog(scheduler.EventDeadlineMissed)
		bs := newScheduler(t, b, "B", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, bs.Every("job", time.Minute, func(context.Context, scheduler.Run) error { return nil },
			scheduler.WithDeadline(40*time.Second)))
		require.NoError(t, bs.Start(t.Context()))
		time.Sleep(2 * time.Minute)
		require.NoError(t, bs.Stop(t.Context()))

		recs := deadlineRecords(t, bs, "job")
		assert.Contains(t, recs[base.Add(4*time.Minute)].Error, "ended error on A (attempt 1)")
		for m := 5; m <= 14; m++ {
			r, ok := recs[base.Add(time.Duration(m)*time.Minute)]
			if assert.True(t, ok, "slot 0:%02d judged", m) {
				assert.Contains(t, r.Error, "decided missed")
				assert.Equal(t, "B", r.Instance)
			}
		}
		for m := 0; m < 4; m++ {
			assert.NotContains(t, recs, base.Add(time.Duration(m)*time.Minute), "slot 0:%02d ended ok in time", m)
		}
		for m := 15; m <= 16; m++ {
			assert.NotContains(t, recs, base.Add(time.Duration(m)*time.Minute), "slot 0:%02d ran in time", m)
		}
		assert.Len(t, events.of(scheduler.EventDeadlineMissed), len(recs))
	})
}

// The deadline counts from the slot's schedule time, before the spread moves it.
func TestDeadlineCountsFromTheNominalSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		offset := scheduler.SpreadOffset("job", 20*time.Second)
		base := time.Now().UTC()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
			if r.Nominal.Sub(base) == time.Minute {
				// Ends 1s after the deadline counted from the nominal time,
				// well within it counted from the moved slot.
				time.Sleep(31*time.Second - offset)
			}
			return nil
		}, scheduler.WithSpread(20*time.Second), scheduler.WithDeadline(30*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2*time.Minute + 40*time.Second)
		require.NoError(t, s.Stop(t.Context()))
		recs := deadlineRecords(t, s, "job")
		delete(recs, base.Add(-time.Minute+offset)) // started late, at Start
		require.Len(t, recs, 1, "%v", recs)
		r := recs[base.Add(time.Minute+offset)]
		assert.Contains(t, r.Error, "deadline "+base.Add(time.Minute+30*time.Second).Format(time.RFC3339Nano))
	})
}

// An entry has the job's deadline unless it sets its own.
func TestDeadlineOfEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Declare("tenants", func(ctx context.Context, r scheduler.Run) error {
			time.Sleep(20 * time.Second)
			return nil
		}, scheduler.WithDeadline(30*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		_, err := s.AddEntry(t.Context(), "tenants", "loose", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		_, err = s.AddEntry(t.Context(), "tenants", "tight", scheduler.EntrySpec{Every: time.Minute, Deadline: 10 * time.Second})
		require.NoError(t, err)
		time.Sleep(3*time.Minute + 40*time.Second)
		require.NoError(t, s.Stop(t.Context()))
		assert.Empty(t, deadlineRecords(t, s, backend.EntryRunName("tenants", "loose")))
		tight := deadlineRecords(t, s, backend.EntryRunName("tenants", "tight"))
		assert.Len(t, tight, 3, "each of the tight entry's slots ran past its 10s: %v", tight)
		for _, r := range tight {
			assert.Contains(t, r.Error, "still running on A")
		}
	})
}

// A deadline the scheduler could not judge reliably is refused at registration.
func TestDeadlineRefusedAtRegistration(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	noop := func(context.Context, scheduler.Run) error { return nil }
	for name, opts := range map[string][]scheduler.JobOption{
		"zero":          {scheduler.WithDeadline(0)},
		"negative":      {scheduler.WithDeadline(-time.Second)},
		"above max":     {scheduler.WithDeadline(scheduler.MaxDuration + 1)},
		"within spread": {scheduler.WithSpread(30 * time.Second), scheduler.WithDeadline(30 * time.Second)},
		"history short": {scheduler.WithDeadline(10 * time.Minute)}, // 11 slots × 4 > 40
		"ttl short":     {scheduler.WithHistory(100, time.Minute), scheduler.WithDeadline(time.Minute)},
	} {
		opts = append([]scheduler.JobOption{scheduler.WithHistory(40, 0)}, opts...)
		if name == "ttl short" {
			opts = opts[1:]
		}
		err := s.Every("job-"+name[:3], time.Minute, noop, opts...)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, name)
	}
	require.NoError(t, s.Every("fits", time.Minute, noop, scheduler.WithHistory(40, 0), scheduler.WithDeadline(8*time.Minute)))

	require.NoError(t, s.Declare("tenants", noop, scheduler.WithHistory(40, 0)))
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	_, err := s.AddEntry(t.Context(), "tenants", "neg", scheduler.EntrySpec{Every: time.Minute, Deadline: -time.Second})
	assert.ErrorIs(t, err, scheduler.ErrInvalidEntry)
	_, err = s.AddEntry(t.Context(), "tenants", "long", scheduler.EntrySpec{Every: time.Minute, Deadline: time.Hour})
	assert.ErrorIs(t, err, scheduler.ErrInvalidEntry)
	assert.ErrorContains(t, err, "WithHistory")
	_, err = s.AddEntry(t.Context(), "tenants", "daily", scheduler.EntrySpec{Cron: "0 9 * * *", Deadline: time.Hour})
	assert.NoError(t, err)
}

// Failed slots in a row, each judged past its deadline, still pause a job that
// pauses after failures; the paused slots are not judged.
func TestDeadlineWithPauseAfterFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now().UTC()
		var ran atomic.Int32
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", time.Minute, func(ctx context.Context, r scheduler.Run) error {
			ran.Add(1)
			return errors.New("boom")
		}, scheduler.WithDeadline(30*time.Second), scheduler.WithPauseAfterFailures(3)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(5*time.Minute + 40*time.Second)
		p, paused := s.Paused("job")
		require.True(t, paused, "three failed slots in a row pause the job")
		assert.Contains(t, p.Reason, "boom")
		assert.Equal(t, int32(3), ran.Load(), "slots 0:00 … 0:02 ran, then the pause held the job")
		require.NoError(t, s.Stop(t.Context()))
		recs := deadlineRecords(t, s, "job")
		for m := 0; m < 3; m++ {
			assert.Contains(t, recs[base.Add(time.Duration(m)*time.Minute)].Error, "ended error on A", "slot 0:%02d", m)
		}
		assert.Len(t, recs, 3, "paused slots are not judged: %v", recs)
	})
}

// The slots of an entry removed before their deadline are not judged: an
// operator ended them.
func TestDeadlineOfARemovedEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		events := newEventLog(scheduler.EventDeadlineMissed)
		s := newScheduler(t, b, "A", func(c *scheduler.Config) { c.OnEvent = events.hook })
		require.NoError(t, s.Declare("tenants", func(ctx context.Context, r scheduler.Run) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Second):
				return nil
			}
		}, scheduler.WithDeadline(10*time.Second)))
		require.NoError(t, s.Start(t.Context()))
		_, err := s.AddEntry(t.Context(), "tenants", "gone", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		_, err = s.AddEntry(t.Context(), "tenants", "kept", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 5*time.Second))) // both run
		require.NoError(t, s.RemoveEntry(t.Context(), "tenants", "gone", 0))
		time.Sleep(time.Minute)
		require.NoError(t, s.Stop(t.Context()))
		assert.Empty(t, deadlineRecords(t, s, backend.EntryRunName("tenants", "gone")))
		assert.NotEmpty(t, deadlineRecords(t, s, backend.EntryRunName("tenants", "kept")))
		for _, e := range events.of(scheduler.EventDeadlineMissed) {
			assert.Equal(t, "kept", e.Entry)
		}
	})
}

// Preview says each slot's deadline, counted from its schedule time, and says
// none for a slot a pause holds: it is not judged.
func TestPreviewShowsDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "A")
		noop := func(context.Context, scheduler.Run) error { return nil }
		require.NoError(t, s.Every("job", time.Hour, noop, scheduler.WithSpread(time.Minute), scheduler.WithDeadline(30*time.Minute)))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		out, err := s.Preview(t.Context(), "job", scheduler.PreviewOptions{N: 3})
		require.NoError(t, err)
		require.Len(t, out, 3)
		for _, ps := range out {
			var texts []string
			for _, n := range ps.Notes {
				if n.Kind == scheduler.PreviewDeadline {
					texts = append(texts, n.Text)
				}
			}
			require.Len(t, texts, 1, "%+v", ps.Notes)
			assert.Contains(t, texts[0], ps.Nominal.Add(30*time.Minute).Format("15:04:05"))
		}
		require.NoError(t, s.Pause(t.Context(), "job", scheduler.PauseOptions{Reason: "maintenance"}))
		synctest.Wait() // the pause reaches this instance's view
		out, err = s.Preview(t.Context(), "job", scheduler.PreviewOptions{N: 3})
		require.NoError(t, err)
		for _, ps := range out {
			assert.False(t, ps.Runs)
			for _, n := range ps.Notes {
				assert.NotEqual(t, scheduler.PreviewDeadline, n.Kind, "a paused slot is not judged: %+v", ps.Notes)
			}
		}
	})
}
