package backend

import (
	"context"
	"math"
	"strconv"
	"time"
)

// Forever is the dedupe window of a backend that never forgets a claimed slot.
const Forever time.Duration = math.MaxInt64

// Backend is the store that decides, for every (job, slot), which instance runs it.
//
// The one rule that matters: for one job and one slot, Claim returns true for exactly
// one instance, and it keeps returning true for that instance's token when the same
// claim is repeated (network clients retry). Everything else is bookkeeping.
//
// Optional capabilities are separate interfaces found by type assertion
// ([JobChecker], [ClaimRecorder], [LeaseBackend], [JobWindower]), so a backend written
// today keeps compiling when new ones appear.
type Backend interface {
	// Name is shown to users, e.g. "memory" or "jetstream".
	Name() string
	// DedupeWindow is how long the backend remembers a claimed slot; Forever if it
	// never forgets. A job whose jitter + max lateness is not below the window that
	// applies to it is rejected at registration.
	DedupeWindow() time.Duration
	// Init connects and checks the store. Called by Start and before reads.
	Init(ctx context.Context) error
	// PrepareJob does one-time setup for a job (a stream, a bucket, a table).
	PrepareJob(ctx context.Context, job JobLimits) error
	// Claim reports whether this claim won the slot. It must return true for exactly
	// one token per (job, slot), and true again when the winning token is repeated.
	Claim(ctx context.Context, in ClaimInput) (bool, error)
	// RecordManualRun records a run started by RunNow. There is no deduplication.
	// It returns the slot the run is recorded under (normally in.Slot).
	RecordManualRun(ctx context.Context, in ClaimInput) (time.Time, error)
	// SaveResult stores how a run ended, keeping at most what keep allows.
	SaveResult(ctx context.Context, job string, r StoredResult, keep Retention) error
	// History returns the job's recent runs from all instances, newest first.
	History(ctx context.Context, job string, limit int) ([]RunRecord, error)
	// Close releases what the backend itself opened (never a connection it was given).
	Close(ctx context.Context) error
}

// JobChecker is implemented by backends that can refuse a job they cannot run safely.
// The error is returned from the registration call.
type JobChecker interface {
	CheckJob(job JobLimits) error
}

// JobWindower is implemented by backends whose dedupe window differs per job (for
// example a per-job stream with its own duplicate window). The scheduler checks a
// job's jitter + max lateness against WindowFor(job) instead of DedupeWindow().
type JobWindower interface {
	WindowFor(job JobLimits) time.Duration
}

// ClaimRecorder is implemented by backends that record a won lease's claim in
// their history. With a run store that is a Settler, RecordClaim is called only
// where the record decides (RecordDecider), before the handler. With any other
// run store it is called for every won attempt but a manual run.
type ClaimRecorder interface {
	RecordClaim(ctx context.Context, in ClaimInput) error
}

// LeaseBackend is implemented by backends with leases. When present, the scheduler
// claims through the RunStore and gains backups, overlap protection, catch-up and
// hand-over.
type LeaseBackend interface {
	Runs() RunStore
}

// ClaimInput is what an instance sends when it claims a slot. It may gain fields;
// a backend that ignores them keeps working.
type ClaimInput struct {
	Job string
	// Slot is the scheduled time at millisecond precision: with Job, the run's identity.
	Slot time.Time
	// Token is random and unique to this attempt. It is also the run's fencing token.
	Token    string
	Instance string
	// Attempt is 1 for a first claim, 2 and up for takeovers by backups.
	Attempt int
	Manual  bool
	// RequestedBy names who asked for a manual run (RunNow with RequestedBy).
	RequestedBy string
	// Backfill says the slot was run on request by Scheduler.Backfill.
	Backfill bool
	// At is when the instance sent the claim, by its own clock.
	At          time.Time
	HistorySize int
	HistoryTTL  time.Duration
}

// Retention bounds a job's stored history.
type Retention struct {
	// Size is the number of results kept per job.
	Size int
	// TTL, when set, drops results older than this.
	TTL time.Duration
}

// Until is when a record finished at t leaves a history kept so (zero: never by
// time).
func (k Retention) Until(t time.Time) time.Time {
	if k.TTL <= 0 || t.IsZero() {
		return time.Time{}
	}
	return t.Add(k.TTL)
}

// JobLimits describes a job to its backend: what PrepareJob sets up and what
// CheckJob judges. It may gain fields.
type JobLimits struct {
	Job      string
	Schedule string
	// Interval is the fixed interval of an Every job; zero for cron jobs.
	Interval time.Duration
	Jitter   time.Duration
	MaxLate  time.Duration
	Timeout  time.Duration
	Lease    time.Duration
	Overlap  OverlapPolicy
	CatchUp  CatchUpPolicy
	// CatchUpWindow bounds how far back catch-up looks.
	CatchUpWindow time.Duration
	// DedupeWindow is the window the job asked for; zero means the backend's default.
	DedupeWindow time.Duration
	// ClockSkew is the scheduler's clock skew allowance (Config.MaxClockSkew) and
	// CallTimeout its bound on a backend call: with the timing above, what a
	// backend needs to fit a dedupe window to the job.
	ClockSkew   time.Duration
	CallTimeout time.Duration
	Retention   Retention
	// MaxRuns is the most scheduled slots the job runs, counted fleet-wide by
	// the run store (RunCounter); zero for no limit.
	MaxRuns int
	// Retry is the job's retry policy; nil for none.
	Retry *RetryLimits
	// MaxManual is how many manual runs of the job may be in progress at once
	// on one instance.
	MaxManual int
	// PauseAfter pauses the job after that many failed slots in a row; zero
	// for never.
	PauseAfter int
	// BufferCap is how many slots OverlapBufferAll keeps buffered; zero for
	// the default.
	BufferCap int
	// Concurrency is how many of the job's slots may run at once under
	// OverlapSkip or a buffer policy; 0 or 1: one.
	Concurrency int
	// DST is the daylight saving time policy of a cron schedule, its defaults
	// filled in (DSTPolicy.Normal); nil for other schedules.
	DST *DSTPolicy
	// Window is the dedupe window that applies to the job: the backend's for
	// it (JobWindower), Forever when it remembers every slot. The scheduler
	// sets it once the backend has said it, before CheckJob.
	Window time.Duration
}

// RetryLimits is a job's retry policy as numbers: what a backend or a fleet
// view can tell of it.
type RetryLimits struct {
	// Attempts is how many attempts a slot may have in all.
	Attempts int
	// Backoff is the delay before the first retry, doubling up to MaxBackoff
	// (zero: no cap but the next slot), with up to Jitter of it added.
	Backoff    time.Duration
	MaxBackoff time.Duration
	Jitter     float64
	// Filtered says a function of the job decides which failures are retried.
	Filtered bool
}

// Status says how a run ended, or that it is still running.
type Status string

// Run statuses.
const (
	StatusRunning   Status = "running"
	StatusOK        Status = "ok"
	StatusError     Status = "error"
	StatusTimeout   Status = "timeout"
	StatusCancelled Status = "cancelled"
	// StatusSkipped is a slot not run because an earlier slot still held its lease.
	StatusSkipped Status = "skipped"
	// StatusLost is a run whose holder lost its lease before finishing.
	StatusLost Status = "lost"
	// StatusSuperseded is a result written by a stale holder after a backup took over.
	StatusSuperseded Status = "superseded"
	// StatusLate is a slot nobody started before its deadline.
	StatusLate Status = "late"
	// StatusMissed is a slot due while no instance could claim it (every one
	// down, paused or cut off from the store), recorded once one could
	// (RunClaim.Missed): not run.
	StatusMissed Status = "missed"
	// StatusPaused is a slot that fell while its job was paused: not run.
	StatusPaused Status = "paused"
	// StatusLimit is a slot not run because the job's run limit
	// (RunClaim.MaxRuns) was reached.
	StatusLimit Status = "limit"
	// StatusDeadline is a slot not ended ok by its deadline (the job's or
	// entry's Deadline after the slot): a judgement of the slot, stored once
	// (OnceRecorder, DeadlineToken), beside the records of its attempts. The slot may still
	// end ok later.
	StatusDeadline Status = "deadline"
	// StatusExcluded is a slot on a day of a calendar its job or entry names
	// (RunClaim.ExcludedWhy): not run, never run later.
	StatusExcluded Status = "excluded"
)

// Finished reports whether s is a final status.
func (s Status) Finished() bool { return s != StatusRunning && s != "" }

// NotRun reports whether s is a slot's decision not to run it: late, missed,
// skipped, paused, limit or excluded.
func (s Status) NotRun() bool {
	switch s {
	case StatusLate, StatusMissed, StatusSkipped, StatusPaused, StatusLimit, StatusExcluded:
		return true
	}
	return false
}

// DeadlineToken is the token of the deadline record of the slot at slot: one
// per slot, so that every instance judging it writes the same record.
func DeadlineToken(slot time.Time) string {
	return "deadline-" + strconv.FormatInt(slot.UnixMilli(), 10)
}

// OnceRecorder is implemented by backends that can tell the first of several
// writers of a record from the others. Instances that judge the same slot (a
// deadline) write the same record; the one that stored it reports the judgement.
// Without it the scheduler reads the history first and writes with SaveResult, so
// two instances judging at the same instant may both report it (the history still
// shows one record: records of the same token are one).
type OnceRecorder interface {
	// RecordOnce stores rec in job's history, keeping what keep allows, unless
	// a record of the same slot and token is stored already; it reports whether
	// this call stored it. Writes of the same record from several instances
	// race to one winner. A retry of a write whose answer was lost is told
	// what the lost answer said: a store tells it by the record's Instance, or
	// by a mark of its own.
	// A store may forget a record it no longer holds (retention) or, for
	// a store that deduplicates by time, one written longer ago than its
	// DedupeWindow: a caller reads the history first.
	RecordOnce(ctx context.Context, job string, rec StoredResult, keep Retention) (bool, error)
}

// Judgement reports whether s is a judgement of a slot (a deadline record)
// rather than the record of an attempt or of a decision about the slot: what
// reads a slot's fate from its records passes it over.
func (s Status) Judgement() bool { return s == StatusDeadline }

// StoredResult is how one attempt at a run ended, as stored by SaveResult.
type StoredResult struct {
	Slot     time.Time
	Token    string
	Instance string
	Attempt  int
	Manual   bool
	// RequestedBy names who asked for a manual run, when known.
	RequestedBy string
	// Backfill says the attempt was run on request by Scheduler.Backfill.
	Backfill   bool
	Status     Status
	StartedAt  time.Time
	FinishedAt time.Time
	Error      string
	// Fence is the lease's fencing number when the run held a lease (0 otherwise).
	Fence uint64
}

// ClaimRecord is a won claim as a backend stores it, the other half of a history
// record.
type ClaimRecord struct {
	Slot     time.Time
	Token    string
	Instance string
	Attempt  int
	Manual   bool
	// Backfill says the attempt was run on request by Scheduler.Backfill.
	Backfill bool
	At       time.Time
	// RequestedBy names who asked for a manual run, when known.
	RequestedBy string
}

// RunRecord is one attempt at one run, as History returns it.
type RunRecord struct {
	Job string
	// Entry is the schedule entry the run is of, if any (set by the scheduler's
	// EntryHistory; a backend returns the entry's run name as Job).
	Entry    string
	Slot     time.Time
	Instance string
	Token    string
	Attempt  int
	Manual   bool
	// RequestedBy names who asked for a manual run, when known.
	RequestedBy string
	// Backfill says the attempt was run on request by Scheduler.Backfill.
	Backfill   bool
	Status     Status
	ClaimedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	Duration   time.Duration
	Error      string
	Fence      uint64
}

// RecordDecider is implemented by a [ClaimRecorder] that can tell whether the
// record of a won lease (any attempt) may still decide who runs the slot: true
// where instances without leases may claim the same job (a fleet in a rolling
// upgrade that turns leases on or off), whose claim the record meets. The scheduler
// then writes the record before the handler starts and does not run the slot when
// the record answers [ErrClaimedElsewhere]. When it reports false nothing is
// written before the handler: a [Settler] run store's records stand for the claim
// record, and a seed-shaped store's record is written beside the handler. A
// ClaimRecorder without this method is treated as deciding.
type RecordDecider interface {
	RecordDecides(job string) bool
}
