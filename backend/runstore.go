package backend

import (
	"context"
	"time"
)

// RunStore keeps leases: time-limited rights to run one (job, slot), each held by
// one token. Lease times are judged by the store's clock, never by an instance's.
// Every change is atomic in the store (a compare-and-set, a transaction).
//
// # One stored decision per slot
//
// For each (job, slot) the store keeps one state, a machine.Run. Package
// backend/machine draws its transitions and decides every one of them. A store
// reads the slot, asks the machine, and writes the decision conditionally on
// what it read. It keeps no rule of its own.
//
// The rules that follow from it:
//   - A decision is stored before the claimer acts on it.
//   - A slot stored skipped, late, limit or paused never runs, unless a
//     catch-up or backfill claim reopens it (RunClaim.MayReopen).
//   - The deciding token is told its decision again when it repeats its claim;
//     every other claim is told done (DecidedOutcome).
//   - A store may forget a run once it holds nothing and RunClaim.Keep has
//     passed (machine.Run.Forgotten).
//   - A Settler stores each terminal record in the step that stores its state.
//
// docs/concepts.md ("A slot's life") gives the reasons.
type RunStore interface {
	// Claim decides in from the stored state of the run (machine.Claim) and
	// stores the decision. It answers won, running, done, overlap, late or
	// none; retry, buffered, limit and paused where the claim asks for them.
	// On won it stores a live lease for in.Token. Invalid claims fail with an
	// error matching ErrInvalidClaim.
	Claim(ctx context.Context, in RunClaim) (ClaimResult, error)
	// Heartbeat extends the lease only if key.Token still holds it. Otherwise it
	// returns an error matching ErrLeaseLost.
	Heartbeat(ctx context.Context, key RunKey, lease time.Duration) error
	// Finish marks the run finished with status, only with the token that holds it.
	// A stale token gets an error matching ErrStaleToken and changes nothing.
	Finish(ctx context.Context, key RunKey, status Status) error
	// Release ends token's live lease at once so a backup can take over without
	// waiting for expiry. Releasing a lease that is no longer held is not an error.
	Release(ctx context.Context, key RunKey) error
	// Active lists the job's unfinished runs and whether each lease is live.
	Active(ctx context.Context, job string) ([]ActiveRun, error)
}

// RunKey names one attempt's hold on a run: the job, the slot and the token that
// claimed it. Every RunStore call after Claim takes one.
type RunKey struct {
	Job   string
	Slot  time.Time
	Token string
}

// ActiveLister is implemented by run stores that list the unfinished runs of many
// jobs in one reading. A starting scheduler reads its jobs' unfinished runs with it
// once, instead of calling Active once per job, so its reads at start-up do not
// grow with the number of jobs.
type ActiveLister interface {
	// ActiveJobs returns, for each of jobs, what Active returns for it (a job
	// with no unfinished run maps to an empty list). With an error, the jobs it
	// could read are in the map and those it could not are left out.
	ActiveJobs(ctx context.Context, jobs []string) (map[string][]ActiveRun, error)
}

// EntryRunLister is implemented by run stores of backends with schedule entries
// (EntryStore) that can tell which entries of a job hold runs, removed entries
// included. A run of an entry removed while its holder was down has nobody to
// take it over: no instance follows the entry any more. A starting scheduler
// asks once which entries of its jobs hold runs, and ends the unfinished runs of
// those the entry store no longer holds (finished cancelled, never run again).
// Without it, such a run is ended only by an instance that followed the entry
// when it was removed.
type EntryRunLister interface {
	// EntryRunNames returns the run names (EntryRunName) of the entries of jobs
	// that may hold an unfinished run: every such entry once, in any order, and
	// maybe others (whose runs are all finished but still remembered). Neither a
	// job's own name nor another job's entries are among them.
	EntryRunNames(ctx context.Context, jobs []string) ([]string, error)
}

// LeaseWatcher is implemented by run stores that can tell a backup at once when a
// run's lease ends (expired, released or finished). Without it the scheduler polls.
type LeaseWatcher interface {
	// WatchRun returns a channel that is closed when the stored state of (job, slot)
	// may have changed so that a new Claim could give a different outcome. The
	// watch ends when ctx is done.
	WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error)
}

// Retrier is implemented by run stores that hand a failed attempt's slot to any
// instance for a retry (RetryPolicy with leases). Without it the scheduler retries
// in the process that ran the failed attempt.
type Retrier interface {
	// Retry ends key's attempt as failed and ends its lease; a Settler stores
	// its record. The slot's next attempt may be claimed from delay to delay +
	// within after now, by the store's clock. Before that a claim is answered
	// OutcomeRetry with RetryIn. In the window another token wins attempt + 1,
	// with Retried set. After it, the slot is finished StatusError: the last
	// failure stands. A claim by the failed token is answered done, StatusError.
	// The run is remembered for delay + within + Keep. Retry is accepted like
	// Finish and is repeat-safe, also once the retry was claimed.
	Retry(ctx context.Context, key RunKey, delay, within time.Duration) error
}

// OverlapCanceller is implemented by run stores that support OverlapCancelOther.
// Without it the scheduler refuses the policy at registration.
//
// A first claim under OverlapCancelOther stores a CancelRequest on each busy run
// of an earlier slot (machine.Run.Busy) that has none. It is answered running,
// with WaitsFor the newest of them. Its own slot stays unstored, so its deadline
// still holds. A busy run of a later slot makes the claim skipped: an older slot
// never cancels a newer one. A run with a cancel request:
//   - Heartbeat extends its lease and returns a *CancelError (ErrCancelRequested);
//   - a claim that would take it over, or run its retry, finishes it cancelled;
//   - Active lists it with Cancel set.
type OverlapCanceller interface {
	// CancelsOverlap reports whether the store implements OverlapCancelOther.
	CancelsOverlap() bool
}

// OverlapBufferer is implemented by run stores that support OverlapBufferOne and
// OverlapBufferAll. Without it the scheduler refuses the policies at registration.
//
// A first claim under a buffer policy, while another slot of the job is busy
// (machine.Run.Busy) or buffered, stores its slot buffered: no lease, attempt 0.
// With RunClaim.Buffers() slots buffered already, it stores the slot skipped. A
// buffered slot keeps no deadline: it is a stored decision to run. A claim of it
// is answered OutcomeBuffered, with WaitsFor, while:
//   - another slot of the job is busy, or an earlier one is buffered (under
//     any policy but OverlapAllow);
//   - the job is paused (RunClaim.PausedWhy);
//   - the slot is a manual one and the claim's token is not its own.
//
// Otherwise the claim wins attempt 1. An adoption (TakeoverOnly) of a manual
// slot ends it lost instead. Finish or Settle by the buffering token withdraws
// the slot. Heartbeat, Release and Retry of a buffered slot hold no lease:
// ErrLeaseLost, nothing, ErrStaleToken. Active lists buffered slots with
// Buffered set. WatchRun of a buffered slot closes once it is claimed or
// finished.
type OverlapBufferer interface {
	// BuffersOverlap reports whether the store implements OverlapBufferOne and
	// OverlapBufferAll.
	BuffersOverlap() bool
}

// DefaultBufferCap is how many slots of a job OverlapBufferAll keeps buffered at
// once when RunClaim.BufferCap is zero; MaxBufferCap the most a claim may ask.
const (
	DefaultBufferCap = 100
	MaxBufferCap     = 10000
)

// CancelRequest is the stored request of a later slot's claim, under
// OverlapCancelOther, that a run end.
type CancelRequest struct {
	// Slot is the slot whose claim asked.
	Slot time.Time
	// Instance and Token are the asking claim's.
	Instance string
	Token    string
}

// MinLease is the shortest lease a run store accepts (lease stores count expiry
// in seconds).
const MinLease = time.Second

// DefaultRunKeep is how long a run store remembers a run when RunClaim.Keep is zero:
// long enough that an instance arriving late for a slot is told it is done.
const DefaultRunKeep = 24 * time.Hour

// RunClaim is what an instance sends to claim a lease. It may gain fields.
type RunClaim struct {
	Job      string
	Slot     time.Time
	Token    string
	Instance string
	// Lease is how long the lease lives without a heartbeat.
	Lease time.Duration
	// Deadline is the latest store time at which nobody having started the slot it
	// may still be started (slot + max lateness, or the catch-up window).
	Deadline time.Time
	// Overlap says whether the slot may start while another slot of the job
	// (earlier, or later: a catch-up slot) still holds a live lease.
	Overlap OverlapPolicy
	// TakeoverOnly claims may take over an expired or released run but never create
	// one: with nothing stored the outcome is none.
	TakeoverOnly bool
	// Keep is how long a finished run is remembered, so late instances see done.
	Keep time.Duration
	// ReopenPaused lets the claim run a slot stored finished paused, before
	// Deadline: catch-up once the pause has ended. The claim wins attempt + 1,
	// with a bigger fence and Reopened set. A store that ignores it answers done:
	// the slot stays paused, never run twice.
	ReopenPaused bool
	// Backfill lets the claim run, before Deadline, a slot another token stored
	// finished late, missed, skipped, limit or paused: a slot that never ran
	// (Scheduler.Backfill). It is won as with ReopenPaused. A store that ignores
	// it answers done.
	Backfill bool
	// Rerun, with Backfill, also lets the claim run a slot that did run (finished
	// with any other status), but only while the stored attempt is RerunAttempt:
	// of several reruns asked on the strength of one attempt, one runs.
	Rerun        bool
	RerunAttempt int
	// BufferCap is, under OverlapBufferAll, the most slots of the job stored
	// buffered at once (DefaultBufferCap when zero); OverlapBufferOne keeps one.
	BufferCap int
	// Concurrency is, under OverlapSkip or a buffer policy, how many of the
	// job's slots may hold a run at once across the fleet (0 and 1: one): a
	// slot is skipped or buffered once that many others are busy, and a
	// buffered slot runs, oldest first, once fewer are. A store that ignores
	// it runs one at a time (ConcurrencyCapper).
	Concurrency int
	// MaxRuns is the most first wins of the job's slots the store counts
	// (RunCounter); once it has counted MaxRuns, a first claim stores its slot
	// finished StatusLimit. Zero: no limit, nothing counted.
	MaxRuns int
	// Manual marks a manual run's claim (Scheduler.RunNow), on a slot off the
	// job's schedule. Its run is never taken over: once its lease ends, a claim
	// ends it lost. A refused manual claim is answered, not stored. RequestedBy
	// names who asked for it.
	Manual      bool
	RequestedBy string
	// PausedWhy, when set, says the job (or the entry) is paused. A claim that
	// would start an attempt stores it finished StatusPaused instead, with this
	// reason, and is answered OutcomePaused. A buffered slot stays buffered.
	PausedWhy string
	// ExcludedWhy, when set, says a calendar excludes the slot's day. A claim of
	// a slot nothing is stored for stores it finished StatusExcluded with this
	// reason and is answered OutcomeExcluded; a slot already stored (running,
	// buffered, finished) is decided as without it. An excluded slot is never
	// reopened.
	ExcludedWhy string
	// LateWhy is the reason a slot this claim stores late is recorded with;
	// empty for the store's own.
	LateWhy string
	// Missed marks the claim of a slot due while no instance could claim it,
	// sent once one can, with Deadline past. A slot nobody decided is stored
	// finished StatusMissed (with LateWhy), not late; while the job is paused
	// it is stored paused, and once MaxRuns were counted nothing is stored: the
	// claim is answered OutcomeNone with LimitReached. A store that ignores it
	// stores late.
	Missed bool
	// Incarnation is the incarnation of the entry the claimer follows
	// (Entry.Incarnation). A run stored by another incarnation belongs to an
	// entry that was removed, maybe added again: it is ended cancelled, never
	// run. EntryGone says the claimer sees the entry removed. Both are zero for
	// a job's own runs.
	Incarnation uint64
	EntryGone   bool
	// Retention bounds the history of the job the records of this claim's
	// decisions join (Settler).
	Retention Retention
}

// Slots returns how many of the job's slots in's policy lets hold a run at
// once when it runs one slot at a time or a few (Overlap.Exclusive): one
// unless Concurrency says more under OverlapSkip or a buffer policy, at most
// MaxConcurrency.
func (in RunClaim) Slots() int {
	if in.Overlap != OverlapSkip && !in.Overlap.Buffers() {
		return 1
	}
	return min(max(in.Concurrency, 1), MaxConcurrency)
}

// MaxConcurrency is the most RunClaim.Concurrency a claim may ask.
const MaxConcurrency = 1000

// ConcurrencyCapper is implemented by run stores that apply
// RunClaim.Concurrency (every store that decides with package machine).
type ConcurrencyCapper interface {
	CapsConcurrency() bool
}

// Buffers returns how many slots of the job in's policy keeps buffered at
// once: 0 unless it is a buffer policy.
func (in RunClaim) Buffers() int {
	switch {
	case in.Overlap == OverlapBufferOne:
		return 1
	case in.Overlap != OverlapBufferAll:
		return 0
	case in.BufferCap > 0:
		return min(in.BufferCap, MaxBufferCap)
	}
	return DefaultBufferCap
}

// ClaimOutcome is the answer of RunStore.Claim. An outcome the scheduler does not
// know is treated like OutcomeDone.
type ClaimOutcome string

// Claim outcomes.
const (
	OutcomeWon     ClaimOutcome = "won"
	OutcomeRunning ClaimOutcome = "running"
	OutcomeDone    ClaimOutcome = "done"
	OutcomeOverlap ClaimOutcome = "overlap"
	OutcomeLate    ClaimOutcome = "late"
	OutcomeNone    ClaimOutcome = "none"
	// OutcomeRetry: the slot's last attempt failed and its retry may be claimed
	// in ClaimResult.RetryIn (Retrier).
	OutcomeRetry ClaimOutcome = "retry"
	// OutcomeBuffered: the slot is stored buffered (OverlapBufferer); claim it
	// again once the run of ClaimResult.WaitsFor ends.
	OutcomeBuffered ClaimOutcome = "buffered"
	// OutcomeLimit: the job's run limit was reached (RunCounter); the slot is
	// stored finished StatusLimit.
	OutcomeLimit ClaimOutcome = "limit"
	// OutcomePaused: the claim asked with PausedWhy and the slot is stored
	// finished StatusPaused.
	OutcomePaused ClaimOutcome = "paused"
	// OutcomeExcluded: the claim asked with ExcludedWhy and the slot is stored
	// finished StatusExcluded.
	OutcomeExcluded ClaimOutcome = "excluded"
)

// DecidedOutcome is the outcome a store answers a claim of a finished slot with.
// The token that stored a skipped, late, missed, limit or paused decision is the decider.
// It is told that decision again, so that its claim is repeat-safe. Every other
// claim is told done, with the stored status in ClaimResult.Status.
func DecidedOutcome(status Status, decider bool) ClaimOutcome {
	if decider {
		switch status {
		case StatusSkipped:
			return OutcomeOverlap
		case StatusLate, StatusMissed:
			return OutcomeLate
		case StatusLimit:
			return OutcomeLimit
		case StatusPaused:
			return OutcomePaused
		case StatusExcluded:
			return OutcomeExcluded
		}
	}
	return OutcomeDone
}

// Key is the claim's run key.
func (in RunClaim) Key() RunKey { return RunKey{Job: in.Job, Slot: in.Slot, Token: in.Token} }

// MayReopen reports whether in may run again a slot that token stored finished
// with status as attempt. The token must be another one. A paused slot needs
// ReopenPaused or Backfill; a late, missed, skipped or limit one needs Backfill. Any
// other needs Rerun, while the stored attempt is RerunAttempt. The store also
// checks in.Deadline by its own clock.
func (in RunClaim) MayReopen(status Status, token string, attempt int) bool {
	if token == in.Token || !status.Finished() {
		return false
	}
	switch status {
	case StatusExcluded:
		return false
	case StatusPaused:
		return in.ReopenPaused || in.Backfill
	case StatusLate, StatusMissed, StatusSkipped, StatusLimit:
		return in.Backfill
	}
	return in.Backfill && in.Rerun && attempt == in.RerunAttempt
}

// ClaimResult is the answer to a RunClaim.
type ClaimResult struct {
	Outcome ClaimOutcome
	// Attempt is the attempt number the run now has (1 on a first win).
	Attempt int
	// Fence grows with every new holder of the run; with the token it is the fencing
	// token a handler passes to systems it writes to.
	Fence uint64
	// Holder is the instance holding the lease (running) or the one that won.
	Holder string
	// Expires is when the current lease expires, by the store's clock.
	Expires time.Time
	// Previous is the instance whose lease was taken over, on a takeover.
	Previous string
	// PreviousToken is the token whose lease was taken over, on a takeover. A
	// Settler records that attempt lost in the same claim.
	PreviousToken string
	// PreviousAttempt is the attempt number that was taken over.
	PreviousAttempt int
	// Status is the slot's final status on done: how it ended (ok, error, ...),
	// or the stored decision (skipped, late, limit, paused). Empty when unknown.
	Status Status
	// Reopened says the won run was a slot stored finished, reopened by a claim
	// with ReopenPaused or Backfill (and by its repeats).
	Reopened bool
	// Retried says the won run is a retry: the attempt before it failed and
	// stored the retry (Retrier), it was not lost.
	Retried bool
	// RetryIn is, on OutcomeRetry, how long until the retry may be claimed, by the
	// store's clock.
	RetryIn time.Duration
	// WaitsFor is the slot of the run the claim waits for. On OutcomeRunning it
	// is an earlier run that OverlapCancelOther asked to end. On OutcomeBuffered
	// it is the run that keeps the buffered slot waiting. Holder and Expires are
	// then that run's. It is zero when the claim's own slot is held, or when the
	// store does not say.
	WaitsFor time.Time
	// LimitReached says, on won or buffered, that the slot was the MaxRuns-th
	// the store counted (RunCounter): the job runs no further scheduled slot.
	LimitReached bool
	// Backfill says the run was asked for by Scheduler.Backfill.
	Backfill bool
}

// ActiveRun is an unfinished run in a RunStore.
type ActiveRun struct {
	Slot     time.Time
	Token    string
	Instance string
	Attempt  int
	Fence    uint64
	Expires  time.Time
	Live     bool
	// RetryAt is, for a slot whose last attempt failed and stored a retry, when
	// the retry may be claimed, by the store's clock; zero otherwise.
	RetryAt time.Time
	// Cancel is the request of a later slot's claim that the run end
	// (OverlapCancelOther); nil without one.
	Cancel *CancelRequest
	// Buffered says the slot is stored buffered (OverlapBufferer): it has not
	// started, Token and Instance are the claim's that buffered it.
	Buffered bool
	// Manual says the run is a manual one (its slot is not on the job's
	// schedule).
	Manual bool
	// Backfill says the run was asked for by Scheduler.Backfill.
	Backfill bool
	// RequestedBy names who asked for a manual run.
	RequestedBy string
	// Claimed is when the store granted the current attempt, by its clock.
	Claimed time.Time
	// Incarnation is the entry's the run belongs to (RunClaim.Incarnation).
	Incarnation uint64
}

// OverlapPolicy says whether a job's slots may run concurrently.
type OverlapPolicy int

const (
	// OverlapAllow lets a slot start while an earlier slot still runs. The default.
	OverlapAllow OverlapPolicy = iota
	// OverlapSkip skips a slot while another slot of the job holds a live lease, and
	// records the skipped slot (a stored decision: no instance runs it afterwards).
	OverlapSkip
	// OverlapCancelOther runs one slot of the job at a time, the newest: a slot
	// due while an earlier one runs asks that run to end (a stored CancelRequest,
	// see OverlapCanceller) and starts once its lease has ended. A slot due while
	// a later one runs is skipped.
	OverlapCancelOther
	// OverlapBufferOne runs one slot of the job at a time: a slot due while
	// another runs is stored buffered and runs once it has ended; one slot at
	// most is buffered, a further one is skipped (see OverlapBufferer).
	OverlapBufferOne
	// OverlapBufferAll is OverlapBufferOne with up to RunClaim.BufferCap slots
	// buffered, run oldest first.
	OverlapBufferAll
)

// Exclusive reports whether p runs one slot of a job at a time.
func (p OverlapPolicy) Exclusive() bool { return p != OverlapAllow }

// Buffers reports whether p is OverlapBufferOne or OverlapBufferAll.
func (p OverlapPolicy) Buffers() bool { return p == OverlapBufferOne || p == OverlapBufferAll }

func (p OverlapPolicy) String() string {
	switch p {
	case OverlapAllow:
		return "allow"
	case OverlapSkip:
		return "skip"
	case OverlapCancelOther:
		return "cancel-other"
	case OverlapBufferOne:
		return "buffer-one"
	case OverlapBufferAll:
		return "buffer-all"
	}
	return "unknown"
}

// CatchUpPolicy says which slots missed while no instance was up run at Start.
type CatchUpPolicy int

const (
	// CatchUpNone runs no missed slot. The default.
	CatchUpNone CatchUpPolicy = iota
	// CatchUpLatest runs the most recent missed slot within the catch-up window.
	CatchUpLatest
	// CatchUpAll runs every missed slot within the catch-up window, oldest first.
	CatchUpAll
)

func (p CatchUpPolicy) String() string {
	switch p {
	case CatchUpNone:
		return "none"
	case CatchUpLatest:
		return "latest"
	case CatchUpAll:
		return "all"
	}
	return "unknown"
}
