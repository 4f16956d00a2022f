package modelcheck

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// buffered is a slot of a job that buffers, from its first claim answered
// buffered to its first grant after that (0: never granted).
type buffered struct {
	key                key
	from, fromSent     time.Duration
	fromSeq            uint64
	granted, grantSent time.Duration
	grantSeq           uint64
	grantToken         string
	grantedPaused      bool
	firstAnswerInst    string
}

// bufferedSlots lists, per job, the slots a claim was answered buffered for,
// oldest slot first.
func (c *checker) bufferedSlots() map[string][]*buffered {
	bySlot := map[key]*buffered{}
	for _, b := range c.rec.buffers {
		if c.jobs[b.key.job].Buffer == 0 {
			continue
		}
		if bs, ok := bySlot[b.key]; !ok || b.seq < bs.fromSeq {
			bySlot[b.key] = &buffered{key: b.key, from: b.at, fromSent: b.sent, fromSeq: b.seq, firstAnswerInst: b.inst}
		}
	}
	out := map[string][]*buffered{}
	for k, bs := range bySlot {
		for _, g := range c.rec.grants[k] {
			if g.atSeq > bs.fromSeq && (bs.grantSeq == 0 || g.atSeq < bs.grantSeq) {
				bs.granted, bs.grantSent, bs.grantSeq, bs.grantToken = g.at, g.sent, g.atSeq, g.token
			}
		}
		out[k.job] = append(out[k.job], bs)
	}
	for _, list := range out {
		slices.SortFunc(list, func(a, b *buffered) int { return cmp.Compare(a.key.slot, b.key.slot) })
	}
	return out
}

// buffers: 8, for the jobs that buffer (backend.OverlapBufferer):
//
//	8a  a slot answered buffered is never recorded late or skipped: it runs (or,
//	    claimed while its job is paused, is recorded paused)
//	8b  buffered slots of a job are first granted oldest first (a grant finished
//	    paused at once, by a claim that asks for no buffer, is left out)
//	8c  a slot is stored skipped only while another slot of the job was answered
//	    buffered and not yet granted (the cap, at least one, was reached)
func (c *checker) buffers(records map[key][]backend.RunRecord) {
	h := c.h
	all := c.bufferedSlots()
	for job, list := range all {
		for _, b := range list {
			rs := records[b.key]
			if len(rs) == 0 {
				continue
			}
			if rr := rs[len(rs)-1]; rr.Status == backend.StatusLate || rr.Status == backend.StatusMissed || rr.Status == backend.StatusSkipped {
				c.add("8a-buffered-runs", []key{b.key}, "", "%s slot %s was answered buffered (to %s at %s) yet is recorded %s: %s",
					job, h.rel(b.key.slot), b.firstAnswerInst, at(b.from), rr.Status, rr.Error)
			}
			for _, rr := range rs {
				b.grantedPaused = b.grantedPaused || rr.Token == b.grantToken && rr.Status == backend.StatusPaused
			}
		}
		for i, a := range list {
			// A release that does not buffer claims a buffered slot at once.
			if a.grantSeq == 0 || a.grantedPaused || !c.buffersAlways(job) {
				continue
			}
			for _, b := range list[i+1:] {
				// a was buffered before b was granted, and b was granted first.
				// Calls answered at one instant may have been applied in either
				// order; over a network, only an answer received before b's
				// claim was sent surely came first.
				before := a.from < b.granted
				if c.rec.timing == Bounded {
					before = a.from < b.grantSent
				}
				if b.grantSeq != 0 && !b.grantedPaused && before && b.grantSeq < a.grantSeq {
					c.add("8b-buffer-order", []key{a.key, b.key}, "", "%s slot %s (buffered at %s) was granted at %s, after the later slot %s (buffered at %s, granted at %s)",
						job, h.rel(a.key.slot), at(a.from), at(a.granted), h.rel(b.key.slot), at(b.from), at(b.granted))
				}
			}
		}
	}
	c.bufferCap(all)
	slack := h.w.StoreSlack
	seen := map[key]bool{}
	for _, d := range c.rec.skips {
		if seen[d.key] || !d.overlap.Buffers() { // 3b judges the others
			continue
		}
		seen[d.key] = true
		held := false
		for _, b := range all[d.key.job] {
			from := b.from
			if c.rec.timing == Bounded {
				from = b.fromSent
			}
			if b.key != d.key && from <= d.at+slack && (b.grantSeq == 0 || b.granted+slack >= d.sent) {
				held = true
				break
			}
		}
		if !held {
			c.add("8c-skipped-unbuffered", []key{d.key}, "", "%s slot %s was stored skipped (claim sent %s, answered %s to %s) while no other slot of the job was buffered",
				d.key.job, h.rel(d.key.slot), at(d.sent), at(d.at), d.inst)
		}
	}
}

// bufferDraining reports whether a, left buffered in the store at the end, is in
// a buffer that was still draining: a handler of its job (a manual one too) ran
// less than a scheduled handler's longest run and a lease (and a second) before
// the final Stop.
func (c *checker) bufferDraining(j Job, a backend.ActiveRun) bool {
	if !a.Buffered || j.Buffer == 0 {
		return false
	}
	since := c.h.endAt - j.MaxRun - j.Lease - time.Second
	for _, hr := range c.rec.handlers {
		if hr.key.job == j.Name && endOf(hr) >= since {
			return true
		}
	}
	return false
}

// buffersAlways reports whether every release of name's job buffers.
func (c *checker) buffersAlways(name string) bool {
	for _, j := range c.h.plan.Jobs {
		if j.Name == backend.JobOf(name) {
			return c.h.job(j).Buffer > 0 && c.h.job(j.Redeployed()).Buffer > 0
		}
	}
	return false
}

// bufferCap: 8d, no more slots of a job are buffered at once than its cap
// (one for OverlapBufferOne): a slot counts from its first answer buffered to
// its first grant (a slot withdrawn without a grant is left out: the record
// cannot tell when).
func (c *checker) bufferCap(all map[string][]*buffered) {
	for job, list := range all {
		limit := c.jobs[job].Buffer
		if limit == 0 {
			continue
		}
		for _, b := range list {
			n := 1
			var with []string
			for _, a := range list {
				if a != b && a.fromSeq < b.fromSeq && a.grantSeq > b.fromSeq {
					n++
					with = append(with, c.h.rel(a.key.slot))
				}
			}
			if n > limit {
				c.add("8d-buffer-cap", []key{b.key}, "", "%s slot %s was buffered at %s while %d other slots were (%s): over the cap of %d",
					job, c.h.rel(b.key.slot), at(b.from), n-1, strings.Join(with, ", "), limit)
			}
		}
	}
}
