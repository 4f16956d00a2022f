package otel_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/scheduler"
)

// recorder is a tracer provider whose ended spans are kept in memory.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// newScheduler is a scheduler on b whose runs tp traces.
func newScheduler(t *testing.T, b backend.Backend, instance string, tp trace.TracerProvider) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: instance,
		Middleware: []scheduler.Middleware{anotel.Middleware(tp)}})
	require.NoError(t, err)
	return s
}

// attrs are a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// runSpans are the ended spans of runs, in the order they ended.
func runSpans(sr *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if _, ok := attrs(s)[anotel.AttrJob]; ok {
			out = append(out, s)
		}
	}
	return out
}

// A scheduled run has one span, a root even when Start's context carries a
// span, with the run's attributes; the handler's context carries it, so the
// handler's own spans are its children.
func TestScheduledRunSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		s := newScheduler(t, memory.New(), "replica-a", tp)
		var inHandler trace.SpanContext
		require.NoError(t, s.Every("report", time.Hour, func(ctx context.Context, run scheduler.Run) error {
			inHandler = trace.SpanContextFromContext(ctx)
			_, child := tp.Tracer("handler").Start(ctx, "write report")
			child.End()
			return nil
		}))
		time.Sleep(30 * time.Minute) // 00:30, between slots
		startCtx, startSpan := tp.Tracer("app").Start(t.Context(), "start up")
		require.NoError(t, s.Start(startCtx))
		startSpan.End()
		time.Sleep(31 * time.Minute) // the slot at 01:00 ran
		require.NoError(t, s.Stop(t.Context()))

		spans := runSpans(sr)
		require.Len(t, spans, 1, "one span per attempt")
		run := spans[0]
		assert.Equal(t, "anarchon.run report", run.Name())
		assert.Equal(t, anotel.ScopeName, run.InstrumentationScope().Name)
		assert.False(t, run.Parent().IsValid(), "a run's span is a root, not a child of Start's span")
		assert.Empty(t, run.Links(), "a scheduled run links to nothing")
		a := attrs(run)
		assert.Equal(t, "report", a[anotel.AttrJob].AsString())
		assert.Equal(t, "2000-01-01T01:00:00.000Z", a[anotel.AttrSlot].AsString(), "synctest's clock starts at 2000-01-01")
		assert.Equal(t, int64(1), a[anotel.AttrAttempt].AsInt64())
		assert.Equal(t, "replica-a", a[anotel.AttrInstance].AsString())
		assert.Positive(t, a[anotel.AttrFence].AsInt64(), "the memory backend has leases: a fence")
		assert.Equal(t, anotel.KindScheduled, a[anotel.AttrKind].AsString())
		assert.Equal(t, anotel.OutcomeOK, a[anotel.AttrOutcome].AsString())
		assert.NotContains(t, a, anotel.AttrTakeoverOf, "a first attempt took nothing over")
		assert.NotContains(t, a, anotel.AttrEntry, "a run of the job's own schedule")
		assert.NotContains(t, a, anotel.AttrBackfill)
		assert.NotContains(t, a, anotel.AttrErrorType, "no error.type on success")
		assert.Equal(t, codes.Unset, run.Status().Code)

		assert.Equal(t, run.SpanContext(), inHandler, "the handler's context carries the run's span")
		var child sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			if s.Name() == "write report" {
				child = s
			}
		}
		require.NotNil(t, child)
		assert.Equal(t, run.SpanContext().SpanID(), child.Parent().SpanID(), "the handler's span is the run's child")
	})
}

// A run that does not end ok ends its span with an error status, its outcome,
// and the handler's error recorded.
func TestFailedRunSpans(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler scheduler.Handler
		opts    []scheduler.JobOption
		outcome string
		message string // in the status and the recorded exception
		errType string // error.type
	}{
		{
			name:    "error",
			handler: func(context.Context, scheduler.Run) error { return errors.New("disk full") },
			outcome: anotel.OutcomeError,
			message: "disk full",
			errType: "*errors.errorString",
		},
		{
			name:    "panic",
			handler: func(context.Context, scheduler.Run) error { panic("nil map") },
			outcome: anotel.OutcomeError,
			message: "scheduler: handler panicked: nil map",
			errType: anotel.ErrorTypePanic,
		},
		{
			name: "timeout",
			handler: func(ctx context.Context, _ scheduler.Run) error {
				<-ctx.Done()
				return context.Cause(ctx)
			},
			opts:    []scheduler.JobOption{scheduler.WithTimeout(5 * time.Second)},
			outcome: anotel.OutcomeTimeout,
			message: "scheduler: handler timed out after 5s",
			errType: anotel.ErrorTypeTimeout,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tp, sr := recorder(t)
				s := newScheduler(t, memory.New(), "A", tp)
				require.NoError(t, s.Every("sync", 24*time.Hour, tc.handler, tc.opts...))
				time.Sleep(time.Hour)
				require.NoError(t, s.Start(t.Context()))
				defer s.Stop(t.Context())
				_, err := s.RunNow(t.Context(), "sync")
				require.NoError(t, err)

				spans := runSpans(sr)
				require.Len(t, spans, 1)
				run := spans[0]
				assert.Equal(t, tc.outcome, attrs(run)[anotel.AttrOutcome].AsString())
				assert.Equal(t, tc.errType, attrs(run)["error.type"].AsString(), "error.type, by the semantic conventions' name")
				assert.Equal(t, anotel.KindManual, attrs(run)[anotel.AttrKind].AsString())
				assert.Equal(t, codes.Error, run.Status().Code)
				assert.Equal(t, tc.outcome+": "+tc.message, run.Status().Description)
				require.Len(t, run.Events(), 1, "the error is recorded")
				ev := run.Events()[0]
				assert.Equal(t, "exception", ev.Name)
				var msg string
				for _, kv := range ev.Attributes {
					if kv.Key == "exception.message" {
						msg = kv.Value.AsString()
					}
				}
				assert.Equal(t, tc.message, msg)
			})
		})
	}
}

// A takeover's span names the instance whose attempt it took over: the holder
// is stopped while its handler runs, its lease released, and the backup runs the
// slot as attempt 2.
func TestTakeoverSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		b := memory.New()
		started := make(chan string, 1)
		byName := map[string]*scheduler.Scheduler{}
		for _, id := range []string{"A", "B"} {
			s := newScheduler(t, b, id, tp)
			require.NoError(t, s.Every("job", time.Hour, func(ctx context.Context, run scheduler.Run) error {
				if run.Attempt == 1 {
					started <- run.Instance
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}, scheduler.WithLease(3*time.Second)))
			byName[id] = s
		}
		time.Sleep(30 * time.Minute)
		for _, s := range byName {
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(30 * time.Minute) // the slot at 01:00 starts on one of them
		holder := <-started
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_ = byName[holder].Stop(ctx) // the handler is cancelled and the lease released
		time.Sleep(10 * time.Second) // the backup took it over
		for _, s := range byName {
			require.NoError(t, s.Stop(t.Context()))
		}

		spans := runSpans(sr)
		require.Len(t, spans, 2, "both attempts have a span")
		first, second := attrs(spans[0]), attrs(spans[1])
		assert.Equal(t, int64(1), first[anotel.AttrAttempt].AsInt64())
		assert.Equal(t, holder, first[anotel.AttrInstance].AsString())
		assert.Equal(t, anotel.OutcomeCancelled, first[anotel.AttrOutcome].AsString(), "Stop cut the first attempt short")
		assert.NotContains(t, first, anotel.AttrTakeoverOf)
		assert.Equal(t, int64(2), second[anotel.AttrAttempt].AsInt64())
		assert.NotEqual(t, holder, second[anotel.AttrInstance].AsString())
		assert.Equal(t, holder, second[anotel.AttrTakeoverOf].AsString(), "the takeover names whose attempt it took over")
		assert.Equal(t, anotel.OutcomeOK, second[anotel.AttrOutcome].AsString())
		assert.Greater(t, second[anotel.AttrFence].AsInt64(), first[anotel.AttrFence].AsInt64())
		assert.Equal(t, first[anotel.AttrSlot], second[anotel.AttrSlot], "one slot")
	})
}

// With a nil provider the middleware uses the global one: without a global
// provider set, runs are traced by nothing and still run.
func TestMiddlewareWithoutProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := scheduler.New(scheduler.Config{Backend: memory.New(),
			Middleware: []scheduler.Middleware{anotel.Middleware(nil)}})
		require.NoError(t, err)
		ran := false
		require.NoError(t, s.Every("job", 24*time.Hour, func(ctx context.Context, _ scheduler.Run) error {
			ran = true
			return nil
		}))
		time.Sleep(time.Hour)
		require.NoError(t, s.Start(t.Context()))
		defer s.Stop(t.Context())
		rec, err := s.RunNow(t.Context(), "job")
		require.NoError(t, err)
		assert.Equal(t, scheduler.StatusOK, rec.Status)
		assert.True(t, ran)
	})
}
