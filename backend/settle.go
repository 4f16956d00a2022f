package backend

import (
	"context"
	"time"
)

// Settler is implemented by run stores that keep the history of the runs they
// decide: every terminal record of an attempt is stored in the same step as the
// decision it records. Such a store writes the record of each slot it decides
// skipped, late, limit or paused in Claim, the record of an attempt it takes
// over from (lost) or ends (cancelled) in the Claim that does it, and the record
// of an attempt its holder ends in Settle. The backend's History returns them.
// The scheduler then writes no history record of its own for the runs of that
// store.
//
// A store without it is driven through Finish, Release and Retry, with the
// records written by the scheduler beside them (SaveResult): a process that dies
// between the two writes leaves the attempt without its record.
//
// Package backend/machine holds the decisions; a store reads, asks the machine
// and writes what it returns conditionally.
type Settler interface {
	// Settle ends s.Key's attempt as s says and stores its record. Like
	// Finish it is accepted only from the token that holds the run (also after
	// its lease expired, while nobody took the run over), and repeat-safe:
	// settling again an attempt settled by the same token changes nothing and
	// returns nil. Another token gets ErrStaleToken.
	Settle(ctx context.Context, s Settlement) error
}

// Settlement is how an attempt ends, sent by its holder.
type Settlement struct {
	Key RunKey
	// Status is the attempt's status: ok, error, timeout, cancelled, lost,
	// paused. It is the status of the attempt's record; the slot's own status
	// may differ (a retry follows, the run is handed over).
	Status Status
	// StartedAt and FinishedAt are when the handler started and returned, by the
	// holder's clock; zero for an attempt that never started.
	StartedAt, FinishedAt time.Time
	// Error explains a status other than ok, at most MaxErrorText bytes.
	Error string
	// Retry, when set on a failed attempt, stores the slot's retry instead of
	// finishing it (see RetryWindow).
	Retry *RetryWindow
	// HandOver leaves the run unfinished with its lease ended, for a backup to
	// take over at once (Stop, a lost lease). A manual run, a run a later slot
	// asked to end and a run of a removed entry are finished instead.
	HandOver bool
	// Incarnation and EntryGone are the holder's view of the run's entry, as in
	// RunClaim: a run of an entry removed meanwhile is finished, not handed over
	// nor retried.
	Incarnation uint64
	EntryGone   bool
	// Retention bounds the job's history the record joins.
	Retention Retention
}

// RetryWindow is when a failed attempt's retry may be claimed: from Delay after
// the store applies the Settle until Within after that, by the store's clock.
type RetryWindow struct {
	Delay, Within time.Duration
}

// RecordWriter is a history a run store writes its records into, for a store
// that keeps none of its own (a Settler on a KV bucket, whose history is a
// backend's stream). Its History returns them.
type RecordWriter interface {
	// WriteRecords appends recs, the terminal records of attempts of job, to its
	// history, keeping what keep allows. It is repeat-safe: a record written
	// again (the same slot, token and status) is stored once.
	WriteRecords(ctx context.Context, job string, recs []StoredResult, keep Retention) error
}

// RecordsUser is implemented by Settler run stores that write their records into
// a RecordWriter. A backend that pairs with such a store (jetstream.NewLeased)
// gives it its history before the store is used.
type RecordsUser interface {
	UseRecords(w RecordWriter)
}
