package kvlease

import "time"

// maxHeld bounds the cache of leases this store holds.
const maxHeld = 4096

// heldKey names a lease this store won: lease key and token.
type heldKey struct{ key, token string }

// held is what the store remembers of a lease it won, to heartbeat and finish it
// without reading first. It is only a hint: every write is still a compare-and-set.
type held struct {
	leaseRev   uint64
	lease      leaseRecord
	runRev     uint64 // 0 when unknown
	run        runRecord
	runWritten time.Time // local time of the run record's last write
}

func (s *Store) remember(k runKeys, token string, h held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) >= maxHeld {
		for key := range s.held { // drop one; it is only a hint
			delete(s.held, key)
			break
		}
	}
	s.held[heldKey{k.lease, token}] = &h
}

func (s *Store) recall(k runKeys, token string) (held, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[heldKey{k.lease, token}]
	if !ok {
		return held{}, false
	}
	return *h, true
}

func (s *Store) forget(k runKeys, token string) {
	s.mu.Lock()
	delete(s.held, heldKey{k.lease, token})
	s.mu.Unlock()
}
