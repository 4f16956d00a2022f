package otel

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Names of the attributes LogHandler adds.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler returns a slog.Handler that passes every record to h, with the
// trace and span IDs (LogTraceID, LogSpanID, in hex) of the span its context
// carries when it carries one. A handler's log lines made with the run's
// context then name the run's trace:
//
//	logger := slog.New(anotel.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))
//	func(ctx context.Context, run scheduler.Run) error {
//		logger.InfoContext(ctx, "reindexing", "shard", n) // trace_id, span_id
//	}
//
// Records made without a context (Logger.Info) or with one that carries no
// span pass as they are. The IDs go where the record's own attributes go: in
// the group WithGroup opened, if any.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ next slog.Handler }

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.next.Enabled(ctx, level)
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return l.next.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{l.next.WithAttrs(attrs)}
}

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.next.WithGroup(name)} }
