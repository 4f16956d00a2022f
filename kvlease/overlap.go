package kvlease

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
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

// backOff is the second look: after this claim stored the lease key of an
// overlap-forbidden job's slot at revision rev, it checks that no other slot of
// the job holds the job (otherBusy, with rev). If one does, it gives the lease key
// up and answers as the claim would have without it (backedOff): a first claim
// stores the slot skipped, a takeover waits (running).
func (c *claiming) backOff(ctx context.Context, run runEntry, rev uint64) (res backend.ClaimResult, backedOff bool, err error) {
	busy, err := c.otherBusy(ctx, true, rev)
	if err != nil || !busy {
		return res, false, err
	}
	if err := c.s.purge(ctx, c.b, c.k.lease, rev); err != nil && !errors.Is(err, errConflict) {
		return res, true, err
	}
	if run.rec != nil {
		return waiting(run.rec), true, nil
	}
	res, err = c.storeDecision(ctx, run.rev, backend.StatusSkipped)
	if errors.Is(err, errConflict) {
		// The run was decided meanwhile: answer from what was stored.
		res, err = c.s.claim(ctx, c.b, c.in)
	}
	return res, true, err
}

// otherBusy reports whether a slot of the claim's job other than its own holds the
// job: its run is established, or (when mine is not 0: the second look of a claim
// whose lease key is at revision mine) a claim of it is in flight whose lease key
// was stored before. Unless liveOnly, the marker of a lease that ended a moment ago
// on an unfinished run counts too (a backup is about to take it over). It lists the
// job's lease keys with one StreamInfo request (lease keys exist only while live,
// and for a second as markers after), then reads the few of other slots: each
// lease key before its run record, so that a lease key read at its claim's
// revision is either still in flight or found established.
func (c *claiming) otherBusy(ctx context.Context, liveOnly bool, mine uint64) (bool, error) {
	s, b := c.s, c.b
	prefix := leasePrefix + jobToken(c.in.Job) + "."
	info, err := s.sampleClock(ctx, b, jetstream.WithSubjectFilter(b.subject(prefix+"*")))
	if err != nil {
		return false, err
	}
	for subj := range info.State.Subjects {
		ms, err := strconv.ParseInt(strings.TrimPrefix(subj, b.subject(prefix)), 10, 64)
		if err != nil || ms == c.in.Slot.UnixMilli() {
			continue
		}
		k := keysFor(c.in.Job, time.UnixMilli(ms))
		ls, err := s.readLease(ctx, b, k)
		if err != nil {
			return false, err
		}
		if ls.rec == nil && (liveOnly || ls.rev == 0) {
			continue
		}
		run, err := s.readRun(ctx, b, k)
		if err != nil {
			return false, err
		}
		switch {
		case ls.rec == nil: // the marker of a lease that just ended
			if run.rec != nil && !run.rec.finished() {
				return true, nil
			}
		case run.rec != nil && run.rec.Token == ls.rec.Token:
			if !run.rec.finished() {
				return true, nil // established
			}
			// finished: its lease key is about to be purged
		case mine != 0 && ls.rev < mine:
			return true, nil // in flight, and first
		}
	}
	return false, nil
}
