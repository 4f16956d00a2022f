package modelcheck

import (
	"slices"
	"strings"
)

// limitReached reports whether a claim of job was answered limit, or that the
// limit was reached (ClaimResult.LimitReached).
func (c *checker) limitReached(job string) bool {
	for _, o := range c.rec.limits {
		if o.key.job == job && (o.limit || o.reached) {
			return true
		}
	}
	return false
}

// runLimits: 9, for the jobs with a run limit (backend.RunCounter):
//
//	9a  the slots counted fleet-wide (first won, or buffered, by a claim that
//	    counts: not manual, backfill, retry, takeover nor reopen) are at most
//	    MaxRuns; a manual slot (off the schedule) buffered by its manual claim
//	    and won by a counting one (an adopting instance's) is not counted
//	9b  no slot is answered limit before MaxRuns slots were counted, but for
//	    the slots whose counting claim failed or was answered late (a store may
//	    count a slot it did not run: kvlease after a crash between two writes),
//	    and for the slots whose claim was cut by its process's death (kvlease
//	    may count such a slot once more when it is claimed again); a win sent
//	    by the time the limit answer was recorded counts as before it (two
//	    answers of one instant are recorded in either order)
func (c *checker) runLimits() {
	h := c.h
	for _, j := range c.checked() {
		if j.MaxRuns == 0 {
			continue
		}
		entry := isEntryRun(j.Name)
		counted := map[int64]bool{}
		failed := map[int64]bool{}
		cut := map[int64]bool{}
		var order []string
		judged := false
		for _, o := range c.rec.limits {
			if o.key.job != j.Name || !entry && (o.key.slot-j.offset())%j.Interval.Milliseconds() != 0 {
				continue
			}
			switch {
			case o.counted && !counted[o.key.slot]:
				counted[o.key.slot] = true
				order = append(order, h.rel(o.key.slot)+" by "+o.inst)
			case o.failed:
				failed[o.key.slot] = true
			}
			if o.cut {
				cut[o.key.slot] = true
			}
			if o.limit && !judged {
				judged = true
				c.seen["limit reached"]++
				slack := 0
				for slot := range failed {
					if !counted[slot] {
						slack++
					}
				}
				for slot := range cut {
					if counted[slot] {
						slack++
					}
				}
				// A win sent by the time this answer was recorded may have
				// been counted first, its answer recorded after.
				early := 0
				for _, p := range c.rec.limits {
					inPlan := entry || (p.key.slot-j.offset())%j.Interval.Milliseconds() == 0
					if p.key.job == j.Name && inPlan && p.counted && !counted[p.key.slot] && p.sent <= o.at {
						early++
					}
				}
				if len(counted)+slack+early < j.MaxRuns {
					c.add("9b-limit-early", []key{o.key}, o.inst, "%s slot %s was answered limit (to %s) after %d of %d runs were counted (%s), %d claims that may have counted failed",
						j.Name, h.rel(o.key.slot), o.inst, len(counted), j.MaxRuns, strings.Join(order, ", "), slack)
				}
			}
		}
		if len(counted) > j.MaxRuns {
			keys := slices.Collect(func(yield func(key) bool) {
				for slot := range counted {
					if !yield(key{j.Name, slot}) {
						return
					}
				}
			})
			c.add("9a-limit-exceeded", keys, "", "%s counted %d runs, over its limit of %d: %s", j.Name, len(counted), j.MaxRuns, strings.Join(order, ", "))
		}
	}
}
