package modelcheck

import (
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Timing is what the record can know about when a store applied a call.
type Timing int

const (
	// Exact: virtual time and a store in memory. A call is applied at the instant
	// the record sees it, and a won claim's Expires is the store's own expiry.
	Exact Timing = iota
	// Bounded: real time and a store across the network. A call is applied
	// somewhere between its send and its answer; the record keeps the bounds.
	Bounded
)

// Store is the backend an instance uses, before the harness puts its faults in
// front of it. JobWindower, JobChecker, ClaimRecorder and RecordDecider are
// passed on when it has them; so are the run store's capabilities.
type Store interface {
	backend.Backend
	backend.LeaseBackend
	backend.Pauser
}

// World is what the seeds of one model check share: how they are named and
// replayed, what their clocks let the record know, and how much time they allow.
type World struct {
	// Name opens the summary, e.g. "model check".
	Name string
	// Replay is the command that runs one seed alone, with %d for the seed.
	Replay string
	// Timing is Exact under testing/synctest with a store in memory, else Bounded.
	Timing Timing

	// HistoryKeep is the history each job keeps (WithHistory).
	HistoryKeep int
	// FinalStop is the deadline of the last Stop: long enough for every handler.
	FinalStop time.Duration
	// StopSlack is how long after its deadline, beyond three call timeouts, a Stop
	// may return.
	StopSlack time.Duration
	// CancelSlack is how long after Stop's context ended a handler may still run.
	CancelSlack time.Duration
	// StoreSlack (Bounded) absorbs the rounding of the store's TTL clock when a
	// takeover is compared with the earliest time the previous lease could expire.
	StoreSlack time.Duration
	// LeaseTTL (Bounded) is how long the store keeps a lease of the given length;
	// nil: the length itself.
	LeaseTTL func(lease time.Duration) time.Duration

	// Faults are the waits of the faulty store calls.
	Faults Faults
	// ManualMin and ManualSpread: a RunNow handler runs ManualMin + [0, ManualSpread),
	// long enough that Stop has to cancel it.
	ManualMin, ManualSpread time.Duration
	// PauseSlack is how long after a pause was stored an instance may still start
	// a slot it claimed before it saw the pause (its watch's delay).
	PauseSlack time.Duration
	// EntrySlack is how long after an entry's change or removal was stored an
	// instance whose watch is up may still follow what it replaced (the watch's
	// delivery); zero: a second.
	EntrySlack time.Duration
	// CrashBetweenWrites, for a store that ends an attempt in more than one
	// write, has store call crash between two writes of a call (step names
	// the point); crash reporting true stops the call there, as if its
	// process died. Nil: the store writes once, or cannot say.
	CrashBetweenWrites func(store Store, crash func(job string, slot time.Time, step string) bool)
}

// Faults are the waits of an instance's faulty store calls.
type Faults struct {
	// A lost request or a lost answer fails after LostMin + [0, LostSpread].
	LostMin, LostSpread time.Duration
	// A slow request reaches the store after [0, SlowMax].
	SlowMax time.Duration
	// A crashed process's calls hang this long, or until the caller gives up.
	CrashHang time.Duration
}

func (w *World) entrySlack() time.Duration {
	if w.EntrySlack == 0 {
		return time.Second
	}
	return w.EntrySlack
}

func (w *World) leaseTTL(lease time.Duration) time.Duration {
	if w.LeaseTTL == nil {
		return lease
	}
	return w.LeaseTTL(lease)
}

// WholeSeconds is a LeaseTTL for stores that count TTLs in whole seconds, rounding
// up.
func WholeSeconds(lease time.Duration) time.Duration {
	ttl := lease.Round(time.Second)
	if ttl < lease {
		ttl += time.Second
	}
	return ttl
}
