package kvlease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// Claim reads the slot (and, when the machine needs them, the job key and the slots
// it lists), asks machine.Claim, and writes its decision. It writes a new lease's
// key first, then the job key, then the run record. Each write is a compare-and-set
// from the revision read. A lost race reads and asks again. See the package
// documentation.
//
// The lease is in.Lease rounded up to whole seconds; it must be at least
// backend.MinLease.
func (s *Store) Claim(ctx context.Context, in backend.RunClaim) (backend.ClaimResult, error) {
	if err := checkClaim(in); err != nil {
		return backend.ClaimResult{}, err
	}
	in.Lease = natsutil.TTL(in.Lease)
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

// claim answers from a finish the shared watcher saw, or by a blind first
// claim, or by rounds of reading, asking and writing until one is not a lost race.
func (s *Store) claim(ctx context.Context, b *bucket, in backend.RunClaim) (backend.ClaimResult, error) {
	k := keysFor(in.Job, in.Slot)
	if run, ok := s.mem.finishedRun(k); ok {
		if d := machine.Claim(run, in, machine.Job{}, s.clock.estimate(time.Now())); !d.Write {
			return d.Result, nil
		}
	}
	if res, ok, err := s.blind(ctx, b, in, k); ok || err != nil {
		return res, err
	}
	waits := 0
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return backend.ClaimResult{}, err
		}
		res, err := s.round(ctx, b, in)
		if errors.Is(err, errInFlight) && waits < maxInFlightWaits {
			waits++
			continue
		}
		if errors.Is(err, errInFlight) {
			return res, nil
		}
		if !lostRace(err) {
			return res, err
		}
	}
	return backend.ClaimResult{}, ErrContention
}

// errInFlight marks a running answer given, by a claim that reads the job key,
// because another token's claim of the slot is between its writes. That claim
// may still be undone by the job key's race. So the answer is read again, up to
// maxInFlightWaits times.
var errInFlight = errors.New("kvlease: a claim of the slot is in flight")

const maxInFlightWaits = 8

// lostRace reports whether err is a write that lost to another (errConflict) or
// whose outcome is unknown (errUndecided): the claim reads and decides again.
func lostRace(err error) bool { return errors.Is(err, errConflict) || errors.Is(err, errUndecided) }

// round is one reading, decision and write of a claim.
func (s *Store) round(ctx context.Context, b *bucket, in backend.RunClaim) (backend.ClaimResult, error) {
	sent := time.Now()
	v, j, err := s.readView(ctx, b, in.Job, in.Slot, needsJob(in, machine.Run{}))
	if err != nil {
		return backend.ClaimResult{}, err
	}
	now, err := s.decisionTime(ctx, b, in, v)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	cur, mine := v.runOf(in.Token, now)
	if j == nil && needsJob(in, cur) { // a buffered slot: its job key too
		if v, j, err = s.readView(ctx, b, in.Job, in.Slot, true); err != nil {
			return backend.ClaimResult{}, err
		}
		cur, mine = v.runOf(in.Token, now)
	}
	var others []other
	job := machine.Job{Fence: s.fence(now)}
	if j != nil {
		if others, err = s.others(ctx, b, in, j, now); err != nil {
			return backend.ClaimResult{}, err
		}
		job.Count = j.val.Count
		for _, o := range others {
			job.Others = append(job.Others, o.run)
		}
	}
	written := s.writePending(ctx, in.Job, v)
	d := machine.Claim(cur, in, job, now)
	w := decisionWrite{in: in, v: v, j: j, others: others, d: d, mine: mine, written: written}
	if d.Result.Outcome == backend.OutcomeRunning && !d.Write {
		s.mem.noteRunning(keysFor(in.Job, in.Slot), v, sent)
		if j != nil && mine == 0 && v.lv != nil && (v.rv == nil || v.rv.Run.Token != v.lv.Token) {
			res, err := s.apply(ctx, b, w)
			if err == nil {
				err = errInFlight
			}
			return res, err
		}
	}
	return s.apply(ctx, b, w)
}

// decisionWrite is a claim's decision and what it was made from.
type decisionWrite struct {
	in      backend.RunClaim
	v       view
	j       *jobRead
	others  []other
	d       machine.Decision
	mine    uint64 // the lease key this claim holds, written by an earlier try
	written bool   // the run record's records were written this round
}

// apply writes w's decision in order: the cancel requests on other slots, the
// new lease's key, the job key, the run record and its records. It answers
// w.d.Result, or an error matching errConflict when a write lost.
func (s *Store) apply(ctx context.Context, b *bucket, w decisionWrite) (backend.ClaimResult, error) {
	in, d := w.in, w.d
	k := keysFor(in.Job, in.Slot)
	if err := s.askToEnd(ctx, b, in.Job, w.others, d.Others); err != nil {
		return backend.ClaimResult{}, err
	}
	grant := d.Write && d.Result.Outcome == backend.OutcomeWon
	if !d.Write {
		if w.mine != 0 && d.Result.Outcome != backend.OutcomeWon {
			_ = s.purge(ctx, b, k.lease, w.mine) // this token's claim in flight: undone
		}
		s.clearPending(b, in.Job, w.v, w.written)
		return d.Result, nil
	}
	leaseRev := w.mine
	if grant && leaseRev == 0 {
		rev, err := s.put(ctx, b, leaseWrite(k, in, w.v.lease.rev))
		if err != nil {
			return backend.ClaimResult{}, err
		}
		leaseRev = rev
	}
	if grant && s.died(in.Job, in.Slot, stepLease) {
		return backend.ClaimResult{}, errDied
	}
	if w.j != nil {
		if next, changed := jobWrite(w.j, w.others, in.Slot, d); changed {
			if _, err := s.put(ctx, b, write{key: jobKey(in.Job), value: next, expect: w.j.rev}); err != nil {
				return backend.ClaimResult{}, err
			}
			if s.died(in.Job, in.Slot, stepJob) {
				return backend.ClaimResult{}, errDied
			}
		}
	}
	rec := runRecord{job: in.Job, run: d.Run, recs: d.Records, keep: in.Retention}
	runRev, err := s.putRun(ctx, b, rec, w.v.run.rev)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	if !grant && w.mine != 0 {
		_ = s.purge(ctx, b, k.lease, w.mine)
	}
	if grant {
		s.mem.remember(k, in.Token, held{leaseRev: leaseRev, lease: leaseValueOf(in), runRev: runRev, run: d.Run})
	}
	if err := s.records(ctx, b, rec, runRev); err != nil {
		// Left in the run record, written by whoever reads it next.
		s.mem.forget(k, in.Token)
		if errors.Is(err, errDied) {
			return backend.ClaimResult{}, err
		}
	}
	return d.Result, nil
}

// leaseValueOf is the lease key's value for in's holder.
func leaseValueOf(in backend.RunClaim) leaseValue {
	return leaseValue{V: recordVersion, Token: in.Token, Instance: in.Instance, LeaseMS: in.Lease.Milliseconds()}
}

// leaseWrite is the write of in's lease key, from revision expect.
func leaseWrite(k runKeys, in backend.RunClaim, expect uint64) write {
	return write{key: k.lease, value: leaseValueOf(in), expect: expect, ttl: in.Lease}
}

// askToEnd stores, on each run of asked (the machine's d.Others), the cancel
// request in its run record, then in its live lease key for its heartbeat. A
// request found in a run record alone (an asker that died between the two) is
// written into the lease key too. A claim in flight has no run record to store
// it in: the asking claim waits for it and asks at its next reading.
func (s *Store) askToEnd(ctx context.Context, b *bucket, job string, others []other, asked []machine.Run) error {
	for _, o := range others {
		var next *machine.Run
		for i := range asked {
			if asked[i].Slot.Equal(o.slot) {
				next = &asked[i]
			}
		}
		if next != nil && (o.rv == nil || o.rv.Run.Token != next.Token) {
			next = nil // a claim in flight: asked once its run record is written
		}
		if next != nil {
			rv := *o.rv
			rv.Run = runJSON(*next)
			if _, err := s.put(ctx, b, write{key: keysFor(job, o.slot).run, value: rv, expect: o.view.run.rev,
				ttl: runTTL(*next, len(rv.Records) > 0, next.Changed)}); err != nil {
				return err
			}
			if s.died(job, o.slot, stepAsked) {
				return errDied
			}
			o.run.Cancel = next.Cancel
		}
		if o.run.Cancel != nil && o.lv != nil && o.lv.Token == o.run.Token && o.lv.Cancel == nil {
			// The holder's lease key carries the request; its lease keeps its end.
			left := o.lease.created.Add(o.lv.lease()).Sub(s.clock.estimate(time.Now()))
			if left <= 0 {
				continue
			}
			lv := *o.lv
			lv.Cancel = o.run.Cancel
			_, _ = s.put(ctx, b, write{key: keysFor(job, o.slot).lease, value: lv, expect: o.lease.rev, ttl: left})
		}
	}
	return nil
}

// decisionTime is the store's clock for a decision: the estimate of the server's
// time, read again first when a deadline or retry window of the slot falls
// within the estimate's uncertainty.
func (s *Store) decisionTime(ctx context.Context, b *bucket, in backend.RunClaim, v view) (time.Time, error) {
	times := []time.Time{in.Deadline}
	if v.rv != nil {
		times = append(times, v.rv.Run.RetryAt, v.rv.Run.RetryBy)
	}
	lo, hi, ok := s.clock.bounds(time.Now())
	for _, t := range times {
		if !t.IsZero() && (!ok || !t.Before(lo) && !t.After(hi)) {
			if err := s.refreshClock(ctx, b); err != nil {
				return time.Time{}, err
			}
			break
		}
	}
	now, err := s.now(ctx, b)
	if err != nil {
		return time.Time{}, err
	}
	for _, e := range []entry{v.run, v.lease} {
		if e.created.After(now) { // the server's clock was there already
			now = e.created
		}
	}
	return now, nil
}

// fence is the fence a new holder gets at least: the server's time in
// nanoseconds, so fences grow across a bucket's deletion.
func (s *Store) fence(now time.Time) uint64 { return uint64(max(now.UnixNano(), 1)) }

// blind is a first claim written before reading: the machine's grant of a slot
// with nothing stored, its lease key and run record created from revision 0 (one
// round trip when chained, pair.go). It is tried only for a slot this store has
// not answered before, by a claim that needs no job key and whose deadline the
// cached clock shows ahead. When anything is stored a write loses and the claim
// reads (ok false), keeping a lease key it did create.
func (s *Store) blind(ctx context.Context, b *bucket, in backend.RunClaim, k runKeys) (res backend.ClaimResult, ok bool, err error) {
	if !s.mem.firstSight(k) || in.TakeoverOnly || needsJob(in, machine.Run{}) {
		return res, false, nil
	}
	lo, hi, fresh := s.clock.bounds(time.Now())
	if !fresh || !in.Deadline.IsZero() && hi.After(in.Deadline) {
		return res, false, nil
	}
	d := machine.Claim(machine.Run{Slot: in.Slot}, in, machine.Job{Fence: s.fence(lo)}, lo)
	if d.Result.Outcome != backend.OutcomeWon || !d.Write {
		return res, false, nil
	}
	p := pair{lease: leaseWrite(k, in, 0), token: in.Token}
	p.run, err = s.runWrite(runRecord{job: in.Job, run: d.Run, keep: in.Retention}, 0)
	if err != nil {
		return res, false, err
	}
	leaseRev, runRev, err := b.pairs.writePair(ctx, p)
	switch {
	case err == nil:
		s.mem.wrote(k.lease, leaseRev)
		s.mem.wrote(k.run, runRev)
		s.mem.remember(k, in.Token, held{leaseRev: leaseRev, lease: leaseValueOf(in), runRev: runRev, run: d.Run})
		return d.Result, true, nil
	case errors.Is(err, errConflict) && leaseRev == 0:
		return s.holderRunning(ctx, b, in, k, storedRev(err))
	case lostRace(err):
		return res, false, nil // read and decide
	}
	return res, true, err
}

// holderRunning answers a blind claim whose lease key write lost. It finds the
// lease from the shared watcher (waiting up to watcherWait for the write the claim
// lost to) or one read of the lease key. A live lease of another token is a claim
// of another token, running to this one. Anything else is left to a reading (ok
// false).
func (s *Store) holderRunning(ctx context.Context, b *bucket, in backend.RunClaim, k runKeys, stored uint64) (backend.ClaimResult, bool, error) {
	sent := time.Now()
	v := view{slot: in.Slot}
	if u, ok := s.mem.leaseSince(ctx, k.lease, stored, watcherWait); stored > 0 && ok {
		v.lease, v.lv, sent = u.entry, u.lv, u.at
	} else {
		e, err := s.read(ctx, b, k.lease)
		if err != nil {
			return backend.ClaimResult{}, true, err
		}
		if v.lv, err = decodeLease(e); err != nil {
			return backend.ClaimResult{}, true, err
		}
		v.lease = e
	}
	if v.lv == nil || v.lv.Token == in.Token {
		return backend.ClaimResult{}, false, nil
	}
	cur, _ := v.runOf(in.Token, s.clock.estimate(time.Now()))
	d := machine.Claim(cur, in, machine.Job{}, s.clock.estimate(time.Now()))
	s.mem.noteRunning(k, v, sent)
	return d.Result, true, nil
}

// watcherWait bounds how long a lost blind claim waits for the shared watcher to
// deliver the write it lost to, before reading the lease key instead.
const watcherWait = 250 * time.Millisecond
