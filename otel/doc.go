// Package otel traces anarchon's runs with OpenTelemetry: one span per attempt of
// every job, scheduled or manual, that the handler's context carries, and a
// trigger's trace context carried over NATS to the run it starts.
//
// It lives in a Go module of its own (github.com/anarchon/anarchon/otel), so that
// users who do not trace never download OpenTelemetry. The scheduler imports no
// tracer: Middleware is a scheduler.Middleware, and ClientOption and ServeOption
// are fleet's generic header options.
//
//	import anotel "github.com/anarchon/anarchon/otel"
//
//	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
//	s, err := scheduler.New(scheduler.Config{
//		Backend:    b,
//		Middleware: []scheduler.Middleware{anotel.Middleware(tp)},
//	})
//	svc, err := fleet.Serve(ctx, nc, s, anotel.ServeOption()) // on every replica
//	c, err := fleet.NewClient(nc, anotel.ClientOption())       // where triggers come from
//
// # Spans
//
// Each attempt's span is named "anarchon.run <job>" (SpanPrefix) and is a new
// root: a run belongs to no request. Its attributes:
//
//	anarchon.job          the job's name
//	anarchon.slot         the slot, RFC 3339 in UTC with milliseconds
//	anarchon.attempt      1, or 2 and on after a takeover
//	anarchon.instance     the instance that runs the attempt
//	anarchon.fence        the fencing token (0 without leases)
//	anarchon.kind         scheduled or manual
//	anarchon.takeover_of  on a takeover, the instance whose attempt it took over
//	anarchon.entry        on a run of a schedule entry, the entry's ID
//	anarchon.backfill     true on a run of a backfilled slot
//	anarchon.outcome      ok, error, timeout, cancelled or lost, when it ends
//	error.type            when the attempt failed: timeout, lease_lost, stopped,
//	                      panic, or the handler's error's type
//
// The outcome is decided as the scheduler decides the run's status, from the
// handler's error and context.Cause of its context: scheduler.ErrHandlerTimeout
// is a timeout, scheduler.ErrStopped and scheduler.ErrOverlapCancelled
// cancelled, scheduler.ErrLeaseLost lost (even when the handler returned nil
// after it), a panic an error. A failed attempt (every outcome but ok, and but
// cancelled by a later slot, which is the cancel-other policy's normal ending)
// sets the span's status to error and error.type as the OpenTelemetry semantic
// conventions say (for a handler's error, semconv.ErrorType: its ErrorType
// method's value, else its Go type), with the handler's error recorded as an
// exception event. The handler's context carries the span: spans the handler
// starts are its children.
//
// # Logs
//
// LogHandler wraps a slog.Handler so that a record made with a context that
// carries a span (Logger.InfoContext(ctx, …) in a handler) has the span's
// trace_id and span_id: a run's log lines name its trace.
//
// # Triggers
//
// A manual run's span is linked to the span RunNow's context carries. Through
// the fleet, ClientOption writes the context of each call into its request's
// headers with the global propagator, otel.GetTextMapPropagator (Inject), and
// ServeOption makes the replica serve the request with what they carry
// (Extract): the run a Client.Trigger starts is linked to the caller's span,
// and its handler's context has the caller's baggage. Set the propagator as for
// the rest of the program, W3C trace context and baggage for example:
//
//	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
//		propagation.TraceContext{}, propagation.Baggage{}))
//
// B3 or any composite works the same; until a program sets one, the global
// propagator propagates nothing. WithPropagator gives one client or replica a
// propagator of its own. A header that does not parse is ignored. Inject and
// Extract serve other NATS messages too.
//
// The span is linked rather than a child because the run is work of its own: a
// trigger is answered once the run starts, and the run's trace is the run's.
package otel
