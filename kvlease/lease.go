package kvlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// Heartbeat extends token's lease to lease (rounded up to whole seconds) from now by
// the server's clock: a compare-and-set on the lease key's revision, carrying a new
// TTL. It fails with an error matching backend.ErrLeaseLost when token does not
// hold a live lease, expired ones included: the server judges expiry. While the run
// is long, heartbeats also refresh the run record's TTL. A run a later slot's claim
// asked to end (a request in the lease key, or in the run record read) has its
// lease extended all the same, and gets a *backend.CancelError.
func (s *Store) Heartbeat(ctx context.Context, key backend.RunKey, lease time.Duration) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if lease < backend.MinLease {
		return fmt.Errorf("%w: kvlease: heartbeat lease %v is below %v", backend.ErrInvalidClaim, lease, backend.MinLease)
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	k := keysFor(job, slot)
	ttl := natsutil.TTL(lease)
	h, cached := s.mem.recall(k, token)
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		if !cached {
			ls, err := s.readLease(ctx, b, k)
			if err != nil {
				return err
			}
			if ls.rec == nil || ls.rec.Token != token {
				s.mem.forget(k, token)
				return fmt.Errorf("%w: %s", backend.ErrLeaseLost, backendutil.DescribeRun(job, slot))
			}
			h = held{leaseRev: ls.rev, lease: *ls.rec}
		}
		cached = false
		rec := h.lease
		rec.LeaseMS = ttl.Milliseconds()
		rev, err := s.put(ctx, b, write{key: k.lease, value: rec, expect: h.leaseRev, ttl: ttl})
		if errors.Is(err, errConflict) {
			// Expired, taken over, a concurrent heartbeat, or a later slot's
			// request written into the lease key (kept: the rewrite starts from
			// the value read): read and judge.
			continue
		}
		if err != nil {
			return fmt.Errorf("kvlease: heartbeat %s: %w", backendutil.DescribeRun(job, slot), err)
		}
		h.leaseRev, h.lease = rev, rec
		s.refreshRun(ctx, b, k, token, &h)
		s.mem.remember(k, token, h)
		req := rec.request()
		if req == nil && h.runRev != 0 && h.run.Token == token {
			req = h.run.request()
		}
		if req != nil {
			return &backend.CancelError{Job: job, Slot: slot, Request: *req}
		}
		return nil
	}
	return fmt.Errorf("kvlease: heartbeat %s: %w", backendutil.DescribeRun(job, slot), ErrContention)
}

// refreshRun rewrites the run record unchanged when half its TTL has passed, so a run
// longer than its keep does not lose its record; only a running one (a stored
// retry's window counts from its record's write). Best effort: a failure is noticed
// at the next heartbeat, and a lost race means the run is no longer ours anyway.
func (s *Store) refreshRun(ctx context.Context, b *bucket, k runKeys, token string, h *held) {
	if h.runRev == 0 {
		run, err := s.readRun(ctx, b, k)
		if err != nil || run.rec == nil || run.rec.Token != token || run.rec.State != stateRunning {
			return
		}
		h.runRev, h.run, h.runWritten = run.rev, *run.rec, s.localTime(run.created)
	}
	lease := time.Duration(h.run.LeaseMS) * time.Millisecond
	ttl := keepFor(time.Duration(h.run.KeepMS)*time.Millisecond, lease, false)
	if time.Since(h.runWritten) < ttl/2 {
		return
	}
	rev, err := s.put(ctx, b, write{key: k.run, value: h.run, expect: h.runRev, ttl: ttl})
	if err != nil {
		h.runRev = 0
		return
	}
	h.runRev, h.runWritten = rev, time.Now()
}

// Finish marks the run finished with status: a compare-and-set on the run record. It
// is accepted from the token stored as the run's holder while the run is unfinished,
// even if its lease expired or was released, as long as nobody took the run over and
// it stored no retry; a repeat by that token is not an error. Any other token gets an error matching
// backend.ErrStaleToken and changes nothing. The finished record lives for the
// claim's Keep; the lease key is purged so that backups and overlap checks see the
// end at once.
func (s *Store) Finish(ctx context.Context, key backend.RunKey, status backend.Status) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if !status.Finished() {
		return fmt.Errorf("%w: kvlease: finish needs a final status, got %q", backend.ErrInvalidClaim, status)
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	k := keysFor(job, slot)
	h, cached := s.mem.recall(k, token)
	cached = cached && h.runRev != 0
	batch := cached
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		run, rerr := s.heldRun(ctx, b, k, &h, &cached)
		if rerr != nil {
			return rerr
		}
		switch {
		case run.rec != nil && run.rec.Token == token && run.rec.buffered():
			// The token that buffered the slot withdraws it.
			if err := s.withdraw(ctx, b, k, key, run, status); err != nil {
				return fmt.Errorf("kvlease: finish %s: %w", backendutil.DescribeRun(job, slot), err)
			}
			return nil
		case run.rec == nil || run.rec.Token != token || run.rec.retrying() || run.rec.buffered():
			// A run that stored a retry is no longer its failed attempt's to finish.
			s.mem.forget(k, token)
			return fmt.Errorf("%w: %s", backend.ErrStaleToken, backendutil.DescribeRun(job, slot))
		case run.rec.finished():
			s.mem.forget(k, token)
			return nil
		}
		next := *run.rec
		next.State, next.Status = stateFinished, status
		lease := time.Duration(next.LeaseMS) * time.Millisecond
		keep := keepFor(time.Duration(next.KeepMS)*time.Millisecond, lease, true)
		if batch && h.leaseRev != 0 && run.rev == h.runRev && b.atomic.Load() {
			// The run record and the lease key's purge in one atomic batch, both
			// compare-and-set. When the lease key moved (expired: the server's
			// marker) the batch stores nothing, and the run record is written
			// alone below: a holder may finish after its lease expired while nobody
			// took over.
			batch = false
			_, err := s.putBatch(ctx, b, []write{
				{key: k.run, value: next, expect: run.rev, ttl: keep},
				{key: k.lease, expect: h.leaseRev, ttl: markerTTL},
			})
			if err == nil {
				s.mem.forget(k, token)
				return nil
			}
			if !errors.Is(err, errConflict) && !errors.Is(err, errNoBatch) {
				return fmt.Errorf("kvlease: finish %s: %w", backendutil.DescribeRun(job, slot), err)
			}
			cached = false
			continue // read the run record again: it may be finished, or another's
		}
		_, err := s.put(ctx, b, write{key: k.run, value: next, expect: run.rev, ttl: keep})
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kvlease: finish %s: %w", backendutil.DescribeRun(job, slot), err)
		}
		switch {
		case next.cancelled():
			// The request's claimer may have rewritten the lease key since this
			// holder's last write: a purge that reads on a lost race.
			_ = s.endLease(ctx, b, k, token, h.leaseRev) // best effort: it expires anyway
		case h.leaseRev != 0:
			s.purgeNoWait(b, k.lease, h.leaseRev, next)
		default:
			_ = s.endLease(ctx, b, k, token, 0) // best effort: it expires anyway
		}
		s.mem.forget(k, token)
		return nil
	}
	return fmt.Errorf("kvlease: finish %s: %w", backendutil.DescribeRun(job, slot), ErrContention)
}

// Release ends token's live lease at once by purging the lease key at its revision.
// The run record stays unfinished, so the next Claim by another token is a takeover.
// Releasing a lease that token does not hold is not an error.
func (s *Store) Release(ctx context.Context, key backend.RunKey) error {
	job, slot, token := key.Job, key.Slot, key.Token
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(ctx)
	if err != nil {
		return err
	}
	k := keysFor(job, slot)
	h, _ := s.mem.recall(k, token)
	defer s.mem.forget(k, token)
	if err := s.endLease(ctx, b, k, token, h.leaseRev); err != nil {
		return fmt.Errorf("kvlease: release %s: %w", backendutil.DescribeRun(job, slot), err)
	}
	return nil
}

// endLease purges the lease key if token holds it, trying revision rev first when it
// is known.
func (s *Store) endLease(ctx context.Context, b *bucket, k runKeys, token string, rev uint64) error {
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		if rev == 0 {
			ls, err := s.readLease(ctx, b, k)
			if err != nil {
				return err
			}
			if ls.rec == nil || ls.rec.Token != token {
				return nil
			}
			rev = ls.rev
		}
		err := s.purge(ctx, b, k.lease, rev)
		if !errors.Is(err, errConflict) {
			return err
		}
		rev = 0
	}
	return ErrContention
}
