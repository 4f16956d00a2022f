package metrics_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

// TestWithScheduler runs a real scheduler on the memory backend, with one job that
// succeeds and one that fails, and checks what the metrics say about them.
func TestWithScheduler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := metrics.Wire(reg)
		require.NoError(t, err)
		var hooked atomic.Int64
		s, err := scheduler.New(scheduler.Config{
			Backend:  memory.New(),
			Instance: "replica-1",
			OnEvent:  metrics.Chain(m.OnEvent, func(scheduler.Event) { hooked.Add(1) }),
		})
		require.NoError(t, err)

		var okRuns, failRuns atomic.Int64
		require.NoError(t, s.Every("report", time.Second, func(ctx context.Context, _ scheduler.Run) error {
			okRuns.Add(1)
			time.Sleep(100 * time.Millisecond) // fake time: the run lasts exactly 100ms
			return nil
		}))
		require.NoError(t, s.Every("flaky", time.Second, func(context.Context, scheduler.Run) error {
			failRuns.Add(1)
			return errors.New("upstream unavailable")
		}))

		start := time.Now() // the bubble starts on a whole second: the first slot is now
		require.Zero(t, start.UnixMilli()%1000)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(2500 * time.Millisecond) // slots start, start+1s, start+2s
		synctest.Wait()

		require.EqualValues(t, 3, okRuns.Load())
		require.EqualValues(t, 3, failRuns.Load())
		runs := func(job, status, manual string) float64 {
			return value(t, reg, "anarchon_runs_total", "job_name", job, "status", status, "manual", manual)
		}
		assert.Equal(t, 3.0, runs("report", "ok", "false"))
		assert.Equal(t, 0.0, runs("report", "error", "false"))
		assert.Equal(t, 3.0, runs("flaky", "error", "false"))
		assert.Equal(t, 0.0, runs("flaky", "ok", "false"))
		assert.Equal(t, 3.0, value(t, reg, "anarchon_claims_total", "job_name", "report", "outcome", "won"))

		lastSlot := start.Add(2 * time.Second)
		assert.Equal(t, unix(lastSlot.Add(100*time.Millisecond)),
			value(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "report"), "the last run finished 100ms after its slot")
		assert.Nil(t, find(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "flaky"), "a job that never succeeded has no last success")
		for _, job := range []string{"report", "flaky"} {
			assert.Equal(t, unix(start.Add(3*time.Second)), value(t, reg, "anarchon_next_slot_timestamp_seconds", "job_name", job), job)
			assert.Equal(t, 0.0, value(t, reg, "anarchon_running_handlers", "job_name", job), job)
		}
		dur := find(t, reg, "anarchon_run_duration_seconds", "job_name", "report")
		require.NotNil(t, dur)
		assert.EqualValues(t, 3, dur.GetHistogram().GetSampleCount())
		assert.InDelta(t, 0.3, dur.GetHistogram().GetSampleSum(), 1e-9)
		lag := find(t, reg, "anarchon_slot_lag_seconds", "job_name", "report")
		require.NotNil(t, lag)
		assert.EqualValues(t, 3, lag.GetHistogram().GetSampleCount())
		assert.Zero(t, lag.GetHistogram().GetSampleSum(), "no jitter, no delay: every run started on its slot")

		// A run in progress shows in running_handlers.
		time.Sleep(550 * time.Millisecond) // start+3.05s: the slot at start+3s is running
		synctest.Wait()
		assert.Equal(t, 1.0, value(t, reg, "anarchon_running_handlers", "job_name", "report"))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 0.0, value(t, reg, "anarchon_running_handlers", "job_name", "report"))

		// A manual run counts under manual="true" and adds no slot lag.
		rec, err := s.RunNow(t.Context(), "report")
		require.NoError(t, err)
		require.Equal(t, scheduler.StatusOK, rec.Status)
		assert.Equal(t, 1.0, runs("report", "ok", "true"))
		assert.Equal(t, 4.0, runs("report", "ok", "false"))
		assert.Equal(t, unix(rec.FinishedAt), value(t, reg, "anarchon_last_success_timestamp_seconds", "job_name", "report"))
		lag = find(t, reg, "anarchon_slot_lag_seconds", "job_name", "report")
		assert.EqualValues(t, 4, lag.GetHistogram().GetSampleCount())

		require.NoError(t, s.Stop(t.Context()))
		assert.Positive(t, hooked.Load(), "the chained hook saw the events too")
	})
}

func unix(t time.Time) float64 { return float64(t.UnixMilli()) / 1e3 }
