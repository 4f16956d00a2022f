package backend

import (
	"context"
	"time"
)

// Settler is implemented by run stores that keep the history of the runs they
// decide. Every terminal record of an attempt is stored in the same step as the
// decision it records:
//   - Claim stores the record of a slot it decides skipped, late, limit or
//     paused, of an attempt it takes over (lost), and of one it ends
//     (cancelled, or lost for a manual run);
//   - Settle stores the record of the attempt its holder ends.
//
// The backend's History returns those records. The scheduler writes no
// terminal record of its own for such a store, and adds the running attempts
// from Active.
//
// A store without it is driven through Finish, Release and Retry. The scheduler
// then writes the records beside them (SaveResult), so a process that dies
// between the two writes leaves an attempt without its record.
//
// Package backend/machine holds the decisions and returns the records.
type Settler interface {
	// Settle ends s.Key's attempt as s says and stores its record. Like Finish
	// it is accepted only from the token that holds the run, also after its
	// lease expired while nobody took the run over. It is repeat-safe: the same
	// token settling again changes nothing and gets nil. Another token gets
	// ErrStaleToken.
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

// RecordWriter is a history a run store writes its records into. It serves a
// store that keeps no history of its own, such as a Settler on a KV bucket
// whose history is a backend's stream. Its History returns the records.
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
