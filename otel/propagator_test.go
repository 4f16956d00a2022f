package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/scheduler"
)

// setPropagator sets the global propagator for the test, as a program does at
// start, and puts back the one before.
func setPropagator(t *testing.T, p propagation.TextMapPropagator) {
	t.Helper()
	before := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(p)
	t.Cleanup(func() { otel.SetTextMapPropagator(before) })
}

// b3AndBaggage is what a program on B3 (Zipkin) sets: B3's multiple headers
// and W3C baggage, and no traceparent.
func b3AndBaggage() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)), propagation.Baggage{})
}

// A program whose global propagator is B3 and baggage has its triggers carried
// in those headers over a real nats-server: the run's span is linked to the
// caller's, and the handler's context has the caller's baggage.
func TestTriggerWithAGlobalB3AndBaggagePropagator(t *testing.T) {
	setPropagator(t, b3AndBaggage())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ns := natstest.Server(t, embedded.Options{})

	replicaTP, replicaSpans := recorder(t)
	s := newScheduler(t, memory.New(), "replica-a", replicaTP)
	tenants := make(chan string, 1)
	require.NoError(t, s.Every("reindex", 24*time.Hour, func(ctx context.Context, _ scheduler.Run) error {
		tenants <- baggage.FromContext(ctx).Member("tenant").Value()
		return nil
	}, scheduler.WithStartAt(time.Now().Add(24*time.Hour))))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	svc, err := fleet.Serve(ctx, natstest.Conn(t, ns), s, anotel.ServeOption())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })

	// What the client sends, seen by a subscriber of the trigger subject.
	nc := natstest.Conn(t, ns)
	seen := make(chan nats.Header, 1)
	sub, err := nc.Subscribe("anarchon.TRIGGER.>", func(m *nats.Msg) {
		select {
		case seen <- m.Header:
		default:
		}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	clientTP, _ := recorder(t)
	client, err := fleet.NewClient(natstest.Conn(t, ns), anotel.ClientOption())
	require.NoError(t, err)
	member, err := baggage.NewMember("tenant", "acme")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	callCtx, caller := clientTP.Tracer("operator").Start(baggage.ContextWithBaggage(ctx, bag), "trigger reindex")
	r, err := client.Trigger(callCtx, "reindex", fleet.TriggerRequest{By: "ana", Wait: true})
	caller.End()
	require.NoError(t, err)
	require.Equal(t, fleet.StateFinished, r.State)

	h := <-seen
	assert.Equal(t, caller.SpanContext().TraceID().String(), h.Get("x-b3-traceid"), "B3 headers, as B3 writes them: %v", h)
	assert.Equal(t, "tenant=acme", h.Get("baggage"))
	assert.Empty(t, h.Get("traceparent"), "no W3C trace context: the program chose B3")

	spans := runSpans(replicaSpans)
	require.Len(t, spans, 1)
	require.Len(t, spans[0].Links(), 1, "the run's span is linked to the trigger's")
	assert.Equal(t, caller.SpanContext().TraceID(), spans[0].Links()[0].SpanContext.TraceID())
	assert.Equal(t, caller.SpanContext().SpanID(), spans[0].Links()[0].SpanContext.SpanID())
	assert.Equal(t, "acme", <-tenants, "the handler's context has the caller's baggage")
}

// The global propagator is read at each call, so a program that sets it after
// building its options is followed; the default global propagator propagates
// nothing.
func TestPropagatorChoice(t *testing.T) {
	tp, _ := recorder(t)
	ctx, span := tp.Tracer("t").Start(context.Background(), "caller")
	defer span.End()
	setPropagator(t, propagation.NewCompositeTextMapPropagator()) // as a program that set none
	h := nats.Header{}
	anotel.Inject(ctx, h)
	assert.Empty(t, h, "the default global propagator writes nothing")

	otel.SetTextMapPropagator(b3AndBaggage())
	h = nats.Header{}
	anotel.Inject(ctx, h)
	assert.NotEmpty(t, h.Get("x-b3-spanid"), "set later, followed: %v", h)
	got := trace.SpanContextFromContext(anotel.Extract(context.Background(), h))
	assert.Equal(t, span.SpanContext().SpanID(), got.SpanID())
	wrong := nats.Header{"traceparent": {"00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"}}
	assert.False(t, trace.SpanContextFromContext(anotel.Extract(context.Background(), wrong)).IsValid(), "a header the program's propagator does not read is ignored")
}

// WithPropagator overrides the global propagator for one client and one
// replica: here W3C trace context while the program's global one is B3.
func TestWithPropagator(t *testing.T) {
	setPropagator(t, b3AndBaggage())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ns := natstest.Server(t, embedded.Options{})
	replicaTP, replicaSpans := recorder(t)
	s := newScheduler(t, memory.New(), "replica-a", replicaTP)
	require.NoError(t, s.Every("reindex", 24*time.Hour, func(context.Context, scheduler.Run) error { return nil },
		scheduler.WithStartAt(time.Now().Add(24*time.Hour))))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	w3c := anotel.WithPropagator(propagation.TraceContext{})
	svc, err := fleet.Serve(ctx, natstest.Conn(t, ns), s, anotel.ServeOption(w3c))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })

	nc := natstest.Conn(t, ns)
	seen := make(chan nats.Header, 1)
	sub, err := nc.Subscribe("anarchon.TRIGGER.>", func(m *nats.Msg) { seen <- m.Header })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	clientTP, _ := recorder(t)
	client, err := fleet.NewClient(natstest.Conn(t, ns), anotel.ClientOption(w3c, nil))
	require.NoError(t, err)
	callCtx, caller := clientTP.Tracer("operator").Start(ctx, "trigger")
	_, err = client.Trigger(callCtx, "reindex", fleet.TriggerRequest{Wait: true})
	caller.End()
	require.NoError(t, err)
	h := <-seen
	assert.NotEmpty(t, h.Get("traceparent"), "%v", h)
	assert.Empty(t, h.Get("x-b3-traceid"), "%v", h)
	spans := runSpans(replicaSpans)
	require.Len(t, spans, 1)
	require.Len(t, spans[0].Links(), 1)
	assert.Equal(t, caller.SpanContext().SpanID(), spans[0].Links()[0].SpanContext.SpanID())
}
