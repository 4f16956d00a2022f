package otel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/anarchon/anarchon/backend/memory"
	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/scheduler"
)

// A scheduler whose every attempt is a span: here recorded in memory, in a
// program sent to an exporter (sdktrace.WithBatcher).
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	s, err := scheduler.New(scheduler.Config{
		Backend:    memory.New(),
		Instance:   "replica-a",
		Middleware: []scheduler.Middleware{anotel.Middleware(tp)},
	})
	if err != nil {
		panic(err)
	}
	// The job's first slot is a day away, so no scheduled run adds a span while the
	// example runs: its one run is RunNow's.
	err = s.Every("reindex", 24*time.Hour, func(ctx context.Context, run scheduler.Run) error {
		return fmt.Errorf("index %s is read-only", "users") // ctx carries the run's span
	}, scheduler.WithStartAt(time.Now().Add(24*time.Hour)))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	if _, err := s.RunNow(ctx, "reindex"); err != nil {
		panic(err)
	}
	for _, span := range spans.Ended() {
		fmt.Println(span.Name())
		for _, kv := range span.Attributes() {
			if kv.Key == anotel.AttrKind || kv.Key == anotel.AttrInstance || kv.Key == anotel.AttrOutcome {
				fmt.Printf("  %s=%s\n", kv.Key, kv.Value.String())
			}
		}
		fmt.Println(" ", span.Status().Description)
	}
	// Output:
	// anarchon.run reindex
	//   anarchon.instance=replica-a
	//   anarchon.kind=manual
	//   anarchon.outcome=error
	//   error: index users is read-only
}
