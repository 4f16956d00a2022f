package kvlease

import (
	"context"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend/machine"
)

// view is what the store read of one slot: its run record, its lease key, and
// its entry in the job key when listed.
type view struct {
	slot   time.Time
	run    entry
	rv     *runValue
	lease  entry
	lv     *leaseValue
	listed *jobSlot
}

// runOf maps the slot's keys to its machine.Run, as seen by a claimer holding
// token ("" for a look at another slot), at now by the store's clock. It is the
// one place where the layout's states meet the machine's:
//
//   - The run record is the slot's run. With none, a slot the job key lists
//     buffered is buffered (its record follows the job key).
//   - A lease key that holds the run's token makes the run's lease live.
//   - A live lease key of another token is a claim between its writes. It is
//     running to others, and to its own token the state before it. Then mine,
//     its revision, says the lease key is the claimer's own.
//   - Otherwise the run's lease ended, at the lease key's marker or earlier.
func (v view) runOf(token string, now time.Time) (cur machine.Run, mine uint64) {
	cur = machine.Run{Slot: v.slot}
	switch {
	case v.rv != nil:
		cur = v.rv.run()
		cur.Slot = v.slot
	case v.listed != nil && v.listed.Phase == machine.Buffered:
		cur.Phase, cur.Token, cur.Instance = machine.Buffered, v.listed.Token, v.listed.Instance
	}
	l := v.lv
	switch {
	case l != nil && l.Token == cur.Token && cur.Phase == machine.Running:
		cur.Lease, cur.Expires = l.lease(), v.liveUntil(now)
		return cur, 0
	case l != nil && l.Token == cur.Token && cur.Phase != machine.Buffered:
		// A finished or retrying run whose lease key is not purged yet.
	case l != nil && l.Token == token:
		v.ended(&cur, now)
		return cur, v.lease.rev
	case l != nil:
		return machine.Run{Slot: v.slot, Phase: machine.Running, Token: l.Token, Instance: l.Instance,
			Lease: l.lease(), Expires: v.liveUntil(now)}, 0
	}
	v.ended(&cur, now)
	return cur, 0
}

// liveUntil is when the live lease ends by the server's clock: after now, the
// server holding the key.
func (v view) liveUntil(now time.Time) time.Time {
	at := v.lease.created.Add(v.lv.lease())
	if !at.After(now) {
		at = now.Add(time.Millisecond)
	}
	return at
}

// ended sets a running run's lease as ended: at its lease key's marker, or by now.
func (v view) ended(cur *machine.Run, now time.Time) {
	if cur.Phase != machine.Running {
		return
	}
	end := now
	if v.lease.rev != 0 && v.lease.created.Before(now) {
		end = v.lease.created
	}
	if cur.Expires.IsZero() || cur.Expires.After(end) {
		cur.Expires = end
	}
}

// pending returns the records the run record holds not yet written.
func (v view) pending() bool { return v.rv != nil && len(v.rv.Records) > 0 }

// readView reads job's slot: its two keys, and when withJob its job key, in one
// request on a single replica.
func (s *Store) readView(ctx context.Context, b *bucket, job string, slot time.Time, withJob bool) (view, *jobRead, error) {
	k := keysFor(job, slot)
	keys := []string{k.run, k.lease}
	if withJob {
		keys = append(keys, jobKey(job))
	}
	got, err := s.readKeys(ctx, b, keys...)
	if err != nil {
		return view{}, nil, err
	}
	v, err := viewOf(slot, got[k.run], got[k.lease])
	if err != nil || !withJob {
		return v, nil, err
	}
	j, err := jobOf(got[jobKey(job)])
	if err != nil {
		return v, nil, err
	}
	v.listed = j.find(slot)
	return v, j, nil
}

func viewOf(slot time.Time, run, lease entry) (view, error) {
	v := view{slot: slot, run: run, lease: lease}
	var err error
	if v.rv, err = decodeRun(run); err != nil {
		return v, err
	}
	v.lv, err = decodeLease(lease)
	return v, err
}

// jobRead is a job key as read: its revision and value.
type jobRead struct {
	rev uint64
	val jobValue
}

func jobOf(e entry) (*jobRead, error) {
	v, err := decodeJob(e)
	if err != nil {
		return nil, err
	}
	return &jobRead{rev: e.rev, val: *v}, nil
}

// find returns the job key's entry of slot, or nil.
func (j *jobRead) find(slot time.Time) *jobSlot {
	i := slices.IndexFunc(j.val.Runs, func(e jobSlot) bool { return e.SlotMS == slot.UnixMilli() })
	if i < 0 {
		return nil
	}
	e := j.val.Runs[i]
	return &e
}
