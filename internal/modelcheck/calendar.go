package modelcheck

import (
	"time"

	"github.com/anarchon/anarchon/backend"
)

// excludedOnce: 13a and 13b, for j's records (judgements left out).
//
//	13a a slot recorded excluded is of a job that names a calendar, and has
//	    that one record: it never ran, nor was decided otherwise
//	13b at most one EventExcluded per slot across the fleet, of a slot whose
//	    record is stored; and a slot is recorded excluded only while its
//	    job's calendar may have been stored, on some instance's view
func (c *checker) excludedOnce(j Job, recs []backend.RunRecord) {
	bySlot := map[int64][]backend.RunRecord{}
	for _, rr := range recs {
		if !rr.Manual {
			bySlot[rr.Slot.UnixMilli()] = append(bySlot[rr.Slot.UnixMilli()], rr)
		}
	}
	excluded := map[int64]bool{}
	for slot, rs := range bySlot {
		for _, rr := range rs {
			if rr.Status != backend.StatusExcluded {
				continue
			}
			excluded[slot] = true
			c.seen["slots recorded excluded"]++
			k := []key{{j.Name, slot}}
			switch {
			case !j.Calendar:
				c.add("13a-excluded-once", k, rr.Instance, "%s slot %s is recorded excluded, the job names no calendar: %+v", j.Name, c.h.rel(slot), rr)
			case len(rs) > 1:
				c.add("13a-excluded-once", k, rr.Instance, "%s slot %s is recorded excluded and has other records too: %v", j.Name, c.h.rel(slot), statuses(rs))
			case !c.calendarAround(backend.JobOf(j.Name), rr.FinishedAt.Sub(c.rec.t0)):
				c.add("13b-excluded-told-once", k, rr.Instance, "%s slot %s is recorded excluded at %s, when no calendar of the job was stored", j.Name, c.h.rel(slot), at(rr.FinishedAt.Sub(c.rec.t0)))
			}
		}
	}
	for k, by := range c.rec.toldExcluded {
		if k.job != j.Name {
			continue
		}
		n := 0
		for _, m := range by {
			n += m
		}
		if n > 1 {
			c.add("13b-excluded-told-once", []key{k}, "", "%s slot %s: EventExcluded sent %d times: %v", j.Name, c.h.rel(k.slot), n, by)
		}
		if !excluded[k.slot] {
			c.add("13b-excluded-told-once", []key{k}, "", "%s slot %s: EventExcluded sent, no excluded record stored", j.Name, c.h.rel(k.slot))
		}
	}
}

// calendarSlack is how long after a calendar write an instance may still
// decide by the calendars it saw before (its watch's delay), and how far its
// clock may be off the harness's both ways.
func (c *checker) calendarSlack() time.Duration { return c.h.w.PauseSlack + c.pauseOffsets() }

// calendarAround reports whether job's calendar may have been stored, as some
// instance saw it, at t (harness time): a store of it was called by then and
// no delete of it was answered a slack before.
func (c *checker) calendarAround(job string, t time.Duration) bool {
	slack := c.calendarSlack()
	stored := false
	for _, w := range c.rec.cals {
		if w.job != job || w.called > t+slack {
			continue
		}
		switch {
		case !w.drop:
			stored = true
		case w.err == nil && w.at+slack < t:
			stored = false
		}
	}
	return stored
}

// excludedNotRun: 13c, no handler starts for a slot of a job (or its entries)
// first claimable while the job's calendar was stored on every view: a slot
// due a slack after the calendar's store was answered, whose handler starts
// before its delete was called.
func (c *checker) excludedNotRun() {
	h := c.h
	slack := c.calendarSlack()
	for i, w := range c.rec.cals {
		if w.drop || w.err != nil {
			continue
		}
		end := h.endAt
		for _, d := range c.rec.cals[i+1:] {
			if d.job == w.job && d.drop {
				end = d.called
				break
			}
		}
		for _, hr := range c.byParent[w.job] {
			due := time.UnixMilli(hr.key.slot).Sub(c.rec.t0)
			if due > w.at+slack && hr.start < end {
				c.add("13c-excluded-not-run", []key{hr.key}, hr.in.name, "%s slot %s: %s's handler (attempt %d) started at %s, the job's calendar stored at %s excluding the slot (deleted at %s)",
					hr.key.job, h.rel(hr.key.slot), hr.in.name, hr.attempt, at(hr.start), at(w.at), at(end))
			}
		}
	}
}

// calendarStored reports whether a store of job's calendar was answered.
func (c *checker) calendarStored(job string) bool {
	for _, w := range c.rec.cals {
		if w.job == job && !w.drop && w.err == nil {
			return true
		}
	}
	return false
}
