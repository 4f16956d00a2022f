package kvlease

import (
	"context"
	"errors"
	"time"
)

// Helpers for the external tests: the layout's key encoding.
var (
	JobTokenForTest  = jobToken
	SlotTokenForTest = slotToken
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
// revision 0: a claimer that died between its two writes.
func WriteLeaseForTest(ctx context.Context, s *Store, job string, slot time.Time, token string) error {
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	k := keysFor(job, slot)
	_, err = s.put(ctx, b, write{key: k.lease, value: leaseRecord{V: recordVersion, Token: token, Instance: "i-" + token, LeaseMS: 60_000}, ttl: time.Minute})
	return err
}

// PutChainedForTest sends a chained first claim of (job, slot) for token and
// reports the revisions and whether the answer was a lost compare-and-set or
// undecided.
func PutChainedForTest(ctx context.Context, s *Store, job string, slot time.Time, token string) (leaseRev, runRev uint64, conflict, undecided bool, err error) {
	b, err := s.bucketFor(ctx)
	if err != nil {
		return 0, 0, false, false, err
	}
	k := keysFor(job, slot)
	rec := leaseRecord{V: recordVersion, Token: token, Instance: "i-" + token, LeaseMS: 60_000}
	run := runRecord{V: recordVersion, Job: job, SlotMS: slot.UnixMilli(), Token: token, Instance: "i-" + token, Attempt: 1, Fence: 1, State: stateRunning, LeaseMS: 60_000, KeepMS: 3_600_000}
	w := &chained{inTurn: inTurn{s: s, b: b}}
	leaseRev, runRev, err = w.chain(ctx, pair{
		lease: write{key: k.lease, value: rec, ttl: time.Minute}, run: write{key: k.run, value: run, ttl: time.Hour}, token: token, blind: true,
	})
	return leaseRev, runRev, errors.Is(err, errConflict), errors.Is(err, errUndecided), err
}

// HoldClaimForTest takes one of s's claims in flight until the returned function
// is called.
func HoldClaimForTest(s *Store) func() {
	s.claims <- struct{}{}
	return func() { <-s.claims }
}

// OnOverlapForTest has s call fn in each claim of an overlap-forbidden job: after
// its first look at the job's other slots, before it writes its lease key (wrote
// false), and after it stored it, before it looks again (wrote true). A test holds
// two claims at both to make them tie.
func OnOverlapForTest(s *Store, fn func(job string, slot time.Time, wrote bool)) { s.overlapHook = fn }

// OnCancelRequestForTest has s call fn in each claim under OverlapCancelOther
// once the request it asks of (job, slot)'s run is in the run record, before it
// writes the request into the lease key.
func OnCancelRequestForTest(s *Store, fn func(job string, slot time.Time)) { s.requestHook = fn }

// OnBufferStepForTest has s call fn between two writes of the buffer policies:
// "listed" (a slot entered the job's buffer key, its run record not yet
// buffered), "unlisted" (a claim took its slot off the list, its record still
// buffered), "marked" (Retry marked its retry, the run record not yet in state
// retry). When fn returns true the call stops there and returns ErrDiedForTest,
// as if its process died.
func OnBufferStepForTest(s *Store, fn func(job string, slot time.Time, step string) bool) {
	s.bufferHook = fn
}

// ErrDiedForTest is what a call stopped by OnBufferStepForTest's fn returns.
var ErrDiedForTest = errDied

// BufferKeyForTest is job's buffer key.
var BufferKeyForTest = bufferKey
