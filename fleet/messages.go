package fleet

import (
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// History limits of <prefix>.history.<job>.
const (
	// DefaultHistoryLimit is the number of runs a history request without a limit
	// gets.
	DefaultHistoryLimit = 20
	// MaxHistoryLimit caps a history request's limit; a larger one is clamped to it
	// and the reply's limit says so.
	MaxHistoryLimit = 1000
)

// TriggerRequest is the body of <prefix>.trigger.<job>. An empty body is the zero
// value.
type TriggerRequest struct {
	// By names who asked; it is recorded with the run (Run.RequestedBy), and is in
	// the replies and the replica's log.
	By string `json:"by,omitempty"`
	// Wait asks for a second reply when the run has finished.
	Wait bool `json:"wait,omitempty"`
}

// Trigger reply states.
const (
	// StateAccepted: the replica accepted the trigger and starts the run.
	StateAccepted = "accepted"
	// StateFinished: the run has ended; TriggerReply.Run says how.
	StateFinished = "finished"
)

// TriggerReply answers a trigger: first accepted, then (when the request asked to
// wait) finished with the run.
type TriggerReply struct {
	State    string `json:"state"`
	Job      string `json:"job"`
	Instance string `json:"instance"`
	By       string `json:"by,omitempty"`
	// At is when the replica accepted the trigger, by its clock.
	At  time.Time `json:"at"`
	Run *Run      `json:"run,omitempty"`
}

// PauseRequest is the body of <prefix>.pause.<job> and <prefix>.pauseall.
type PauseRequest struct {
	// Reason is required.
	Reason string `json:"reason"`
	// By names who asked. Empty: the scheduler's default, the instance that
	// stores the pause.
	By string `json:"by,omitempty"`
	// Until ends the pause by itself at that time (RFC 3339); it must be in the
	// future by the replica's clock.
	Until time.Time `json:"until,omitzero"`
	// For ends the pause by itself after this long (a Go duration such as "90m"),
	// counted on the replica's clock. At most one of Until and For.
	For string `json:"for,omitempty"`
}

// PauseReply answers a pause: the pause stored.
type PauseReply struct {
	Instance string    `json:"instance"`
	Pause    PauseInfo `json:"pause"`
}

// ResumeRequest is the body of <prefix>.resume.<job> and <prefix>.resumeall.
type ResumeRequest struct {
	// By names who asked, for the replica's log.
	By string `json:"by,omitempty"`
}

// ResumeReply answers a resume.
type ResumeReply struct {
	// Job is the job resumed, "" for resumeall.
	Job      string `json:"job"`
	Instance string `json:"instance"`
	// StillPaused is the all-jobs pause that still holds the job after its own
	// pause was removed (resume does not end it; resumeall does).
	StillPaused *PauseInfo `json:"still_paused,omitempty"`
}

// HistoryRequest is the body of <prefix>.history.<job>.
type HistoryRequest struct {
	// Limit is how many runs, newest first: 0 means DefaultHistoryLimit, more than
	// MaxHistoryLimit is clamped to it, a negative limit is a bad request.
	Limit int `json:"limit,omitempty"`
}

// HistoryReply answers a history request.
type HistoryReply struct {
	Job      string `json:"job"`
	Instance string `json:"instance"`
	// Limit is the limit applied (after the default and the clamp).
	Limit int   `json:"limit"`
	Runs  []Run `json:"runs"`
}

// Replica is one replica's answer to <prefix>.jobs: what it declares and how it
// sees each job's pause.
type Replica struct {
	Instance string `json:"instance"`
	// Version is the replica's fleet.Version.
	Version string `json:"version"`
	// Backend is the scheduler backend's name.
	Backend string `json:"backend"`
	// PauseSupported says whether the backend stores pauses.
	PauseSupported bool       `json:"pause_supported"`
	Jobs           []JobState `json:"jobs"`
}

// JobState is one declared job on one replica.
type JobState struct {
	Name string `json:"name"`
	// Schedule is the schedule in words, as the replica declares it.
	Schedule string `json:"schedule"`
	// Pause is the pause in force on the replica's view (the job's own, or the
	// all-jobs pause with Job ""); nil while the job runs.
	Pause *PauseInfo `json:"pause,omitempty"`
}

// PauseInfo is a pause, as replies show it.
type PauseInfo struct {
	// Job is the paused job, "" for the all-jobs pause.
	Job    string `json:"job"`
	Reason string `json:"reason"`
	By     string `json:"by,omitempty"`
	// At is when the pause was stored (in a pause reply: when the replica was
	// asked).
	At time.Time `json:"at,omitzero"`
	// Until is when the pause ends by itself; absent: until resumed.
	Until time.Time `json:"until,omitzero"`
}

func pauseInfo(p scheduler.Pause) *PauseInfo {
	return &PauseInfo{Job: p.Job, Reason: p.Reason, By: p.By, At: p.At, Until: p.Until}
}

// Run is one attempt at one run, as history and finished triggers show it.
type Run struct {
	Job      string    `json:"job"`
	Slot     time.Time `json:"slot"`
	Instance string    `json:"instance"`
	Token    string    `json:"token"`
	Attempt  int       `json:"attempt"`
	Fence    uint64    `json:"fence,omitempty"`
	Manual   bool      `json:"manual,omitempty"`
	// RequestedBy names who asked for a manual run, when known.
	RequestedBy string           `json:"requested_by,omitempty"`
	Status      scheduler.Status `json:"status"`
	ClaimedAt   time.Time        `json:"claimed_at,omitzero"`
	StartedAt   time.Time        `json:"started_at,omitzero"`
	FinishedAt  time.Time        `json:"finished_at,omitzero"`
	// DurationMS is FinishedAt − StartedAt in milliseconds, for a finished run.
	DurationMS float64 `json:"duration_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
}

func runOf(r scheduler.RunRecord) Run {
	return Run{
		Job: r.Job, Slot: r.Slot, Instance: r.Instance, Token: r.Token, Attempt: r.Attempt,
		Fence: r.Fence, Manual: r.Manual, RequestedBy: r.RequestedBy, Status: r.Status, ClaimedAt: r.ClaimedAt,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		DurationMS: float64(r.Duration) / float64(time.Millisecond), Error: r.Error,
	}
}
