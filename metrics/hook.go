package metrics

import (
	"strconv"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// OnEvent updates the collectors from one scheduler event. Put it in
// scheduler.Config.OnEvent, alone or through Chain. It never blocks and ignores
// event kinds it does not know. Calling it on a nil *Metrics does nothing.
func (m *Metrics) OnEvent(e scheduler.Event) {
	if m == nil {
		return
	}
	if e.Kind == scheduler.EventPauseChanged {
		m.pauseChanged(e.Job, e.Pause != nil)
		return
	}
	if e.Job == "" {
		return
	}
	m.initJob(e.Job, e.At)
	job := e.Job
	if e.Entry != "" {
		m.initEntries(job)
	}
	switch e.Kind {
	case scheduler.EventScheduled:
		// An entry's slots are its own schedule's: they say nothing of the job's.
		if e.Next.IsZero() || e.Entry != "" {
			break
		}
		m.nextSlot.WithLabelValues(job).Set(unixSeconds(e))
		if gap := m.slots.next(job, e.Next); gap > 0 {
			m.interval.WithLabelValues(job).Set(gap.Seconds())
		}
	case scheduler.EventLimitReached:
		if e.Entry == "" { // the job's loop ended: no next slot, no interval
			m.slots.forget(job)
			m.interval.DeleteLabelValues(job)
			m.nextSlot.DeleteLabelValues(job)
		}
	case scheduler.EventClaimed, scheduler.EventLost, scheduler.EventStandby:
		m.claims.WithLabelValues(job, outcomeLabel(e)).Inc()
	case scheduler.EventLate:
		m.claims.WithLabelValues(job, outcomeLabel(e)).Inc()
		m.lateSlots.WithLabelValues(job).Inc()
	case scheduler.EventMissed:
		m.claims.WithLabelValues(job, outcomeLabel(e)).Inc()
		m.missedSlots.WithLabelValues(job).Add(float64(max(e.Count, 1)))
	case scheduler.EventDeadlineMissed:
		m.deadlines.WithLabelValues(job).Inc()
	case scheduler.EventSkipped:
		m.claims.WithLabelValues(job, outcomeLabel(e)).Inc()
		m.skippedSlots.WithLabelValues(job).Inc()
	case scheduler.EventStarted:
		m.running.WithLabelValues(job).Inc()
		if !e.Manual {
			m.slotLag.WithLabelValues(job).Observe(e.Lag.Seconds())
		}
	case scheduler.EventFinished:
		m.running.WithLabelValues(job).Dec()
		status := statusLabel(e.Status)
		m.runs.WithLabelValues(job, status, strconv.FormatBool(e.Manual)).Inc()
		m.runDuration.WithLabelValues(job).Observe(e.Duration.Seconds())
		if e.Entry != "" {
			m.entryRuns.WithLabelValues(job, status).Inc()
			break // an entry's success is not the job's own
		}
		if e.Status == scheduler.StatusOK && !e.At.IsZero() {
			m.lastSuccess.WithLabelValues(job).Set(float64(e.At.UnixMilli()) / 1e3)
		}
	case scheduler.EventTakeover:
		m.takeovers.WithLabelValues(job).Inc()
	case scheduler.EventLeaseLost:
		m.leaseLosses.WithLabelValues(job).Inc()
	case scheduler.EventBackendError:
		m.backendErrors.WithLabelValues(job, opLabel(e.Op)).Inc()
	case scheduler.EventPaused:
		m.pausedSlots.WithLabelValues(job).Inc()
	case scheduler.EventExcluded:
		m.excludedSlots.WithLabelValues(job).Inc()
	case scheduler.EventRetry:
		m.retries.WithLabelValues(job).Inc()
	case scheduler.EventFailed:
		m.failedSlots.WithLabelValues(job).Inc()
		if e.Entry != "" {
			m.entryFailed.WithLabelValues(job).Inc()
		}
	case scheduler.EventCancelRequested:
		m.cancelAsked.WithLabelValues(job).Inc()
	case scheduler.EventJobConflict:
		v := 0.0
		if e.Conflict != "" {
			v = 1
		}
		m.jobConflict.WithLabelValues(job).Set(v)
	}
}

// pauseChanged records job's pause state ("": all jobs) and sets job_paused for
// every job seen so far.
func (m *Metrics) pauseChanged(job string, paused bool) {
	if job != "" {
		m.initJob(job, time.Time{})
	}
	m.pauseMu.Lock()
	defer m.pauseMu.Unlock()
	if paused {
		m.paused[job] = true
	} else {
		delete(m.paused, job)
	}
	m.seen.Range(func(k, _ any) bool {
		m.setPausedLocked(k.(string))
		return true
	})
}

func (m *Metrics) setPausedLocked(job string) {
	v := 0.0
	if m.paused[job] || m.paused[""] {
		v = 1
	}
	m.jobPaused.WithLabelValues(job).Set(v)
}

// initJob creates the job's most-queried series at zero the first time the job is
// seen (its first event is "scheduled", at Start), so rate() and increase() see the
// first increment and alerts do not depend on a series appearing; at is when (zero:
// not known, as for a pause change, and the next event's time is taken).
func (m *Metrics) initJob(job string, at time.Time) {
	if _, seen := m.seen.Load(job); seen {
		if !at.IsZero() {
			m.firstSeenAt(job, at)
		}
		return
	}
	if _, seen := m.seen.LoadOrStore(job, struct{}{}); seen {
		return
	}
	if !at.IsZero() {
		m.firstSeenAt(job, at)
	}
	m.runs.WithLabelValues(job, string(scheduler.StatusOK), "false")
	m.runs.WithLabelValues(job, string(scheduler.StatusError), "false")
	m.lateSlots.WithLabelValues(job)
	m.missedSlots.WithLabelValues(job)
	m.deadlines.WithLabelValues(job)
	m.skippedSlots.WithLabelValues(job)
	m.takeovers.WithLabelValues(job)
	m.leaseLosses.WithLabelValues(job)
	m.backendErrors.WithLabelValues(job, "claim")
	m.backendErrors.WithLabelValues(job, "save_result")
	m.running.WithLabelValues(job)
	m.pausedSlots.WithLabelValues(job)
	m.excludedSlots.WithLabelValues(job)
	m.jobConflict.WithLabelValues(job)
	m.retries.WithLabelValues(job)
	m.cancelAsked.WithLabelValues(job)
	m.failedSlots.WithLabelValues(job)
	m.pauseMu.Lock()
	m.setPausedLocked(job)
	m.pauseMu.Unlock()
}

// firstSeenAt sets job's first-seen time once.
func (m *Metrics) firstSeenAt(job string, at time.Time) {
	if _, set := m.seenAt.LoadOrStore(job, struct{}{}); !set {
		m.firstSeen.WithLabelValues(job).Set(float64(at.UnixMilli()) / 1e3)
	}
}

// initEntries creates the job's entry series at zero at its first entry event.
func (m *Metrics) initEntries(job string) {
	if _, seen := m.seenEntries.LoadOrStore(job, struct{}{}); seen {
		return
	}
	m.entryRuns.WithLabelValues(job, string(scheduler.StatusOK))
	m.entryRuns.WithLabelValues(job, string(scheduler.StatusError))
	m.entryFailed.WithLabelValues(job)
}

// unixSeconds is e.Next as Unix seconds, at the millisecond precision of slots.
func unixSeconds(e scheduler.Event) float64 { return float64(e.Next.UnixMilli()) / 1e3 }

// outcomeLabel bounds the outcome label: the claim outcomes this version knows,
// the kind's own outcome when the event carries none, and "other" for the rest (a
// run store newer than this package).
func outcomeLabel(e scheduler.Event) string {
	o := e.Outcome
	if o == "" {
		switch e.Kind {
		case scheduler.EventClaimed:
			o = scheduler.OutcomeWon
		case scheduler.EventStandby:
			o = scheduler.OutcomeRunning
		case scheduler.EventLost:
			o = scheduler.OutcomeDone
		case scheduler.EventSkipped:
			o = scheduler.OutcomeOverlap
		case scheduler.EventLate, scheduler.EventMissed:
			o = scheduler.OutcomeLate
		}
	}
	switch o {
	case scheduler.OutcomeWon, scheduler.OutcomeRunning, scheduler.OutcomeDone,
		scheduler.OutcomeOverlap, scheduler.OutcomeLate, scheduler.OutcomeNone, scheduler.OutcomeRetry, scheduler.OutcomeBuffered,
		scheduler.OutcomeLimit:
		return string(o)
	}
	return "other"
}

// statusLabel bounds the status label to the statuses this version knows.
func statusLabel(s scheduler.Status) string {
	switch s {
	case scheduler.StatusOK, scheduler.StatusError, scheduler.StatusTimeout, scheduler.StatusCancelled,
		scheduler.StatusLost, scheduler.StatusSuperseded, scheduler.StatusSkipped, scheduler.StatusLate,
		scheduler.StatusMissed, scheduler.StatusRunning, scheduler.StatusPaused, scheduler.StatusLimit, scheduler.StatusExcluded:
		return string(s)
	}
	return "other"
}

// maxOpLen bounds the op label's length.
const maxOpLen = 32

// opLabel keeps the op label bounded. The scheduler names its calls with fixed
// identifiers ("claim", "save_result", "heartbeat", ...), so they pass through, and
// a future call shows up under its own name; anything that is not a short
// lower-case identifier becomes "other".
func opLabel(op string) string {
	if op == "" || len(op) > maxOpLen {
		return "other"
	}
	for i := 0; i < len(op); i++ {
		c := op[i]
		if (c < 'a' || c > 'z') && c != '_' && (i == 0 || c < '0' || c > '9') {
			return "other"
		}
	}
	return op
}

// Chain returns a hook that calls each non-nil hook in order.
//
// Deprecated: use scheduler.Chain, which is the same; the hook helpers live in the
// core beside scheduler.LogEvents.
func Chain(hooks ...func(scheduler.Event)) func(scheduler.Event) { return scheduler.Chain(hooks...) }
