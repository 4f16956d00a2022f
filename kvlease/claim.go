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

// Claim decides the claim from the run's two keys and, on won, makes in.Token the
// holder: first the lease key (created by compare-and-set from a revision that was not
// a live lease), then the run record (compare-and-set from the revision read). Every
// lost race reads both keys again and decides again. See the package documentation.
//
// The lease is in.Lease rounded up to whole seconds; it must be at least
// backend.MinLease. Expires of a fresh win is estimated from the server's clock;
// later answers read it from the stored lease.
func (s *Store) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if err := checkClaim(in); err != nil {
		return backend.ClaimResult{}, err
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	select {
	case s.claims <- struct{}{}:
		defer func() { <-s.claims }()
	case <-ctx.Done():
		return backend.ClaimResult{}, fmt.Errorf("kvlease: claim %s: waiting for one of the %d claims in flight to end: %w",
			backendutil.DescribeRun(in.Job, in.Slot), cap(s.claims), ctx.Err())
	}
	b, err := s.bucketFor(ctx)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	res, err := s.claim(ctx, b, in)
	if err != nil {
		return backend.ClaimResult{}, fmt.Errorf("kvlease: claim %s: %w", backendutil.DescribeRun(in.Job, in.Slot), err)
	}
	return res, nil
}

func checkClaim(in backend.RunClaim) error {
	if err := backendutil.CheckClaim("kvlease", in.Job, in.Token); err != nil {
		return err
	}
	switch {
	case in.Lease < backend.MinLease:
		return fmt.Errorf("%w: kvlease: claim for job %q: lease %v is below %v (the server counts TTLs in whole seconds)",
			backend.ErrInvalidClaim, in.Job, in.Lease, backend.MinLease)
	case in.Keep < 0:
		return fmt.Errorf("%w: kvlease: claim for job %q: negative keep %v", backend.ErrInvalidClaim, in.Job, in.Keep)
	case in.MaxRuns < 0:
		return fmt.Errorf("%w: kvlease: claim for job %q: max runs must not be negative, got %d", backend.ErrInvalidClaim, in.Job, in.MaxRuns)
	}
	return nil
}

// claiming is one claim in progress: what was asked, the run's keys and bucket, and
// the lease key the claim created, if any.
type claiming struct {
	s      *Store
	b      *bucket
	in     backend.RunClaim
	k      runKeys
	lease  time.Duration // in.Lease in whole seconds
	keepMS int64         // the run record's keep_ms: in.Keep, or the default
	// mine is the revision of a lease key this claim created (0: none): purged when
	// the run turns out decided meanwhile.
	mine uint64
	// inFlightWaits counts the rounds spent waiting for earlier slots' claims in
	// flight (cancelEarlier).
	inFlightWaits int
	// counted is the job's count key as this round read or wrote it (runlimit.go);
	// last says the claim's slot is the MaxRuns-th counted.
	counted *countEntry
	last    bool
}

// claim decides in: from a finish the shared watcher saw, by a first claim's writes
// sent before reading (blind.go), or by rounds of reading both keys and deciding,
// until one is not a lost race.
func (s *Store) claim(ctx context.Context, b *bucket, in backend.RunClaim) (backend.ClaimResult, error) {
	c := &claiming{s: s, b: b, in: in, k: keysFor(in.Job, in.Slot), lease: natsutil.TTL(in.Lease), keepMS: in.Keep.Milliseconds()}
	if in.Keep == 0 {
		c.keepMS = backend.DefaultRunKeep.Milliseconds()
	}
	// A finish this store's shared watcher saw (the purge carries the finished
	// record, stored before the purge was sent): done, without a read. A backup's
	// claim after its watch fired on the holder's finish is this case.
	// Not for a claim that may reopen a paused slot: that decides from the store.
	if rec, ok := s.mem.finishedRun(c.k); ok && !mayReopen(in, rec) {
		return decided(rec, in.Token), nil
	}
	if res, answered, err := c.blind(ctx); answered || err != nil {
		return res, err
	}
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return backend.ClaimResult{}, err
		}
		res, err := c.round(ctx)
		if !lostRace(err) {
			return res, err
		}
	}
	return backend.ClaimResult{}, ErrContention
}

// lostRace reports whether err is a write that lost to another (errConflict) or
// whose outcome is unknown (errUndecided): the claim reads and decides again.
func lostRace(err error) bool { return errors.Is(err, errConflict) || errors.Is(err, errUndecided) }

// round reads the run's two keys and decides by the first case that holds: the run
// is decided (decidedRun); it waits for a stored retry whose window is not open, or
// has closed (retryDue); another token holds the lease (running); this token holds
// the lease and the run (wonAgain); this token holds the lease key alone (resume); no
// lease is live (take). An error for which lostRace holds asks for another round.
func (c *claiming) round(ctx context.Context) (backend.ClaimResult, error) {
	sent := time.Now()
	c.counted, c.last = nil, false
	run, ls, err := c.s.readBoth(ctx, c.b, c.k)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	if run.rec != nil && run.rec.finished() {
		reopen, err := c.reopens(ctx, run.rec)
		switch {
		case err != nil:
			return backend.ClaimResult{}, err
		case !reopen:
			return c.decidedRun(ctx, run.rec), nil
		}
		// A paused slot catch-up asks for: taken below like an expired lease, from
		// the lease key's last revision (readBoth skips the lease key of a decided
		// run where it reads the keys one at a time).
		if ls, err = c.s.readLease(ctx, c.b, c.k); err != nil {
			return backend.ClaimResult{}, err
		}
	}
	if run.rec != nil && !run.rec.finished() && run.rec.cancelled() {
		// A later slot asked the run to end: it is not taken over, nor retried.
		if res, answered, err := c.cancelled(ctx, run, ls); answered || err != nil {
			return res, err
		}
	}
	if run.rec != nil && run.rec.retrying() {
		// A stored retry: answered before and after its window whatever the lease
		// key holds; within it, taken over below as the retry's attempt.
		if res, answered, err := c.retryDue(ctx, run); answered || err != nil {
			return res, err
		}
	}
	if run.rec != nil && run.rec.buffered() {
		return c.claimBuffered(ctx, run, ls, sent, nil)
	}
	if run.rec == nil && c.in.Overlap.Buffers() && (ls.rec == nil || ls.rec.Token == c.in.Token) {
		return c.firstBuffered(ctx, run, ls, sent)
	}
	switch {
	case ls.rec != nil && ls.rec.Token != c.in.Token:
		return c.running(run, ls, sent), nil
	case ls.rec != nil && run.rec != nil && run.rec.Token == c.in.Token && !run.rec.retrying():
		return c.wonAgain(run, ls), nil
	case ls.rec != nil:
		return c.resume(ctx, run, ls)
	}
	return c.take(ctx, run, ls)
}

// cancelled decides a claim of an unfinished run with a cancel request: while its
// holder holds its lease, on to the cases below (answered false: running, or won
// again); otherwise (its lease ended, or it stored a retry) the run is stored
// finished cancelled (compare-and-set from the revision read, the request kept)
// and the claim answered done. A lease key this claim holds is purged.
func (c *claiming) cancelled(ctx context.Context, run runEntry, ls leaseEntry) (res backend.ClaimResult, answered bool, err error) {
	if ls.rec != nil && ls.rec.Token == run.rec.Token && !run.rec.retrying() {
		return res, false, nil
	}
	if ls.rec != nil && ls.rec.Token == c.in.Token && c.mine == 0 {
		c.mine = ls.rev // this token's claim in flight (resume's case)
	}
	next := *run.rec
	next.State, next.Status = stateFinished, backend.StatusCancelled
	next.RetryDelayMS, next.RetryWithinMS = 0, 0
	keep := keepFor(time.Duration(next.KeepMS)*time.Millisecond, time.Duration(next.LeaseMS)*time.Millisecond, true)
	if _, err := c.s.put(ctx, c.b, write{key: c.k.run, value: next, expect: run.rev, ttl: keep}); err != nil {
		return res, true, err // a lost race: the claim reads and decides again
	}
	return c.decidedRun(ctx, &next), true, nil
}

// decidedRun answers a run stored decided: done with the stored status (see
// decided). A lease key this claim created for it meanwhile is purged.
func (c *claiming) decidedRun(ctx context.Context, rec *runRecord) backend.ClaimResult {
	if c.mine != 0 {
		_ = c.s.purge(ctx, c.b, c.k.lease, c.mine)
	}
	return decided(rec, c.in.Token)
}

// running answers a live lease of another token: running, with the holder's attempt
// and fence when the run record is the holder's. The lease, read at sent, becomes the
// baseline of the watch a backup starts next.
func (c *claiming) running(run runEntry, ls leaseEntry, sent time.Time) backend.ClaimResult {
	res := backend.ClaimResult{Outcome: backend.OutcomeRunning, Holder: ls.rec.Instance, Expires: ls.expires()}
	if run.rec != nil && run.rec.Token == ls.rec.Token {
		res.Attempt, res.Fence = run.rec.Attempt, run.rec.Fence
	}
	c.s.mem.noteRunning(c.k, ls, sent)
	return res
}

// wonAgain answers the same token asking again while it holds the lease and the
// run: won, with the same attempt and fence.
func (c *claiming) wonAgain(run runEntry, ls leaseEntry) backend.ClaimResult {
	c.s.mem.remember(c.k, c.in.Token, held{
		leaseRev: ls.rev, lease: *ls.rec, runRev: run.rev, run: *run.rec, runWritten: c.s.localTime(run.created),
	})
	return wonResult(run.rec, ls.expires())
}

// resume completes a claim whose lease key this token holds without the run (an
// earlier call by the token wrote it and then failed, or lost the run record's
// race): it writes the run record, for a job that forbids overlap after the look at
// its other slots that the earlier call may not have made (overlap.go).
func (c *claiming) resume(ctx context.Context, run runEntry, ls leaseEntry) (backend.ClaimResult, error) {
	if c.in.Overlap.Exclusive() {
		if res, backedOff, err := c.backOff(ctx, run, ls.rev); err != nil || backedOff {
			return res, err
		}
	}
	if run.rec == nil {
		c.mine = ls.rev
		if limit, err := c.countRun(ctx); err != nil || limit {
			if err != nil {
				return backend.ClaimResult{}, err
			}
			return c.storeLimit(ctx, run)
		}
	}
	return c.writeRun(ctx, run, ls.rev, ls.expires())
}

// take decides a run with no live lease: a first claim (no run record: nothing
// stored, or a lease key whose claimer died before writing the run record) or a
// takeover. A first claim may be decided without running (none, late, skipped),
// stored before the claimer is answered; a takeover of a job that forbids overlap
// waits while another slot of the job holds a live lease. Otherwise the claim
// writes both keys: through the bucket's pair writer (pair.go), or apart for a job
// that forbids overlap (takeApart).
func (c *claiming) take(ctx context.Context, run runEntry, ls leaseEntry) (backend.ClaimResult, error) {
	if run.rec != nil && c.in.Overlap.Exclusive() {
		busy, err := c.otherBusy(ctx, true, 0)
		if err != nil {
			return backend.ClaimResult{}, err
		}
		if busy {
			return waiting(run.rec), nil
		}
	}
	if run.rec == nil {
		if c.in.TakeoverOnly {
			return backend.ClaimResult{Outcome: backend.OutcomeNone}, nil
		}
		status, res, answered, err := c.firstDecision(ctx)
		if err != nil {
			return backend.ClaimResult{}, err
		}
		if answered { // waits for earlier slots asked to end: nothing stored
			c.purgeMine(ctx)
			return res, nil
		}
		if status != "" {
			// Stored before anyone acts on it; a lost race decides again from what won.
			return c.storeDecision(ctx, run.rev, status)
		}
	}
	if c.in.Overlap.Exclusive() {
		return c.takeApart(ctx, run, ls)
	}
	if run.rec == nil {
		if limit, err := c.countRun(ctx); err != nil || limit {
			if err != nil {
				return backend.ClaimResult{}, err
			}
			return c.storeLimit(ctx, run)
		}
	}
	return c.writeBoth(ctx, run, ls.rev, false)
}

// takeApart is take's writes for a job that forbids overlap: the lease key alone,
// then, once it is visible to the claims of the job's other slots, a second look at
// them, and the run record. The first look and the lease key are two keys apart:
// two slots of the job claimed at the same instant could both pass it. If another
// slot holds the job at the second look, this claim backs off; in a tie the lease
// key stored first goes on: exactly one runs (overlap.go).
func (c *claiming) takeApart(ctx context.Context, run runEntry, ls leaseEntry) (backend.ClaimResult, error) {
	if c.s.overlapHook != nil {
		c.s.overlapHook(c.in.Job, c.in.Slot, false)
	}
	rev, err := c.s.put(ctx, c.b, c.leaseWrite(ls.rev))
	if err != nil {
		return backend.ClaimResult{}, err
	}
	c.mine = rev
	expires := c.s.clock.estimate(time.Now()).Add(c.lease)
	if c.s.overlapHook != nil {
		c.s.overlapHook(c.in.Job, c.in.Slot, true)
	}
	if res, backedOff, err := c.backOff(ctx, run, rev); err != nil || backedOff {
		return res, err
	}
	if run.rec == nil {
		if limit, err := c.countRun(ctx); err != nil || limit {
			if err != nil {
				return backend.ClaimResult{}, err
			}
			return c.storeLimit(ctx, run)
		}
	}
	return c.writeRun(ctx, run, rev, expires)
}

// writeBoth makes this token the holder of a run with no live lease: the lease key
// from revision leaseRev and the run record from the revision read, written by the
// bucket's pair writer (pair.go). blind: a first claim's writes, sent before any
// read. An error for which lostRace holds is a race lost, or a write left
// unanswered.
func (c *claiming) writeBoth(ctx context.Context, run runEntry, leaseRev uint64, blind bool) (backend.ClaimResult, error) {
	next, err := c.nextRun(ctx, run.rec)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	p := pair{lease: c.leaseWrite(leaseRev), run: c.runWrite(next, run.rev), token: c.in.Token, blind: blind}
	leaseRev, runRev, err := c.b.pairs.writePair(ctx, p)
	if leaseRev != 0 {
		c.mine = leaseRev
	}
	if err != nil {
		return backend.ClaimResult{}, err
	}
	return c.won(leaseRev, runRev, next, c.s.clock.estimate(time.Now()).Add(c.lease)), nil
}

// writeRun makes this token the run's holder once its lease key is stored at
// leaseRev: the run record, by compare-and-set from the revision read. If the run
// changed meanwhile (the old holder finished it, or another holder wrote it), the
// error matches errConflict.
func (c *claiming) writeRun(ctx context.Context, run runEntry, leaseRev uint64, expires time.Time) (backend.ClaimResult, error) {
	next, err := c.nextRun(ctx, run.rec)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	runRev, err := c.s.put(ctx, c.b, c.runWrite(next, run.rev))
	if err != nil {
		return backend.ClaimResult{}, err
	}
	return c.won(leaseRev, runRev, next, expires), nil
}

// won remembers the lease this claim took (its lease key at leaseRev, the run
// record next at runRev) and answers won.
func (c *claiming) won(leaseRev, runRev uint64, next runRecord, expires time.Time) backend.ClaimResult {
	c.s.mem.remember(c.k, c.in.Token, held{leaseRev: leaseRev, lease: c.leaseRecord(), runRev: runRev, run: next, runWritten: time.Now()})
	return wonResult(&next, expires)
}

// leaseRecord is the lease key's value for this claim.
func (c *claiming) leaseRecord() leaseRecord {
	return leaseRecord{V: recordVersion, Token: c.in.Token, Instance: c.in.Instance, LeaseMS: c.lease.Milliseconds()}
}

// leaseWrite is the write of this claim's lease key, from revision expect.
func (c *claiming) leaseWrite(expect uint64) write {
	return write{key: c.k.lease, value: c.leaseRecord(), expect: expect, ttl: c.lease}
}

// runWrite is the write of the run record next, from revision expect.
func (c *claiming) runWrite(next runRecord, expect uint64) write {
	return write{key: c.k.run, value: next, expect: expect, ttl: keepFor(c.in.Keep, c.lease, false)}
}

// nextRun is the run record that makes this token the holder of a run whose record
// is prev (nil for a first claim): attempt 1, or attempt+1 naming the previous
// holder on a takeover (marked retried when prev stored a retry), with the next
// fence.
func (c *claiming) nextRun(ctx context.Context, prev *runRecord) (runRecord, error) {
	fence, err := c.s.nextFence(ctx, c.b, prev)
	if err != nil {
		return runRecord{}, err
	}
	next := runRecord{
		V: recordVersion, Job: c.in.Job, SlotMS: c.in.Slot.UnixMilli(),
		Token: c.in.Token, Instance: c.in.Instance, Attempt: 1, Fence: fence,
		State: stateRunning, LeaseMS: c.lease.Milliseconds(), KeepMS: c.keepMS,
		Buffer: c.in.Overlap.Buffers(), Last: c.last,
	}
	if prev != nil {
		next.Last = prev.Last
	}
	switch {
	case prev != nil && prev.finished(): // a paused slot reopened (see reopens)
		next.Attempt, next.Reopened = prev.Attempt+1, true
	case prev != nil: // a takeover, or the retry a failed attempt stored
		next.Attempt, next.Retried = prev.Attempt+1, prev.retrying()
		next.Previous, next.PreviousToken = prev.Instance, prev.Token
	}
	return next, nil
}

// reopens reports whether this claim may run the slot that rec stored finished: a
// slot stored paused, claimed with ReopenPaused by another token before the claim's
// deadline (by the server's clock).
func (c *claiming) reopens(ctx context.Context, rec *runRecord) (bool, error) {
	if !mayReopen(c.in, rec) {
		return false, nil
	}
	late, err := c.s.pastDeadline(ctx, c.b, c.in.Deadline)
	return !late, err
}

// mayReopen is what reopens decides without the server's clock.
func mayReopen(in backend.RunClaim, rec *runRecord) bool {
	return rec.State == stateFinished && in.MayReopen(rec.Status, rec.Token, rec.Attempt)
}

// firstDecision decides a first claim of a slot with nothing stored: late when the
// server's clock is past the deadline, limit when the job's run limit is reached
// (runlimit.go), skipped when the job forbids overlap and
// another of its slots holds a live lease on an unfinished run, else "" (claim it).
// Under OverlapCancelOther, when only earlier slots hold the job, it asks them to
// end instead and answers running (answered: cancelEarlier).
func (c *claiming) firstDecision(ctx context.Context) (status backend.Status, res backend.ClaimResult, answered bool, err error) {
	late, err := c.s.pastDeadline(ctx, c.b, c.in.Deadline)
	if err != nil || late {
		return backend.StatusLate, res, false, err
	}
	if limit, err := c.limited(ctx); err != nil || limit {
		return backend.StatusLimit, res, false, err
	}
	switch c.in.Overlap {
	case backend.OverlapSkip:
		busy, err := c.otherBusy(ctx, false, 0)
		if err != nil || busy {
			return backend.StatusSkipped, res, false, err
		}
	case backend.OverlapCancelOther:
		found, err := c.busySlots(ctx, false, 0, true)
		if err != nil || len(found) == 0 {
			return "", res, false, err
		}
		if res, answered, err := c.cancelEarlier(ctx, found); answered || err != nil {
			return "", res, answered, err
		}
		return backend.StatusSkipped, res, false, nil
	}
	return "", res, false, nil
}

// storeDecision stores the slot finished with status (skipped, late or limit) for this
// token, by compare-and-set from the run record's revision runRev, and answers the
// decision. A lost race returns an error matching errConflict.
func (c *claiming) storeDecision(ctx context.Context, runRev uint64, status backend.Status) (backend.ClaimResult, error) {
	rec := runRecord{
		V: recordVersion, Job: c.in.Job, SlotMS: c.in.Slot.UnixMilli(), Token: c.in.Token, Instance: c.in.Instance,
		Attempt: 1, State: stateFinished, Status: status, LeaseMS: c.lease.Milliseconds(), KeepMS: c.keepMS,
	}
	if _, err := c.s.put(ctx, c.b, write{key: c.k.run, value: rec, expect: runRev, ttl: keepFor(c.in.Keep, c.lease, true)}); err != nil {
		return backend.ClaimResult{}, err
	}
	return decided(&rec, c.in.Token), nil
}

// waiting answers a takeover of an overlap-forbidden job's run while another slot
// of the job holds a lease: running, until that one ends.
func waiting(r *runRecord) backend.ClaimResult {
	return backend.ClaimResult{Outcome: backend.OutcomeRunning, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance}
}

// decided answers a claim of a finished run: the token that stored a skipped or late
// decision is told it again (so its claim is repeat-safe), every other claim done,
// with how the run ended. A state or status this version does not know reads as
// done.
func decided(r *runRecord, token string) backend.ClaimResult {
	return backend.ClaimResult{Outcome: backend.DecidedOutcome(r.Status, r.Token == token && r.Fence == 0),
		Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance, Status: r.Status}
}

func wonResult(r *runRecord, expires time.Time) backend.ClaimResult {
	res := backend.ClaimResult{
		Outcome: backend.OutcomeWon, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance, Expires: expires,
	}
	if r.PreviousToken != "" {
		res.Previous, res.PreviousToken, res.PreviousAttempt = r.Previous, r.PreviousToken, r.Attempt-1
	}
	res.Reopened, res.Retried, res.LimitReached = r.Reopened, r.Retried, r.Last
	return res
}
