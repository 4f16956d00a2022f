package modelcheck

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// stored: 4, the records in History and what is left in the run store.
//
//	4   every attempt the store granted or decided has exactly one record in
//	    History, and every record is such an attempt's (a Settler store:
//	    the record is written with the state); per slot, the last attempt's
//	    record holds the slot's outcome and every earlier one is a failure
//	    whose retry was stored, or an attempt that did not end on its own
//	    (lost, cancelled by Stop, paused) or that a backfill reopened; no
//	    attempt is granted or starts after the slot's ok; a slot whose run
//	    the store finished ends with an outcome, cancelled or paused, never
//	    with a lost or running attempt; every slot due in the quiet phase
//	    ends so; and nothing is left unfinished in the run store at the end
//	    but a retry whose window was open and a buffer still draining.
func (c *checker) stored(ctx context.Context, history backend.Backend, runs backend.RunStore) {
	records := map[key][]backend.RunRecord{} // by slot, by attempt
	defer func() { c.buffers(records) }()
	for _, j := range c.checked() {
		recs, err := history.History(ctx, j.Name, 0)
		if err != nil {
			c.add("4-terminal", nil, "", "history of %s: %v", j.Name, err)
			continue
		}
		active, err := runs.Active(ctx, j.Name)
		if err != nil {
			c.add("4-terminal", nil, "", "active runs of %s: %v", j.Name, err)
			continue
		}
		unfinished := map[int64]backend.ActiveRun{}
		for _, a := range active {
			unfinished[a.Slot.UnixMilli()] = a
		}
		recs = c.deadlines(j, recs)
		c.excludedOnce(j, recs)
		if !c.h.noSettler {
			c.onePerAttempt(j, recs, unfinished)
		}
		bySlot := map[int64][]backend.RunRecord{}
		for _, rr := range recs {
			if !rr.Manual {
				bySlot[rr.Slot.UnixMilli()] = append(bySlot[rr.Slot.UnixMilli()], rr)
			}
			if rr.Status == backend.StatusMissed {
				c.seen["slots recorded missed"]++
			}
		}
		last := map[int64]backend.RunRecord{}
		for slot, rs := range bySlot {
			k := key{j.Name, slot}
			slices.SortStableFunc(rs, func(a, b backend.RunRecord) int { return cmp.Compare(a.Attempt, b.Attempt) })
			last[slot] = rs[len(rs)-1]
			records[k] = rs
			c.oneOutcome(j, k, rs)
			if _, open := unfinished[slot]; !open {
				c.endsDecided(j, k, rs[len(rs)-1])
			}
		}
		draining := map[int64]bool{}
		for _, a := range active {
			draining[a.Slot.UnixMilli()] = c.bufferDraining(j, a)
		}
		for _, slot := range c.quietSlots(j) {
			switch rr, ok := last[slot]; {
			case !ok && draining[slot]:
			case !ok && c.limitReached(j.Name):
				// Every loop of the job ended: nobody claims its later slots.
			case !ok:
				c.add("4-terminal", []key{{j.Name, slot}}, "", "%s slot %s, due in the quiet phase, has no record", j.Name, c.h.rel(slot))
			case !terminal[rr.Status] && rr.Status != backend.StatusPaused && rr.Status != backend.StatusCancelled:
				c.add("4-terminal", []key{{j.Name, slot}}, "", "%s slot %s, due in the quiet phase, ends with attempt %d by %s recorded %s, not an outcome",
					j.Name, c.h.rel(slot), rr.Attempt, rr.Instance, rr.Status)
			default:
				c.quietDecided(j, slot, rr)
			}
		}
		for _, a := range active {
			if c.retryPendingAtEnd(j, a) || draining[a.Slot.UnixMilli()] || c.waitingAtEnd(j, a) {
				continue
			}
			c.add("4-terminal", []key{{j.Name, a.Slot.UnixMilli()}}, "", "%s slot %s is still unfinished in the run store after every instance stopped (attempt %d by %s, live %v, buffered %v, retry at %v): never taken over",
				j.Name, c.h.rel(a.Slot.UnixMilli()), a.Attempt, a.Instance, a.Live, a.Buffered, a.RetryAt)
		}
	}
}

// onePerAttempt: 4, each attempt the store granted or decided for j (a
// manual run's too) has exactly one record, and each record is one of them.
// The attempt that holds a run left unfinished at the end is judged by the
// run store's rule instead.
func (c *checker) onePerAttempt(j Job, recs []backend.RunRecord, unfinished map[int64]backend.ActiveRun) {
	h := c.h
	type attemptKey struct {
		slot  int64
		token string
	}
	byToken := map[attemptKey][]backend.RunRecord{}
	byNumber := map[[2]int64][]backend.RunRecord{}
	for _, rr := range recs {
		slot := rr.Slot.UnixMilli()
		byToken[attemptKey{slot, rr.Token}] = append(byToken[attemptKey{slot, rr.Token}], rr)
		byNumber[[2]int64{slot, int64(rr.Attempt)}] = append(byNumber[[2]int64{slot, int64(rr.Attempt)}], rr)
	}
	known := map[attemptKey]bool{}
	for k, gs := range c.rec.grants {
		if k.job != j.Name {
			continue
		}
		for _, g := range gs {
			ak := attemptKey{k.slot, g.token}
			known[ak] = true
			c.seen["attempts granted"]++
			if a, open := unfinished[k.slot]; open && a.Token == g.token {
				continue
			}
			if len(byToken[ak]) == 0 {
				c.add("4-one-record", []key{k}, "", "%s slot %s: attempt %d (%s, fence %d, tok %s) has no record in History",
					k.job, h.rel(k.slot), g.attempt, g.inst, g.fence, tok(g.token))
			}
		}
	}
	for _, d := range c.rec.decisions {
		if d.key.job == j.Name {
			known[attemptKey{d.key.slot, d.token}] = true
		}
	}
	for ak, rs := range byToken {
		k := key{j.Name, ak.slot}
		if len(rs) > 1 {
			var what []string
			for _, rr := range rs {
				what = append(what, fmt.Sprintf("attempt %d %s by %s", rr.Attempt, rr.Status, rr.Instance))
			}
			c.add("4-one-record", []key{k}, "", "%s slot %s: the attempt of tok %s has %d records: %s", j.Name, h.rel(ak.slot), tok(ak.token), len(rs), strings.Join(what, "; "))
		}
		if !known[ak] {
			rr := rs[0]
			c.add("4-one-record", []key{k}, "", "%s slot %s: a record (attempt %d %s by %s, tok %s) of no attempt the store granted or decided",
				j.Name, h.rel(ak.slot), rr.Attempt, rr.Status, rr.Instance, tok(ak.token))
		}
	}
	for n, rs := range byNumber {
		if len(rs) < 2 {
			continue
		}
		tokens := map[string]bool{}
		for _, rr := range rs {
			tokens[rr.Token] = true
		}
		if len(tokens) > 1 {
			c.add("4-one-record", []key{{j.Name, n[0]}}, "", "%s slot %s: attempt %d has records of %d tokens", j.Name, h.rel(n[0]), n[1], len(tokens))
		}
	}
}

// oneOutcome: 4, per slot one outcome: the last attempt's record holds it; an
// earlier attempt's is a failure whose retry was kept, or an attempt that did
// not end on its own, or one a backfill reopened (a slot stored late, skipped,
// limit or paused, or rerun). No attempt is granted or starts after an ok that
// stands.
func (c *checker) oneOutcome(j Job, k key, rs []backend.RunRecord) {
	h := c.h
	top := rs[len(rs)-1].Attempt
	var finals []string
	for i, rr := range rs {
		retried := (rr.Status == backend.StatusError || rr.Status == backend.StatusTimeout) && c.retryKept(k, rr.Token)
		switch {
		case !terminal[rr.Status] || retried:
		case rr.Attempt < top && c.reopenedAfter(k, rr, rs):
			c.seen["slots reopened after an outcome"]++
		case rr.Attempt < top:
			c.add("4-terminal", []key{k}, "", "%s slot %s: attempt %d by %s is recorded %s and was not retried, yet attempt %d followed",
				j.Name, h.rel(k.slot), rr.Attempt, rr.Instance, rr.Status, top)
		default:
			finals = append(finals, fmt.Sprintf("%s attempt %d by %s", rr.Status, rr.Attempt, rr.Instance))
		}
		if rr.Status == backend.StatusCancelled && i < len(rs)-1 && endedForGood(rr) && !c.reopenedAfter(k, rr, rs) {
			c.add("4-terminal", []key{k}, "", "%s slot %s: attempt %d by %s was ended for good (%s), yet attempt %d followed",
				j.Name, h.rel(k.slot), rr.Attempt, rr.Instance, rr.Error, rs[i+1].Attempt)
		}
		if rr.Status == backend.StatusOK && !c.reopenedAfter(k, rr, rs) {
			c.noneAfterOK(k, rr)
		}
	}
	if rr := rs[len(rs)-1]; c.removed(j.Name) && rr.Status == backend.StatusCancelled && rr.Attempt > 1 {
		c.seen["removed entries' runs taken over and ended cancelled"]++
	}
	if len(finals) > 1 {
		c.add("4-terminal", []key{k}, "", "%s slot %s has %d final records: %s", j.Name, h.rel(k.slot), len(finals), strings.Join(finals, "; "))
	}
}

// endedForGood reports whether rr is the record of a run a claim ended for
// good: its entry removed, or a later slot's request that it end.
func endedForGood(rr backend.RunRecord) bool {
	return rr.Error == machine.WhyEntryRemoved || rr.Error == machine.WhyCancelAsked
}

// reopenedAfter reports whether the attempt after rr's reopened the slot: a
// backfill's (its record says so; a paused job's backfill ends it paused), or
// a grant answered Reopened.
func (c *checker) reopenedAfter(k key, rr backend.RunRecord, rs []backend.RunRecord) bool {
	for _, g := range c.rec.grants[k] {
		if g.attempt == rr.Attempt+1 && g.reopened {
			return true
		}
	}
	for _, next := range rs {
		// A slot with an outcome is paused only by a claim that reopens it.
		if next.Attempt == rr.Attempt+1 && (next.Backfill && !rr.Backfill || next.Status == backend.StatusPaused) {
			return true
		}
	}
	return false
}

// endsDecided: 4, a slot the run store no longer holds unfinished ends with an
// outcome, cancelled or paused, never with an attempt that was lost,
// superseded or still running: an attempt follows those. But a run that may
// not be taken over again ends with its holder's status, lost too: a manual
// run, a run a later slot asked to end (cancel-other), a removed entry's.
func (c *checker) endsDecided(j Job, k key, rr backend.RunRecord) {
	switch rr.Status {
	case backend.StatusLost, backend.StatusSuperseded, backend.StatusRunning, "":
	default:
		return
	}
	switch {
	case c.h.noSettler && rr.Status == backend.StatusSuperseded:
		return // the seed's shape: the run's last attempt wrote its own record beside
	case rr.Status == backend.StatusLost && (c.asked(k) || c.rec.mayBeAsked[k] || c.entryGone(j.Name)):
		c.seen["runs ended lost, asked to end or their entry gone"]++
		return
	}
	c.add("4-terminal", []key{k}, "", "%s slot %s ends with attempt %d by %s recorded %q, and no attempt followed: %s",
		j.Name, c.h.rel(k.slot), rr.Attempt, rr.Instance, rr.Status, rr.Error)
}

// entryGone reports whether name is an entry's run name whose entry was
// removed once, re-added or not.
func (c *checker) entryGone(name string) bool {
	for _, w := range c.rec.entryWrites {
		if w.err == nil && w.op == "delete" && w.e.RunName() == name {
			return true
		}
	}
	return false
}

// retryKept reports whether token's attempt of k stored a retry that the store
// kept: the view saw the slot kept for it, or the next attempt was granted as
// that retry.
func (c *checker) retryKept(k key, token string) bool {
	gs := c.rec.grants[k]
	for i, g := range gs {
		if g.token != token || g.retry == nil {
			continue
		}
		if g.retry.stored || i+1 < len(gs) && gs[i+1].retried {
			return true
		}
	}
	return false
}

// waitingAtEnd reports whether a, an unfinished run whose lease ended, of a
// job that runs one slot at a time, waited for another run of the job (a
// manual one too) that still ran less than a lease and a second before the
// final Stop: its takeover waits for that run to end.
//
// So does one of a job that catches up, one slot at a time: a starting
// instance adopts the runs it finds in the queue of its catch-up.
func (c *checker) waitingAtEnd(j Job, a backend.ActiveRun) bool {
	if a.Live || !j.Exclusive() && j.CatchUp == backend.CatchUpNone {
		return false
	}
	since := c.h.endAt - j.Lease - time.Second
	for _, hr := range c.rec.handlers {
		if hr.key.job == j.Name && hr.key.slot != a.Slot.UnixMilli() && endOf(hr) >= since {
			c.seen["runs left waiting at the end for another run of their job"]++
			return true
		}
	}
	return false
}

// asked reports whether k's run was asked to end (cancel-other).
func (c *checker) asked(k key) bool {
	_, ok := c.rec.cancelAsked[k]
	return ok
}

// quietDecided: 4c, a slot due in the quiet phase, every instance up and
// healthy, is not recorded late (but for a job that cancels the other run:
// one that holds on past the new slot's lateness makes it late), nor missed,
// nor paused while no pause of its job was in force around it.
func (c *checker) quietDecided(j Job, slot int64, rr backend.RunRecord) {
	due := time.UnixMilli(slot).Sub(c.rec.t0)
	switch {
	case rr.Status == backend.StatusLate && !j.CancelOther:
		c.add("4c-quiet-decided", []key{{j.Name, slot}}, "", "%s slot %s, due in the quiet phase, is recorded late by %s: %s",
			j.Name, c.h.rel(slot), rr.Instance, rr.Error)
	case rr.Status == backend.StatusMissed:
		c.add("4c-quiet-decided", []key{{j.Name, slot}}, "", "%s slot %s, due in the quiet phase, is recorded missed by %s: %s",
			j.Name, c.h.rel(slot), rr.Instance, rr.Error)
	case rr.Status == backend.StatusPaused && !c.pausedBetween(j.Name, due-time.Second, due+time.Second):
		c.add("4c-quiet-decided", []key{{j.Name, slot}}, "", "%s slot %s, due in the quiet phase, is recorded paused by %s while no pause of the job was in force: %s",
			j.Name, c.h.rel(slot), rr.Instance, rr.Error)
	}
}
