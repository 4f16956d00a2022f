package integration

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/scheduler"
)

// Odd job names either work end to end on JetStream or are refused at registration.
func TestOddJobNamesEndToEnd(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	s := newSched(t, plainBackend(t, nc), "odd", nil)
	log := newLedger()
	names := []string{"with.dots.in.it", "with spaces", "a/b\\c", "wild*card", "full>wild", "ünïcödé-ジョブ", "UPPER_lower-09", strings.Repeat("kilo", 256)}
	for _, n := range names {
		require.NoError(t, s.Every(n, time.Second, log.handler), "%q", n)
	}
	err := s.Every(strings.Repeat("x", scheduler.MaxJobNameLen+1), time.Second, log.handler)
	assert.ErrorIs(t, err, scheduler.ErrInvalidJobName, "a name over 1 KiB is refused at registration")
	err = s.Every("tab\tname", time.Second, log.handler)
	assert.ErrorIs(t, err, scheduler.ErrInvalidJobName, "control characters are refused at registration")
	require.NoError(t, s.Start(ctxT(t, 20*time.Second)))
	sleepCtx(t, 2500*time.Millisecond)
	require.NoError(t, s.Stop(ctxT(t, 10*time.Second)))
	for _, n := range names {
		hist, err := s.History(ctxT(t, 5*time.Second), n, 10)
		require.NoError(t, err, "%q", n)
		if assert.NotEmpty(t, hist, "job %q ran and its history reads back", n) {
			assert.Equal(t, n, hist[0].Job)
			assert.Equal(t, scheduler.StatusOK, hist[0].Status)
		}
	}
}

func TestBadInputClearErrors(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	s := newSched(t, plainBackend(t, nc), "bad", nil)
	noop := func(context.Context, scheduler.Run) error { return nil }
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"interval 0", s.Every("i0", 0, noop), scheduler.ErrInvalidSchedule},
		{"interval 1ns", s.Every("i1", time.Nanosecond, noop), scheduler.ErrInvalidSchedule},
		{"malformed cron", s.Cron("c", "*/0 * * * *", noop), scheduler.ErrInvalidSchedule},
		{"nil handler", s.Every("nil", time.Second, nil), scheduler.ErrNilHandler},
		{"max late at the window", s.Every("w1", time.Hour, noop, scheduler.WithMaxLate(10*time.Minute), scheduler.WithDedupeWindow(10*time.Minute)), scheduler.ErrWindowTooShort},
		{"jitter + max late above the window", s.Every("w2", time.Hour, noop, scheduler.WithJitter(5*time.Minute), scheduler.WithMaxLate(6*time.Minute), scheduler.WithDedupeWindow(10*time.Minute)), scheduler.ErrWindowTooShort},
		{"history size 0", s.Every("h0", time.Second, noop, scheduler.WithHistory(0, 0)), scheduler.ErrInvalidOption},
		{"history size -1", s.Every("h1", time.Second, noop, scheduler.WithHistory(-1, 0)), scheduler.ErrInvalidOption},
	}
	for _, c := range cases {
		assert.ErrorIs(t, c.err, c.want, c.name)
	}
	// A 100-year interval is valid: its next slot is simply far away.
	require.NoError(t, s.Every("century", 100*365*24*time.Hour, noop))
	// A job that asks for a longer window can have a longer max lateness.
	require.NoError(t, s.Every("w3", time.Hour, noop, scheduler.WithMaxLate(20*time.Minute), scheduler.WithDedupeWindow(30*time.Minute)))
	require.NoError(t, s.Start(ctxT(t, 10*time.Second)))
	require.NoError(t, s.Stop(ctxT(t, 10*time.Second)))
}

func TestServerWithoutJetStream(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{DisableJetStream: true})
	nc := natstest.Conn(t, srv)
	s := newSched(t, plainBackend(t, nc), "nojs", nil)
	require.NoError(t, s.Every("j", time.Second, func(context.Context, scheduler.Run) error { return nil }))
	t0 := time.Now()
	err := s.Start(ctxT(t, 30*time.Second))
	require.Error(t, err)
	assert.Less(t, time.Since(t0), 15*time.Second, "fails fast, no hang")
	assert.Contains(t, err.Error(), "JetStream")
	t.Logf("Start on a server without JetStream: %v (after %v)", err, time.Since(t0).Round(time.Millisecond))
}

func TestForeignStreamAndMessages(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	j := natstest.JetStream(t, nc)
	// Someone else's stream where ours would be.
	_, err := j.CreateStream(ctxT(t, 5*time.Second), natsjs.StreamConfig{Name: "ANARCHON_taken", Subjects: []string{"theirs.>"}})
	require.NoError(t, err)
	s := newSched(t, plainBackend(t, nc), "foreign", nil)
	require.NoError(t, s.Every("taken", time.Second, func(context.Context, scheduler.Run) error { return nil }))
	err = s.Start(ctxT(t, 10*time.Second))
	require.Error(t, err, "an incompatible stream is an error at Start, never overwritten")
	assert.True(t, errors.Is(err, jetstream.ErrIncompatibleStream), "%v", err)
	assert.Contains(t, err.Error(), "ANARCHON_taken")
	info, err := j.Stream(ctxT(t, 5*time.Second), "ANARCHON_taken")
	require.NoError(t, err)
	assert.Equal(t, []string{"theirs.>"}, info.CachedInfo().Config.Subjects, "the user's stream is untouched")

	// Foreign and corrupt messages on a job's subjects are logged and skipped.
	var buf syncBuffer
	b, err := jetstream.New(j, jetstream.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	require.NoError(t, err)
	s2 := newSched(t, b, "reader", nil)
	log := newLedger()
	require.NoError(t, s2.Every("victim", time.Second, log.handler))
	require.NoError(t, s2.Start(ctxT(t, 10*time.Second)))
	sleepCtx(t, 1500*time.Millisecond)
	for _, subj := range []string{"anarchon.victim.result", "anarchon.victim.manual", "anarchon.victim.claim.123"} {
		for _, body := range [][]byte{[]byte("not json"), []byte(`{"v":99,"weird":true}`), {0xff, 0x00}} {
			_, err := j.Publish(ctxT(t, 5*time.Second), subj, body)
			require.NoError(t, err)
		}
	}
	sleepCtx(t, 1500*time.Millisecond)
	require.NoError(t, s2.Stop(ctxT(t, 10*time.Second)))
	hist, err := s2.History(ctxT(t, 5*time.Second), "victim", 50)
	require.NoError(t, err, "foreign data never breaks History")
	assert.NotEmpty(t, hist)
	for _, r := range hist {
		assert.Equal(t, "reader", r.Instance)
	}
	assert.Empty(t, log.duplicates("victim"), "the job kept running once per slot")
	assert.Contains(t, buf.String(), "level=WARN", "foreign records are logged")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
