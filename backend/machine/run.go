package machine

import (
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Phase is where a slot's run is in its life.
type Phase uint8

// The phases of a run.
const (
	// Pending: nothing is stored for the slot (or it was forgotten).
	Pending Phase = iota
	// Buffered: a decision to run the slot once nothing else holds its job.
	Buffered
	// Running: an attempt holds the run; its lease is live until Expires.
	Running
	// Retrying: the last attempt failed and stored its retry.
	Retrying
	// Finished: decided for good; Status says how.
	Finished
)

func (p Phase) String() string {
	switch p {
	case Pending:
		return "pending"
	case Buffered:
		return "buffered"
	case Running:
		return "running"
	case Retrying:
		return "retrying"
	case Finished:
		return "finished"
	}
	return "unknown"
}

// Run is the stored state of one slot's run: what a store keeps per run name and
// slot. Its zero value, with Slot set, is a slot nothing was stored for.
type Run struct {
	Slot  time.Time
	Phase Phase
	// Token and Instance are the current attempt's (running, retrying), the
	// buffering claim's (buffered), or the last writer's (finished).
	Token    string
	Instance string
	// Attempt counts the attempts granted, 0 while buffered.
	Attempt int
	// Fence grows with every new holder of the run.
	Fence uint64
	// Lease is the holder's lease duration, and Expires when it ends by the
	// store's clock (running; a released or retried lease ends at once).
	Lease   time.Duration
	Expires time.Time
	// RetryAt and RetryBy bound the claim of a stored retry (retrying).
	RetryAt, RetryBy time.Time
	// Cancel is a later slot's request that the run end (cancel-other).
	Cancel *backend.CancelRequest
	// Status is how a finished run ended.
	Status backend.Status
	// Previous and PreviousToken held the attempt this one took over.
	Previous, PreviousToken string
	// Reopened: the attempt runs a slot that was finished without running
	// (paused, or late, skipped, limit for a backfill). Retried: it runs a
	// stored retry. Last: the slot was the run limit's last counted one.
	Reopened, Retried, Last bool
	// Counted says the run limit counted the slot.
	Counted bool
	// HandedOver says the attempt taken over had handed the run over: its
	// record is its own.
	HandedOver bool
	// Manual and Backfill say who asked for the run; RequestedBy names who
	// asked for a manual one.
	Manual, Backfill bool
	RequestedBy      string
	// Incarnation is the entry's the run belongs to (0 for a job's own run).
	Incarnation uint64
	// Recorded says the current attempt's terminal record is stored.
	Recorded bool
	// Claimed is when the current attempt was granted, by the store's clock.
	Claimed time.Time
	// Changed is the last write, and Keep how long the run is remembered after
	// it once it holds nothing.
	Changed time.Time
	Keep    time.Duration
}

// Live reports whether the run's lease is held at now.
func (r Run) Live(now time.Time) bool { return r.Phase == Running && now.Before(r.Expires) }

// Unfinished reports whether the run is buffered, running or retrying.
func (r Run) Unfinished() bool {
	return r.Phase == Buffered || r.Phase == Running || r.Phase == Retrying
}

// Busy reports whether the run holds its job at now under a policy that runs one
// slot at a time. It does while its lease is live or ended less than a lease ago
// (a backup is about to take it over). It also does while its stored retry is
// pending.
func (r Run) Busy(now time.Time) bool {
	switch r.Phase {
	case Running:
		return now.Before(r.Expires.Add(r.Lease))
	case Retrying:
		return !now.After(r.RetryBy)
	}
	return false
}

// Forgotten reports whether a store may forget the run at now: it holds no lease,
// is not buffered, has no retry pending, and was not written for its Keep.
func (r Run) Forgotten(now time.Time) bool {
	switch {
	case r.Phase == Pending:
		return true
	case r.Phase == Buffered, r.Live(now):
		return false
	case r.Phase == Retrying && now.Before(r.RetryBy.Add(r.Keep)):
		return false
	}
	return !now.Before(r.Changed.Add(r.Keep))
}

// ForgetAt is the first instant at which Forgotten may report true; the zero time
// for a buffered run, which is never forgotten.
func (r Run) ForgetAt() time.Time {
	if r.Phase == Buffered {
		return time.Time{}
	}
	at := r.Changed.Add(r.Keep)
	if r.Phase == Running && r.Expires.After(at) {
		at = r.Expires
	}
	if r.Phase == Retrying && r.RetryBy.Add(r.Keep).After(at) {
		at = r.RetryBy.Add(r.Keep)
	}
	return at
}

// Active is the run as Active lists it; false for a run that is not unfinished.
func (r Run) Active(now time.Time) (backend.ActiveRun, bool) {
	if !r.Unfinished() {
		return backend.ActiveRun{}, false
	}
	a := backend.ActiveRun{
		Slot:        r.Slot,
		Token:       r.Token,
		Instance:    r.Instance,
		Attempt:     r.Attempt,
		Fence:       r.Fence,
		Expires:     r.Expires,
		Live:        r.Live(now),
		Buffered:    r.Phase == Buffered,
		Manual:      r.Manual,
		Backfill:    r.Backfill,
		RequestedBy: r.RequestedBy,
		Claimed:     r.Claimed,
		Incarnation: r.Incarnation,
	}
	if r.Phase == Retrying {
		a.RetryAt = r.RetryAt
	}
	if r.Cancel != nil {
		c := *r.Cancel
		a.Cancel = &c
	}
	return a, true
}

// answer is the answer to a claim from the run's state.
func (r Run) answer(o backend.ClaimOutcome) backend.ClaimResult {
	res := backend.ClaimResult{Outcome: o, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance, Expires: r.Expires, Backfill: r.Backfill}
	if r.Phase == Finished {
		res.Status, res.Expires = r.Status, time.Time{}
	}
	if o == backend.OutcomeWon {
		res.Reopened, res.Retried, res.LimitReached = r.Reopened, r.Retried, r.Last
		if r.PreviousToken != "" {
			res.Previous, res.PreviousToken, res.PreviousAttempt = r.Previous, r.PreviousToken, r.Attempt-1
		}
	}
	return res
}

// record is the terminal record of the run's current attempt, ended with status
// at now for why.
func (r Run) record(status backend.Status, why string, now time.Time) backend.StoredResult {
	return backend.StoredResult{
		Slot:        r.Slot,
		Token:       r.Token,
		Instance:    r.Instance,
		Attempt:     max(r.Attempt, 1),
		Manual:      r.Manual,
		RequestedBy: r.RequestedBy,
		Backfill:    r.Backfill,
		Status:      status,
		StartedAt:   r.Claimed,
		FinishedAt:  now,
		Error:       backend.TruncateText(why, backend.MaxErrorText),
		Fence:       r.Fence,
	}
}
