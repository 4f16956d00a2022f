package jetstream

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// newBackend returns an initialised backend on js.
func newBackend(t testing.TB, js natsjs.JetStream, opts ...Option) *Backend {
	t.Helper()
	b, err := New(js, opts...)
	require.NoError(t, err)
	require.NoError(t, b.Init(ctxFor(t)))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// ctxFor returns a context that ends with the test or after 30s.
func ctxFor(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// limits returns the JobLimits of a test job.
func limits(job string) backend.JobLimits {
	return backend.JobLimits{
		Job: job, Schedule: "every 1s", Interval: time.Second, MaxLate: time.Second,
		Retention: backend.Retention{Size: 50},
	}
}

func claimIn(job string, slot time.Time, token, instance string) backend.ClaimInput {
	return backend.ClaimInput{Job: job, Slot: slot, Token: token, Instance: instance, Attempt: 1, At: time.Now(), HistorySize: 50}
}

// logBuffer is a slog handler target that tests can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// retainedJob starts a server with a backend on it and prepares a job called name
// (made unique by jobName) that keeps keep.
func retainedJob(t *testing.T, name string, keep backend.Retention) (natsjs.JetStream, *Backend, backend.JobLimits, context.Context) {
	t.Helper()
	js := natstest.JetStream(t, natstest.Conn(t, natstest.Server(t, embedded.Options{})))
	ctx := ctxFor(t)
	b := newBackend(t, js)
	l := limits(jobName(name))
	l.Retention = keep
	require.NoError(t, b.PrepareJob(ctx, l))
	return js, b, l, ctx
}
