package backend

import (
	"context"
	"time"
)

// RunStore keeps leases: time-limited rights to run one (job, slot), each held by one
// token. Lease times are judged by the store's clock, never by comparing instance
// clocks. Every change is atomic in the store (a compare-and-set, a transaction).
//
// # One stored decision per slot
//
// For each (job, slot) the store holds one state machine:
//
//	pending ──won──▶ running(token, attempt, fence, expiry) ──Finish──▶ finished(status)
//	   │                 ▲        │ lease expired or released
//	   │                 └────────┘ takeover: attempt+1, new token, bigger fence
//	   │                 ▲        │ Retry(delay, within) (Retrier)
//	   │                 │        ▼
//	   │                 └── retry(at, by) ──claimed after by──▶ finished(error)
//	   │         claimed in [at, by]: attempt+1, new token, bigger fence
//	   ├──overlap──▶ finished(skipped)
//	   └──late─────▶ finished(late)
//
//	pending ──another slot busy (OverlapBufferOne/All, under the cap)──▶ buffered(token)
//	pending ──another slot busy, the cap of buffered slots reached──▶ finished(skipped)
//	buffered ──claimed once no other slot holds the job, oldest first──▶ running(attempt 1)
//	buffered(token) ──Finish by token (withdrawn)──▶ finished(status)
//
//	running(token) ──a later slot's claim (OverlapCancelOther)──▶ running(token, cancel)
//	running(token, cancel) ──Finish──▶ finished(status), the request kept
//	running(token, cancel) ──lease ended, or a retry claimed──▶ finished(cancelled)
//
// Every transition is a compare-and-set written before the claimer acts on it: a
// claim answered overlap or late has stored that decision (for the deciding token,
// which is answered the same again when it repeats the claim), so an instance that
// claims the slot later is answered done and never runs it, and catch-up never
// runs it either. Nothing about a slot's fate lives only in one process's memory.
// A store may forget a finished slot once RunClaim.Keep has passed.
type RunStore interface {
	// Claim decides between won, running, done, overlap, late and none (and
	// retry, buffered, limit with the capabilities) from the stored state of the
	// run, and on won stores a live lease for in.Token; on overlap, late and
	// limit it stores the slot as finished skipped, late or limit. Invalid
	// claims fail with an error matching ErrInvalidClaim.
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
	// Retry ends key's attempt as failed and releases its lease, storing that the
	// slot's next attempt may be claimed once delay has passed and until delay +
	// within has, by the store's clock. A claim by key.Token itself (a late
	// repeat) is answered done, StatusError: a token never takes its own retry.
	// For any other token, before that a Claim is answered
	// OutcomeRetry with RetryIn; in time, won, as a takeover (attempt + 1, a bigger
	// fence) with Retried set; after it, done: the store finishes the slot with
	// StatusError, the last attempt's failure standing. The run is remembered for
	// delay + within + its Keep. Accepted like Finish: only from the token that
	// holds the run, repeat-safe (also once its retry was claimed: the run's
	// attempt is then Retried, taken from key.Token, and a repeat changes
	// nothing); another token gets ErrStaleToken.
	Retry(ctx context.Context, key RunKey, delay, within time.Duration) error
}

// OverlapCanceller is implemented by run stores that support OverlapCancelOther.
// A store without it refuses nothing: the scheduler refuses the policy at
// registration.
//
// A claim with OverlapCancelOther of a slot nobody has started decides like
// OverlapSkip, except for the runs of earlier slots of the job: a claim that finds
// one unfinished and busy (a live lease, or one that ended less than a lease ago)
// stores on it a CancelRequest naming the claim (unless one is stored already) and
// is answered running, with WaitsFor the newest such slot; its own slot stays
// unstored, so its deadline still holds. A later slot's busy run makes it skipped,
// as OverlapSkip does: an older slot never cancels a newer one. A run with a
// cancel request:
//   - Heartbeat extends its lease as usual and returns a *CancelError (matching
//     ErrCancelRequested) naming the request; the holder ends the run and
//     finishes it (the request stays stored with the run);
//   - a claim that would take it over (its lease ended unfinished, or it stored a
//     retry, due or not) finishes it StatusCancelled instead and is answered done;
//   - Active lists it with Cancel set.
type OverlapCanceller interface {
	// CancelsOverlap reports whether the store implements OverlapCancelOther.
	CancelsOverlap() bool
}

// OverlapBufferer is implemented by run stores that support OverlapBufferOne and
// OverlapBufferAll. A store without it refuses nothing: the scheduler refuses the
// policies at registration.
//
// Under a buffer policy a slot's run holds the job (blocks) while it is unfinished
// and its lease is live or ended less than a lease ago, or its last attempt
// stored a retry that is still pending. A first claim of a slot while another
// slot blocks, or while another slot is stored buffered, stores its slot
// buffered (for the claim's token and instance, no lease, attempt 0) when fewer
// than RunClaim.BufferCap slots of the job are, and is answered OutcomeBuffered;
// otherwise it stores the slot finished skipped (answered overlap, as
// OverlapSkip). A buffered slot keeps no deadline: it is a stored decision to run
// it. Any claim of a buffered slot (any token, TakeoverOnly too, past its
// Deadline too):
//   - is answered OutcomeBuffered while another slot blocks or an earlier slot
//     is buffered, with WaitsFor the newest slot that blocks, else the oldest
//     earlier buffered one (Holder and Expires that run's);
//   - otherwise, and at once under OverlapAllow (a paused job's claims ask it:
//     the slot is finished paused, never run), is won as a first claim would
//     be (attempt 1, a new fence).
//
// Finish by the token that stored a slot buffered withdraws it (finished with
// the status given); Heartbeat, Release and Retry of a buffered slot hold no
// lease (ErrLeaseLost, nothing, ErrStaleToken). Active lists buffered slots with
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
	// ReopenPaused lets the claim run a slot stored finished paused (catch-up once
	// the job's pause has ended, when its catch-up policy asks): before Deadline
	// the slot is taken like an expired lease (attempt + 1, a bigger fence) and the
	// answer is won with Reopened set. A store that ignores it answers done: the
	// paused slot stays paused, never run twice.
	ReopenPaused bool
	// Backfill lets the claim run, before Deadline, a slot stored finished late,
	// skipped, limit or paused by another token (Scheduler.Backfill: a slot that never
	// ran), taken like ReopenPaused's (Reopened set). A store that ignores it
	// answers done.
	Backfill bool
	// Rerun, with Backfill, also lets the claim run a slot that did run (finished
	// with any other status), but only while the stored attempt is RerunAttempt:
	// of several reruns asked on the strength of one attempt, one runs.
	Rerun        bool
	RerunAttempt int
	// BufferCap is, under OverlapBufferAll, the most slots of the job stored
	// buffered at once (DefaultBufferCap when zero); OverlapBufferOne keeps one.
	BufferCap int
	// MaxRuns is the most first wins of the job's slots the store counts
	// (RunCounter); once it has counted MaxRuns, a first claim stores its slot
	// finished StatusLimit. Zero: no limit, nothing counted.
	MaxRuns int
	// Manual marks a manual run's claim (Scheduler.RunNow), on a slot off the
	// job's schedule: its run is never taken over to run again, but ended lost.
	// RequestedBy names who asked for it.
	Manual      bool
	RequestedBy string
	// PausedWhy, when set, says the job (or the entry) is paused: a claim that
	// would start an attempt stores the slot finished StatusPaused instead,
	// with this reason, and is answered OutcomePaused. A buffered slot stays
	// buffered.
	PausedWhy string
	// LateWhy is the reason a slot this claim stores late is recorded with;
	// empty for the store's own.
	LateWhy string
	// Incarnation identifies the version of the entry the claimer follows
	// (Entry.Incarnation): a run stored by another incarnation of the entry is
	// of an entry that was removed (and maybe added again), and is ended
	// cancelled, never run. EntryGone says the claimer sees the entry removed.
	// Zero and false for a job's own runs.
	Incarnation uint64
	EntryGone   bool
	// Retention bounds the history of the job the records of this claim's
	// decisions join (Settler).
	Retention Retention
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
)

// DecidedOutcome is the outcome a store answers a claim of a finished slot with.
// The token that stored a skipped, late, limit or paused decision (decider: the
// claim's token is the stored one) is told that decision again, so that its claim
// is repeat-safe; every other claim is told done, with the stored status in
// ClaimResult.Status.
func DecidedOutcome(status Status, decider bool) ClaimOutcome {
	if decider {
		switch status {
		case StatusSkipped:
			return OutcomeOverlap
		case StatusLate:
			return OutcomeLate
		case StatusLimit:
			return OutcomeLimit
		case StatusPaused:
			return OutcomePaused
		}
	}
	return OutcomeDone
}

// Key is the claim's run key.
func (in RunClaim) Key() RunKey { return RunKey{Job: in.Job, Slot: in.Slot, Token: in.Token} }

// MayReopen reports whether in may take a slot stored finished with status by
// token as attempt: claimed by another token, a paused slot with ReopenPaused or
// Backfill, a late, skipped or limit one with Backfill, any other with Rerun while the
// attempt is RerunAttempt. The store also checks in.Deadline by its own clock.
func (in RunClaim) MayReopen(status Status, token string, attempt int) bool {
	if token == in.Token || !status.Finished() {
		return false
	}
	switch status {
	case StatusPaused:
		return in.ReopenPaused || in.Backfill
	case StatusLate, StatusSkipped, StatusLimit:
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
	// PreviousToken is the token whose lease was taken over, on a takeover; the
	// scheduler records that attempt as lost.
	PreviousToken string
	// PreviousAttempt is the attempt number that was taken over.
	PreviousAttempt int
	// Status is the slot's final status on done: how it ended (ok, error, ...), or
	// skipped, late or limit when that was the stored decision. Empty when unknown.
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
	// WaitsFor is, on OutcomeRunning, the slot of another run of the job that the
	// claim waits for (OverlapCancelOther asked it to end), and on
	// OutcomeBuffered the slot of the run that keeps the buffered slot waiting;
	// Holder and Expires are then that run's. Zero when the claim's own slot is
	// held, or when the store does not say.
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
