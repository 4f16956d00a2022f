package scheduler

import (
	"context"
	"log/slog"
)

// Chain returns a hook that calls each non-nil hook in order. For example, it
// feeds metrics and logging on one scheduler:
//
//	OnEvent: scheduler.Chain(m.OnEvent, scheduler.LogEvents(logger))
//
// A hook that panics does not keep the later hooks from seeing the event. Chain
// calls them all, then re-panics with the first panic so the scheduler logs it.
// Chain never returns nil; with no non-nil hook it returns a hook that does nothing.
func Chain(hooks ...func(Event)) func(Event) {
	var hs []func(Event)
	for _, h := range hooks {
		if h != nil {
			hs = append(hs, h)
		}
	}
	switch len(hs) {
	case 0:
		return func(Event) {}
	case 1:
		return hs[0]
	}
	return func(e Event) {
		var first any
		for _, h := range hs {
			if p := callHook(h, e); p != nil && first == nil {
				first = p
			}
		}
		if first != nil {
			panic(first)
		}
	}
}

func callHook(h func(Event), e Event) (p any) {
	defer func() { p = recover() }()
	h(e)
	return nil
}

// LogEvents returns an event hook that logs what this instance does with each slot
// to log. At info level it logs runs started and finished (whatever their
// status) and slots skipped. At warn level it logs slots late. At debug level it
// logs claims, slots lost to another instance (which ran or runs them),
// stand-bys and the next slot.
//
// What went wrong is not repeated: the scheduler logs it itself through
// Config.Logger, so give it the same logger. A handler's error or timeout is "run
// failed" at warn level. A handler's panic is "handler panicked" at error level,
// with its stack (once). A lost lease, a superseded result, a takeover and a failed
// backend call are each logged at the level it deserves. The hook only formats a
// line, as a hook must return quickly.
func LogEvents(log *slog.Logger) func(Event) {
	if log == nil {
		return func(Event) {}
	}
	return func(e Event) {
		var (
			level = slog.LevelDebug
			msg   string
			attrs = []slog.Attr{slog.String("instance", e.Instance), slog.String("job", e.Job)}
		)
		if e.Entry != "" {
			attrs = append(attrs, slog.String("entry", e.Entry))
		}
		if !e.Slot.IsZero() {
			attrs = append(attrs, slog.Time("slot", e.Slot))
		}
		switch e.Kind {
		case EventFinished:
			level, msg = slog.LevelInfo, "run finished" // a failure: the scheduler's own line
			attrs = append(attrs, slog.Int("attempt", e.Attempt), slog.Bool("manual", e.Manual),
				slog.String("status", string(e.Status)), slog.Duration("duration", e.Duration))
			if e.Err != nil {
				attrs = append(attrs, slog.String("err", e.Err.Error()))
			}
		case EventStarted:
			level, msg = slog.LevelInfo, "run started"
			attrs = append(attrs, slog.Int("attempt", e.Attempt), slog.Bool("manual", e.Manual), slog.Duration("lag", e.Lag))
		case EventSkipped:
			level, msg = slog.LevelInfo, "slot skipped: another run of the job holds its lease"
		case EventLate:
			level, msg = slog.LevelWarn, "slot late: its deadline passed before it was claimed"
		case EventMissed:
			level, msg = slog.LevelWarn, "slot missed: it was due while no instance could claim it; recorded missed"
			attrs = append(attrs, slog.Int("slots", max(e.Count, 1)))
		case EventStandby:
			msg = "standing by as a backup"
			attrs = append(attrs, slog.Int("attempt", e.Attempt))
		case EventClaimed, EventLost:
			msg = "claim " + string(e.Kind)
			attrs = append(attrs, slog.String("outcome", string(e.Outcome)))
		case EventLimitReached:
			level, msg = slog.LevelInfo, "run limit reached: the job's loop ended"
			attrs = append(attrs, slog.String("outcome", string(e.Outcome)))
		case EventScheduled:
			msg = "next slot"
			attrs = append(attrs, slog.Time("next", e.Next))
		default:
			return // takeover, lease_lost, backend_error: the scheduler logs them
		}
		log.LogAttrs(context.Background(), level, msg, attrs...)
	}
}
