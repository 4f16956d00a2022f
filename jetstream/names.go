package jetstream

import (
	"crypto/sha256"
	"encoding/base32"
	"math"
	"strconv"
	"strings"
)

// maxStreamName is nats-server's limit on stream names (JSMaxNameLen), which is also
// the file-name limit of common file systems: a file-backed stream is a directory.
const maxStreamName = 255

// hashMarker starts the hashed tail of a name too long to escape in full. The escape
// form never contains it: '_' is always followed by two lowercase hex digits there.
const hashMarker = "_h"

// hashChars of lowercase base32 carry 130 bits of SHA-256.
const hashChars = 26

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// encodeJob turns a job name into one token that is valid both in a stream name and
// in a subject, and is at most budget bytes long.
//
// Bytes in [a-z0-9-] are kept, so ordinary names stay readable ("nightly-report");
// every other byte becomes '_' and two lowercase hex digits ("Report.v2" is
// "_52eport_2ev2"). Upper case is escaped too, because a file-backed stream is a
// directory and "A" and "a" are one directory on case-insensitive file systems. The
// escaped form is injective. When it is longer than budget, it is cut and ends with
// "_h" and 26 base32 characters of the name's SHA-256 instead. That is still one
// token per name in practice. PrepareJob checks the stream's metadata, so that a
// collision is an error, never two jobs in one stream.
func encodeJob(job string, budget int) string {
	var b strings.Builder
	b.Grow(len(job))
	const hexd = "0123456789abcdef"
	for i := 0; i < len(job); i++ {
		c := job[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&0xf])
	}
	esc := b.String()
	if len(esc) <= budget {
		return esc
	}
	sum := sha256.Sum256([]byte(job))
	tail := hashMarker + strings.ToLower(b32.EncodeToString(sum[:]))[:hashChars]
	keep := max(budget-len(tail), 0)
	head := esc[:keep]
	// Never cut an escape in two: a dangling "_" or "_x" would read as another byte.
	if i := strings.LastIndexByte(head, '_'); i >= 0 && i > len(head)-3 {
		head = head[:i]
	}
	return head + tail
}

// names are the stream and subjects of one job, or of one of its entries (entry):
// an entry's subjects are its job's with "entry.<entry token>" after the job's
// token, in the job's stream.
type names struct {
	stream  string // <stream prefix>_<token>
	token   string // encodeJob(job); an entry's: <job token>.entry.<entry token>
	all     string // <subject prefix>.<token>.>   the stream's only subject
	claims  string // <subject prefix>.<token>.claim   (+ ".<slot ms>")
	results string // <subject prefix>.<token>.result
	manual  string // <subject prefix>.<token>.manual
	leases  string // <subject prefix>.<token>.lease
	// entries is <subject prefix>.<job token>.entry, under which the job's
	// entries' subjects are; "" in an entry's names.
	entries string
}

// Subject kinds: the last-but-one or last token of a job subject.
const (
	kindClaim  = "claim"
	kindResult = "result"
	kindManual = "manual"
	kindLease  = "lease"
	// kindEntry is a subject of one of the job's entries, in the job's names.
	kindEntry = "entry"
)

func (c *config) namesFor(job string) names {
	tok := encodeJob(job, maxStreamName-len(c.streamPrefix)-1)
	n := subjectNames(c.subjectPrefix+"."+tok+".", tok)
	n.stream = c.streamPrefix + "_" + tok
	n.entries = c.subjectPrefix + "." + tok + "." + kindEntry
	return n
}

// subjectNames are the subjects under base (which ends with a dot), and the
// token of their claims' ids.
func subjectNames(base, token string) names {
	return names{
		token:   token,
		all:     base + ">",
		claims:  base + kindClaim,
		results: base + kindResult,
		manual:  base + kindManual,
		leases:  base + kindLease,
	}
}

// entry returns the names of the job's entry id: its subjects under
// <subject prefix>.<job token>.entry.<entry token>, in the job's stream. The
// entry token is the ID escaped as job names are (encodeJob), never cut: a
// subject has no length limit of its own, and an ID at most 256 bytes. It is
// injective, and holds no '.', '*', '>' or space, so a job's subjects and each
// entry's are apart; a claim's Nats-Msg-Id (token:slot) is then the entry's own
// too.
func (n names) entry(id string) names {
	tok := encodeJob(id, math.MaxInt)
	e := subjectNames(n.entries+"."+tok+".", n.token+"."+kindEntry+"."+tok)
	e.stream = n.stream
	return e
}

// claimSubject is the subject of one slot's claims: one subject per slot, so that the
// per-subject limit that bounds results never evicts a claim.
func (n names) claimSubject(slotMS int64) string {
	return n.claims + "." + strconv.FormatInt(slotMS, 10)
}

// slotKey is the claim memo's key of one slot of the job or entry.
func (n names) slotKey(slotMS int64) slotKey {
	return slotKey{stream: n.stream, token: n.token, slot: slotMS}
}

// msgID is the claim's Nats-Msg-Id: the job and the slot, nothing else, so every
// instance claiming the slot sends the same id.
func (n names) msgID(slotMS int64) string {
	return n.token + ":" + strconv.FormatInt(slotMS, 10)
}

// kindOf returns the record kind a subject of this job carries, or "" for a subject
// that is not one of ours.
func (n names) kindOf(subject string) string {
	switch subject {
	case n.results:
		return kindResult
	case n.manual:
		return kindManual
	case n.leases:
		return kindLease
	}
	if rest, ok := strings.CutPrefix(subject, n.claims+"."); ok {
		if _, err := strconv.ParseInt(rest, 10, 64); err == nil {
			return kindClaim
		}
	}
	if n.entries != "" && strings.HasPrefix(subject, n.entries+".") {
		return kindEntry
	}
	return ""
}
