package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// A job's limits carry every policy it was declared with, so that a fleet view
// can show them all: retries, manual runs, catch-up window, the dedupe window
// that applies, retention, pause after failures, buffer cap.
func TestJobLimitsCarryEveryPolicy(t *testing.T) {
	s := newScheduler(t, memory.New(), "A")
	noop := func(context.Context, scheduler.Run) error { return nil }
	require.NoError(t, s.Every("report", time.Hour, noop,
		scheduler.WithRetry(scheduler.RetryPolicy{Attempts: 3, MaxBackoff: time.Minute, Jitter: 0.1, Retryable: func(error) bool { return true }}),
		scheduler.WithMaxManualRuns(2), scheduler.WithCatchUp(scheduler.CatchUpAll, 3*time.Hour),
		scheduler.WithHistory(50, 24*time.Hour), scheduler.WithPauseAfterFailures(5),
		scheduler.WithOverlap(scheduler.OverlapBufferAll), scheduler.WithBufferCap(7)))
	require.NoError(t, s.Every("plain", time.Hour, noop))
	jobs := s.Jobs()
	require.Len(t, jobs, 2)
	l := jobs[0].JobLimits
	require.NotNil(t, l.Retry)
	assert.Equal(t, backend.RetryLimits{Attempts: 3, Backoff: scheduler.DefaultRetryBackoff, MaxBackoff: time.Minute, Jitter: 0.1, Filtered: true}, *l.Retry)
	assert.Equal(t, 2, l.MaxManual)
	assert.Equal(t, 3*time.Hour, l.CatchUpWindow)
	assert.Equal(t, backend.Retention{Size: 50, TTL: 24 * time.Hour}, l.Retention)
	assert.Equal(t, 5, l.PauseAfter)
	assert.Equal(t, 7, l.BufferCap)
	assert.Equal(t, memory.New().DedupeWindow(), l.Window, "the window that applies")
	p := jobs[1].JobLimits
	assert.Nil(t, p.Retry)
	assert.Equal(t, scheduler.DefaultMaxManualRuns, p.MaxManual)
	assert.Zero(t, p.PauseAfter)
}
