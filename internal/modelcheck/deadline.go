package modelcheck

import (
	"cmp"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// judgeMargin is how long after a deadline and the clock skew allowance the
// judgement of a quiet slot must have been stored: a read and a write.
const judgeMargin = 2 * time.Second

// skewAllowance is the scheduler's Config.MaxClockSkew as the harness leaves it.
const skewAllowance = 2 * time.Second

// deadlines: 12, the deadline records of j (WithDeadline), which it returns
// recs without: they judge a slot, not an attempt, and the other rules read
// attempts.
//
//	12a at most one deadline record per slot, with the slot's deadline token,
//	    of a job with a deadline, of no manual run
//	12b at most one EventDeadlineMissed per slot across the fleet, of a slot
//	    whose record is stored
//	12c a slot due in the quiet phase that ended ok by its deadline has no
//	    deadline record; one that did not, and was not decided paused or past
//	    the run limit, has one
func (c *checker) deadlines(j Job, recs []backend.RunRecord) []backend.RunRecord {
	judged := map[int64]backend.RunRecord{}
	rest := make([]backend.RunRecord, 0, len(recs))
	for _, rr := range recs {
		if !rr.Status.Judgement() {
			rest = append(rest, rr)
			continue
		}
		ms := rr.Slot.UnixMilli()
		k := []key{{j.Name, ms}}
		switch {
		case j.Deadline == 0:
			c.add("12a-deadline-once", k, rr.Instance, "%s slot %s has a deadline record, the job has no deadline: %+v", j.Name, c.h.rel(ms), rr)
		case rr.Manual || rr.Token != backend.DeadlineToken(rr.Slot):
			c.add("12a-deadline-once", k, rr.Instance, "%s slot %s: a deadline record of a manual run or another token: %+v", j.Name, c.h.rel(ms), rr)
		}
		if prev, dup := judged[ms]; dup {
			c.add("12a-deadline-once", k, rr.Instance, "%s slot %s has two deadline records: %+v and %+v", j.Name, c.h.rel(ms), prev, rr)
		}
		judged[ms] = rr
		c.seen["slots judged past their deadline"]++
	}
	for k, by := range c.rec.told {
		if k.job != j.Name {
			continue
		}
		n := 0
		for _, m := range by {
			n += m
		}
		if n > 1 {
			c.add("12b-deadline-told-once", []key{k}, "", "%s slot %s: EventDeadlineMissed sent %d times: %v", j.Name, c.h.rel(k.slot), n, by)
		}
		if _, ok := judged[k.slot]; !ok {
			c.add("12b-deadline-told-once", []key{k}, "", "%s slot %s: EventDeadlineMissed sent, no deadline record stored", j.Name, c.h.rel(k.slot))
		}
	}
	if j.Deadline > 0 {
		c.quietDeadlines(j, rest, judged)
	}
	return rest
}

// quietDeadlines is 12c.
func (c *checker) quietDeadlines(j Job, recs []backend.RunRecord, judged map[int64]backend.RunRecord) {
	bySlot := map[int64][]backend.RunRecord{}
	for _, rr := range recs {
		if !rr.Manual {
			bySlot[rr.Slot.UnixMilli()] = append(bySlot[rr.Slot.UnixMilli()], rr)
		}
	}
	end := c.rec.t0.Add(c.h.endAt)
	for _, slot := range c.quietSlots(j) {
		due := time.UnixMilli(slot - j.offset()).Add(j.Deadline)
		if due.Add(skewAllowance + judgeMargin).After(end) {
			continue // judged after the instances stopped, or not at all
		}
		rs := bySlot[slot]
		if len(rs) == 0 && c.limitReached(j.Name) {
			continue
		}
		okBy := slices.ContainsFunc(rs, func(rr backend.RunRecord) bool {
			return rr.Status == backend.StatusOK && !rr.FinishedAt.After(due)
		})
		rr, isJudged := judged[slot]
		k := []key{{j.Name, slot}}
		switch {
		case okBy && isJudged:
			c.add("12c-deadline-judged", k, rr.Instance, "%s slot %s ended ok by its deadline %s, yet was judged: %s", j.Name, c.h.rel(slot), c.h.rel(due.UnixMilli()), rr.Error)
		case okBy || isJudged:
		case len(rs) > 0 && notJudged(rs):
		default:
			c.add("12c-deadline-judged", k, "", "%s slot %s did not end ok by its deadline %s and has no deadline record (records %v)", j.Name, c.h.rel(slot), c.h.rel(due.UnixMilli()), statuses(rs))
		}
	}
}

// notJudged reports whether the last of a slot's records decided it not to
// run on purpose: paused, or past the run limit.
func notJudged(rs []backend.RunRecord) bool {
	last := slices.MaxFunc(rs, func(a, b backend.RunRecord) int { return cmp.Compare(a.Attempt, b.Attempt) })
	return last.Status == backend.StatusPaused || last.Status == backend.StatusLimit || last.Status == backend.StatusExcluded
}

func statuses(rs []backend.RunRecord) []backend.Status {
	out := make([]backend.Status, len(rs))
	for i, rr := range rs {
		out[i] = rr.Status
	}
	return out
}
