package kvlease

import (
	"context"
	"errors"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// blind is a first claim sent without reading first: the lease key, then the run
// record, each created by compare-and-set from "nothing stored" (revision 0), so a
// slot nobody has claimed yet is won without a read (in one round trip when the
// bucket's pair writer chains or batches them, pair.go). They are the claim's own
// first two writes on a fresh slot, made before the read instead of after it: when
// anything is stored, the first write that meets it loses its compare-and-set and
// the claim reads and decides as always (answered false), keeping a lease key it
// did create (mine).
//
// It is tried only for a claim that would decide nothing before writing: not a
// takeover-only claim, not a job that forbids overlap (which looks at the job's
// other slots first), nor one with a run limit (which counts first), a deadline the cached estimate of the server's clock shows
// unambiguously ahead, and a slot this store has not answered before (a backup's
// claims of a slot it saw running read first: they find it running or finished).
func (c *claiming) blind(ctx context.Context) (res backend.ClaimResult, answered bool, err error) {
	if !c.s.mem.firstSight(c.k) || c.in.TakeoverOnly || c.in.Overlap.Exclusive() || c.in.Counts() {
		return res, false, nil
	}
	if !c.in.Deadline.IsZero() {
		if _, hi, ok := c.s.clock.bounds(time.Now()); !ok || hi.After(c.in.Deadline) {
			return res, false, nil
		}
	}
	res, err = c.writeBoth(ctx, runEntry{}, 0, true)
	switch {
	case errors.Is(err, errUndecided):
		return res, false, nil // a write may be stored: read and decide
	case errors.Is(err, errConflict) && c.mine == 0:
		return c.holderRunning(ctx, storedRev(err))
	case errors.Is(err, errConflict):
		return res, false, nil // a run record exists: read and decide
	}
	return res, true, err
}

// holderRunning answers a blind claim whose lease key write lost: the slot's lease
// key holds something, stored at revision stored when the server's answer named it
// (else 0). A live lease of another token answers running, the common loss, at once
// (without the run record's attempt and fence, which a backup does not need), and
// a finish the shared watcher saw answers done; anything else is left to the
// claim's read of both keys (answered false).
//
// The lease comes from the store's shared watcher when it has delivered the key at
// that revision or later (waiting up to watcherWait for it): the other instances'
// claims of the same instant are then answered without a request, the watcher
// having received the winner's write anyway. Otherwise the lease key alone is read
// (one message, where the claim's usual read asks for both keys).
func (c *claiming) holderRunning(ctx context.Context, stored uint64) (res backend.ClaimResult, answered bool, err error) {
	if stored > 0 {
		if u, ok := c.s.mem.leaseSince(ctx, c.k.lease, stored, watcherWait); ok {
			if rec, ok := c.s.mem.finishedRun(c.k); ok && !mayReopen(c.in, rec) {
				return decided(rec, c.in.Token), true, nil
			}
			if u.lease.rec != nil && u.lease.rec.Token != c.in.Token {
				return c.running(runEntry{}, u.lease, u.at), true, nil
			}
		}
	}
	sent := time.Now()
	ls, err := c.s.readLease(ctx, c.b, c.k)
	if err != nil {
		return res, true, err
	}
	if ls.rec == nil || ls.rec.Token == c.in.Token {
		return res, false, nil
	}
	return c.running(runEntry{}, ls, sent), true, nil
}

// watcherWait bounds how long a lost blind claim waits for the shared watcher to
// deliver the write it lost to, before reading the lease key instead.
const watcherWait = 250 * time.Millisecond
