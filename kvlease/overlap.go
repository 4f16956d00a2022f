package kvlease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// A job that forbids overlap runs one slot at a time. Each claim of one of its
// slots looks at the job's other slots twice: before it writes anything, and again
// once its lease key is stored, since two claims of two slots at the same instant
// can both pass the first look, their lease keys being two keys apart. If, at the
// second look, each gave way to the other's lease key, both slots would be skipped
// and nothing would run (a job catching up its newest missed slot while its loop
// claims the slot due at Start, on every instance at once).
//
// A run is established when its run record is unfinished and names its lease
// key's token: its claim is past its own second look. A claim is in flight when
// its lease key is live and its run record absent or naming another token: between
// its two writes (a first claim's, a takeover's, a reopened slot's).
//
//   - The first look gives way only to an established run (a first claim stores
//     its slot skipped, a takeover waits), and to the marker of a lease that ended
//     on an unfinished run (a backup is about to take it over). A claim in flight
//     is left to the second look: a claim that stored its slot skipped because of
//     one could leave nothing to run, that claim losing in turn (a third instance
//     skipping the slot it was claiming).
//   - The second look gives way to an established run, and to a claim in flight
//     whose lease key's revision is lower than this claim's.
//
// Revisions are one total order over the bucket, and a lease key's revision
// changes only by its claim's write until that claim has written its run record
// (heartbeats come after): of claims in flight, the one whose lease key was stored
// first goes on and every later one gives way. A later one always sees it: its
// second look comes after its own write, so after the earlier one's. Exactly one
// of two racing slots runs: never both, never neither — unless the one that goes
// on dies between its writes (its slot is then taken over or stored late, as any
// lease key without its run record) or another instance stores its slot late, its
// deadline passing between the two.
//
// Under OverlapCancelOther a first claim gives way the same, but stores its slot
// skipped only for a later slot: to earlier ones alone it stores its request that
// the established runs end and waits for them (running, its slot unstored), and
// to claims in flight alone it looks again, then waits (cancelEarlier). The claim
// that goes on is the same as under OverlapSkip.

// backOff is the second look: after this claim stored the lease key of an
// overlap-forbidden job's slot at revision rev, it checks that no other slot of
// the job holds the job (busySlots, with rev). If one does, it gives the lease key
// up and answers as the claim would have without it (backedOff): a first claim
// stores the slot skipped (under OverlapCancelOther, unless only earlier slots
// hold the job: see cancelEarlier), a takeover waits (running).
func (c *claiming) backOff(ctx context.Context, run runEntry, rev uint64) (res backend.ClaimResult, backedOff bool, err error) {
	found, err := c.busySlots(ctx, true, rev, c.cancelsOther(run) || c.in.Overlap.Buffers())
	if err != nil || len(found) == 0 {
		return res, false, err
	}
	if err := c.s.purge(ctx, c.b, c.k.lease, rev); err != nil && !errors.Is(err, errConflict) {
		return res, true, err
	}
	c.mine = 0
	if run.rec != nil {
		return waiting(run.rec), true, nil
	}
	if c.cancelsOther(run) {
		if res, answered, err := c.cancelEarlier(ctx, found); answered || err != nil {
			return res, true, err
		}
	}
	if run.rec == nil && c.in.Overlap.Buffers() {
		// Buffered behind what it gave way to, unless the cap is reached; a lost
		// race decides again.
		l, err := c.lookBuffer(ctx, found)
		if err != nil {
			return res, true, err
		}
		res, err = c.bufferSlot(ctx, run, l)
		return res, true, err
	}
	res, err = c.storeDecision(ctx, run.rev, backend.StatusSkipped)
	if errors.Is(err, errConflict) {
		// The run was decided meanwhile: answer from what was stored.
		res, err = c.s.claim(ctx, c.b, c.in)
	}
	return res, true, err
}

// cancelsOther reports whether the claim is a first claim (no run record) under
// OverlapCancelOther: one that asks earlier slots' runs to end.
func (c *claiming) cancelsOther(run runEntry) bool {
	return run.rec == nil && c.in.Overlap == backend.OverlapCancelOther
}

// busy is another slot of the job that holds it, as busySlots found it.
type busy struct {
	ms  int64
	ls  leaseEntry
	run runEntry
	// inFlight: a claim between its two writes, not an established run.
	inFlight bool
}

// otherBusy reports whether a slot of the claim's job other than its own holds the
// job (busySlots).
func (c *claiming) otherBusy(ctx context.Context, liveOnly bool, mine uint64) (bool, error) {
	found, err := c.busySlots(ctx, liveOnly, mine, false)
	return len(found) > 0, err
}

// busySlots returns the slots of the claim's job other than its own that hold the
// job (the first one found, unless all): its run is established, or (when mine is
// not 0: the second look of a claim whose lease key is at revision mine) a claim of
// it is in flight whose lease key was stored before. Unless liveOnly, the marker of
// a lease that ended a moment ago on an unfinished run counts too (a backup is
// about to take it over). It lists the job's lease keys with one StreamInfo request
// (lease keys exist only while live, and for a second as markers after), then reads
// the few of other slots: each lease key before its run record, so that a lease
// key read at its claim's revision is either still in flight or found established.
func (c *claiming) busySlots(ctx context.Context, liveOnly bool, mine uint64, all bool) ([]busy, error) {
	s, b := c.s, c.b
	prefix := leasePrefix + jobToken(c.in.Job) + "."
	info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(prefix+"*")))
	if err != nil {
		return nil, err
	}
	var found []busy
	for subj := range info.State.Subjects {
		ms, err := strconv.ParseInt(strings.TrimPrefix(subj, b.subject(prefix)), 10, 64)
		if err != nil || ms == c.in.Slot.UnixMilli() {
			continue
		}
		k := keysFor(c.in.Job, time.UnixMilli(ms))
		ls, err := s.readLease(ctx, b, k)
		if err != nil {
			return nil, err
		}
		if ls.rec == nil && (liveOnly || ls.rev == 0) {
			continue
		}
		run, err := s.readRun(ctx, b, k)
		if err != nil {
			return nil, err
		}
		o := busy{ms: ms, ls: ls, run: run}
		switch {
		case ls.rec == nil: // the marker of a lease that just ended
			if run.rec == nil || run.rec.finished() || run.rec.buffered() {
				continue // a buffered slot's: a claim of it that gave way
			}
		case run.rec != nil && run.rec.Token == ls.rec.Token && !run.rec.buffered():
			if run.rec.finished() {
				continue // its lease key is about to be purged
			}
			// established
		case mine != 0 && ls.rev < mine:
			o.inFlight = true // and first
		default:
			continue
		}
		found = append(found, o)
		if !all {
			break
		}
	}
	return found, nil
}

// maxInFlightWaits bounds the rounds a first claim under OverlapCancelOther
// spends, after giving way at the second look to earlier slots' claims in flight
// only, waiting for one of them to be established so that it can store its
// request on it.
const maxInFlightWaits = 3

// cancelEarlier decides a first claim under OverlapCancelOther from the slots
// found holding the job (found): a later one leaves it to the caller (answered
// false: skipped). Otherwise it stores, on each earlier unfinished run, this
// claim's request that it end, unless one is stored already (requestCancel), and
// answers running, waiting for the newest of them (WaitsFor); the claim's own slot
// stays unstored. Claims in flight get no request: the claim looks again
// (a lost race) up to maxInFlightWaits times, then waits for them too. When every
// run found has finished meanwhile, the claim decides again (a lost race).
func (c *claiming) cancelEarlier(ctx context.Context, found []busy) (res backend.ClaimResult, answered bool, err error) {
	slot := c.in.Slot.UnixMilli()
	for _, o := range found {
		if o.ms > slot {
			return res, false, nil
		}
	}
	newest, flying := int64(math.MinInt64), false
	for _, o := range found {
		if o.inFlight {
			flying = true
			continue
		}
		r, ok, err := c.requestCancel(ctx, o)
		if err != nil {
			return res, true, err
		}
		if ok && o.ms > newest {
			newest, res = o.ms, r
		}
	}
	if flying && newest == math.MinInt64 && c.inFlightWaits < maxInFlightWaits {
		c.inFlightWaits++
		return res, true, fmt.Errorf("%w: an earlier slot's claim is in flight", errConflict)
	}
	for _, o := range found {
		if o.inFlight && o.ms > newest {
			newest = o.ms
			res = backend.ClaimResult{Outcome: backend.OutcomeRunning, Holder: o.ls.rec.Instance, Expires: o.ls.expires()}
		}
	}
	if newest == math.MinInt64 {
		return res, true, fmt.Errorf("%w: the earlier runs ended", errConflict)
	}
	res.WaitsFor = time.UnixMilli(newest).UTC()
	return res, true, nil
}

// requestCancel stores this claim's request that o's unfinished run end, unless
// one is stored already: in the run record (the stored decision, compare-and-set
// from the revision read), then in the lease key while the run's holder holds it
// (compare-and-set on its revision, same holder, a full lease's TTL), so that the
// holder's heartbeat sees it. The second write is also made for a request found
// stored without it (a claimer that died between the two). ok is false when the
// run finished meanwhile; res is the running answer waiting for it.
func (c *claiming) requestCancel(ctx context.Context, o busy) (res backend.ClaimResult, ok bool, err error) {
	k := keysFor(c.in.Job, time.UnixMilli(o.ms))
	run, ls := o.run, o.ls
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return res, false, err
		}
		if try > 0 {
			if run, err = c.s.readRun(ctx, c.b, k); err != nil {
				return res, false, err
			}
			if ls, err = c.s.readLease(ctx, c.b, k); err != nil {
				return res, false, err
			}
		}
		r := run.rec
		if r == nil || r.finished() {
			return res, false, nil
		}
		if !r.cancelled() {
			next := *r
			next.cancelFields = c.request()
			_, err := c.s.put(ctx, c.b, write{key: k.run, value: next, expect: run.rev, ttl: unfinishedKeep(&next)})
			if errors.Is(err, errConflict) {
				continue // a heartbeat's refresh, a finish, a takeover, another request
			}
			if err != nil {
				return res, false, err
			}
			r = &next
		}
		res = backend.ClaimResult{Outcome: backend.OutcomeRunning, Attempt: r.Attempt, Fence: r.Fence, Holder: r.Instance}
		holds := ls.rec != nil && ls.rec.Token == r.Token && !r.retrying()
		if holds {
			res.Expires = ls.expires()
		}
		if !holds || ls.rec.cancelled() {
			return res, true, nil
		}
		if c.s.requestHook != nil {
			c.s.requestHook(c.in.Job, time.UnixMilli(o.ms))
		}
		next := *ls.rec
		next.cancelFields = r.cancelFields
		ttl := natsutil.TTL(time.Duration(next.LeaseMS) * time.Millisecond)
		_, err := c.s.put(ctx, c.b, write{key: k.lease, value: next, expect: ls.rev, ttl: ttl})
		if errors.Is(err, errConflict) {
			continue // a heartbeat, or the lease ended: read again
		}
		if err != nil {
			return res, true, err
		}
		res.Expires = c.s.clock.estimate(time.Now()).Add(ttl)
		return res, true, nil
	}
	// The request is stored; its lease-key half is left to the next claim.
	return res, true, nil
}

// request is this claim's request that an earlier run end.
func (c *claiming) request() cancelFields {
	return cancelFields{CancelSlotMS: c.in.Slot.UnixMilli(), CancelInstance: c.in.Instance, CancelToken: c.in.Token}
}

// unfinishedKeep is the TTL of an unfinished run record r rewritten: as its
// holder's claim wrote it, or, in state retry, as its Retry did.
func unfinishedKeep(r *runRecord) time.Duration {
	keep := time.Duration(r.KeepMS) * time.Millisecond
	if r.retrying() {
		return retryKeepFor(keep, time.Duration(r.RetryDelayMS)*time.Millisecond, time.Duration(r.RetryWithinMS)*time.Millisecond)
	}
	return keepFor(keep, time.Duration(r.LeaseMS)*time.Millisecond, false)
}
