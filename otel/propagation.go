package otel

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/anarchon/anarchon/fleet"
)

// Inject writes the context ctx carries into h with the global propagator
// (otel.GetTextMapPropagator): W3C traceparent and tracestate, B3, baggage or
// whatever the program set with otel.SetTextMapPropagator. A ctx without a span
// or baggage writes nothing; so does the default global propagator, which
// propagates nothing until the program sets one.
func Inject(ctx context.Context, h nats.Header) { inject(otel.GetTextMapPropagator(), ctx, h) }

// Extract returns ctx with what h carries read by the global propagator
// (otel.GetTextMapPropagator): the remote span context and baggage; ctx as it is
// when h carries none, or a header that does not parse.
func Extract(ctx context.Context, h nats.Header) context.Context {
	return extract(otel.GetTextMapPropagator(), ctx, h)
}

func inject(p propagation.TextMapPropagator, ctx context.Context, h nats.Header) {
	p.Inject(ctx, headerCarrier(h))
}

func extract(p propagation.TextMapPropagator, ctx context.Context, h nats.Header) context.Context {
	return p.Extract(ctx, headerCarrier(h))
}

// Option configures ClientOption and ServeOption.
type Option func(*config)

type config struct {
	propagator propagation.TextMapPropagator // nil: the global one at each call
}

// WithPropagator makes ClientOption and ServeOption use p instead of the global
// propagator. A nil p keeps the global one.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// propagatorOf is c's propagator, or the global one as it is now: a program
// that sets it after building its options is followed.
func (c config) propagatorOf() propagation.TextMapPropagator {
	if c.propagator != nil {
		return c.propagator
	}
	return otel.GetTextMapPropagator()
}

// ClientOption is the fleet.NewClient option that sends the context of each
// call with its request, written by the global propagator (or WithPropagator's):
//
//	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
//		propagation.TraceContext{}, propagation.Baggage{}))
//	c, err := fleet.NewClient(nc, anotel.ClientOption())
func ClientOption(opts ...Option) fleet.Option {
	c := newConfig(opts)
	return fleet.WithRequestHeaders(func(ctx context.Context, h nats.Header) {
		inject(c.propagatorOf(), ctx, h)
	})
}

// ServeOption is the fleet.Serve option that serves each request with the
// context its headers carry, read by the global propagator (or
// WithPropagator's), so the span of a triggered run is linked to the trigger's
// span and its handler's context has the trigger's baggage:
//
//	svc, err := fleet.Serve(ctx, nc, s, anotel.ServeOption())
func ServeOption(opts ...Option) fleet.Option {
	c := newConfig(opts)
	return fleet.WithRequestContext(func(ctx context.Context, h nats.Header) context.Context {
		return extract(c.propagatorOf(), ctx, h)
	})
}

// headerCarrier is a propagation.TextMapCarrier on NATS headers, which are case
// sensitive: it writes the names as the propagator gives them and reads them in
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
