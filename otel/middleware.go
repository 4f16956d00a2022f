package otel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

// ScopeName is the instrumentation scope of the spans: the tracer's name.
const ScopeName = "github.com/anarchon/anarchon/otel"

// SpanPrefix begins the name of every run's span: "anarchon.run <job>".
const SpanPrefix = "anarchon.run "

// The attributes of a run's span.
const (
	AttrJob      = attribute.Key("anarchon.job")      // the job's name
	AttrSlot     = attribute.Key("anarchon.slot")     // the slot, RFC 3339 in UTC with milliseconds
	AttrAttempt  = attribute.Key("anarchon.attempt")  // 1, 2 after a takeover, …
	AttrInstance = attribute.Key("anarchon.instance") // the instance that runs the attempt
	AttrFence    = attribute.Key("anarchon.fence")    // the fencing token (0 without leases)
	AttrKind     = attribute.Key("anarchon.kind")     // KindScheduled or KindManual
	// AttrEntry is the schedule entry's ID, on a run of an entry; absent on a
	// run of the job's own schedule.
	AttrEntry = attribute.Key("anarchon.entry")
	// AttrBackfill is true on a run of a slot asked for by a backfill; absent
	// otherwise.
	AttrBackfill = attribute.Key("anarchon.backfill")
	// AttrTakeoverOf is the instance whose attempt this one took over
	// (scheduler.Run.Previous); absent when the attempt took nothing over.
	AttrTakeoverOf = attribute.Key("anarchon.takeover_of")
	// AttrOutcome is how the attempt ended: OutcomeOK, OutcomeError,
	// OutcomeTimeout, OutcomeCancelled or OutcomeLost.
	AttrOutcome = attribute.Key("anarchon.outcome")
	// AttrErrorType is the semantic conventions' error.type, set when an
	// attempt failed: ErrorTypeTimeout, ErrorTypeLeaseLost, ErrorTypeStopped,
	// ErrorTypePanic, or the handler's error's type (its ErrorType method's
	// value, else its Go type, as semconv.ErrorType says).
	AttrErrorType = semconv.ErrorTypeKey
)

// Values of AttrErrorType that are not a Go type.
const (
	ErrorTypeTimeout   = "timeout"    // the job's timeout ended the attempt
	ErrorTypeLeaseLost = "lease_lost" // its lease was lost while it ran
	ErrorTypeStopped   = "stopped"    // Stop cut it short
	ErrorTypePanic     = "panic"      // the handler panicked
)

// Values of AttrKind.
const (
	KindScheduled = "scheduled"
	KindManual    = "manual"
)

// Values of AttrOutcome: the run statuses a handler's attempt can end with.
const (
	OutcomeOK        = "ok"        // the handler returned nil
	OutcomeError     = "error"     // it returned an error, or panicked
	OutcomeTimeout   = "timeout"   // the job's timeout ended it (scheduler.ErrHandlerTimeout)
	OutcomeCancelled = "cancelled" // Stop cut it short (scheduler.ErrStopped), or a later slot did (scheduler.ErrOverlapCancelled)
	OutcomeLost      = "lost"      // its lease was lost while it ran (scheduler.ErrLeaseLost)
)

// slotLayout is RFC 3339 with milliseconds, the precision of a slot.
const slotLayout = "2006-01-02T15:04:05.000Z07:00"

// Middleware returns the scheduler middleware that traces every attempt of every
// job with tp (nil: the global provider, otel.GetTracerProvider). Put it in
// scheduler.Config.Middleware.
//
// Each attempt, scheduled or manual, gets one span named SpanPrefix + the job's
// name, a new root, with the Attr* attributes; the handler's context carries it,
// so the spans the handler starts are its children, and a log record made with
// that context (Logger.InfoContext(ctx, …)) through LogHandler carries its trace
// and span IDs. The span ends when the handler returns, with AttrOutcome; a
// failed attempt (an error, a panic, a timeout, a lost lease, Stop) has an error
// status, AttrErrorType and the handler's error recorded. A run a later slot
// cancelled (OverlapCancelOther) is outcome cancelled without an error status:
// that is the policy's normal ending. A manual run's span is linked to the span
// that RunNow's context carries: the trigger's, when it came through fleet with
// ClientOption and ServeOption.
func Middleware(tp trace.TracerProvider) scheduler.Middleware {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer(ScopeName, trace.WithInstrumentationVersion(fleet.Version))
	return func(next scheduler.Handler) scheduler.Handler {
		return func(ctx context.Context, run scheduler.Run) (err error) {
			opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(runAttributes(run)...)}
			if sc := trace.SpanContextFromContext(ctx); run.Manual && sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
			ctx, span := tracer.Start(ctx, SpanPrefix+run.Job, opts...)
			defer func() {
				if p := recover(); p != nil { // an inner middleware's panic
					end(span, OutcomeError, ErrorTypePanic, fmt.Errorf("%w: %v", scheduler.ErrHandlerPanic, p))
					panic(p)
				}
				out, errType := outcome(ctx, err)
				end(span, out, errType, err)
			}()
			return next(ctx, run)
		}
	}
}

func runAttributes(run scheduler.Run) []attribute.KeyValue {
	kind := KindScheduled
	if run.Manual {
		kind = KindManual
	}
	attrs := []attribute.KeyValue{
		AttrJob.String(run.Job),
		AttrSlot.String(run.Slot.UTC().Format(slotLayout)),
		AttrAttempt.Int(run.Attempt),
		AttrInstance.String(run.Instance),
		AttrFence.Int64(int64(run.Fence)),
		AttrKind.String(kind),
	}
	if run.Previous != "" {
		attrs = append(attrs, AttrTakeoverOf.String(run.Previous))
	}
	if run.Entry != "" {
		attrs = append(attrs, AttrEntry.String(run.Entry))
	}
	if run.Backfill {
		attrs = append(attrs, AttrBackfill.Bool(true))
	}
	return attrs
}

// outcome is how an attempt ended, decided as the scheduler decides its status:
// from the handler's error and the cause of its context's end; and its
// error.type, empty when it did not fail.
func outcome(ctx context.Context, err error) (out, errType string) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, scheduler.ErrLeaseLost):
		// Even a handler that returned nil ran past its lease: another attempt
		// may run the slot, and the scheduler decides which result stands.
		return OutcomeLost, ErrorTypeLeaseLost
	case err == nil:
		return OutcomeOK, ""
	case errors.Is(err, scheduler.ErrHandlerPanic):
		return OutcomeError, ErrorTypePanic
	case errors.Is(cause, scheduler.ErrHandlerTimeout):
		return OutcomeTimeout, ErrorTypeTimeout
	case errors.Is(cause, scheduler.ErrStopped):
		return OutcomeCancelled, ErrorTypeStopped
	case errors.Is(cause, scheduler.ErrOverlapCancelled):
		return OutcomeCancelled, "" // the policy's normal ending, no failure
	}
	return OutcomeError, semconv.ErrorType(err).Value.AsString()
}

// end ends span with its outcome; errType set marks a failure.
func end(span trace.Span, out, errType string, err error) {
	span.SetAttributes(AttrOutcome.String(out))
	if errType != "" {
		span.SetAttributes(AttrErrorType.String(errType))
		desc := out
		if err != nil {
			span.RecordError(err)
			desc += ": " + err.Error()
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}
