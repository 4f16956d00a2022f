package jetstream

import (
	"slices"
	"sync"
	"time"
)

// claimMemo is what one Backend has seen of the claims of the slots it claimed, so
// that a duplicate answer is read back from the stream leader only when the token
// may be the stored one.
//
// A duplicate carries the stored claim's sequence, not its token. A token is unique
// to one attempt (the contract), and the scheduler sends one token per slot through
// its Backend (repeating it, never another one, when an answer is lost). So:
//
//   - A token this Backend published before and that may be stored (won, or sent
//     without an answer) is read back: the answer that was lost may have been ours.
//   - When this Backend knows the stored claim's token (it stored it, or read it
//     back), that decides a loss without a second request. A match is still read
//     back, so that a memo never wins a slot by itself.
//   - The first token of a slot on this Backend that it did not publish before is
//     the common lost claim: lost, one round trip, no read back.
//   - Another token of a slot this Backend has already answered that way is not the
//     scheduler's one token for the slot. So it is a repeat from elsewhere (another
//     process retrying its claim, a test): it is read back, and the holder learned.
//
// The memo belongs to one Backend, not to the process: a token first published
// through another Backend value (or process) and repeated here as this Backend's
// first word on the slot is answered lost unless WithVerifyEveryDuplicate is set.
// Entries live as long as the claims they speak of may be stored (claimTTL).
type claimMemo struct {
	mu     sync.Mutex
	slots  map[slotKey]*slotMemo
	nextGC time.Time
}

type slotKey struct {
	stream string
	token  string // names.token: the job's, or one of its entries'
	slot   int64
}

// slotMemo is what the memo knows of one slot.
type slotMemo struct {
	until time.Time // when the entry stops mattering
	// sent are the tokens published through this Backend that may be stored: won,
	// or sent without a definite answer.
	sent []string
	// seq is the stored claim's sequence as the last answer told it, 0 before any.
	seq uint64
	// holder is that claim's token when known: stored through this Backend, or
	// read back.
	holder string
	// lost are the tokens answered lost at seq without reading the claim back.
	lost []string
}

// send records that token is about to be published for the slot, and reports
// whether this Backend published it before and it may be stored.
func (m *claimMemo) send(k slotKey, token string, now time.Time, ttl time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots == nil {
		m.slots = make(map[slotKey]*slotMemo)
	}
	if now.After(m.nextGC) {
		for k, s := range m.slots {
			if now.After(s.until) {
				delete(m.slots, k)
			}
		}
		m.nextGC = now.Add(time.Minute)
	}
	s := m.slots[k]
	if s == nil {
		s = &slotMemo{}
		m.slots[k] = s
	}
	s.until = later(s.until, now.Add(ttl))
	if slices.Contains(s.sent, token) {
		return true
	}
	s.sent = append(s.sent, token)
	return false
}

// mayHold reports whether the claim stored at seq may be token's, for a token this
// Backend has not published before (see claimMemo): false decides a loss without
// reading the claim back.
func (m *claimMemo) mayHold(k slotKey, token string, seq uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.slots[k]
	switch {
	case s == nil || s.seq != seq:
		return false // this Backend's first word on the stored claim
	case s.holder != "":
		return s.holder == token
	default:
		return !slices.Contains(s.lost, token)
	}
}

// answered records the answer to token's claim of the slot.
func (m *claimMemo) answered(k slotKey, token string, ans claimAnswer, now time.Time, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots == nil {
		m.slots = make(map[slotKey]*slotMemo)
	}
	s := m.slots[k]
	if s == nil {
		s = &slotMemo{}
		m.slots[k] = s
	}
	s.until = later(s.until, now.Add(ttl))
	if s.seq != ans.seq {
		s.seq, s.holder, s.lost = ans.seq, "", nil
	}
	switch {
	case ans.stored:
		s.holder = token
	case ans.held != nil:
		s.holder = ans.held.Token
	case !slices.Contains(s.lost, token):
		s.lost = append(s.lost, token)
	}
	if !ans.won(token) {
		// A definite loss stays a loss: no need to read it back when repeated.
		s.sent = slices.DeleteFunc(s.sent, func(t string) bool { return t == token })
	}
}

// clear forgets everything (Close).
func (m *claimMemo) clear() {
	m.mu.Lock()
	clear(m.slots)
	m.mu.Unlock()
}

// len is the number of slots remembered.
func (m *claimMemo) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.slots)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
