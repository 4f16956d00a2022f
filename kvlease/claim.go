package kvlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/scheduler"
)

// Claim decides the claim from the run's two keys and, on won, makes in.Token the
// holder: first the lease key (created by compare-and-set from a revision that was not
// a live lease), then the run record (compare-and-set from the revision read). Every
// lost race reads both keys again and decides again. See the package documentation.
//
// The lease is in.Lease rounded up to whole seconds; it must be at least
// scheduler.MinLease. Expires of a fresh win is estimated from the server's clock;
// later answers read it from the stored lease.
func (s *Store) Claim(ctx context.Context, in scheduler.RunClaim) (scheduler.ClaimResult, error) {
	if err := checkClaim(in); err != nil {
		return scheduler.ClaimResult{}, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	select {
	case s.claims <- struct{}{}:
		defer func() { <-s.claims }()
	case <-ctx.Done():
		return scheduler.ClaimResult{}, fmt.Errorf("kvlease: claim %s: waiting for one of the %d claims in flight to end: %w",
			backendutil.DescribeRun(in.Job, in.Slot), cap(s.claims), ctx.Err())
	}
	b, err := s.bucketFor(ctx)
	if err != nil {
		return scheduler.ClaimResult{}, err
	}
	res, err := s.claim(ctx, b, in)
	if err != nil {
		return scheduler.ClaimResult{}, fmt.Errorf("kvlease: claim %s: %w", backendutil.DescribeRun(in.Job, in.Slot), err)
	}
	return res, nil
}

func checkClaim(in scheduler.RunClaim) error {
	if err := backendutil.CheckClaim("kvlease", in.Job, in.Token); err != nil {
		return err
	}
	switch {
	case in.Lease < scheduler.MinLease:
		return fmt.Errorf("%w: kvlease: claim for job %q: lease %v is below %v (the server counts TTLs in whole seconds)",
			scheduler.ErrInvalidClaim, in.Job, in.Lease, scheduler.MinLease)
	case in.Keep < 0:
		return fmt.Errorf("%w: kvlease: claim for job %q: negative keep %v", scheduler.ErrInvalidClaim, in.Job, in.Keep)
	}
	return nil
}

func (s *Store) claim(ctx context.Context, b *bucket, in scheduler.RunClaim) (scheduler.ClaimResult, error) {
	k := keysFor(in.Job, in.Slot)
	lease := natsutil.TTL(in.Lease)
	keepMS := in.Keep.Milliseconds()
	if in.Keep == 0 {
		keepMS = scheduler.DefaultRunKeep.Milliseconds()
	}
	// A finish this store's shared watcher saw (the purge carries the finished
	// record, stored before the purge was sent): done, without a read. A backup's
	// claim after its watch fired on the holder's finish is this case.
	// Not for a claim that may reopen a paused slot: that decides from the store.
	if rec, ok := s.mem.finishedRun(k); ok && !mayReopen(in, rec) {
		return decided(rec, in.Token), nil
	}
	// revision of a lease key this call created
	mine, res, done, err := s.claimBlind(ctx, b, k, in, lease, keepMS)
	if done || err != nil {
		return res, err
	}

	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return scheduler.ClaimResult{}, err
		}
		sent := time.Now()
		run, ls, err := s.readBoth(ctx, b, k)
		if err != nil {
			return scheduler.ClaimResult{}, err
		}
		if run.rec != nil && run.rec.finished() {
			reopen, err := s.reopens(ctx, b, in, run.rec)
			if err != nil {
				return scheduler.ClaimResult{}, err
			}
			if !reopen {
				if mine != 0 { // a lease key we wrote for a run that was decided meanwhile
					_ = s.purge(ctx, b, k.lease, mine)
				}
				return decided(run.rec, in.Token), nil
			}
			// A paused slot catch-up asks for: taken below like an expired lease,
			// from the lease key's last revision (readBoth skips the lease key of
			// a decided run where it reads the keys one at a time).
			if ls, err = s.readLease(ctx, b, k); err != nil {
				return scheduler.ClaimResult{}, err
			}
		}

		var leaseRev uint64
		var expires time.Time
		switch {
		case ls.rec != nil && ls.rec.Token != in.Token:
			res := scheduler.ClaimResult{Outcome: scheduler.OutcomeRunning, Holder: ls.rec.Instance, Expires: ls.expires()}
			if run.rec != nil && run.rec.Token == ls.rec.Token {
				res.Attempt, res.Fence = run.rec.Attempt, run.rec.Fence
			}
			s.mem.noteRunning(k, ls, sent)
			return res, nil

		case ls.rec != nil && run.rec != nil && run.rec.Token == in.Token:
			// The same token asking again while it holds the lease.
			s.mem.remember(k, in.Token, held{
				leaseRev: ls.rev, lease: *ls.rec, runRev: run.rev, run: *run.rec, runWritten: s.localTime(run.created),
			})
			return wonResult(run.rec, ls.expires()), nil

		case ls.rec != nil:
			// We hold the lease key (an earlier call by this token wrote it and then
			// failed, or lost the run record's race): finish the claim. For a job
			// that forbids overlap, after the look at its other slots that the
			// earlier call may not have made (overlap.go).
			leaseRev, expires = ls.rev, ls.expires()
			if in.Overlap == scheduler.OverlapSkip {
				res, backedOff, err := s.backOff(ctx, b, k, in, run, ls.rev, lease, keepMS)
				if err != nil || backedOff {
					return res, err
				}
			}

		default:
			// No live lease: a first claim (run.rec == nil: nothing stored, or a
			// lease key whose claimer died before writing the run record) or a
			// takeover. A job that forbids overlap takes over only while no other
			// slot of it holds a live lease.
			if run.rec != nil && in.Overlap == scheduler.OverlapSkip {
				busy, err := s.otherBusy(ctx, b, in.Job, in.Slot, true, 0)
				if err != nil {
					return scheduler.ClaimResult{}, err
				}
				if busy {
					return waiting(run.rec), nil
				}
			}
			if run.rec == nil {
				if in.TakeoverOnly {
					return scheduler.ClaimResult{Outcome: scheduler.OutcomeNone}, nil
				}
				status, err := s.firstClaimDecision(ctx, b, in)
				if err != nil {
					return scheduler.ClaimResult{}, err
				}
				if status != "" {
					// Store the decision before anyone acts on it; a lost race
					// decides again from what won.
					res, err := s.storeDecision(ctx, b, k, in, run.rev, status, lease, keepMS)
					if errors.Is(err, errConflict) {
						continue
					}
					return res, err
				}
			}
			rec := leaseRecord{V: recordVersion, Token: in.Token, Instance: in.Instance, LeaseMS: lease.Milliseconds()}
			if b.atomic.Load() && in.Overlap != scheduler.OverlapSkip {
				// Both keys in one atomic batch. (A job that forbids overlap writes
				// the lease key first, to look at the job's other slots once it is
				// visible: see backOff.)
				res, err := s.claimBatch(ctx, b, k, in, run, ls.rev, rec, lease, keepMS)
				switch {
				case errors.Is(err, errConflict):
					continue
				case !errors.Is(err, errNoBatch):
					return res, err
				}
			}
			if in.Overlap == scheduler.OverlapSkip && s.overlapHook != nil {
				s.overlapHook(in.Job, in.Slot, false)
			}
			rev, err := s.put(ctx, b, write{key: k.lease, value: rec, expect: ls.rev, ttl: lease})
			if errors.Is(err, errConflict) {
				continue
			}
			if err != nil {
				return scheduler.ClaimResult{}, err
			}
			leaseRev, mine = rev, rev
			expires = s.clock.estimate(time.Now()).Add(lease)
			if in.Overlap == scheduler.OverlapSkip {
				if s.overlapHook != nil {
					s.overlapHook(in.Job, in.Slot, true)
				}
				// The overlap check and the lease key are two keys apart: two slots
				// of the job claimed at the same instant could both pass it. Now
				// that this lease key is visible to the others, look again; if
				// another slot holds the job, back off. In a tie the lease key
				// stored first goes on: exactly one runs (overlap.go).
				res, backedOff, err := s.backOff(ctx, b, k, in, run, rev, lease, keepMS)
				if err != nil || backedOff {
					return res, err
				}
			}
		}

		next, err := s.nextRun(ctx, b, in, run.rec, lease, keepMS)
		if err != nil {
			return scheduler.ClaimResult{}, err
		}
		runRev, err := s.put(ctx, b, write{key: k.run, value: next, expect: run.rev, ttl: keepFor(in.Keep, lease, false)})
		if errors.Is(err, errConflict) {
			continue // the run changed (finished, or another holder wrote it): decide again
		}
		if err != nil {
			return scheduler.ClaimResult{}, err
		}
		leaseRec := leaseRecord{V: recordVersion, Token: in.Token, Instance: in.Instance, LeaseMS: lease.Milliseconds()}
		s.mem.remember(k, in.Token, held{leaseRev: leaseRev, lease: leaseRec, runRev: runRev, run: next, runWritten: time.Now()})
		return wonResult(&next, expires), nil
	}
	return scheduler.ClaimResult{}, ErrContention
}

// claimBlind is a first claim sent without reading first: the lease key, then the
// run record, each created by compare-and-set from "nothing stored" (revision 0), so
// a slot nobody has claimed yet is won in two round trips (one atomic batch with
// WithAtomicBatches). It is the claim's own first two writes on a fresh slot, made
// before the read instead of after it: when anything is stored, the first write
// that meets it loses its compare-and-set and the claim reads and decides as
// always, keeping a lease key it did create (mine).
//
// It is tried only for a claim that would decide nothing before writing: not a
// takeover-only claim, not a job that forbids overlap (which looks at the job's
// other slots first), a deadline the cached estimate of the server's clock shows
// unambiguously ahead, and a slot this store has not answered before (a backup's
// claims of a slot it saw running read first: they find it running or finished).
func (s *Store) claimBlind(ctx context.Context, b *bucket, k runKeys, in scheduler.RunClaim, lease time.Duration, keepMS int64) (mine uint64, res scheduler.ClaimResult, done bool, err error) {
	if !s.mem.firstSight(k) || in.TakeoverOnly || in.Overlap == scheduler.OverlapSkip {
		return 0, res, false, nil
	}
	if !in.Deadline.IsZero() {
		if _, hi, ok := s.clock.bounds(time.Now()); !ok || hi.After(in.Deadline) {
			return 0, res, false, nil
		}
	}
	rec := leaseRecord{V: recordVersion, Token: in.Token, Instance: in.Instance, LeaseMS: lease.Milliseconds()}
	if b.atomic.Load() {
		res, err := s.claimBatch(ctx, b, k, in, runEntry{}, 0, rec, lease, keepMS)
		switch {
		case errors.Is(err, errConflict), errors.Is(err, errNoBatch):
			return 0, res, false, nil
		case err != nil:
			return 0, res, true, err
		}
		return 0, res, true, nil
	}
	next, err := s.nextRun(ctx, b, in, nil, lease, keepMS)
	if err != nil {
		return 0, res, true, err
	}
	var rev, runRev uint64
	if s.blindInFlight.Add(1) <= maxChained && b.chain {
		rev, runRev, err = s.putChained(ctx, b, k, in.Token, rec, lease, next, keepFor(in.Keep, lease, false))
	} else {
		rev, runRev, err = s.putInTurn(ctx, b, k, rec, lease, next, keepFor(in.Keep, lease, false))
	}
	s.blindInFlight.Add(-1)
	switch {
	case errors.Is(err, errUndecided):
		return rev, res, false, nil // a write may be stored: read and decide
	case errors.Is(err, errConflict) && rev == 0:
		res, done, err := s.holderRunning(ctx, b, k, in, storedRev(err))
		return 0, res, done, err
	case errors.Is(err, errConflict):
		return rev, res, false, nil // a run record exists: read and decide
	case err != nil:
		return rev, res, true, err
	}
	expires := s.clock.estimate(time.Now()).Add(lease)
	s.mem.remember(k, in.Token, held{leaseRev: rev, lease: rec, runRev: runRev, run: next, runWritten: time.Now()})
	return rev, wonResult(&next, expires), true, nil
}

// maxChained is how many first claims a store sends chained (putChained) at once;
// the claims beyond wait for each write in turn (putInTurn). A chained claim saves
// a round trip only when no other write to the bucket comes between its two
// messages, and costs a write more when it loses: many claims at one instant (a
// fleet whose jobs share a schedule, claiming at the slot) come between each
// other's messages, and their losers' run records are refused writes the server
// must still answer. Measured with the bench's load section (1,000 jobs × 3
// instances at one instant), chaining every claim doubled the lag's p99; a store's
// own claims in flight are the best sign it has of such a burst.
const maxChained = 4

// putInTurn writes a first claim's two keys one after the other, each from
// revision 0, and answers as putChained does.
func (s *Store) putInTurn(ctx context.Context, b *bucket, k runKeys, lease leaseRecord, leaseTTL time.Duration, run runRecord, runTTL time.Duration) (leaseRev, runRev uint64, err error) {
	leaseRev, err = s.put(ctx, b, write{key: k.lease, value: lease, ttl: leaseTTL})
	if err != nil {
		return 0, 0, err
	}
	runRev, err = s.put(ctx, b, write{key: k.run, value: run, ttl: runTTL})
	if err != nil {
		return leaseRev, 0, err
	}
	return leaseRev, runRev, nil
}

// errUndecided marks a chained claim left without an answer to one of its writes:
// either may be stored.
var errUndecided = errors.New("kvlease: claim undecided")

// putChained writes a first claim's two keys in one round trip: the lease key and
// the run record, both from revision 0, sent one after the other without waiting.
// The run record is chained to the lease key: the lease key's message carries a
// Nats-Msg-Id of this claim (the slot's lease key and the token), and the run
// record's Nats-Expected-Last-Msg-Id names it, so the server stores the run record
// only if the stream's last stored message is this claim's lease key. A run record
// therefore never exists without its lease key having been stored first, as with
// the two writes in sequence. (The id also makes a repeat of the lease write, after
// an answer was lost, a duplicate that answers with the stored revision.)
//
// Another write to the bucket stored between the two (any key: the check is on the
// stream's last message) makes the run record fail with 10070; it is then written
// again, alone, from revision 0. So it returns:
//
//   - both revisions: both stored;
//   - leaseRev 0 and an error matching errConflict: the lease key holds something
//     (storedRev of the error names its revision);
//   - leaseRev and an error matching errConflict: the lease key is ours, the run
//     record exists;
//   - an error matching errUndecided: a write went unanswered;
//   - any other error as put returns it.
func (s *Store) putChained(ctx context.Context, b *bucket, k runKeys, token string, lease leaseRecord, leaseTTL time.Duration, run runRecord, runTTL time.Duration) (leaseRev, runRev uint64, err error) {
	lm, err := putMsg(b, write{key: k.lease, value: lease, ttl: leaseTTL})
	if err != nil {
		return 0, 0, err
	}
	rm, err := putMsg(b, write{key: k.run, value: run, ttl: runTTL})
	if err != nil {
		return 0, 0, err
	}
	id := k.lease + " " + token
	lm.Header.Set(jetstream.MsgIDHeader, id)
	rm.Header.Set(jetstream.ExpectedLastMsgIDHeader, id)
	actx, cancel := context.WithTimeout(ctx, s.opts.attempt)
	res := s.direct.PublishAll(actx, []*nats.Msg{lm, rm})
	cancel()
	le, re := res[0].Err, res[1].Err
	switch {
	case le == nil && re == nil:
		return res[0].Ack.Sequence, res[1].Ack.Sequence, nil
	case le != nil && re == nil:
		// Not reachable by the chain (the run record needs the lease key stored
		// just before it), but never leave a run record without its lease: end it
		// and decide from the store.
		_ = s.purge(ctx, b, k.run, res[1].Ack.Sequence)
		return 0, 0, fmt.Errorf("%w: the run record was stored without its lease key (%w)", errUndecided, le)
	case le != nil && isConflict(le):
		return 0, 0, fmt.Errorf("%w: %s at revision 0: %w", errConflict, k.lease, le)
	case le != nil && natsutil.Unanswered(le), le != nil && errors.Is(le, context.DeadlineExceeded):
		return 0, 0, fmt.Errorf("%w: %w", errUndecided, le)
	case le != nil:
		return 0, 0, fmt.Errorf("kvlease: write %s: %w", k.lease, le)
	}
	leaseRev = res[0].Ack.Sequence
	if res[0].Ack.Duplicate {
		// This claim's lease key was stored before (an earlier call with the token,
		// whose answer was lost): it may have changed since. Read and decide.
		return 0, 0, fmt.Errorf("%w: the lease key was written before", errUndecided)
	}
	switch {
	case natsutil.HasCode(re, natsutil.ErrCodeWrongLastMsgID):
		// Another write came between the two: the run record alone.
		s.chainRetries.Add(1)
		runRev, err = s.put(ctx, b, write{key: k.run, value: run, ttl: runTTL})
		return leaseRev, runRev, err
	case isConflict(re):
		return leaseRev, 0, fmt.Errorf("%w: %s at revision 0: %w", errConflict, k.run, re)
	case natsutil.Unanswered(re), errors.Is(re, context.DeadlineExceeded):
		return leaseRev, 0, fmt.Errorf("%w: %w", errUndecided, re)
	default:
		return leaseRev, 0, fmt.Errorf("kvlease: write %s: %w", k.run, re)
	}
}

// holderRunning answers a blind claim whose lease key write lost: the slot's lease
// key holds something, stored at revision stored when the server's answer named it
// (else 0). A live lease of another token answers running, the common loss, at once
// (without the run record's attempt and fence, which a backup does not need), and
// a finish the shared watcher saw answers done; anything else is left to the
// claim's read of both keys.
//
// The lease comes from the store's shared watcher when it has delivered the key at
// that revision or later (waiting up to watcherWait for it): the other instances'
// claims of the same instant are then answered without a request, the watcher
// having received the winner's write anyway. Otherwise the lease key alone is read
// (one message, where the claim's usual read asks for both keys).
func (s *Store) holderRunning(ctx context.Context, b *bucket, k runKeys, in scheduler.RunClaim, stored uint64) (scheduler.ClaimResult, bool, error) {
	if stored > 0 {
		if u, ok := s.mem.leaseSince(ctx, k.lease, stored, watcherWait); ok {
			if rec, ok := s.mem.finishedRun(k); ok && !mayReopen(in, rec) {
				return decided(rec, in.Token), true, nil
			}
			if u.lease.rec != nil && u.lease.rec.Token != in.Token {
				s.mem.noteRunning(k, u.lease, u.at)
				return scheduler.ClaimResult{Outcome: scheduler.OutcomeRunning, Holder: u.lease.rec.Instance, Expires: u.lease.expires()}, true, nil
			}
		}
	}
	sent := time.Now()
	ls, err := s.readLease(ctx, b, k)
	if err != nil {
		return scheduler.ClaimResult{}, true, err
	}
	if ls.rec == nil || ls.rec.Token == in.Token {
		return scheduler.ClaimResult{}, false, nil
	}
	s.mem.noteRunning(k, ls, sent)
	return scheduler.ClaimResult{Outcome: scheduler.OutcomeRunning, Holder: ls.rec.Instance, Expires: ls.expires()}, true, nil
}

// watcherWait bounds how long a lost blind claim waits for the shared watcher to
// deliver the write it lost to, before reading the lease key instead.
const watcherWait = 250 * time.Millisecond

// nextRun is the run record that makes in.Token the holder of a run whose record
// is prev (nil for a first claim): attempt 1, or attempt+1 naming the previous
// holder on a takeover, with the next fence.
func (s *Store) nextRun(ctx context.Context, b *bucket, in scheduler.RunClaim, prev *runRecord, lease time.Duration, keepMS int64) (runRecord, error) {
	fence, err := s.nextFence(ctx, b, prev)
	if err != nil {
		return runRecord{}, err
	}
	next := runRecord{
		V: recordVersion, Job: in.Job, SlotMS: in.Slot.UnixMilli(),
		Token: in.Token, Instance: in.Instance, Attempt: 1, Fence: fence,
		State: stateRunning, LeaseMS: lease.Milliseconds(), KeepMS: keepMS,
	}
	switch {
	case prev != nil && prev.finished(): // a paused slot reopened (see reopens)
		next.Attempt, next.Reopened = prev.Attempt+1, true
	case prev != nil: // a takeover
		next.Attempt = prev.Attempt + 1
		next.Previous, next.PreviousToken = prev.Instance, prev.Token
	}
	return next, nil
}

// reopens reports whether in may run the slot that rec stored finished: a slot
// stored paused, claimed with ReopenPaused by another token before the claim's
// deadline (by the server's clock).
func (s *Store) reopens(ctx context.Context, b *bucket, in scheduler.RunClaim, rec *runRecord) (bool, error) {
	if !mayReopen(in, rec) {
		return false, nil
	}
	late, err := s.pastDeadline(ctx, b, in.Deadline)
	return !late, err
}

// mayReopen is what reopens decides without the server's clock.
func mayReopen(in scheduler.RunClaim, rec *runRecord) bool {
	return rec.State == stateFinished && in.MayReopen(rec.Status, rec.Token)
}

// claimBatch makes in.Token the holder in one atomic batch: the lease key rec from
// revision leaseRev (which holds no live lease) and the run record from the revision
// read, both compare-and-set. It is the same pair of writes as the two-step claim,
// stored together or not at all, so no claimer dies between them. A lost race
// returns an error matching errConflict; a batch the server did not take, one
// matching errNoBatch (the caller writes the keys one at a time).
func (s *Store) claimBatch(ctx context.Context, b *bucket, k runKeys, in scheduler.RunClaim, run runEntry, leaseRev uint64, rec leaseRecord, lease time.Duration, keepMS int64) (scheduler.ClaimResult, error) {
	next, err := s.nextRun(ctx, b, in, run.rec, lease, keepMS)
	if err != nil {
		return scheduler.ClaimResult{}, err
	}
	revs, err := s.putBatch(ctx, b, []write{
		{key: k.lease, value: rec, expect: leaseRev, ttl: lease},
		{key: k.run, value: next, expect: run.rev, ttl: keepFor(in.Keep, lease, false)},
	})
	if errors.Is(err, errNoBatch) && natsutil.HasCode(err, natsutil.ErrCodeAtomicDisabled) {
		b.atomic.Store(false) // turned off on the stream: stop trying
	}
	if err != nil {
		return scheduler.ClaimResult{}, err
	}
	expires := s.clock.estimate(time.Now()).Add(lease)
	s.mem.remember(k, in.Token, held{leaseRev: revs[0], lease: rec, runRev: revs[1], run: next, runWritten: time.Now()})
	return wonResult(&next, expires), nil
}

// storeDecision stores the slot finished with status (skipped or late) for in.Token,
// by compare-and-set from the run record's revision runRev, and answers the
// decision. A lost race returns an error matching errConflict.
func (s *Store) storeDecision(ctx context.Context, b *bucket, k runKeys, in scheduler.RunClaim, runRev uint64, status scheduler.Status, lease time.Duration, keepMS int64) (scheduler.ClaimResult, error) {
	rec := runRecord{
		V: recordVersion, Job: in.Job, SlotMS: in.Slot.UnixMilli(), Token: in.Token, Instance: in.Instance,
		Attempt: 1, State: stateFinished, Status: status, LeaseMS: lease.Milliseconds(), KeepMS: keepMS,
	}
	if _, err := s.put(ctx, b, write{key: k.run, value: rec, expect: runRev, ttl: keepFor(in.Keep, lease, true)}); err != nil {
		return scheduler.ClaimResult{}, err
	}
	return decided(&rec, in.Token), nil
}

// waiting answers a takeover of an overlap-forbidden job's run while another slot
// of the job holds a lease: running, until that one ends.
func waiting(r *runRecord) scheduler.ClaimResult {
	return scheduler.ClaimResult{Outcome: scheduler.OutcomeRunning, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance}
}

// firstClaimDecision decides a first claim of a slot with nothing stored: late when
// the server's clock is past the deadline, skipped when the job forbids overlap and
// another of its slots holds a live lease on an unfinished run, else "" (claim it).
func (s *Store) firstClaimDecision(ctx context.Context, b *bucket, in scheduler.RunClaim) (scheduler.Status, error) {
	late, err := s.pastDeadline(ctx, b, in.Deadline)
	if err != nil || late {
		return scheduler.StatusLate, err
	}
	if in.Overlap == scheduler.OverlapSkip {
		busy, err := s.otherBusy(ctx, b, in.Job, in.Slot, false, 0)
		if err != nil || busy {
			return scheduler.StatusSkipped, err
		}
	}
	return "", nil
}

// decided answers a claim of a finished run: the token that stored a skipped or late
// decision is told it again (so its claim is repeat-safe), every other claim done,
// with how the run ended. A state or status this version does not know reads as
// done.
func decided(r *runRecord, token string) scheduler.ClaimResult {
	return scheduler.ClaimResult{Outcome: scheduler.DecidedOutcome(r.Status, r.Token == token && r.Fence == 0),
		Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance, Status: r.Status}
}

// nextFence is the fence of a new holder of a run: the server's time in nanoseconds
// (the low end of this store's estimate, read afresh when it has none), and always
// above the previous holder's fence. So fences grow per run across takeovers, and
// stay above the fences handed out before a bucket was recreated or a memory bucket
// lost its contents in a restart (stream sequences, which would start again at 1),
// as long as the server's clock does not go back by more than the time since.
func (s *Store) nextFence(ctx context.Context, b *bucket, prev *runRecord) (uint64, error) {
	lo, _, ok := s.clock.bounds(time.Now())
	if !ok {
		if err := s.refreshClock(ctx, b); err != nil {
			return 0, err
		}
		lo = s.clock.estimate(time.Now())
	}
	fence := uint64(max(lo.UnixNano(), 1))
	if prev != nil && fence <= prev.Fence {
		fence = prev.Fence + 1
	}
	return fence, nil
}

func wonResult(r *runRecord, expires time.Time) scheduler.ClaimResult {
	res := scheduler.ClaimResult{
		Outcome: scheduler.OutcomeWon, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance, Expires: expires,
	}
	if r.PreviousToken != "" {
		res.Previous, res.PreviousToken, res.PreviousAttempt = r.Previous, r.PreviousToken, r.Attempt-1
	}
	res.Reopened = r.Reopened
	return res
}

// pastDeadline reports whether the server's clock is past deadline. It decides from
// the cached estimate of the server's clock when that is unambiguous, and reads the
// server's time (StreamInfo.TimeStamp) otherwise; when the deadline falls within the
// reading's round trip, the middle of the round trip decides.
func (s *Store) pastDeadline(ctx context.Context, b *bucket, deadline time.Time) (bool, error) {
	if deadline.IsZero() {
		return false, nil
	}
	for sampled := false; ; sampled = true {
		lo, hi, ok := s.clock.bounds(time.Now())
		if ok {
			switch {
			case lo.After(deadline):
				return true, nil
			case !hi.After(deadline):
				return false, nil
			case sampled:
				return lo.Add(hi.Sub(lo) / 2).After(deadline), nil
			}
		} else if sampled {
			return false, errors.New("kvlease: the server sent no timestamp")
		}
		if err := s.refreshClock(ctx, b); err != nil {
			return false, err
		}
	}
}

// clockCall is a reading of the server's time in flight, shared by every claim
// that needs one meanwhile (so a busy store sends one request, not one per claim).
type clockCall struct {
	done chan struct{}
	err  error
}

// refreshClock reads the server's time, or waits for the reading already in flight.
func (s *Store) refreshClock(ctx context.Context, b *bucket) error {
	s.mu.Lock()
	if c := s.clockCall; c != nil {
		s.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &clockCall{done: make(chan struct{})}
	s.clockCall = c
	s.mu.Unlock()
	_, c.err = s.sampleClock(ctx, b)
	s.mu.Lock()
	s.clockCall = nil
	s.mu.Unlock()
	close(c.done)
	return c.err
}
