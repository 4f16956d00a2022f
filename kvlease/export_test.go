package kvlease

import (
	"context"
	"time"
)

// Helpers for the external tests: the layout's key encoding.
var (
	JobTokenForTest  = jobToken
	SlotTokenForTest = slotToken
	JobKeyForTest    = jobKey
)

// ChainRetriesForTest reports how many of s's chained claims wrote their run record
// again alone.
func ChainRetriesForTest(s *Store) int64 {
	if c, ok := s.b.Load().pairs.(*chained); ok {
		return c.retries.Load()
	}
	return 0
}

// WriteLeaseForTest writes only the lease key of (job, slot) for token, from
// revision 0, with lease: a claimer that died between its two writes.
func WriteLeaseForTest(ctx context.Context, s *Store, job string, slot time.Time, token string, lease time.Duration) error {
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	k := keysFor(job, slot)
	_, err = s.put(ctx, b, write{key: k.lease, value: leaseValue{V: recordVersion, Token: token, Instance: "i-" + token, LeaseMS: lease.Milliseconds()}, ttl: lease})
	return err
}

// HoldClaimForTest takes one of s's claims in flight until the returned function
// is called.
func HoldClaimForTest(s *Store) func() {
	s.claims <- struct{}{}
	return func() { <-s.claims }
}

// Steps between two writes (OnStepForTest).
const (
	StepLease   = stepLease
	StepJob     = stepJob
	StepAsked   = stepAsked
	StepStored  = stepStored
	StepWritten = stepWritten
)

// OnStepForTest has s call fn between two writes of a call; when fn returns true
// the call stops there and returns ErrDiedForTest, as if its process died.
func OnStepForTest(s *Store, fn func(job string, slot time.Time, step string) bool) { s.stepHook = fn }

// ErrDiedForTest is what a call stopped by OnStepForTest's fn returns.
var ErrDiedForTest = errDied

// ForgetForTest drops what s remembers of the leases it holds and of the slots
// it answered, as a process that restarted would have.
func ForgetForTest(s *Store) {
	s.mem.mu.Lock()
	s.mem.held, s.mem.hints, s.mem.sighted = nil, nil, nil
	s.mem.mu.Unlock()
}

// OnDeliverForTest has s's shared watcher call fn after it delivered an update of
// key (purge: a purge marker). While fn runs, the watcher delivers nothing else.
func OnDeliverForTest(s *Store, fn func(key string, purge bool)) { s.watchHook = fn }

// SetWatcherIdleForTest sets how long s's shared lease watcher runs on idle.
func SetWatcherIdleForTest(s *Store, d time.Duration) {
	s.mem.hub.mu.Lock()
	s.mem.hub.idle = d
	s.mem.hub.mu.Unlock()
}

// WatcherRunningForTest reports whether s's shared lease watcher runs.
func WatcherRunningForTest(s *Store) bool {
	s.mem.hub.mu.Lock()
	defer s.mem.hub.mu.Unlock()
	return s.mem.hub.running
}
