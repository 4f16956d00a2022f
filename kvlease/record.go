package kvlease

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// recordVersion is the format of the values this package writes. Readers accept
// unknown fields, so a newer writer may add some.
const recordVersion = 1

// Run states in a run record. A retry is a failed attempt's stored retry
// (backend.Retrier): the run is unfinished, its lease ended, and its next attempt
// may be claimed within the record's retry window.
//
// A buffered slot (backend.OverlapBufferer) is stored buffered: not started, no
// lease, for the token and instance of the claim that buffered it. Its record
// stores attempt 1 (the attempt its claim runs as: a release that predates the
// state refuses an attempt below 1 as corrupt, and reads the state as done) and
// fence 0; answers and Active report attempt 0.
const (
	stateRunning  = "running"
	stateFinished = "finished"
	stateRetry    = "retry"
	stateBuffered = "buffered"
)

// leaseRecord is the value of a lease key: who holds the lease and for how long
// each write keeps it.
type leaseRecord struct {
	V        int    `json:"v"`
	Token    string `json:"token"`
	Instance string `json:"instance"`
	LeaseMS  int64  `json:"lease_ms"`
	// cancelFields, on a live lease, repeat the run record's cancel request, so
	// that the holder's heartbeat sees it without reading the run record.
	cancelFields
}

// cancelFields are a later slot's stored request that the run end
// (backend.OverlapCancelOther); none while CancelToken is empty. A version that
// predates them ignores them.
type cancelFields struct {
	CancelSlotMS   int64  `json:"cancel_slot_ms,omitempty"`
	CancelInstance string `json:"cancel_instance,omitempty"`
	CancelToken    string `json:"cancel_token,omitempty"`
}

// cancelled reports whether a request is stored.
func (f cancelFields) cancelled() bool { return f.CancelToken != "" }

// request is the stored request, nil without one.
func (f cancelFields) request() *backend.CancelRequest {
	if !f.cancelled() {
		return nil
	}
	return &backend.CancelRequest{Slot: time.UnixMilli(f.CancelSlotMS).UTC(), Instance: f.CancelInstance, Token: f.CancelToken}
}

// runRecord is the value of a run key: who the run belongs to, and how it ended.
type runRecord struct {
	V        int    `json:"v"`
	Job      string `json:"job"`
	SlotMS   int64  `json:"slot_ms"`
	Token    string `json:"token"`
	Instance string `json:"instance"`
	Attempt  int    `json:"attempt"`
	// Fence is the holder's fencing token: the server's time in nanoseconds when
	// Token took the run, above the previous holder's fence (nextFence).
	Fence         uint64 `json:"fence"`
	Previous      string `json:"previous,omitempty"`
	PreviousToken string `json:"previous_token,omitempty"`
	// Reopened: the run is a slot stored paused, reopened by a claim with
	// ReopenPaused (catch-up after the pause ended).
	Reopened bool `json:"reopened,omitempty"`
	// Retried: the run was taken for the retry its previous attempt stored.
	Retried bool `json:"retried,omitempty"`
	// Buffer: the run was claimed under a buffer overlap policy, so that its
	// Retry marks the job's buffer key (a stored retry holds the job).
	Buffer bool `json:"buffer,omitempty"`
	// Last: the slot was the MaxRuns-th counted of its job (runlimit.go).
	Last    bool           `json:"last,omitempty"`
	State   string         `json:"state"`
	Status  backend.Status `json:"status,omitempty"`
	LeaseMS int64          `json:"lease_ms"`
	KeepMS  int64          `json:"keep_ms"`
	// RetryDelayMS and RetryWithinMS are the window of a stored retry (state
	// retry): it may be claimed from the record's write (the server's timestamp on
	// it) plus the delay, until that plus the window.
	RetryDelayMS  int64 `json:"retry_delay_ms,omitempty"`
	RetryWithinMS int64 `json:"retry_within_ms,omitempty"`
	// cancelFields: a later slot's request that the run end, kept once the run
	// finished. A new attempt (a reopened slot) starts without one.
	cancelFields
}

// finished reports whether the run is decided: finished, or in a state this
// version does not know (a newer writer's; read as done, the documented fallback).
func (r *runRecord) finished() bool {
	return r.State != stateRunning && r.State != stateRetry && r.State != stateBuffered
}

// buffered reports whether the slot is stored buffered: not started.
func (r *runRecord) buffered() bool { return r.State == stateBuffered }

// retrying reports whether the run waits for the retry its last attempt stored.
func (r *runRecord) retrying() bool { return r.State == stateRetry }

// retryWindow is when the stored retry of a run in state retry may be claimed,
// by the server's clock: from at until by.
func (e runEntry) retryWindow() (at, by time.Time) {
	at = e.created.Add(time.Duration(e.rec.RetryDelayMS) * time.Millisecond)
	return at, at.Add(time.Duration(e.rec.RetryWithinMS) * time.Millisecond)
}

// entry is the last message on one key's subject.
type entry struct {
	rev     uint64    // its stream sequence, 0 when nothing is stored
	created time.Time // when the server stored it, by the server's clock
	put     bool      // a value; false for nothing, a purge (release, finish) or an expiry marker
	value   []byte
}

// Headers that make a message a marker rather than a value.
const (
	kvOperationHeader = "KV-Operation"
)

func entryOf(rev uint64, created time.Time, h nats.Header, value []byte) entry {
	put := h.Get(kvOperationHeader) == "" && h.Get(jetstream.MarkerReasonHeader) == ""
	return entry{rev: rev, created: created, put: put, value: value}
}

// leaseEntry is a lease key's last message and, when it is a value, the live lease.
type leaseEntry struct {
	entry
	rec *leaseRecord // nil when no lease is live
}

// watched is what a watch of the lease waits to change: the holder's token, and
// whether the lease carries a cancel request. A heartbeat changes neither.
func (e leaseEntry) watched() string {
	if e.rec == nil {
		return ""
	}
	if e.rec.cancelled() {
		return e.rec.Token + " cancel"
	}
	return e.rec.Token
}

// expires is when the live lease ends by the server's clock.
func (e leaseEntry) expires() time.Time {
	if e.rec == nil {
		return time.Time{}
	}
	return e.created.Add(time.Duration(e.rec.LeaseMS) * time.Millisecond)
}

// runEntry is a run key's last message and, when it is a value, the run record.
type runEntry struct {
	entry
	rec *runRecord // nil when no run is stored
}

func decodeLease(e entry) (leaseEntry, error) {
	le := leaseEntry{entry: e}
	if !e.put {
		return le, nil
	}
	var rec leaseRecord
	if err := json.Unmarshal(e.value, &rec); err != nil {
		return le, fmt.Errorf("kvlease: corrupt lease record at revision %d: %w", e.rev, err)
	}
	if rec.Token == "" || rec.LeaseMS <= 0 {
		return le, fmt.Errorf("kvlease: corrupt lease record at revision %d: no token or lease", e.rev)
	}
	le.rec = &rec
	return le, nil
}

func decodeRun(e entry) (runEntry, error) {
	re := runEntry{entry: e}
	if !e.put {
		return re, nil
	}
	var rec runRecord
	if err := json.Unmarshal(e.value, &rec); err != nil {
		return re, fmt.Errorf("kvlease: corrupt run record at revision %d: %w", e.rev, err)
	}
	// A state this version does not know is a newer writer's: it reads as finished
	// (done), never as corrupt, so a rolling upgrade does not fail every claim of
	// the slot on the older instances.
	if rec.Token == "" || rec.Attempt < 1 || rec.State == "" {
		return re, fmt.Errorf("kvlease: corrupt run record at revision %d: token %q attempt %d state %q",
			e.rev, rec.Token, rec.Attempt, rec.State)
	}
	re.rec = &rec
	return re, nil
}

// keepFor is how long a run record lives: keep once finished; while unfinished at
// least three leases, so that heartbeats refresh it long before it expires. Whole
// seconds, as the server keeps it.
func keepFor(keep, lease time.Duration, finished bool) time.Duration {
	if keep == 0 {
		keep = backend.DefaultRunKeep
	}
	if !finished {
		keep = max(keep, 3*lease)
	}
	return natsutil.TTL(keep)
}

// retryKeepFor is how long a run record in state retry lives: its retry window and
// then its keep, so a retry is remembered while it may be claimed and a late
// instance is told the slot's fate afterwards.
func retryKeepFor(keep, delay, within time.Duration) time.Duration {
	if keep == 0 {
		keep = backend.DefaultRunKeep
	}
	return natsutil.TTL(satAdd(satAdd(delay, within), keep))
}

// satAdd is a + b for non-negative durations, saturating instead of overflowing.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
