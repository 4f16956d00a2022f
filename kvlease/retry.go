package kvlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
)

var _ backend.Retrier = (*Store)(nil)

// Retry ends key's attempt as failed and stores its retry (backend.Retrier): a
// compare-and-set of the run record to state retry, with the window delay and
// within counted from the record's write by the server's clock, then a purge of
// the lease key, so backups watching the lease are told at once. The record lives
// for delay + within + the run's keep. It is accepted only from the token stored
// as the unfinished run's holder (also after its lease expired, while nobody took
// the run over); a repeat by that token while the retry is pending, or once its
// retry was claimed (the record is Retried, taken from that token), is not an
// error and changes nothing. Any other token, or a finished run, gets an error matching
// backend.ErrStaleToken and changes nothing.
func (s *Store) Retry(ctx context.Context, key backend.RunKey, delay, within time.Duration) error {
	job, slot, token := key.Job, key.Slot, key.Token
	if delay < 0 || within <= 0 {
		return fmt.Errorf("%w: kvlease: retry needs a delay of zero or more and a positive window, got %v and %v",
			backend.ErrInvalidClaim, delay, within)
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
	s.mem.forget(k, token) // the lease ends here, whatever the outcome
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		run, rerr := s.heldRun(ctx, b, k, &h, &cached)
		if rerr != nil {
			return rerr
		}
		switch {
		case run.rec != nil && run.rec.Retried && run.rec.PreviousToken == token:
			return nil // a repeat, after the retry it stored was claimed
		case run.rec == nil || run.rec.Token != token || run.rec.finished() || run.rec.buffered():
			return fmt.Errorf("%w: %s", backend.ErrStaleToken, backendutil.DescribeRun(job, slot))
		case run.rec.retrying():
			// A repeat: end the lease in case the first call stored the retry and
			// failed before its purge.
			return retryEndLease(s.endLease(ctx, b, k, token, 0), key)
		}
		if run.rec.Buffer {
			// A stored retry holds a buffer policy's job: marked before the
			// record says so, and so before the lease key is purged.
			if err := s.markRetry(ctx, b, job, slot, token); err != nil {
				return fmt.Errorf("kvlease: retry %s: %w", backendutil.DescribeRun(job, slot), err)
			}
			if s.died(job, slot, stepMarked) {
				return errDied
			}
		}
		next := *run.rec
		// The failed attempt's status: an older version, which reads the state as
		// done, reports the slot ended so.
		next.State, next.Status = stateRetry, backend.StatusError
		next.RetryDelayMS, next.RetryWithinMS = delay.Milliseconds(), max(within.Milliseconds(), 1)
		ttl := retryKeepFor(time.Duration(next.KeepMS)*time.Millisecond, delay, within)
		_, err := s.put(ctx, b, write{key: k.run, value: next, expect: run.rev, ttl: ttl})
		if errors.Is(err, errConflict) {
			continue // a takeover, or the holder's own heartbeat refreshing the record
		}
		if err != nil {
			return fmt.Errorf("kvlease: retry %s: %w", backendutil.DescribeRun(job, slot), err)
		}
		// The retry is stored before the lease ends: a claim between the two finds
		// the retry, never a run to take over at once.
		return retryEndLease(s.endLease(ctx, b, k, token, h.leaseRev), key)
	}
	return fmt.Errorf("kvlease: retry %s: %w", backendutil.DescribeRun(job, slot), ErrContention)
}

// retryEndLease wraps the error of ending key's lease after its retry was stored.
func retryEndLease(err error, key backend.RunKey) error {
	if err != nil {
		return fmt.Errorf("kvlease: retry %s: stored, but the lease did not end: %w", backendutil.DescribeRun(key.Job, key.Slot), err)
	}
	return nil
}

// retryDue decides a claim of a run waiting for its stored retry, by the server's
// clock: before the window, retry with how long until it opens; after it, the
// slot stored finished error (the last attempt's failure stands), done. Within
// the window it answers nothing (answered false): the claim takes the run over
// like an expired lease, as the retry's attempt. A lease key this claim created
// meanwhile is purged when it answers.
func (c *claiming) retryDue(ctx context.Context, run runEntry) (res backend.ClaimResult, answered bool, err error) {
	if r := run.rec; r.Token == c.in.Token {
		// The failed attempt's own token (a late repeat of its claim): its
		// attempt is over, and it never takes the retry.
		c.purgeMine(ctx)
		return backend.ClaimResult{Outcome: backend.OutcomeDone, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance, Status: backend.StatusError}, true, nil
	}
	at, by := run.retryWindow()
	delay := time.Duration(run.rec.RetryDelayMS) * time.Millisecond
	// Without a delay the window opened at the record's write, which the server's
	// clock has passed: the record was read.
	opened := delay == 0
	if !opened {
		if opened, err = c.s.pastDeadline(ctx, c.b, at); err != nil {
			return res, true, err
		}
	}
	if !opened {
		c.purgeMine(ctx)
		in := max(min(at.Sub(c.s.clock.estimate(time.Now())), delay), time.Millisecond)
		r := run.rec
		return backend.ClaimResult{Outcome: backend.OutcomeRetry, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance, RetryIn: in}, true, nil
	}
	closed, err := c.s.pastDeadline(ctx, c.b, by)
	if err != nil || !closed {
		return res, err != nil, err
	}
	next := *run.rec
	next.State, next.Status = stateFinished, backend.StatusError
	next.RetryDelayMS, next.RetryWithinMS = 0, 0
	lease := time.Duration(next.LeaseMS) * time.Millisecond
	keep := keepFor(time.Duration(next.KeepMS)*time.Millisecond, lease, true)
	if _, err := c.s.put(ctx, c.b, write{key: c.k.run, value: next, expect: run.rev, ttl: keep}); err != nil {
		return res, true, err // a lost race: the claim reads and decides again
	}
	return c.decidedRun(ctx, &next), true, nil
}

// purgeMine purges the lease key this claim created, if any: best effort, a lease
// key without its run record ends by its TTL anyway.
func (c *claiming) purgeMine(ctx context.Context) {
	if c.mine != 0 {
		_ = c.s.purge(ctx, c.b, c.k.lease, c.mine)
		c.mine = 0
	}
}
