package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/scheduler"
)

// Tracing modes (-otel).
const (
	otelOff  = ""
	otelLog  = "log"  // spans as JSON lines on stderr
	otelOTLP = "otlp" // spans to an OTLP/HTTP collector, set by OTEL_EXPORTER_OTLP_* variables
)

// setupTracing sets the global tracer provider and propagator as a program that
// traces does, and returns what the scheduler and the fleet need: the
// middleware that traces every attempt, and a shutdown that flushes the spans.
// With -otel off it sets nothing and returns no middleware.
func setupTracing(ctx context.Context, mode, instance string, stderr io.Writer) ([]scheduler.Middleware, func(context.Context) error, error) {
	var exporter sdktrace.SpanExporter
	var err error
	switch mode {
	case otelOff:
		return nil, func(context.Context) error { return nil }, nil
	case otelLog:
		exporter, err = stdouttrace.New(stdouttrace.WithWriter(stderr))
	case otelOTLP:
		exporter, err = otlptracehttp.New(ctx) // OTEL_EXPORTER_OTLP_ENDPOINT, …_HEADERS, …
	default:
		return nil, nil, fmt.Errorf("-otel %q: log, otlp, or empty for none", mode)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("-otel %s: %w", mode, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("anarchon-example"), semconv.ServiceInstanceID(instance)))
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	// W3C trace context and baggage; B3 or any composite works the same way.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return []scheduler.Middleware{anotel.Middleware(nil)}, tp.Shutdown, nil
}

// traced makes log's records carry the trace and span IDs of the span their
// context carries (a handler's log.InfoContext(ctx, …)).
func traced(log *slog.Logger) *slog.Logger { return slog.New(anotel.LogHandler(log.Handler())) }
