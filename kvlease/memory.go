package kvlease

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend/machine"
)

// memory is what a Store remembers between calls. All of it is a hint: a call that
// acts on it still writes by compare-and-set, and one that finds it wrong reads the
// keys and decides from them. It holds:
//
//   - The leases won through the store (remember, recall, forget), so that their
//     heartbeats and finishes need no read first.
//   - The live leases claims answered running with (noteRunning, takeHint): the
//     baselines of the watches that backups start next.
//   - The slots the store answered claims of (firstSight), whose later claims read
//     before they write.
//   - The shared watcher (hub, watch.go): the waiters of WatchRun, and what it
//     delivered, which claims read (finishedRun, leaseSince).
type memory struct {
	mu      sync.Mutex
	held    map[heldKey]*held    // by (lease key, token)
	hints   map[string]hint      // by lease key
	sighted map[string]time.Time // by lease key: when
	hub     watchHub
}

// Bounds of what memory keeps. The limits drop hints, never a decision.
const (
	// maxHeld bounds the leases remembered as held, and the running hints.
	maxHeld = 4096
	// hintTTL is how long a claim's reading of a live lease serves as a watch's
	// baseline, and how long the hub keeps the updates it delivered.
	hintTTL = 5 * time.Second
	// sightTTL is how long a slot counts as answered before; maxSighted bounds the
	// slots remembered.
	sightTTL   = 10 * time.Minute
	maxSighted = 1 << 16
)

// heldKey names a lease this store won: lease key and token.
type heldKey struct{ key, token string }

// held is what the store remembers of a lease it won, to heartbeat and finish it
// without reading first.
type held struct {
	leaseRev   uint64
	lease      leaseValue
	runRev     uint64 // 0 when unknown
	run        machine.Run
	runWritten time.Time // local time of the run record's last write
}

// hint is a live lease as a claim read it, and when that read was sent.
type hint struct {
	lease entry
	lv    *leaseValue
	sent  time.Time
}

// remember keeps h as the lease token holds on k's slot.
func (m *memory) remember(k runKeys, token string, h held) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = make(map[heldKey]*held)
	}
	if len(m.held) >= maxHeld {
		for key := range m.held { // drop one; it is only a hint
			delete(m.held, key)
			break
		}
	}
	m.held[heldKey{k.lease, token}] = &h
}

// recall returns what remember kept of token's lease on k's slot.
func (m *memory) recall(k runKeys, token string) (held, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.held[heldKey{k.lease, token}]
	if !ok {
		return held{}, false
	}
	return *h, true
}

// forget drops token's lease on k's slot.
func (m *memory) forget(k runKeys, token string) {
	m.mu.Lock()
	delete(m.held, heldKey{k.lease, token})
	m.mu.Unlock()
}

// noteRunning keeps the live lease a claim read (answering running), sent at sent,
// as the baseline of the WatchRun a backup calls next.
func (m *memory) noteRunning(k runKeys, v view, sent time.Time) {
	if v.lv == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hints == nil {
		m.hints = make(map[string]hint)
	}
	if len(m.hints) >= maxHeld {
		now := time.Now()
		for key, h := range m.hints {
			if now.Sub(h.sent) > hintTTL {
				delete(m.hints, key)
			}
		}
		if len(m.hints) >= maxHeld {
			clear(m.hints)
		}
	}
	m.hints[k.lease] = hint{lease: v.lease, lv: v.lv, sent: sent}
}

// takeHint returns (and forgets) the reading of k's lease a claim took, when it is
// recent and was sent after the shared watcher started: every update newer than it
// then reaches the watcher.
func (m *memory) takeHint(k runKeys, started time.Time) (hint, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.hints[k.lease]
	delete(m.hints, k.lease)
	if !ok || started.IsZero() || !h.sent.After(started) || time.Since(h.sent) > hintTTL {
		return hint{}, false
	}
	return h, true
}

// firstSight reports whether this store answers a claim of k's slot for the first
// time (within the last sightTTL), and remembers it.
func (m *memory) firstSight(k runKeys) bool {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sighted == nil {
		m.sighted = make(map[string]time.Time)
	}
	if at, ok := m.sighted[k.lease]; ok && now.Sub(at) < sightTTL {
		return false
	}
	if len(m.sighted) >= maxSighted {
		for key, at := range m.sighted {
			if now.Sub(at) >= sightTTL {
				delete(m.sighted, key)
			}
		}
		if len(m.sighted) >= maxSighted {
			clear(m.sighted) // only a hint: a slot seen again is claimed blind once more
		}
	}
	m.sighted[k.lease] = now
	return true
}

// finishedRun returns the finished run record of k's slot that a Finish's purge
// carried to the shared watcher in the last hintTTL, if any.
func (m *memory) finishedRun(k runKeys) (machine.Run, bool) { return m.hub.finishedRun(k) }

// wrote notes that this store wrote key (a slot's run record or lease key) at
// rev, so that no claim is answered from an older state of the slot.
func (m *memory) wrote(key string, rev uint64) {
	if rest, ok := strings.CutPrefix(key, runPrefix); ok {
		key = leasePrefix + rest
	} else if !strings.HasPrefix(key, leasePrefix) {
		return
	}
	m.hub.written(key, rev)
}

// leaseSince returns the newest update of a lease key the running shared watcher
// delivered, if its revision is at least rev, waiting up to wait for it.
func (m *memory) leaseSince(ctx context.Context, key string, rev uint64, wait time.Duration) (lastSeen, bool) {
	return m.hub.leaseSince(ctx, key, rev, wait)
}
