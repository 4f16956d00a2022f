package jetstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// recordVersion is written in every record. Readers accept any version from 1 up and
// read the fields they know, so a newer writer in a rolling deploy can add fields;
// a record without a version is not ours.
const recordVersion = 1

// claimRecord is the body of a claim, a manual run or a lease-won claim.
type claimRecord struct {
	V        int       `json:"v"`
	Job      string    `json:"job"`
	Slot     *int64    `json:"slot_ms"`
	Token    string    `json:"token"`
	Instance string    `json:"instance,omitempty"`
	Attempt  int       `json:"attempt,omitempty"`
	Manual   bool      `json:"manual,omitempty"`
	At       time.Time `json:"at,omitzero"`
	// By names who asked for a manual run. Older readers ignore it.
	By string `json:"by,omitempty"`
	// HistoryTTL is how long the record belongs in History. A scheduled claim is
	// stored for the duplicate window, which may be longer; History hides it after
	// this.
	HistoryTTL int64 `json:"history_ttl_ms,omitempty"`
	// Leased marks a claim on a slot's claim subject written by an instance with
	// leases (LeasedBackend): its lease store decides who runs the slot. A claim
	// without it was written by an instance that decides by the claim alone. Older
	// readers ignore the field.
	Leased bool `json:"leased,omitempty"`
	// Backfill marks an attempt run by Scheduler.Backfill. Older readers ignore it.
	Backfill bool `json:"backfill,omitempty"`
}

// resultRecord is the body of a stored result.
type resultRecord struct {
	V          int       `json:"v"`
	Job        string    `json:"job"`
	Slot       *int64    `json:"slot_ms"`
	Token      string    `json:"token,omitempty"`
	Instance   string    `json:"instance,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	Manual     bool      `json:"manual,omitempty"`
	Status     string    `json:"status"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Error      string    `json:"error,omitempty"`
	Fence      uint64    `json:"fence,omitempty"`
	// Backfill marks an attempt run by Scheduler.Backfill. Older readers ignore it.
	Backfill bool `json:"backfill,omitempty"`
	// By names who asked for a manual run. Older readers ignore it.
	By string `json:"by,omitempty"`
}

func encodeClaim(in backend.ClaimInput, manual bool, now time.Time) []byte {
	return encodeClaimAs(in, manual, false, now)
}

// encodeClaimAs is encodeClaim with the leased flag.
//
// It writes the JSON of claimRecord by hand: a claim is the hot path, and the
// reflection of encoding/json was its largest cost in the client (the profile of
// BenchmarkClaimWin). The bytes decode to the same record as json.Marshal's
// (TestEncodeClaimMatchesJSON).
func encodeClaimAs(in backend.ClaimInput, manual, leased bool, now time.Time) []byte {
	at := in.At
	if at.IsZero() {
		at = now
	}
	b := make([]byte, 0, 192+len(in.Job)+len(in.Instance)+len(in.RequestedBy))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, recordVersion, 10)
	b = append(b, `,"job":`...)
	b = appendJSONString(b, in.Job)
	b = append(b, `,"slot_ms":`...)
	b = strconv.AppendInt(b, in.Slot.UnixMilli(), 10)
	b = append(b, `,"token":`...)
	b = appendJSONString(b, in.Token)
	if in.Instance != "" {
		b = append(b, `,"instance":`...)
		b = appendJSONString(b, in.Instance)
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(max(in.Attempt, 1)), 10)
	if manual || in.Manual {
		b = append(b, `,"manual":true`...)
	}
	b = append(b, `,"at":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if in.RequestedBy != "" {
		b = append(b, `,"by":`...)
		b = appendJSONString(b, in.RequestedBy)
	}
	if ttl := in.HistoryTTL.Milliseconds(); ttl != 0 {
		b = append(b, `,"history_ttl_ms":`...)
		b = strconv.AppendInt(b, ttl, 10)
	}
	if leased {
		b = append(b, `,"leased":true`...)
	}
	if in.Backfill {
		b = append(b, `,"backfill":true`...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string: as it is, quoted, when it is
// printable ASCII without quotes or backslashes (job names, tokens, instance names
// in practice), else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func encodeResult(job string, r backend.StoredResult) []byte {
	ms := r.Slot.UnixMilli()
	data, _ := json.Marshal(resultRecord{
		V: recordVersion, Job: job, Slot: &ms, Token: r.Token, Instance: r.Instance,
		Attempt: r.Attempt, Manual: r.Manual, Status: string(r.Status),
		StartedAt: utc(r.StartedAt), FinishedAt: utc(r.FinishedAt), Error: r.Error, Fence: r.Fence,
		Backfill: r.Backfill, By: r.RequestedBy,
	})
	return data
}

var errNotOurs = errors.New("not an anarchon record")

// decodeClaim reads a claim record of job. kind says which subject it came from. It
// also returns how long the record belongs in History (0: as long as it is stored).
func decodeClaim(job, kind string, data []byte) (backend.ClaimRecord, time.Duration, error) {
	c, err := parseClaim(job, data)
	if err != nil {
		return backend.ClaimRecord{}, 0, err
	}
	return backend.ClaimRecord{
		Slot:        time.UnixMilli(*c.Slot),
		Token:       c.Token,
		Instance:    c.Instance,
		Attempt:     max(c.Attempt, 1),
		Manual:      c.Manual || kind == kindManual,
		At:          local(c.At),
		RequestedBy: c.By,
		Backfill:    c.Backfill,
	}, historyTTL(c.HistoryTTL), nil
}

// historyTTL is a record's history_ttl_ms as a duration: none when not positive,
// the longest duration when the milliseconds do not fit in one (a foreign record;
// they would wrap round to a negative one).
func historyTTL(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms > int64(math.MaxInt64/time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// parseClaim reads and checks the body of a claim record of job, with the fields
// History does not show (the leased flag). strictClaim reads it when this package
// wrote it, encoding/json otherwise (decode.go).
func parseClaim(job string, data []byte) (claimRecord, error) {
	var c claimRecord
	if !strictClaim(data, &c) {
		var err error
		if c, err = jsonRecord[claimRecord](data); err != nil {
			return claimRecord{}, err
		}
	}
	switch {
	case c.V < 1:
		return claimRecord{}, fmt.Errorf("%w: no version", errNotOurs)
	case c.Job != job:
		return claimRecord{}, fmt.Errorf("%w: job %q, want %q", errNotOurs, c.Job, job)
	case c.Slot == nil:
		return claimRecord{}, fmt.Errorf("%w: no slot", errNotOurs)
	case c.Token == "":
		return claimRecord{}, fmt.Errorf("%w: no token", errNotOurs)
	}
	return c, nil
}

// decodeResult reads a result record of job: with strictResult when this package
// wrote it, encoding/json otherwise (decode.go).
func decodeResult(job string, data []byte) (backend.StoredResult, error) {
	var r resultRecord
	if !strictResult(data, &r) {
		var err error
		if r, err = jsonRecord[resultRecord](data); err != nil {
			return backend.StoredResult{}, err
		}
	}
	switch {
	case r.V < 1:
		return backend.StoredResult{}, fmt.Errorf("%w: no version", errNotOurs)
	case r.Job != job:
		return backend.StoredResult{}, fmt.Errorf("%w: job %q, want %q", errNotOurs, r.Job, job)
	case r.Slot == nil:
		return backend.StoredResult{}, fmt.Errorf("%w: no slot", errNotOurs)
	case r.Status == "":
		return backend.StoredResult{}, fmt.Errorf("%w: no status", errNotOurs)
	}
	return backend.StoredResult{
		Slot:        time.UnixMilli(*r.Slot),
		Token:       r.Token,
		Instance:    r.Instance,
		Attempt:     r.Attempt,
		Manual:      r.Manual,
		Status:      backend.Status(r.Status),
		StartedAt:   local(r.StartedAt),
		FinishedAt:  local(r.FinishedAt),
		Error:       r.Error,
		Fence:       r.Fence,
		Backfill:    r.Backfill,
		RequestedBy: r.By,
	}, nil
}

// jsonRecord reads a record with encoding/json: what the strict readers leave to it.
// (A function of its own: the record json.Unmarshal is given goes to the heap.)
func jsonRecord[T claimRecord | resultRecord](data []byte) (T, error) {
	var rec T
	if err := json.Unmarshal(data, &rec); err != nil {
		var zero T
		return zero, fmt.Errorf("%w: %w", errNotOurs, err)
	}
	return rec, nil
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func local(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Local()
}
