package main

import (
	"context"
	"log/slog"

	"github.com/anarchon/anarchon/scheduler"
)

// logEvents is a scheduler event hook that logs what this replica does with each
// slot. The scheduler logs takeovers, lost leases and failed backend calls itself.
// The hook is called synchronously, so it only formats a line.
func logEvents(log *slog.Logger) func(scheduler.Event) {
	return func(e scheduler.Event) {
		var (
			level = slog.LevelDebug
			msg   string
			attrs = []slog.Attr{slog.String("instance", e.Instance), slog.String("job", e.Job)}
		)
		if !e.Slot.IsZero() {
			attrs = append(attrs, slog.Time("slot", e.Slot))
		}
		switch e.Kind {
		case scheduler.EventFinished:
			level, msg = slog.LevelInfo, "run finished"
			if e.Status != scheduler.StatusOK {
				level = slog.LevelWarn
			}
			attrs = append(attrs, slog.Int("attempt", e.Attempt), slog.Bool("manual", e.Manual),
				slog.String("status", string(e.Status)), slog.Duration("duration", e.Duration))
			if e.Err != nil {
				attrs = append(attrs, slog.String("err", e.Err.Error()))
			}
		case scheduler.EventStarted:
			level, msg = slog.LevelInfo, "run started"
			attrs = append(attrs, slog.Int("attempt", e.Attempt), slog.Bool("manual", e.Manual), slog.Duration("lag", e.Lag))
		case scheduler.EventSkipped:
			level, msg = slog.LevelInfo, "slot skipped: an earlier run still holds its lease"
		case scheduler.EventLate:
			level, msg = slog.LevelWarn, "slot late: its deadline passed before it was claimed"
		case scheduler.EventStandby:
			msg = "standing by as a backup"
			attrs = append(attrs, slog.Int("attempt", e.Attempt))
		case scheduler.EventClaimed, scheduler.EventLost:
			msg = "claim " + string(e.Kind)
			attrs = append(attrs, slog.String("outcome", string(e.Outcome)))
		case scheduler.EventScheduled:
			msg = "next slot"
			attrs = append(attrs, slog.Time("next", e.Next))
		default:
			return // takeover, lease_lost, backend_error: the scheduler logs them
		}
		log.LogAttrs(context.Background(), level, msg, attrs...)
	}
}
