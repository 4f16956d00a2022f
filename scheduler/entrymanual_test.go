package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// RunEntryNow runs the entry's handler with its payload as a manual run, records
// it in the entry's history (not the job's), and names the entry in the record,
// the handler's Run and the events.
func TestRunEntryNowRunsTheEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		var got atomic.Pointer[scheduler.Run]
		var events []scheduler.Event
		handler := func(ctx context.Context, r scheduler.Run) error {
			got.Store(&r)
			return nil
		}
		s := newScheduler(t, b, "A", func(c *scheduler.Config) {
			c.OnEvent = func(e scheduler.Event) {
				if e.Manual {
					events = append(events, e)
				}
			}
		})
		require.NoError(t, s.Declare("tenants", handler, scheduler.WithOverlap(scheduler.OverlapSkip)))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		_, err := s.AddEntry(t.Context(), "tenants", "acme", scheduler.EntrySpec{Every: time.Hour, Payload: []byte("p-acme"), Paused: true})
		require.NoError(t, err)

		rec, err := s.RunEntryNow(t.Context(), "tenants", "acme", scheduler.RequestedBy("ana"))
		require.NoError(t, err, "a paused entry runs when asked, as a paused job's RunNow does")
		assert.Equal(t, "tenants", rec.Job)
		assert.Equal(t, "acme", rec.Entry)
		assert.True(t, rec.Manual)
		assert.Equal(t, "ana", rec.RequestedBy)
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		r := got.Load()
		require.NotNil(t, r)
		assert.Equal(t, "tenants", r.Job)
		assert.Equal(t, "acme", r.Entry)
		assert.Equal(t, "p-acme", string(r.Payload))
		assert.True(t, r.Manual)

		hist, err := s.EntryHistory(t.Context(), "tenants", "acme", 10)
		require.NoError(t, err)
		require.Len(t, hist, 1)
		assert.True(t, hist[0].Manual)
		assert.Equal(t, "ana", hist[0].RequestedBy)
		assert.Equal(t, "acme", hist[0].Entry)
		own, err := s.History(t.Context(), "tenants", 10)
		require.NoError(t, err)
		assert.Empty(t, own, "the job's own history holds none of its entries' runs")
		require.NotEmpty(t, events)
		for _, e := range events {
			assert.Equal(t, "tenants", e.Job)
			assert.Equal(t, "acme", e.Entry, "event %s", e.Kind)
		}
	})
}

func TestRunEntryNowRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		release := make(chan struct{})
		var manual atomic.Int32
		handler := func(ctx context.Context, r scheduler.Run) error {
			if r.Manual {
				manual.Add(1)
				<-release
			}
			return nil
		}
		s := newScheduler(t, b, "A")
		require.NoError(t, s.Declare("tenants", handler, scheduler.WithOverlap(scheduler.OverlapSkip), scheduler.WithMaxManualRuns(2)))
		require.NoError(t, s.Every("other", time.Hour, handler))
		require.NoError(t, s.Start(t.Context()))
		defer func() { require.NoError(t, s.Stop(context.Background())) }()
		for _, id := range []string{"a", "b", "c"} {
			_, err := s.AddEntry(t.Context(), "tenants", id, scheduler.EntrySpec{Every: time.Hour})
			require.NoError(t, err)
		}

		_, err := s.RunEntryNow(t.Context(), "tenants", "nobody")
		assert.ErrorIs(t, err, scheduler.ErrEntryNotFound)
		_, err = s.RunEntryNow(t.Context(), "nojob", "a")
		assert.ErrorIs(t, err, scheduler.ErrJobNotFound)
		_, err = s.RunEntryNow(t.Context(), "tenants", "bad\x00id")
		assert.ErrorIs(t, err, scheduler.ErrInvalidEntry)
		_, err = s.RunEntryNow(t.Context(), "other", "a")
		assert.ErrorIs(t, err, scheduler.ErrEntryNotFound, "a job without that entry")

		done := make(chan error, 3)
		go func() { _, err := s.RunEntryNow(context.Background(), "tenants", "a"); done <- err }()
		synctest.Wait()
		_, err = s.RunEntryNow(t.Context(), "tenants", "a")
		assert.ErrorIs(t, err, scheduler.ErrJobBusy, "the entry's own run holds its lease (overlap skip)")
		assert.ErrorContains(t, err, `entry "a" of "tenants"`)
		go func() { _, err := s.RunEntryNow(context.Background(), "tenants", "b"); done <- err }()
		synctest.Wait()
		assert.Equal(t, int32(2), manual.Load(), "another entry's run is not kept out by the first: overlap is per entry")
		_, err = s.RunEntryNow(t.Context(), "tenants", "c")
		assert.ErrorIs(t, err, scheduler.ErrTooManyManualRuns, "the job's manual-run limit counts its entries' manual runs")
		close(release)
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})
}

// An entry added on one instance is run at once on another: RunEntryNow waits
// for the view to follow an entry the store has.
func TestRunEntryNowWaitsForTheViewToFollowANewEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		runs := newEntryRuns()
		fleet := startFleet(t, b, 2, func(s *scheduler.Scheduler) {
			require.NoError(t, s.Declare("tenants", runs.handler))
		})
		_, err := fleet[0].AddEntry(t.Context(), "tenants", "new", scheduler.EntrySpec{Every: time.Hour, Payload: []byte("x")})
		require.NoError(t, err)
		rec, err := fleet[1].RunEntryNow(t.Context(), "tenants", "new")
		require.NoError(t, err)
		assert.Equal(t, "i1", rec.Instance)
		assert.Equal(t, "x", runs.payloads["new"])
	})
}
