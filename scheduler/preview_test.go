package scheduler_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/stepclock"
)

// kinds lists the kinds of a preview slot's notes.
func kinds(ps scheduler.PreviewSlot) []scheduler.PreviewKind {
	var out []scheduler.PreviewKind
	for _, n := range ps.Notes {
		out = append(out, n.Kind)
	}
	return out
}

// nominals records each run's Nominal by slot.
type nominals struct {
	mu sync.Mutex
	by map[int64]time.Time
}

func (n *nominals) handler(ctx context.Context, r scheduler.Run) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.by[r.Slot.UnixMilli()] = r.Nominal
	return nil
}

func (n *nominals) get() map[int64]time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[int64]time.Time, len(n.by))
	for k, v := range n.by {
		out[k] = v
	}
	return out
}

// What Preview lists is what two replicas then do: a job with a spread, start
// and end bounds, a pause with an end and a run limit runs exactly the slots
// the preview says run, at the moved instants, and records paused those it
// says are paused; none past the limit or the end. A job with catch-up runs,
// once its pause ends, the paused slot the preview says catch-up runs.
func TestPreviewAgreesWithHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now().UTC() // 2000-01-01T00:00:00Z
		runs := &nominals{by: map[int64]time.Time{}}
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B"} {
			s := newScheduler(t, b, id)
			require.NoError(t, s.Every("agree", time.Minute, runs.handler,
				scheduler.WithSpread(20*time.Second), scheduler.WithStartAt(base.Add(2*time.Minute)),
				scheduler.WithEndAt(base.Add(30*time.Minute)), scheduler.WithMaxRuns(8), scheduler.WithHistory(1000, 0)))
			require.NoError(t, s.Every("caught", time.Minute, func(context.Context, scheduler.Run) error { return nil },
				scheduler.WithCatchUp(scheduler.CatchUpLatest, time.Hour), scheduler.WithHistory(1000, 0)))
			require.NoError(t, s.Start(t.Context()))
			scheds = append(scheds, s)
		}
		s := scheds[0]
		require.NoError(t, s.Pause(t.Context(), "agree", scheduler.PauseOptions{Reason: "migration", By: "ops", Until: base.Add(6*time.Minute + 30*time.Second)}))
		require.NoError(t, s.Pause(t.Context(), "caught", scheduler.PauseOptions{Reason: "migration", By: "ops", Until: base.Add(5*time.Minute + 30*time.Second)}))
		synctest.Wait() // every instance sees the pauses

		agree, err := s.Preview(t.Context(), "agree", scheduler.PreviewOptions{N: 100})
		require.NoError(t, err)
		require.Len(t, agree, 28, "the slots from 00:02 to 00:29: the end bound stops the list")
		offset := scheduler.SpreadOffset("agree", 20*time.Second)
		require.Positive(t, offset, "the test needs a spread that moves the slots")
		assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewSpread, scheduler.PreviewStartBound, scheduler.PreviewPaused}, kinds(agree[0]))
		assert.Equal(t, "recorded paused, not run: job paused by ops until 2000-01-01T00:06:30Z: migration", agree[0].Notes[2].Text)
		last := agree[len(agree)-1]
		require.Contains(t, kinds(last), scheduler.PreviewLast)
		assert.Contains(t, last.Notes[slices.Index(kinds(last), scheduler.PreviewLast)].Text, "end bound")
		want := map[int64]scheduler.Status{}
		ran := 0
		for i, ps := range agree {
			nominal := base.Add(time.Duration(i+2) * time.Minute)
			assert.Equal(t, nominal, ps.Nominal, "slot %d", i)
			assert.Equal(t, nominal.Add(offset), ps.Slot, "slot %d is moved by the spread", i)
			switch {
			case ps.Slot.Before(base.Add(6*time.Minute + 30*time.Second)):
				assert.False(t, ps.Runs, "slot %d is paused", i)
				assert.Contains(t, kinds(ps), scheduler.PreviewPaused)
				want[ps.Slot.UnixMilli()] = scheduler.StatusPaused
			case ran < 8:
				assert.True(t, ps.Runs, "slot %d runs: %v", i, ps.Notes)
				assert.NotContains(t, kinds(ps), scheduler.PreviewLimit)
				want[ps.Slot.UnixMilli()] = scheduler.StatusOK
				ran++
			default:
				assert.False(t, ps.Runs, "slot %d is past the run limit", i)
				assert.Contains(t, kinds(ps), scheduler.PreviewLimit)
			}
		}

		caught, err := s.Preview(t.Context(), "caught", scheduler.PreviewOptions{N: 7})
		require.NoError(t, err)
		var caughtKinds [][]scheduler.PreviewKind
		for _, ps := range caught {
			caughtKinds = append(caughtKinds, kinds(ps))
		}
		paused, catchUp := []scheduler.PreviewKind{scheduler.PreviewPaused}, []scheduler.PreviewKind{scheduler.PreviewCatchUp}
		assert.Equal(t, [][]scheduler.PreviewKind{paused, paused, paused, paused, catchUp, nil, nil}, caughtKinds,
			"00:01 to 00:04 paused, 00:05 caught up when the pause ends at 00:05:30, then running (00:00 is due now: not listed)")

		time.Sleep(40 * time.Minute)
		synctest.Wait()
		recs, err := s.History(t.Context(), "agree", 1000)
		require.NoError(t, err)
		got := map[int64]scheduler.Status{}
		for _, r := range recs {
			got[r.Slot.UnixMilli()] = r.Status
		}
		for ms, st := range got {
			if st == scheduler.StatusLimit && want[ms] == "" {
				delete(got, ms) // a slot past the limit is not run; one may be recorded so
			}
		}
		assert.Equal(t, want, got, "History holds what the preview said: paused, then eight runs, no run after")
		ranAt := runs.get()
		assert.Len(t, ranAt, 8)
		for _, ps := range agree {
			if n, ok := ranAt[ps.Slot.UnixMilli()]; ok {
				assert.Equal(t, ps.Nominal, n, "Run.Nominal is the preview's")
			}
		}
		recs, err = s.History(t.Context(), "caught", 1000)
		require.NoError(t, err)
		caughtHist := map[int64]scheduler.Status{} // the newest record of each slot
		for _, r := range slices.Backward(recs) {
			caughtHist[r.Slot.UnixMilli()] = r.Status
		}
		for i, ps := range caught {
			st := caughtHist[ps.Slot.UnixMilli()]
			if ps.Runs {
				assert.Equal(t, scheduler.StatusOK, st, "caught slot %d (%v) runs", i, kinds(ps))
			} else {
				assert.Equal(t, scheduler.StatusPaused, st, "caught slot %d is recorded paused", i)
			}
		}
		stopAll(t, scheds)
	})
}

// Bad input is refused at once: an unknown job or entry, N out of range, a
// From slots cannot reach, and a job of entries only without an entry.
func TestPreviewRefuses(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	noop := func(context.Context, scheduler.Run) error { return nil }
	require.NoError(t, s.Every("job", time.Minute, noop))
	require.NoError(t, s.Declare("entries", noop))
	ctx := t.Context()
	_, err := s.Preview(ctx, "nope", scheduler.PreviewOptions{N: 1})
	assert.ErrorIs(t, err, scheduler.ErrJobNotFound)
	_, err = s.Preview(ctx, "job", scheduler.PreviewOptions{N: 1, Entry: "nope"})
	assert.ErrorIs(t, err, scheduler.ErrEntryNotFound)
	for _, n := range []int{0, -1, scheduler.MaxPreviewSlots + 1} {
		_, err = s.Preview(ctx, "job", scheduler.PreviewOptions{N: n})
		assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "N %d", n)
	}
	_, err = s.Preview(ctx, "job", scheduler.PreviewOptions{N: 1, From: time.Date(300_000_000, 1, 1, 0, 0, 0, 0, time.UTC)})
	assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "a From past the range of slots")
	_, err = s.Preview(ctx, "entries", scheduler.PreviewOptions{N: 1})
	assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "a job of entries only")
	out, err := s.Preview(ctx, "job", scheduler.PreviewOptions{N: scheduler.MaxPreviewSlots})
	require.NoError(t, err)
	assert.Len(t, out, scheduler.MaxPreviewSlots)
	assert.True(t, out[0].Slot.After(time.Now()), "a zero From is after now: %v", out[0].Slot)
}

// Daylight saving in the zone of a cron job: a time the clocks skip is
// shifted by the jump, a time they repeat fires at its first occurrence, as
// the schedule computes them; other days have no note.
func TestPreviewDaylightSaving(t *testing.T) {
	c := stepclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newScheduler(t, memory.NewWithClock(c), "A", func(cfg *scheduler.Config) { cfg.Clock = c })
	noop := func(context.Context, scheduler.Run) error { return nil }
	athens, err := time.LoadLocation("Europe/Athens")
	require.NoError(t, err)
	newYork, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	require.NoError(t, s.Cron("athens", "30 3 * * *", noop, scheduler.WithLocation(athens)))
	require.NoError(t, s.Cron("new-york", "30 1 * * *", noop, scheduler.WithLocation(newYork)))
	require.NoError(t, s.Cron("spread", "30 3 * * *", noop, scheduler.WithLocation(athens), scheduler.WithSpread(time.Hour)))

	cases := []struct {
		name, job string
		from      time.Time
		// note is the slot (of 3) with a note of kind, at the instant at
		note int
		kind scheduler.PreviewKind
		at   time.Time
		text string
	}{
		{"spring forward", "athens", time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC), 1, scheduler.PreviewDSTShifted,
			time.Date(2026, 3, 29, 4, 30, 0, 0, athens), "03:30 does not exist on Sun 29 Mar 2026 in Europe/Athens (the clocks jump forward 1h): shifted by the jump to 04:30 EEST"},
		{"fall back", "athens", time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), 1, scheduler.PreviewDSTRepeated,
			time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), "03:30 happens twice on Sun 25 Oct 2026 in Europe/Athens (the clocks fall back 1h): it fires once, at the first (03:30 EEST)"},
		{"fall back in New York", "new-york", time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC), 1, scheduler.PreviewDSTRepeated,
			time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), "01:30 happens twice on Sun 1 Nov 2026 in America/New_York (the clocks fall back 1h): it fires once, at the first (01:30 EDT)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := s.Preview(t.Context(), tc.job, scheduler.PreviewOptions{From: tc.from, N: 3})
			require.NoError(t, err)
			require.Len(t, out, 3)
			sched, err := scheduler.ParseCron(map[string]string{"athens": "30 3 * * *", "new-york": "30 1 * * *"}[tc.job],
				map[string]*time.Location{"athens": athens, "new-york": newYork}[tc.job])
			require.NoError(t, err)
			prev := tc.from.Add(-time.Nanosecond)
			for i, ps := range out {
				next := sched.Next(prev)
				assert.Equal(t, next, ps.Slot, "slot %d is the schedule's", i)
				prev = next
				if i != tc.note {
					assert.Empty(t, ps.Notes, "slot %d", i)
					continue
				}
				assert.True(t, ps.Slot.Equal(tc.at), "slot %d at %v, not %v", i, ps.Slot, tc.at)
				require.Len(t, ps.Notes, 1)
				assert.Equal(t, tc.kind, ps.Notes[0].Kind)
				assert.Contains(t, ps.Notes[0].Text, tc.text)
			}
		})
	}

	// With a spread, the note is about the nominal time; the slot is moved.
	out, err := s.Preview(t.Context(), "spread", scheduler.PreviewOptions{From: time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), N: 1})
	require.NoError(t, err)
	require.Len(t, out, 1)
	offset := scheduler.SpreadOffset("spread", time.Hour)
	assert.True(t, out[0].Nominal.Equal(time.Date(2026, 3, 29, 4, 30, 0, 0, athens)), "%v", out[0].Nominal)
	assert.Equal(t, out[0].Nominal.Add(offset), out[0].Slot)
	assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewSpread, scheduler.PreviewDSTShifted}, kinds(out[0]))
}

// Far instants end the list without a hang: a year-9999 preview crosses into
// year 10000, one near the end of the range of slots lists what is left, and a
// job whose end is past lists none. A cron that never matches is refused
// when the job is registered.
func TestPreviewFarAndNever(t *testing.T) {
	c := stepclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newScheduler(t, memory.NewWithClock(c), "A", func(cfg *scheduler.Config) { cfg.Clock = c })
	noop := func(context.Context, scheduler.Run) error { return nil }
	require.NoError(t, s.Every("hourly", time.Hour, noop))
	require.NoError(t, s.Cron("yearly", "0 0 1 1 *", noop))
	require.NoError(t, s.Every("ended", time.Minute, noop, scheduler.WithEndAt(c.Now().Add(-time.Hour))))
	err := s.Cron("never", "0 0 30 2 *", noop)
	assert.ErrorIs(t, err, scheduler.ErrInvalidSchedule, "30 February never fires")

	out, err := s.Preview(t.Context(), "hourly", scheduler.PreviewOptions{From: time.Date(9999, 12, 31, 22, 30, 0, 0, time.UTC), N: 3})
	require.NoError(t, err)
	require.Len(t, out, 3)
	assert.Equal(t, time.Date(10000, 1, 1, 1, 0, 0, 0, time.UTC), out[2].Slot)
	out, err = s.Preview(t.Context(), "yearly", scheduler.PreviewOptions{From: time.Date(9999, 6, 1, 0, 0, 0, 0, time.UTC), N: 2})
	require.NoError(t, err)
	require.Len(t, out, 2)
	assert.Equal(t, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), out[0].Slot)

	end := time.UnixMilli(math.MaxInt64 - 1).UTC()
	out, err = s.Preview(t.Context(), "hourly", scheduler.PreviewOptions{From: end.Add(-3 * time.Hour), N: 10})
	require.NoError(t, err)
	assert.LessOrEqual(t, len(out), 3, "no slot past the range")
	require.NotEmpty(t, out)
	assert.Equal(t, scheduler.PreviewLast, out[len(out)-1].Notes[0].Kind, "the last slot says so")

	out, err = s.Preview(t.Context(), "ended", scheduler.PreviewOptions{N: 10})
	require.NoError(t, err)
	assert.Empty(t, out, "an end already past: no slot")
}

// runCountHider is a memory backend whose run store counts runs but cannot say
// how many it counted.
type runCountHider struct{ *memory.Backend }

func (h runCountHider) Runs() backend.RunStore {
	return struct {
		backend.RunStore
		backend.RunCounter
	}{h.Backend.Runs(), h.Backend.Runs().(backend.RunCounter)}
}

// The run limit: with a store that reads its count, the runs left are exact,
// also when From is later than now (the slots between use them up); without
// one, every slot may be past the limit until the limit's number of slots is
// listed.
func TestPreviewRunLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		noop := func(context.Context, scheduler.Run) error { return nil }
		s := newScheduler(t, mem, "A")
		require.NoError(t, s.Every("limited", time.Minute, noop, scheduler.WithMaxRuns(5)))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2*time.Minute + time.Second) // the slots of 00:00, 00:01 and 00:02 run
		synctest.Wait()

		out, err := s.Preview(t.Context(), "limited", scheduler.PreviewOptions{N: 5})
		require.NoError(t, err)
		var runs []bool
		for _, ps := range out {
			runs = append(runs, ps.Runs)
		}
		assert.Equal(t, []bool{true, true, false, false, false}, runs, "two of five runs left")
		assert.Equal(t, scheduler.PreviewLimit, out[2].Notes[0].Kind)

		later, err := s.Preview(t.Context(), "limited", scheduler.PreviewOptions{N: 2, From: time.Now().Add(time.Minute)})
		require.NoError(t, err)
		assert.Equal(t, out[1:3], later, "the slot between now and From uses up a run left")

		hidden := newScheduler(t, runCountHider{mem}, "B")
		require.NoError(t, hidden.Every("limited", time.Minute, noop, scheduler.WithMaxRuns(5)))
		out, err = hidden.Preview(t.Context(), "limited", scheduler.PreviewOptions{N: 6})
		require.NoError(t, err)
		for i, ps := range out[:5] {
			assert.True(t, ps.Runs, "slot %d", i)
			assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewMayLimit}, kinds(ps), "slot %d", i)
		}
		assert.Equal(t, []scheduler.PreviewKind{scheduler.PreviewLimit}, kinds(out[5]), "five slots before it use up the limit whatever was counted")
		require.NoError(t, s.Stop(t.Context()))
	})
}

// A run in progress under an exclusive overlap policy: the slots that fall
// before its timeout may be skipped, buffered or ask it to end, as the policy
// says; later slots have no note. The slots then end as the preview said: the
// run in progress lasts until its timeout (or until asked to end), the
// others return at once.
func TestPreviewOverlap(t *testing.T) {
	cases := []struct {
		policy scheduler.OverlapPolicy
		// notes are the kinds of the three slots after the running one, and
		// statuses how they end
		notes    [][]scheduler.PreviewKind
		statuses []scheduler.Status
	}{
		{scheduler.OverlapSkip,
			[][]scheduler.PreviewKind{{scheduler.PreviewMaySkip}, {scheduler.PreviewMaySkip}, nil},
			[]scheduler.Status{scheduler.StatusSkipped, scheduler.StatusSkipped, scheduler.StatusOK}},
		{scheduler.OverlapBufferOne,
			[][]scheduler.PreviewKind{{scheduler.PreviewMayBuffer}, {scheduler.PreviewMaySkip}, nil},
			[]scheduler.Status{scheduler.StatusOK, scheduler.StatusSkipped, scheduler.StatusOK}},
		{scheduler.OverlapCancelOther,
			[][]scheduler.PreviewKind{{scheduler.PreviewMayCancel}, nil, nil},
			[]scheduler.Status{scheduler.StatusOK, scheduler.StatusOK, scheduler.StatusOK}},
	}
	for _, tc := range cases {
		t.Run(tc.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler(t, memory.New(), "A")
				first := time.Now().UTC()
				handler := func(ctx context.Context, r scheduler.Run) error {
					if r.Slot.Equal(first) {
						<-ctx.Done() // until its timeout, or asked to end
						return ctx.Err()
					}
					return nil
				}
				require.NoError(t, s.Every("long", time.Minute, handler, scheduler.WithOverlap(tc.policy),
					scheduler.WithTimeout(150*time.Second), scheduler.WithHistory(1000, 0)))
				require.NoError(t, s.Start(t.Context()))
				time.Sleep(30 * time.Second) // the slot of 00:00 runs
				synctest.Wait()

				out, err := s.Preview(t.Context(), "long", scheduler.PreviewOptions{N: 3})
				require.NoError(t, err)
				var got [][]scheduler.PreviewKind
				for _, ps := range out {
					got = append(got, kinds(ps))
					assert.True(t, ps.Runs, "a may note leaves the slot running")
				}
				require.Equal(t, tc.notes, got, "%v", out)
				assert.Contains(t, out[0].Notes[0].Text, "the run of slot 2000-01-01T00:00:00Z in progress (on A)")

				time.Sleep(10 * time.Minute)
				synctest.Wait()
				hist := statuses(t, s, "long")
				for i, ps := range out {
					assert.Equal(t, tc.statuses[i], hist[ps.Slot.Unix()], "slot %d (%v)", i, kinds(ps))
				}
				require.NoError(t, s.Stop(t.Context()))
			})
		})
	}
}

// An entry's preview: its own spread offset, its end bound and the time it
// was stored; paused, none of its slots runs.
func TestPreviewEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "A")
		noop := func(context.Context, scheduler.Run) error { return nil }
		require.NoError(t, s.Declare("tenants", noop, scheduler.WithSpread(time.Minute)))
		now := time.Now().UTC()
		e, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Hour, End: now.Add(3 * time.Hour)})
		require.NoError(t, err)
		out, err := s.Preview(t.Context(), "tenants", scheduler.PreviewOptions{Entry: "acme", N: 5})
		require.NoError(t, err)
		require.Len(t, out, 3, "the end bound leaves three slots")
		offset := scheduler.SpreadOffset(backend.EntryRunName("tenants", "acme"), time.Minute)
		require.Positive(t, offset, "the test needs a spread that moves the slots")
		for i, ps := range out {
			// The slot of 00:00, moved after the entry was stored, is its first.
			assert.Equal(t, now.Add(time.Duration(i)*time.Hour), ps.Nominal)
			assert.Equal(t, ps.Nominal.Add(offset), ps.Slot, "moved by the entry's own offset")
			assert.True(t, ps.Runs)
		}
		assert.Contains(t, kinds(out[2]), scheduler.PreviewLast)

		e.Paused = true
		_, err = s.UpdateEntry(t.Context(), "tenants", "acme", e.EntrySpec, e.Revision, scheduler.ChangedBy("ops"))
		require.NoError(t, err)
		out, err = s.Preview(t.Context(), "tenants", scheduler.PreviewOptions{Entry: "acme", N: 5})
		require.NoError(t, err)
		require.Len(t, out, 3)
		for i, ps := range out {
			assert.False(t, ps.Runs, "slot %d", i)
			assert.Contains(t, kinds(ps), scheduler.PreviewEntryPaused)
			assert.Contains(t, ps.Notes[len(ps.Notes)-1].Text, "changed by ops")
		}
	})
}
