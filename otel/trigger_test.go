package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/scheduler"
)

// A trigger sent through a fleet.Client with ClientOption to a replica served
// with ServeOption, over a real nats-server, starts a run whose span is linked
// to the span of the caller's context (the client and the replica trace with
// providers of their own, as two processes do). A trigger whose context has no
// span starts a run whose span links to nothing.
func TestTriggerLinksTheRunToTheCallersSpan(t *testing.T) {
	setPropagator(t, propagation.TraceContext{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ns := natstest.Server(t, embedded.Options{})

	replicaTP, replicaSpans := recorder(t)
	s := newScheduler(t, memory.New(), "replica-a", replicaTP)
	// No scheduled slot (one due at Start, in the first minute after 00:00 UTC,
	// would be a span more): the runs are the triggers'.
	require.NoError(t, s.Every("reindex", 24*time.Hour, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithStartAt(time.Now().Add(24*time.Hour))))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	svc, err := fleet.Serve(ctx, natstest.Conn(t, ns), s, anotel.ServeOption())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })

	clientTP, _ := recorder(t)
	client, err := fleet.NewClient(natstest.Conn(t, ns), anotel.ClientOption())
	require.NoError(t, err)
	callCtx, caller := clientTP.Tracer("operator").Start(ctx, "trigger reindex")
	r, err := client.Trigger(callCtx, "reindex", fleet.TriggerRequest{By: "ana", Wait: true})
	caller.End()
	require.NoError(t, err)
	require.Equal(t, fleet.StateFinished, r.State)

	spans := runSpans(replicaSpans)
	require.Len(t, spans, 1)
	run := spans[0]
	assert.Equal(t, anotel.KindManual, attrs(run)[anotel.AttrKind].AsString())
	require.Len(t, run.Links(), 1, "the run's span is linked to the trigger's")
	link := run.Links()[0].SpanContext
	assert.Equal(t, caller.SpanContext().TraceID(), link.TraceID())
	assert.Equal(t, caller.SpanContext().SpanID(), link.SpanID())
	assert.True(t, link.IsRemote(), "it came over NATS")
	assert.False(t, run.Parent().IsValid(), "linked, not a child: the run's trace is its own")
	assert.NotEqual(t, caller.SpanContext().TraceID(), run.SpanContext().TraceID())

	_, err = client.Trigger(ctx, "reindex", fleet.TriggerRequest{Wait: true})
	require.NoError(t, err)
	spans = runSpans(replicaSpans)
	require.Len(t, spans, 2)
	assert.Empty(t, spans[1].Links(), "a trigger without a span links the run to nothing")
}

// Inject writes the W3C headers in lower case; Extract reads them in any case,
// and ignores what does not parse.
func TestInjectAndExtract(t *testing.T) {
	setPropagator(t, propagation.TraceContext{})
	tp, _ := recorder(t)
	ctx, span := tp.Tracer("t").Start(context.Background(), "caller")
	defer span.End()
	h := nats.Header{}
	anotel.Inject(ctx, h)
	require.NotEmpty(t, h.Get("traceparent"), "headers: %v", h)

	got := trace.SpanContextFromContext(anotel.Extract(context.Background(), h))
	assert.Equal(t, span.SpanContext().TraceID(), got.TraceID())
	assert.Equal(t, span.SpanContext().SpanID(), got.SpanID())

	upper := nats.Header{"Traceparent": h["traceparent"]}
	got = trace.SpanContextFromContext(anotel.Extract(context.Background(), upper))
	assert.Equal(t, span.SpanContext().SpanID(), got.SpanID(), "read in any case")

	for _, bad := range []nats.Header{nil, {}, {"traceparent": {"00-not-a-trace-01"}}, {"traceparent": {""}}} {
		got = trace.SpanContextFromContext(anotel.Extract(context.Background(), bad))
		assert.False(t, got.IsValid(), "%v", bad)
	}
	none := nats.Header{}
	anotel.Inject(context.Background(), none)
	assert.Empty(t, none, "no span, no header")
}
