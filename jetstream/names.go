package jetstream

import (
	"crypto/sha256"
	"encoding/base32"
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
// "_h" and 26 base32 characters of the name's SHA-256 instead: still one token per
// name in practice, and PrepareJob checks the stream's metadata so that a collision
// is an error, never two jobs in one stream.
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

// names are the stream and subjects of one job.
type names struct {
	stream  string // <stream prefix>_<token>
	token   string // encodeJob(job)
	all     string // <subject prefix>.<token>.>   the stream's only subject
	claims  string // <subject prefix>.<token>.claim   (+ ".<slot ms>")
	results string // <subject prefix>.<token>.result
	manual  string // <subject prefix>.<token>.manual
	leases  string // <subject prefix>.<token>.lease
}

// Subject kinds: the last-but-one or last token of a job subject.
const (
	kindClaim  = "claim"
	kindResult = "result"
	kindManual = "manual"
	kindLease  = "lease"
)

func (c *config) namesFor(job string) names {
	tok := encodeJob(job, maxStreamName-len(c.streamPrefix)-1)
	base := c.subjectPrefix + "." + tok + "."
	return names{
		stream:  c.streamPrefix + "_" + tok,
		token:   tok,
		all:     base + ">",
		claims:  base + kindClaim,
		results: base + kindResult,
		manual:  base + kindManual,
		leases:  base + kindLease,
	}
}

// claimSubject is the subject of one slot's claims: one subject per slot, so that the
// per-subject limit that bounds results never evicts a claim.
func (n names) claimSubject(slotMS int64) string {
	return n.claims + "." + strconv.FormatInt(slotMS, 10)
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
	return ""
}
