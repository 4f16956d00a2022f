package kvlease

import (
	"context"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// The job key (job.<run name>) holds what a run name's slots share: the slots
// listed unfinished by the decisions that read it, and the run count. Every claim
// that needs the job's other runs or its count reads it. A decision that starts a
// lease, buffers a slot or counts writes it by compare-and-set from the revision
// read. Of two such decisions made on the same reading, one is stored. The slots'
// own keys are the truth of each slot; the list only says which to read.

var (
	_ backend.RunCounter         = (*Store)(nil)
	_ backend.BufferedRunCounter = (*Store)(nil)
	_ backend.OverlapCanceller   = (*Store)(nil)
	_ backend.OverlapBufferer    = (*Store)(nil)
)

// CountsRuns reports that the store counts runs for RunClaim.MaxRuns.
func (s *Store) CountsRuns() bool { return true }

// CountsBufferedRuns reports that a buffered slot is counted as it is stored.
func (s *Store) CountsBufferedRuns() bool { return true }

// CancelsOverlap reports that the store implements backend.OverlapCancelOther.
func (s *Store) CancelsOverlap() bool { return true }

// BuffersOverlap reports that the store implements the buffer policies.
func (s *Store) BuffersOverlap() bool { return true }

// CapsConcurrency reports that the store applies RunClaim.Concurrency.
func (s *Store) CapsConcurrency() bool { return true }

// needsJob reports whether a claim of cur needs the job's other runs or count.
func needsJob(in backend.RunClaim, cur machine.Run) bool {
	return in.Overlap.Exclusive() || in.Counts() || cur.Phase == machine.Buffered
}

// other is another listed slot as read.
type other struct {
	view
	run machine.Run
}

// others reads the slots j lists other than in's own, and maps each to its run;
// slots that hold nothing any more (finished, or never stored) are left out.
func (s *Store) others(ctx context.Context, b *bucket, in backend.RunClaim, j *jobRead, now time.Time) ([]other, error) {
	job, own := in.Job, in.Slot
	var keys []string
	for _, e := range j.val.Runs {
		if e.SlotMS != own.UnixMilli() {
			k := keysFor(job, e.slot())
			keys = append(keys, k.run, k.lease)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	got, err := s.readKeys(ctx, b, keys...)
	if err != nil {
		return nil, err
	}
	var out []other
	for _, e := range j.val.Runs {
		if e.SlotMS == own.UnixMilli() {
			continue
		}
		k := keysFor(job, e.slot())
		v, err := viewOf(e.slot(), got[k.run], got[k.lease])
		if err != nil {
			return nil, err
		}
		v.listed = &e
		if r, _ := v.runOf("", now); r.Unfinished() {
			out = append(out, other{view: v, run: r})
		}
	}
	return out, nil
}

// jobWrite is the job key after d, read at j with others found unfinished:
// the claim's slot listed as d leaves it (or unlisted once finished), the slots
// found holding nothing dropped, the count d's. changed is false when the key
// would stay as it is.
func jobWrite(j *jobRead, others []other, slot time.Time, d machine.Decision) (next jobValue, changed bool) {
	next = jobValue{V: recordVersion, Count: d.Count}
	for _, o := range others {
		next.Runs = append(next.Runs, *o.listed)
	}
	own := j.find(slot)
	if d.Run.Unfinished() {
		e := jobSlot{SlotMS: slot.UnixMilli(), Token: d.Run.Token, Phase: d.Run.Phase}
		if e.Phase == machine.Buffered {
			e.Instance = d.Run.Instance
		}
		next.Runs = append(next.Runs, e)
		changed = own == nil || *own != e
	}
	slices.SortFunc(next.Runs, func(a, b jobSlot) int { return int(min(max(a.SlotMS-b.SlotMS, -1), 1)) })
	return next, changed || d.Counted
}
