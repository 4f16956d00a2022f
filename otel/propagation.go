package otel

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/anarchon/anarchon/fleet"
)

// propagator is the W3C trace context (traceparent, tracestate).
var propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Inject writes the trace context of ctx's span into h as W3C traceparent and
// tracestate headers; a ctx without a valid span writes nothing.
func Inject(ctx context.Context, h nats.Header) { propagator.Inject(ctx, headerCarrier(h)) }

// Extract returns ctx with the remote span context that h's W3C headers carry
// (ctx as it is when they carry none, or one that does not parse).
func Extract(ctx context.Context, h nats.Header) context.Context {
	return propagator.Extract(ctx, headerCarrier(h))
}

// ClientOption is the fleet.NewClient option that sends the trace context of each
// call's context with its request (Inject):
//
//	c, err := fleet.NewClient(nc, otel.ClientOption())
func ClientOption() fleet.Option { return fleet.WithRequestHeaders(Inject) }

// ServeOption is the fleet.Serve option that serves each request with the trace
// context it carries (Extract), so the span of a triggered run is linked to the
// trigger's span:
//
//	svc, err := fleet.Serve(ctx, nc, s, otel.ServeOption())
func ServeOption() fleet.Option { return fleet.WithRequestContext(Extract) }

// headerCarrier is a propagation.TextMapCarrier on NATS headers, which are case
// sensitive: it writes the W3C names as they are (lower case) and reads them in
// any case.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := nats.Header(c).Get(key); v != "" {
		return v
	}
	for k, vs := range c {
		if len(vs) > 0 && strings.EqualFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
