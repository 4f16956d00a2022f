package fleet

import (
	"fmt"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// History limits of <prefix>.HISTORY.<job>.
const (
	// DefaultHistoryLimit is the number of runs a history request without a limit
	// gets.
	DefaultHistoryLimit = 20
	// MaxHistoryLimit caps a history request's limit; a larger one is clamped to it
	// and the reply's limit says so.
	MaxHistoryLimit = 1000
)

// Bounds of the jobs view and of events, so that no job's view outgrows a
// message however long its runs' errors or however many of its runs are going on.
const (
	// MaxViewError is the longest error text the jobs view (a job's last run, last
	// success, last failure and view error), an error reply and Events carry, in
	// bytes: a longer one is cut with backend.TruncateText's mark. History and a
	// finished trigger carry the run's error as stored (at most
	// scheduler.MaxErrorText).
	MaxViewError = 1 << 10
	// MaxViewRunning is how many unfinished runs of one job the jobs view lists
	// (JobState.Running, oldest slot first); JobState.RunningMore counts the rest.
	// The active endpoint lists every one.
	MaxViewRunning = 10
)

// RequestVersion is the request format this version of the protocol speaks. Every
// request is a JSON object that carries it as "v" (Client sets it): a replica
// refuses (400) an empty body, a request without "v", and one whose "v" is newer
// than its own, saying what to send or that it needs an upgrade.
const RequestVersion = 1

// JobsRequest is the body of <prefix>.JOBS.
type JobsRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
}

// ActiveRequest is the body of <prefix>.ACTIVE.<job>.
type ActiveRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
}

// TriggerRequest is the body of <prefix>.TRIGGER.<job>.
type TriggerRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
	// By names who asked; it is recorded with the run (Run.RequestedBy), and is in
	// the replies and the replica's log.
	By string `json:"by,omitempty"`
	// Wait asks for a second reply when the run has finished.
	Wait bool `json:"wait,omitempty"`
}

// TriggerEntryRequest is the body of <prefix>.ENTRIES.<job>.TRIGGER: run one
// schedule entry of the job now, with its payload (Scheduler.RunEntryNow).
type TriggerEntryRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
	// ID is the entry's.
	ID string `json:"id"`
	// By names who asked; it is recorded with the run (Run.RequestedBy).
	By string `json:"by,omitempty"`
	// Wait asks for a second reply when the run has finished.
	Wait bool `json:"wait,omitempty"`
}

// Trigger reply states.
const (
	// StateAccepted: the replica recorded the manual run and its handler starts.
	StateAccepted = "accepted"
	// StateBuffered: the job's run in progress keeps the manual run waiting; it
	// is stored buffered (overlap policies buffer-one and buffer-all) and starts
	// once that run ends (then accepted follows, and finished when asked for),
	// unless the replica stops first: the buffered run is then withdrawn.
	StateBuffered = "buffered"
	// StateFinished: the run has ended; TriggerReply.Run says how.
	StateFinished = "finished"
)

// TriggerReply answers a trigger: first accepted, once the run has started, then
// (when the request asked to wait) finished with the run. A run stored buffered
// behind the job's run in progress is answered buffered at once, before those. A trigger that cannot
// start is answered with an error instead, and nothing ran: 409 (ErrJobBusy), 429
// (ErrTooManyManualRuns), 503, 404.
type TriggerReply struct {
	State string `json:"state"`
	Job   string `json:"job"`
	// Entry is the schedule entry run, for a trigger of one (TriggerEntry).
	Entry    string `json:"entry,omitempty"`
	Instance string `json:"instance"`
	By       string `json:"by,omitempty"`
	// At is when the run started, by the replica's clock.
	At time.Time `json:"at"`
	// Slot and Token are the manual run's identity, as history shows it.
	Slot  time.Time `json:"slot,omitzero"`
	Token string    `json:"token,omitempty"`
	Run   *Run      `json:"run,omitempty"`
}

// BackfillRequest is the body of <prefix>.BACKFILL.<job>: run the job's slots in
// [From, To) that never ran (Scheduler.Backfill), on one replica that declares it.
type BackfillRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V    int       `json:"v"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Rerun also runs the slots that ran, as a new attempt (BackfillRerun).
	Rerun bool `json:"rerun,omitempty"`
	// Concurrency runs that many slots at once (BackfillConcurrency); 0 is 1.
	Concurrency int `json:"concurrency,omitempty"`
	// Entry backfills this schedule entry of the job instead of the job's own
	// slots (BackfillEntry); AllEntries every entry of it (BackfillAllEntries).
	// A job of entries has no slots of its own: one of them is needed.
	Entry      string `json:"entry,omitempty"`
	AllEntries bool   `json:"all_entries,omitempty"`
	// By names who asked; it is in the replies and the replica's log.
	By string `json:"by,omitempty"`
	// Wait asks for the finished reply once every taken slot has ended.
	Wait bool `json:"wait,omitempty"`
}

// BackfillReply answers a backfill: first accepted, once the range is checked
// and its slots sorted (Counts has how many are taken, "pending", and how many
// ran already), then (when the request asked to wait) finished, with every
// slot, in parts (Part of Parts) when they do not fit in one message. A backfill
// that cannot start is answered with an error instead, and nothing ran.
type BackfillReply struct {
	State string `json:"state"`
	Job   string `json:"job"`
	// Entry and AllEntries are the request's: which entries were backfilled.
	Entry      string    `json:"entry,omitempty"`
	AllEntries bool      `json:"all_entries,omitempty"`
	Instance   string    `json:"instance"`
	By         string    `json:"by,omitempty"`
	At         time.Time `json:"at"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Rerun      bool      `json:"rerun,omitempty"`
	// Counts is the number of slots by outcome (scheduler.BackfillOutcome).
	Counts map[string]int `json:"counts"`
	// Error says why the wait ended before every slot did (the slots go on).
	Error string         `json:"error,omitempty"`
	Part  int            `json:"part,omitempty"`
	Parts int            `json:"parts,omitempty"`
	Slots []BackfillSlot `json:"slots,omitempty"`
}

// BackfillSlot is one slot of a finished backfill (scheduler.BackfillSlot).
type BackfillSlot struct {
	// Entry is the schedule entry the slot is of ("" for the job's own).
	Entry    string           `json:"entry,omitempty"`
	Slot     time.Time        `json:"slot"`
	Outcome  string           `json:"outcome"`
	Status   scheduler.Status `json:"status,omitempty"`
	Attempt  int              `json:"attempt,omitempty"`
	Instance string           `json:"instance,omitempty"`
	Error    string           `json:"error,omitempty"`
}

// PauseRequest is the body of <prefix>.PAUSE.<job> and <prefix>.PAUSEALL.
type PauseRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
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

// ResumeRequest is the body of <prefix>.RESUME.<job> and <prefix>.RESUMEALL.
type ResumeRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
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
	// NotPaused says there was nothing to resume: the replica read the stored
	// pauses before removing the pause and none of the job (for resumeall: no
	// all-jobs pause) was in force. Absent when a pause was in force, and from a
	// replica that could not read the pauses or predates this field.
	NotPaused bool `json:"not_paused,omitempty"`
}

// HistoryRequest is the body of <prefix>.HISTORY.<job>.
type HistoryRequest struct {
	// V is the request format, RequestVersion; Client sets it when zero.
	V int `json:"v"`
	// Limit is how many runs, newest first: 0 means DefaultHistoryLimit, more than
	// MaxHistoryLimit is clamped to it, a negative limit is a bad request.
	Limit int `json:"limit,omitempty"`
	// Entry asks for the runs of this schedule entry of the job, which the
	// job's own history does not hold.
	Entry string `json:"entry,omitempty"`
	// Status keeps the runs of these statuses only; Since those of slots at or
	// after it. The replica reads at most MaxHistoryScan of the newest records
	// to find Limit that match (HistoryReply.Scanned, ScanLimited).
	Status []scheduler.Status `json:"status,omitempty"`
	Since  time.Time          `json:"since,omitzero"`
}

// MaxHistoryScan bounds the records a replica reads for a history request with
// a filter (HistoryRequest.Status, Since).
const MaxHistoryScan = 10_000

// HistoryReply answers a history request.
type HistoryReply struct {
	Job      string `json:"job"`
	Instance string `json:"instance"`
	// Entry is the request's: the runs are that entry's.
	Entry string `json:"entry,omitempty"`
	// Limit is the limit applied (after the default and the clamp).
	Limit int   `json:"limit"`
	Runs  []Run `json:"runs"`
	// Scanned is how many records the replica read to filter them (a request
	// with Status or Since); ScanLimited says it stopped at MaxHistoryScan
	// with fewer than Limit found: older runs that match may exist.
	Scanned     int  `json:"scanned,omitempty"`
	ScanLimited bool `json:"scan_limited,omitempty"`
	// Part and Parts number this message among the messages of one reply (Part 1
	// to Parts). A reply that would not fit in one message is sent in as many as
	// it takes, each with some of the runs, in order. Client reads every part and
	// returns one reply with every run, Parts the count and Part zero.
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
}

// Replica is one replica's answer to <prefix>.JOBS: what it declares and how it
// sees each job's pause.
type Replica struct {
	Instance string `json:"instance"`
	// Version is the replica's fleet.Version.
	Version string `json:"version"`
	// Backend is the scheduler backend's name.
	Backend string `json:"backend"`
	// PauseSupported says whether the backend stores pauses.
	PauseSupported bool `json:"pause_supported"`
	// Entries is how many schedule entries the replica follows (of the jobs it
	// declares); OrphanedEntries how many stored entries are of jobs it does not
	// declare (scheduler.EntryCounts): no replica that does not declare a job
	// runs, lists or changes its entries.
	Entries         int        `json:"entries,omitempty"`
	OrphanedEntries int        `json:"orphaned_entries,omitempty"`
	Jobs            []JobState `json:"jobs"`
	// ServiceID is the replica's micro service id, unique to each Serve: it tells
	// apart two replicas that answer as one instance.
	ServiceID string `json:"service_id,omitempty"`
	// Part and Parts number this message among the messages of the replica's
	// answer, each with some of its jobs (see HistoryReply.Part). Client.Jobs
	// lists a replica once every part of its answer arrived.
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
}

// Job states in JobState.State.
const (
	// JobActive: no pause holds the job; its slots run.
	JobActive = "active"
	// JobPaused: a pause holds the job (JobState.Pause says which).
	JobPaused = "paused"
	// JobEnded: the job's schedule has no slot left (a one-time job past its
	// instant, a bounded one past its end), or its run limit was reached
	// (JobState.LimitReached); no pause holds it.
	JobEnded = "ended"
)

// ViewHistoryLimit is how many of a job's most recent history records a replica
// reads to fill a JobState's last run, last success and last failure when its
// backend cannot read the last runs of every job at once
// (backend.LastRunsReader): one with none among them shows none.
const ViewHistoryLimit = scheduler.LastRunsDepth

// JobState is one declared job on one replica, with the replica's view of its
// runs: the pause it sees, the next slot by its clock, and what it reads in the
// backend the replicas share (history and unfinished runs).
type JobState struct {
	Name string `json:"name"`
	// Schedule is the schedule in words, as the replica declares it.
	Schedule string `json:"schedule"`
	// State is JobActive, JobPaused or JobEnded.
	State string `json:"state"`
	// MaxRuns is the job's fleet-wide run limit (scheduler.WithMaxRuns); 0:
	// none. LimitReached says the replica was told it is reached: its loop of
	// the job ended (RunNow still runs it).
	MaxRuns      int  `json:"max_runs,omitempty"`
	LimitReached bool `json:"limit_reached,omitempty"`
	// Pause is the pause in force on the replica's view (the job's own, or the
	// all-jobs pause with Job ""); nil while the job runs.
	Pause *PauseInfo `json:"pause,omitempty"`
	// Next is the job's next slot that will run, by the replica's clock and its
	// view of the pauses (scheduler.JobInfo.Next): past the end of a pause that
	// holds the job; absent when the schedule has no further slot or a pause
	// without an end holds the job.
	Next time.Time `json:"next,omitzero"`
	// LastRun is the newest run that started (it may still be running), as
	// scheduler.LastRuns reads it; LastSuccess the newest that ended ok;
	// LastFailure the newest that ended error, timeout, cancelled, lost or
	// superseded. Slots skipped, late or paused are none of these.
	LastRun     *Run `json:"last_run,omitempty"`
	LastSuccess *Run `json:"last_success,omitempty"`
	LastFailure *Run `json:"last_failure,omitempty"`
	// Running are the job's unfinished runs in the run store (scheduler's Active),
	// every instance's, oldest slot first: empty without leases. At most
	// MaxViewRunning; RunningMore counts the others (the active endpoint lists
	// every one).
	Running     []ActiveRun `json:"running,omitempty"`
	RunningMore int         `json:"running_more,omitempty"`
	// ViewError says why the runs could not be read (a backend call failed, or took
	// longer than the replica's budget for a jobs reply); the fields above that
	// come from the backend are then absent. The errors of the view (here and in
	// its runs) are at most MaxViewError bytes.
	ViewError string `json:"view_error,omitempty"`
	// EntriesOnly says the job has no schedule of its own (scheduler.Declare):
	// Next is then its entries' earliest next slot, and the last runs are its
	// entries' newest that this replica knows (it ran them, or read them).
	EntriesOnly bool `json:"entries_only,omitempty"`
	// Entries sums up the job's schedule entries, for a job that has any (and
	// every job of entries).
	Entries *EntriesState `json:"entries,omitempty"`
}

// EntriesState sums up a job's schedule entries (scheduler.EntriesSummary).
type EntriesState struct {
	// Active, Paused and Ended count the entries the replica follows by state.
	Active int `json:"active"`
	Paused int `json:"paused"`
	Ended  int `json:"ended"`
	// Failing are the entries whose newest run that ended failed, as the
	// replica saw them fail and checked in the shared history, by ID: at most
	// scheduler.MaxSummaryFailing, FailingMore counts the others. Unchecked
	// says the history could not be read to check them all.
	Failing     []string `json:"failing,omitempty"`
	FailingMore int      `json:"failing_more,omitempty"`
	Unchecked   bool     `json:"unchecked,omitempty"`
}

// Total is how many entries are counted.
func (e EntriesState) Total() int { return e.Active + e.Paused + e.Ended }

// Counts says the entries by state, "2 active, 1 paused", or "none".
func (e EntriesState) Counts() string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{{e.Active, "active"}, {e.Paused, "paused"}, {e.Ended, "ended"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ActiveRun is an unfinished run, as the active endpoint and JobState.Running show
// it: a lease held (Live) or left behind by an instance that stopped renewing it.
type ActiveRun struct {
	Job      string    `json:"job"`
	Slot     time.Time `json:"slot"`
	Instance string    `json:"instance"`
	Token    string    `json:"token"`
	Attempt  int       `json:"attempt"`
	Fence    uint64    `json:"fence,omitempty"`
	// Expires is when the lease ends unless renewed.
	Expires time.Time `json:"expires,omitzero"`
	// Live says the lease has not expired: the run is going on now.
	Live bool `json:"live"`
	// RetryAt is set when Attempt failed and its retry is stored: any replica
	// claims the next attempt at that time (the run store's clock).
	RetryAt time.Time `json:"retry_at,omitzero"`
	// CancelBy is set when a later slot of the job asked the run to end (overlap
	// policy cancel-other): the run ends at its holder's next heartbeat.
	CancelBy *CancelRequest `json:"cancel_by,omitempty"`
	// Buffered says the slot is stored buffered (overlap policies buffer-one and
	// buffer-all): it runs once the job's run in progress ends; Instance is the
	// replica that buffered it, Attempt 0.
	Buffered bool `json:"buffered,omitempty"`
}

// CancelRequest names the later slot, and the replica, that asked a run to end.
type CancelRequest struct {
	Slot     time.Time `json:"slot"`
	Instance string    `json:"instance"`
}

func activeRunOf(job string, a scheduler.ActiveRun) ActiveRun {
	r := ActiveRun{Job: job, Slot: a.Slot, Instance: a.Instance, Token: a.Token, Attempt: a.Attempt,
		Fence: a.Fence, Expires: a.Expires, Live: a.Live, RetryAt: a.RetryAt, Buffered: a.Buffered}
	if a.Cancel != nil {
		r.CancelBy = &CancelRequest{Slot: a.Cancel.Slot, Instance: a.Cancel.Instance}
	}
	return r
}

// ActiveReply answers <prefix>.ACTIVE.<job> (ActiveRequest): the job's unfinished
// runs, oldest slot first.
type ActiveReply struct {
	Job      string      `json:"job"`
	Instance string      `json:"instance"`
	Runs     []ActiveRun `json:"runs"`
	// Part and Parts number this message among the messages of one reply (see
	// HistoryReply.Part).
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
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
	return &PauseInfo{Job: p.Job, Reason: backend.TruncateText(p.Reason, scheduler.MaxPauseText),
		By: backend.TruncateText(p.By, scheduler.MaxPauseText), At: p.At, Until: p.Until}
}

// Run is one attempt at one run, as history and finished triggers show it.
type Run struct {
	Job string `json:"job"`
	// Entry is the schedule entry the run is of, if any.
	Entry    string    `json:"entry,omitempty"`
	Slot     time.Time `json:"slot"`
	Instance string    `json:"instance"`
	Token    string    `json:"token"`
	Attempt  int       `json:"attempt"`
	Fence    uint64    `json:"fence,omitempty"`
	Manual   bool      `json:"manual,omitempty"`
	// Backfill: the attempt was run by a backfill (Scheduler.Backfill).
	Backfill bool `json:"backfill,omitempty"`
	// RequestedBy names who asked for a manual run, when known.
	RequestedBy string           `json:"requested_by,omitempty"`
	Status      scheduler.Status `json:"status"`
	ClaimedAt   time.Time        `json:"claimed_at,omitzero"`
	StartedAt   time.Time        `json:"started_at,omitzero"`
	FinishedAt  time.Time        `json:"finished_at,omitzero"`
	// DurationMS is FinishedAt − StartedAt in milliseconds, for a finished run.
	DurationMS float64 `json:"duration_ms,omitempty"`
	// LagMS is the start lag, StartedAt − Slot in milliseconds, for a run that
	// started (jitter included).
	LagMS float64 `json:"lag_ms,omitempty"`
	Error string  `json:"error,omitempty"`
}

// runOf is r as replies show it, with its error cut at maxError bytes (a record
// that an earlier version or another writer stored may be longer than the
// scheduler now stores).
func runOf(r scheduler.RunRecord, maxError int) Run {
	out := Run{
		Job: r.Job, Entry: r.Entry, Slot: r.Slot, Instance: r.Instance, Token: r.Token, Attempt: r.Attempt,
		Fence: r.Fence, Manual: r.Manual, Backfill: r.Backfill, RequestedBy: backend.TruncateText(r.RequestedBy, scheduler.MaxPauseText),
		Status: r.Status, ClaimedAt: r.ClaimedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		DurationMS: ms(r.Duration), Error: backend.TruncateText(r.Error, maxError),
	}
	if !r.StartedAt.IsZero() && !r.Slot.IsZero() {
		out.LagMS = ms(r.StartedAt.Sub(r.Slot))
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
