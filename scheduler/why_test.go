package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/anarchontest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// whyOf is Why of slot of job (or of entry, when given), required to succeed.
func whyOf(t *testing.T, s *scheduler.Scheduler, job string, slot time.Time, entry ...string) scheduler.WhyReport {
	t.Helper()
	o := scheduler.WhyOptions{Slot: slot}
	if len(entry) > 0 {
		o.Entry = entry[0]
	}
	r, err := s.Why(t.Context(), job, o)
	require.NoError(t, err)
	require.NotEmpty(t, r.Steps, "Why always says something")
	return r
}

// whyKinds lists the kinds of a report's steps.
func whyKinds(r scheduler.WhyReport) []scheduler.WhyKind {
	var out []scheduler.WhyKind
	for _, st := range r.Steps {
		out = append(out, st.Kind)
	}
	return out
}

// A holder that dies mid-run is taken over by a backup: while the dead holder
// still held its lease, Why said the run was live on it; then Why says the
// first attempt ran and was lost, and the second ran on the backup after the
// first's lease ended.
func TestWhyTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(90 * time.Second)
		f := anarchontest.Start(t, anarchontest.Config{Setup: func(s *scheduler.Scheduler) error {
			return s.Every("job", time.Hour, func(ctx context.Context, r scheduler.Run) error {
				if r.Attempt == 1 {
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}, scheduler.WithLease(10*time.Second))
		}})
		slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
		anarchontest.AdvanceTo(slot)
		first := f.Holder("job", slot)
		require.NotNil(t, first)
		first.Kill()
		other := f.Replica(0) // a replica alive to ask
		if other == first {
			other = f.Replica(1)
		}
		anarchontest.Advance(5 * time.Second)
		r := whyOf(t, other.Scheduler(), "job", slot)
		assert.Equal(t, []scheduler.WhyKind{scheduler.WhyRan, scheduler.WhyRunning}, whyKinds(r), "%+v", r.Steps)
		assert.True(t, r.Open)
		assert.Equal(t, scheduler.StatusRunning, r.Steps[0].Status)
		assert.Contains(t, r.Steps[1].Text, "running on "+first.Name()+" as attempt 1: its lease is live until 2000-01-01T01:00:10Z")

		anarchontest.Advance(time.Minute)
		r = whyOf(t, other.Scheduler(), "job", slot)
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyRan, scheduler.WhyTakeover}, whyKinds(r), "%+v", r.Steps)
		assert.False(t, r.Open)
		assert.Equal(t, first.Name(), r.Steps[0].Instance)
		assert.Equal(t, scheduler.StatusLost, r.Steps[0].Status)
		backup := r.Steps[1].Instance
		assert.NotEqual(t, first.Name(), backup)
		assert.Equal(t, scheduler.StatusOK, r.Steps[1].Status)
		assert.Equal(t, 2, r.Steps[1].Attempt)
		assert.Contains(t, r.Steps[1].Text, "ran on "+backup+" as attempt 2 after the lease of "+first.Name()+" ended (attempt 1 recorded lost")
		for _, st := range r.Steps {
			require.NotNil(t, st.Record, "each step is a record")
			assert.Equal(t, st.Attempt, st.Record.Attempt)
		}
	})
}

// The overlap policies: a slot skipped while another ran names that run; a
// buffered slot waits, then runs (and the one after it is skipped, the buffer
// full); a slot that asked an earlier run to end waits for it, and is late
// when that run outlasts its deadline.
func TestWhyOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		m := func(k int) time.Time { return t0.Add(time.Duration(k) * time.Minute) }
		long := func(d time.Duration, honour bool) scheduler.Handler {
			return func(ctx context.Context, r scheduler.Run) error {
				if !r.Slot.Equal(m(1)) {
					return nil
				}
				if honour {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return ctx.Err()
					}
					return nil
				}
				time.Sleep(d) // a handler that ignores its context
				return nil
			}
		}
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("skip", time.Minute, long(90*time.Second, true), scheduler.WithOverlap(scheduler.OverlapSkip)))
		require.NoError(t, s.Every("buffer", time.Minute, long(150*time.Second, true), scheduler.WithOverlap(scheduler.OverlapBufferOne)))
		require.NoError(t, s.Every("cancel", time.Minute, long(150*time.Second, false), scheduler.WithOverlap(scheduler.OverlapCancelOther)))
		time.Sleep(30 * time.Second)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(100 * time.Second) // 0:02:10
		synctest.Wait()

		r := whyOf(t, s, "buffer", m(2))
		assert.Equal(t, []scheduler.WhyKind{scheduler.WhyWaiting}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "waiting, buffered: stored by A to run once nothing else holds the job (overlap policy buffer-one)", r.Steps[0].Text)
		assert.True(t, r.Open)
		r = whyOf(t, s, "cancel", m(2))
		assert.Equal(t, []scheduler.WhyKind{scheduler.WhyWaiting}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "it asked the run of slot "+stamp(m(1))+" (on A) to end (overlap policy cancel-other)")
		r = whyOf(t, s, "cancel", m(1))
		assert.Equal(t, []scheduler.WhyKind{scheduler.WhyRan, scheduler.WhyRunning, scheduler.WhyCancelAsked}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[2].Text, "asked to end by slot "+stamp(m(2))+", from A")

		time.Sleep(3 * time.Minute) // 0:05:10
		require.NoError(t, s.Stop(t.Context()))
		r = whyOf(t, s, "skip", m(2))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhySkipped}, whyKinds(r), "%+v", r.Steps)
		assert.Regexp(t, `^skipped: another slot of the job held its lease \(overlap forbidden\); slot `+stamp(m(1))+
			` held the job then \(on A, attempt 1\) \(decided by A at \S+\)$`, r.Steps[0].Text)
		assert.False(t, r.Open)

		r = whyOf(t, s, "buffer", m(2))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyBuffered}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, scheduler.StatusOK, r.Steps[0].Status)
		assert.Contains(t, r.Steps[0].Text, "and started 1m30s after its slot, past its max lateness; ran on A as attempt 1: ended ok")
		r = whyOf(t, s, "buffer", m(3))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhySkipped}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "1 were buffered already (overlap policy buffer-one)")

		r = whyOf(t, s, "cancel", m(2))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyLate}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "late: the run of slot "+m(1).UTC().Format(time.RFC3339Nano)+
			" that it asked to end (overlap policy cancel-other) had not ended by the slot's deadline (decided by A at ")
		r = whyOf(t, s, "skip", m(4))
		assert.Equal(t, []scheduler.WhyKind{scheduler.WhyRan}, whyKinds(r), "a slot that simply ran")
		assert.Regexp(t, `^ran on A as attempt 1: ended ok$`, r.Steps[0].Text)
	})
}

// Every replica down: the slots that fell meanwhile are recorded missed by the
// first one back, the older ones of a long outage as one record; a backfill
// runs a missed slot as its next attempt.
func TestWhyMissedAndBackfill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		base := time.Now()
		m := func(k int) time.Time { return base.Add(time.Duration(k) * time.Minute) }
		noop := func(context.Context, scheduler.Run) error { return nil }
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("job", time.Minute, noop))
		require.NoError(t, a.Start(t.Context()))
		time.Sleep(4*time.Minute + 30*time.Second)
		require.NoError(t, a.Stop(t.Context()))
		time.Sleep(36 * time.Minute) // 0:05 … 0:40 fall with no replica up
		s := newScheduler(t, b, "B")
		require.NoError(t, s.Every("job", time.Minute, noop))
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2 * time.Minute) // 0:42:30

		r := whyOf(t, s, "job", m(30))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyMissed}, whyKinds(r), "%+v", r.Steps)
		assert.Regexp(t, `^missed: due while no instance could claim it \(recorded by B at \S+, once it could claim\)$`, r.Steps[0].Text)
		r = whyOf(t, s, "job", m(10))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyMissed}, whyKinds(r), "%+v", r.Steps)
		require.NotNil(t, r.Steps[0].Record)
		assert.True(t, m(5).Equal(r.Steps[0].Record.Slot), "the slot has no record of its own: %v", r.Steps[0].Record.Slot)
		assert.Contains(t, r.Steps[0].Text, "missed: the record of slot "+stamp(m(5))+" stands for it: one record for 15 slots due from")

		res, err := s.Backfill(t.Context(), "job", m(30), m(31))
		require.NoError(t, err)
		require.Len(t, res.Slots, 1)
		r = whyOf(t, s, "job", m(30))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyMissed, scheduler.WhyBackfill}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "backfilled on request (Backfill) after attempt 1 was recorded missed: ran on B as attempt 2: ended ok", r.Steps[1].Text)
		require.NoError(t, s.Stop(t.Context()))
	})
}

// A pause: the slots that fell while it held are recorded paused with its
// reason, and catch-up runs them once it ends; the run limit: a replica that
// starts after it was reached records its first slot past it.
func TestWhyPausedAndLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		t0 := time.Now()
		m := func(k int) time.Time { return t0.Add(time.Duration(k) * time.Minute) }
		noop := func(context.Context, scheduler.Run) error { return nil }
		a := newScheduler(t, b, "A")
		require.NoError(t, a.Every("paused", time.Minute, noop, scheduler.WithCatchUp(scheduler.CatchUpAll, time.Hour)))
		require.NoError(t, a.Every("limited", time.Minute, noop, scheduler.WithMaxRuns(1)))
		time.Sleep(30 * time.Second)
		require.NoError(t, a.Start(t.Context()))
		require.NoError(t, a.Pause(t.Context(), "paused", scheduler.PauseOptions{Reason: "migration", By: "ops", Until: m(2).Add(30 * time.Second)}))
		time.Sleep(time.Minute) // 0:01:30
		synctest.Wait()
		r := whyOf(t, a, "paused", m(1))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyPaused}, whyKinds(r), "%+v", r.Steps)
		assert.Regexp(t, `^paused: job paused by ops: migration \(recorded by A at \S+\)$`, r.Steps[0].Text)
		r = whyOf(t, a, "paused", m(2))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyNotDue}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "the job is paused now (job paused by ops: migration)")

		bs := newScheduler(t, b, "B")
		require.NoError(t, bs.Every("limited", time.Minute, noop, scheduler.WithMaxRuns(1)))
		require.NoError(t, bs.Start(t.Context()))
		time.Sleep(3 * time.Minute) // 0:04:30
		stopAll(t, []*scheduler.Scheduler{a, bs})

		r = whyOf(t, a, "paused", m(1))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyPaused, scheduler.WhyCatchUp}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "caught up once the pause ended (attempt 1 was recorded paused): ran on A as attempt 2: ended ok", r.Steps[1].Text)
		r = whyOf(t, a, "limited", m(0))
		assert.Equal(t, []scheduler.WhyKind{scheduler.WhyRan}, whyKinds(r), "the slot due at the start ran: %+v", r.Steps)
		r = whyOf(t, bs, "limited", m(1))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyLimit}, whyKinds(r), "%+v", r.Steps)
		assert.Regexp(t, `^past the run limit of 1: the job's run limit was reached \(decided by B at \S+\)$`, r.Steps[0].Text)
	})
}

// A failed attempt stores its retry, which Why says is pending, then the
// retry runs; a slot that never ended ok is judged past its deadline.
func TestWhyRetryAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, memory.New(), "A")
		require.NoError(t, s.Every("retried", time.Hour, func(_ context.Context, r scheduler.Run) error {
			if r.Attempt == 1 {
				return errors.New("boom")
			}
			return nil
		}, scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 2, Backoff: 10 * time.Second})))
		require.NoError(t, s.Every("judged", time.Hour, func(context.Context, scheduler.Run) error { return errors.New("disk full") },
			scheduler.WithDeadline(30*time.Minute)))
		require.NoError(t, s.Start(t.Context()))
		slot := time.Date(2000, 1, 1, 1, 0, 0, 0, time.UTC)
		time.Sleep(time.Until(slot.Add(5 * time.Second)))
		synctest.Wait()
		r := whyOf(t, s, "retried", slot)
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyRan, scheduler.WhyRetryPending}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "ran on A as attempt 1: failed: boom", r.Steps[0].Text)
		assert.Contains(t, r.Steps[1].Text, "attempt 1 failed and stored a retry: any replica may claim attempt 2 from 2000-01-01T01:00:10Z")
		assert.True(t, r.Open)

		time.Sleep(time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		r = whyOf(t, s, "retried", slot)
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyRan, scheduler.WhyRetry}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "a retry after attempt 1 failed on A: boom; ran on A as attempt 2: ended ok", r.Steps[1].Text)
		assert.False(t, r.Open)
		r = whyOf(t, s, "judged", slot)
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyRan, scheduler.WhyDeadline}, whyKinds(r), "%+v", r.Steps)
		assert.Regexp(t, `^deadline missed, judged by A at \S+: not ended ok by its deadline 2000-01-01T01:30:00Z \(30m0s after the slot\): `, r.Steps[1].Text)
	})
}

// A manual run says who asked; an entry's slot is its own; a slot nobody
// decided, one not due, one that is due, one older than the history keeps and
// an instant that is no slot are each said so. Bad input is refused at once.
func TestWhyManualAndNothingStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		t0 := time.Now()
		m := func(k int) time.Time { return t0.Add(time.Duration(k) * time.Minute) }
		noop := func(context.Context, scheduler.Run) error { return nil }
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Every("job", time.Minute, noop, scheduler.WithHistory(5, 0)))
		require.NoError(t, s.Declare("tenants", noop))
		time.Sleep(30 * time.Second)
		require.NoError(t, s.Start(t.Context()))
		_, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Minute})
		require.NoError(t, err)
		time.Sleep(10 * time.Minute) // 0:10:30
		rec, err := s.RunNow(t.Context(), "job", scheduler.RequestedBy("ana"))
		require.NoError(t, err)

		r := whyOf(t, s, "job", rec.Slot)
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyManual}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "manual run requested by ana: ran on A as attempt 1: ended ok", r.Steps[0].Text)
		r = whyOf(t, s, "tenants", m(9), "acme")
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyRan}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "acme", r.Entry)
		assert.Equal(t, "acme", r.Steps[0].Record.Entry)
		_, err = s.AddEntry(t.Context(), "tenants", "idle", scheduler.EntrySpec{Every: time.Minute, Paused: true})
		require.NoError(t, err)
		r = whyOf(t, s, "tenants", m(12), "idle")
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyNotDue}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "; the schedule entry is paused now (changed by A at ")
		r = whyOf(t, s, "job", m(1))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyBeyondHistory}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "no record in the 5 newest records, which reach back to slot ")
		assert.Contains(t, r.Steps[0].Text, "the slot is older than those: the history keeps 5 records per job (WithHistory)")
		assert.False(t, r.Reached)
		r = whyOf(t, s, "job", m(12))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyNotDue}, whyKinds(r), "%+v", r.Steps)
		assert.True(t, r.Open)
		r = whyOf(t, s, "job", m(1).Add(30*time.Second))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyNotASlot}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, `this instant is not a slot of job "job", and no manual run has it; the nearest slots are `+stamp(m(1))+" and "+stamp(m(2)), r.Steps[0].Text)
		require.NoError(t, s.Stop(t.Context()))

		// A job declared here that no replica runs.
		idle := newScheduler(t, b, "C")
		require.NoError(t, idle.Every("idle", time.Minute, noop))
		r = whyOf(t, idle, "idle", m(10))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyDue}, whyKinds(r), "%+v", r.Steps)
		assert.Equal(t, "due and not decided yet: a replica may still claim it until "+stamp(m(11))+" (its max lateness)", r.Steps[0].Text)
		r = whyOf(t, idle, "idle", m(5))
		require.Equal(t, []scheduler.WhyKind{scheduler.WhyNone}, whyKinds(r), "%+v", r.Steps)
		assert.Contains(t, r.Steps[0].Text, "no decision stored: the history holds no record of this slot. ")
		assert.Contains(t, r.Steps[0].Text, "the history keeps 100 records per job (WithHistory). History (anarchon history) lists what is kept")
		assert.True(t, r.Reached)

		ctx := t.Context()
		for _, c := range []struct {
			job  string
			o    scheduler.WhyOptions
			want error
		}{
			{"nope", scheduler.WhyOptions{Slot: m(1)}, scheduler.ErrJobNotFound},
			{"tenants", scheduler.WhyOptions{Slot: m(1), Entry: "nope"}, scheduler.ErrEntryNotFound},
			{"job", scheduler.WhyOptions{}, scheduler.ErrInvalidOption},
			{"job", scheduler.WhyOptions{Slot: m(1).Add(time.Microsecond)}, scheduler.ErrInvalidOption},
			{"job", scheduler.WhyOptions{Slot: time.Date(300_000_000, 1, 1, 0, 0, 0, 0, time.UTC)}, scheduler.ErrInvalidOption},
		} {
			_, err := s.Why(ctx, c.job, c.o)
			assert.ErrorIs(t, err, c.want, "%s %+v", c.job, c.o)
		}
	})
}

// stamp writes t as Why's sentences do.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.999Z07:00") }
