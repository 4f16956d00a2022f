package kvlease

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// recordVersion is the format of the values this package writes. Readers accept
// unknown fields, so a newer writer may add some.
const recordVersion = 2

// leaseValue is a lease key's value: who holds the lease, and for how long each
// write keeps it.
type leaseValue struct {
	V        int    `json:"v"`
	Token    string `json:"token"`
	Instance string `json:"instance"`
	LeaseMS  int64  `json:"lease_ms"`
	// Cancel repeats the run record's cancel request for the holder's heartbeat.
	Cancel *backend.CancelRequest `json:"cancel,omitempty"`
}

func (v *leaseValue) lease() time.Duration { return time.Duration(v.LeaseMS) * time.Millisecond }

// runJSON is machine.Run as a run record stores it. Its fields are machine.Run's,
// in order, so that the two convert: a field added to the machine fails the build.
type runJSON struct {
	Slot          time.Time              `json:"slot"`
	Phase         machine.Phase          `json:"phase"`
	Token         string                 `json:"token"`
	Instance      string                 `json:"instance,omitempty"`
	Attempt       int                    `json:"attempt,omitempty"`
	Fence         uint64                 `json:"fence,omitempty"`
	Lease         time.Duration          `json:"lease,omitempty"`
	Expires       time.Time              `json:"expires,omitzero"`
	RetryAt       time.Time              `json:"retry_at,omitzero"`
	RetryBy       time.Time              `json:"retry_by,omitzero"`
	Cancel        *backend.CancelRequest `json:"cancel,omitempty"`
	Status        backend.Status         `json:"status,omitempty"`
	Previous      string                 `json:"previous,omitempty"`
	PreviousToken string                 `json:"previous_token,omitempty"`
	Reopened      bool                   `json:"reopened,omitempty"`
	Retried       bool                   `json:"retried,omitempty"`
	Last          bool                   `json:"last,omitempty"`
	Counted       bool                   `json:"counted,omitempty"`
	HandedOver    bool                   `json:"handed_over,omitempty"`
	Manual        bool                   `json:"manual,omitempty"`
	Backfill      bool                   `json:"backfill,omitempty"`
	RequestedBy   string                 `json:"requested_by,omitempty"`
	Incarnation   uint64                 `json:"incarnation,omitempty"`
	Recorded      bool                   `json:"recorded,omitempty"`
	Claimed       time.Time              `json:"claimed,omitzero"`
	Changed       time.Time              `json:"changed,omitzero"`
	Keep          time.Duration          `json:"keep,omitempty"`
}

// runValue is a run record's value: the slot's run, and the terminal records of
// its attempts not yet written to the store's RecordWriter, with the retention
// of the history they join.
type runValue struct {
	V       int                    `json:"v"`
	Job     string                 `json:"job"`
	Run     runJSON                `json:"run"`
	Records []backend.StoredResult `json:"records,omitempty"`
	Keep    backend.Retention      `json:"keep,omitzero"`
}

func (v *runValue) run() machine.Run { return machine.Run(v.Run) }

// jobValue is a job key's value: the run name's unfinished slots, as the
// decisions that read job-wide facts listed them, and its run count.
type jobValue struct {
	V     int       `json:"v"`
	Count int       `json:"count,omitempty"`
	Runs  []jobSlot `json:"runs,omitempty"`
}

// jobSlot is one listed slot: the token of its last decision, and its phase then.
// A buffered slot's instance is kept too: its run record may not be written yet.
type jobSlot struct {
	SlotMS   int64         `json:"s"`
	Token    string        `json:"t"`
	Phase    machine.Phase `json:"p"`
	Instance string        `json:"i,omitempty"`
}

func (j jobSlot) slot() time.Time { return time.UnixMilli(j.SlotMS).UTC() }

// entry is the last message on one key's subject.
type entry struct {
	rev     uint64    // its stream sequence, 0 when nothing is stored
	created time.Time // when the server stored it, by the server's clock
	put     bool      // a value; false for nothing, a purge or an expiry marker
	value   []byte
}

const kvOperationHeader = "KV-Operation"

func entryOf(rev uint64, created time.Time, h nats.Header, value []byte) entry {
	put := h.Get(kvOperationHeader) == "" && h.Get(jetstream.MarkerReasonHeader) == ""
	return entry{rev: rev, created: created, put: put, value: value}
}

func msgEntry(m *jetstream.RawStreamMsg) entry {
	if m == nil {
		return entry{}
	}
	return entryOf(m.Sequence, m.Time, m.Header, m.Data)
}

// decode reads e's value into v; ok is false for a marker or nothing.
func decode(e entry, v any, what string) (ok bool, err error) {
	if !e.put {
		return false, nil
	}
	if err := json.Unmarshal(e.value, v); err != nil {
		return false, fmt.Errorf("kvlease: corrupt %s at revision %d: %w", what, e.rev, err)
	}
	return true, nil
}

func decodeLease(e entry) (*leaseValue, error) {
	var v leaseValue
	ok, err := decode(e, &v, "lease")
	switch {
	case err != nil || !ok:
		return nil, err
	case v.Token == "" || v.LeaseMS <= 0:
		return nil, fmt.Errorf("kvlease: corrupt lease at revision %d: no token or lease", e.rev)
	}
	return &v, nil
}

func decodeRun(e entry) (*runValue, error) {
	var v runValue
	ok, err := decode(e, &v, "run record")
	switch {
	case err != nil || !ok:
		return nil, err
	case v.V < recordVersion || v.Run.Token == "":
		return nil, fmt.Errorf("kvlease: run record at revision %d is not of layout %s (version %d)", e.rev, layout, v.V)
	}
	return &v, nil
}

func decodeJob(e entry) (*jobValue, error) {
	v := jobValue{V: recordVersion}
	_, err := decode(e, &v, "job key")
	return &v, err
}

// runTTL is how long a run record lives once written at now: until the machine
// may forget the run. While running, it is at least three leases, which
// heartbeats refresh. A buffered slot's record, and one with records to write,
// live for ever (0).
func runTTL(r machine.Run, pending bool, now time.Time) time.Duration {
	at := r.ForgetAt()
	if at.IsZero() || pending {
		return 0
	}
	ttl := at.Sub(now)
	if r.Phase == machine.Running {
		ttl = max(ttl, satMul(r.Lease, 3))
	}
	return natsutil.TTL(max(ttl, time.Second))
}

// satMul is d * n, saturating instead of overflowing.
func satMul(d time.Duration, n int64) time.Duration {
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}
