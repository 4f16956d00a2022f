package scheduler

import (
	"time"

	"github.com/anarchon/anarchon/backend"
)

// EventKind names what happened.
type EventKind string

// Event kinds. The list may grow; a hook should ignore kinds it does not know.
const (
	// EventScheduled: the job's next slot is Event.Next.
	EventScheduled EventKind = "scheduled"
	// EventClaimed: this instance won the slot (Event.Outcome says how).
	EventClaimed EventKind = "claimed"
	// EventLost: another instance has the slot (running or done), or the slot
	// was stored limit (Event.Outcome limit: the job's run limit was reached).
	EventLost EventKind = "lost"
	// EventLate: the slot's start deadline passed before this instance claimed it.
	EventLate EventKind = "late"
	// EventMissed: this instance recorded the slot missed: it was due while no
	// instance could claim it (every one down, paused or cut off from the run
	// store). Sent once per record across the fleet; Event.Count says how many
	// slots the record stands for (more than one for the oldest of a long outage,
	// recorded as one, its error text naming the range).
	EventMissed EventKind = "missed"
	// EventSkipped: an earlier slot still held its lease and the job forbids overlap.
	EventSkipped EventKind = "skipped"
	// EventStarted: the handler started; Event.Lag is start time − slot time.
	EventStarted EventKind = "started"
	// EventFinished: the handler returned; Event.Status and Event.Duration say how.
	EventFinished EventKind = "finished"
	// EventTakeover: this instance took over a run whose lease expired or was released.
	EventTakeover EventKind = "takeover"
	// EventStandby: this instance stands by as a backup for a running slot.
	EventStandby EventKind = "standby"
	// EventLeaseLost: the running handler lost its lease; its context is cancelled.
	EventLeaseLost EventKind = "lease_lost"
	// EventBackendError: a backend or run-store call failed; Event.Op names it.
	EventBackendError EventKind = "backend_error"
	// EventPaused: the slot fell while its job was paused; this instance recorded it
	// paused (once per slot across the fleet).
	EventPaused EventKind = "paused"
	// EventPauseChanged: the job's pause state changed (Job "" for all jobs);
	// Event.Pause is the pause now in force, nil once resumed.
	EventPauseChanged EventKind = "pause_changed"
	// EventExcluded: the slot fell on a day of a calendar its job or entry
	// names; this instance recorded it excluded (once per slot across the fleet).
	EventExcluded EventKind = "excluded"
	// EventCalendarsChanged: the stored calendars this instance follows changed.
	EventCalendarsChanged EventKind = "calendars_changed"
	// EventJobConflict: the replicas that declare the job do not declare it alike
	// (schedule, overlap, catch-up, lease or lateness differ): Event.Conflict says
	// how; sent again with Conflict empty once they agree. The core cannot see
	// other replicas: a plug-in that can (fleet's registry) reports it through
	// Scheduler.Report.
	EventJobConflict EventKind = "job_conflict"
	// EventRetry: the attempt failed and its retry is planned at Event.Next (stored
	// in the run store with leases, for any instance to run).
	EventRetry EventKind = "retry"
	// EventFailed: the attempt failed (error or timeout) and no retry follows. It
	// is the slot's final failure, sent once per slot by the instance whose attempt
	// it was. It is also sent when the retry that instance stored closed unclaimed,
	// once it finds the window closed, if it is still up.
	EventFailed EventKind = "failed"
	// EventCancelRequested: a later slot of the job (Event.Next) asked this
	// instance's run of Event.Slot to end (OverlapCancelOther); the handler's
	// context is cancelled, Event.Err says by whom.
	EventCancelRequested EventKind = "cancel_requested"
	// EventLimitReached: the job's run limit was reached (WithMaxRuns): this
	// instance claims no further scheduled slot of it, its loop ended. Sent once
	// per instance; Event.Slot is the slot whose claim told it, Event.Outcome
	// that claim's outcome (won or buffered: the last counted slot; limit or
	// done: a slot stored limit).
	EventLimitReached EventKind = "limit_reached"
	// EventDeadlineMissed: this instance recorded the slot past its deadline
	// (WithDeadline): it had not ended ok by then. Sent once per slot across the
	// fleet (by every judge on a backend without backend.OnceRecorder that
	// judges at the same instant); Event.Err says what the slot had come to,
	// Event.Next is the deadline.
	EventDeadlineMissed EventKind = "deadline_missed"
)

// Event is what the scheduler reports to Config.OnEvent.
type Event struct {
	Kind EventKind
	Job  string
	// Entry is the schedule entry of the job the event is of, if any.
	Entry    string
	Slot     time.Time
	Instance string
	// At is when it happened, by the scheduler's clock.
	At      time.Time
	Token   string
	Attempt int
	Manual  bool
	// Backfill says the event is of a slot asked for by Scheduler.Backfill.
	Backfill bool
	// Outcome is the claim outcome, for claimed, lost, late, skipped and standby.
	Outcome backend.ClaimOutcome
	// Status and Duration are set on finished.
	Status   Status
	Duration time.Duration
	// Lag is start time − slot time, on started.
	Lag time.Duration
	// Next is the next slot, on scheduled.
	Next time.Time
	// Count is how many slots a missed record stands for, on missed.
	Count int
	// Op names the failed call on backend_error ("claim", "save_result", "heartbeat"…).
	Op  string
	Err error
	// Pause is the pause in force, on pause_changed (nil: the job runs).
	Pause *Pause
	// Conflict says how the replicas' declarations of the job differ, on
	// job_conflict (empty: they agree again).
	Conflict string
}
