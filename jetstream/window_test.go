package jetstream

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

func TestFitWindow(t *testing.T) {
	cases := []struct {
		name string
		job  backend.JobLimits
		want time.Duration
	}{
		{"every 2s, the scheduler's defaults", backend.JobLimits{MaxLate: 2 * time.Second, ClockSkew: 2 * time.Second, Lease: 30 * time.Second, CallTimeout: 10 * time.Second}, 44 * time.Second},
		{"the floor", backend.JobLimits{MaxLate: time.Second}, MinFittedWindow},
		{"rounded up to a second", backend.JobLimits{Jitter: 20 * time.Second, MaxLate: 10*time.Second + time.Millisecond, CallTimeout: 10 * time.Second}, 41 * time.Second},
		{"an hour of lateness", backend.JobLimits{MaxLate: time.Hour, ClockSkew: 2 * time.Second, Lease: 30 * time.Second, CallTimeout: 10 * time.Second}, time.Hour + 42*time.Second},
		{"catch-up reaches back its window", backend.JobLimits{MaxLate: 2 * time.Second, CatchUp: backend.CatchUpAll, CatchUpWindow: time.Hour, ClockSkew: 2 * time.Second, Lease: 30 * time.Second, CallTimeout: 10 * time.Second}, time.Hour + 42*time.Second},
		{"the latest missed slot too", backend.JobLimits{MaxLate: 2 * time.Second, CatchUp: backend.CatchUpLatest, CatchUpWindow: 10 * time.Minute, ClockSkew: 2 * time.Second}, 10*time.Minute + 2*time.Second},
		{"a catch-up window below max lateness", backend.JobLimits{Jitter: time.Second, MaxLate: 2 * time.Minute, CatchUp: backend.CatchUpAll, CatchUpWindow: time.Minute}, 2*time.Minute + time.Second},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, FitWindow(c.job), c.name)
	}
}

// streamWindow is the duplicate window of job's stream on the server.
func streamWindow(t *testing.T, b *Backend, job string) time.Duration {
	t.Helper()
	info, err := b.cached(job).stream.Info(ctxFor(t))
	require.NoError(t, err)
	return info.Config.Duplicates
}

// TestFittedWindowOfScheduledJobs registers jobs with the scheduler's defaults: an
// Every(2s) job's window is under a minute, and a job that may start 20 minutes
// late, refused by a fixed window, gets one wide enough.
func TestFittedWindowOfScheduledJobs(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	b, err := NewLeased(js, memory.NewRunStore(backend.SystemClock{}))
	require.NoError(t, err)
	sc, err := scheduler.New(scheduler.Config{Backend: b, Instance: "a"})
	require.NoError(t, err)
	noop := func(context.Context, scheduler.Run) error { return nil }
	fast, late := jobName("every-2s"), jobName("late-20m")
	require.NoError(t, sc.Every(fast, 2*time.Second, noop))
	require.NoError(t, sc.Every(late, time.Hour, noop, scheduler.WithMaxLate(20*time.Minute)))
	require.NoError(t, sc.Start(ctxFor(t)))
	t.Cleanup(func() { _ = sc.Stop(context.Background()) })

	w := streamWindow(t, b.Backend, fast)
	assert.LessOrEqual(t, w, time.Minute)
	// 2s (max lateness, the interval) + 2s skew + 30s lease + 10s call.
	assert.Equal(t, 44*time.Second, w)
	assert.Greater(t, streamWindow(t, b.Backend, late), 20*time.Minute+scheduler.DefaultMaxClockSkew)

	// A fixed window refuses the late job, naming the terms.
	fixed, err := New(js, WithDedupeWindow(10*time.Minute))
	require.NoError(t, err)
	sc2, err := scheduler.New(scheduler.Config{Backend: fixed, Instance: "b"})
	require.NoError(t, err)
	err = sc2.Every(late, time.Hour, noop, scheduler.WithMaxLate(20*time.Minute))
	require.ErrorIs(t, err, scheduler.ErrWindowTooShort)
}

// TestFittedWindowOnlyWidens: a fitted window never narrows a stream's (one set by
// an older release's fixed default, or by an instance that fits it wider), so a
// fleet whose instances disagree does not change the stream back and forth; a
// window the job or backend sets is applied both ways.
func TestFittedWindowOnlyWidens(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	ctx := ctxFor(t)
	job := jobName("widen")
	prepare := func(l backend.JobLimits, opts ...Option) (*Backend, time.Duration) {
		t.Helper()
		b := newBackend(t, js, opts...)
		require.NoError(t, b.PrepareJob(ctx, l))
		return b, streamWindow(t, b, l.Job)
	}
	fitted := limits(job)
	fitted.ClockSkew, fitted.Lease, fitted.CallTimeout = 2*time.Second, 30*time.Second, 10*time.Second
	require.Equal(t, 43*time.Second, FitWindow(fitted))

	_, w := prepare(fitted, WithDedupeWindow(10*time.Minute)) // an older release's default
	require.Equal(t, 10*time.Minute, w)
	for range 3 {
		b, w := prepare(fitted)
		assert.Equal(t, 10*time.Minute, w, "a fitted window does not narrow the stream")
		assert.Equal(t, 10*time.Minute, b.cached(job).dupWindow(), "the backend works with the stream's window")
	}

	own := fitted
	own.DedupeWindow = 45 * time.Second
	_, w = prepare(own)
	assert.Equal(t, 45*time.Second, w, "a window the job sets narrows the stream")

	wider := fitted
	wider.MaxLate = 2 * time.Minute
	_, w = prepare(wider)
	assert.Equal(t, FitWindow(wider), w, "a fitted window wider than the stream's widens it")
	_, w = prepare(fitted)
	assert.Equal(t, FitWindow(wider), w, "and an instance that fits it narrower leaves it")
}

// TestWidenedWindowReachesEarlierInstances: an instance that prepared a job's
// stream before another widened it (another max lateness, say) learns the wider
// window from the server's update advisory, and stores its claims for it: a claim
// stored for less than the window is forgotten by a server restart inside it.
func TestWidenedWindowReachesEarlierInstances(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	ctx := ctxFor(t)
	job := jobName("widened")
	timing := func(maxLate time.Duration) backend.JobLimits {
		l := limits(job)
		l.Schedule, l.Interval, l.MaxLate = "every 1h", time.Hour, maxLate
		l.ClockSkew, l.Lease, l.CallTimeout = time.Second, 5*time.Second, 5*time.Second
		return l
	}
	a := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	require.NoError(t, a.PrepareJob(ctx, timing(time.Second)))
	require.Equal(t, MinFittedWindow, a.cached(job).dupWindow())
	b := newBackend(t, natstest.JetStream(t, natstest.Conn(t, s)))
	require.NoError(t, b.PrepareJob(ctx, timing(2*time.Minute)))
	window := streamWindow(t, b, job)
	require.Equal(t, FitWindow(timing(2*time.Minute)), window, "B widened the stream")

	require.Eventually(t, func() bool { return a.cached(job).dupWindow() == window },
		10*time.Second, 10*time.Millisecond, "A learns the window B set")
	slot := time.Now().Truncate(time.Hour)
	won, err := a.Claim(ctx, claimIn(job, slot, token(), "a"))
	require.NoError(t, err)
	require.True(t, won)
	m, err := a.cached(job).stream.GetLastMsgForSubject(ctx, a.cached(job).claimSubject(slot.UnixMilli()))
	require.NoError(t, err)
	ttl, err := time.ParseDuration(m.Header.Get(natsjs.MsgTTLHeader))
	require.NoError(t, err, "the claim's TTL header %q", m.Header.Get(natsjs.MsgTTLHeader))
	assert.GreaterOrEqual(t, ttl, window, "A's claim is stored for the whole window")
}
