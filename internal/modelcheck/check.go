package modelcheck

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Violation is one broken invariant.
type Violation struct {
	Inv  string // "1-one-handler", "2-lease-order", …
	Msg  string
	keys []key // slots the trace should show; none: the instance's entries
	inst string
}

var terminal = map[backend.Status]bool{
	backend.StatusOK: true, backend.StatusError: true, backend.StatusTimeout: true,
	backend.StatusSkipped: true, backend.StatusLate: true,
}

// at formats a time since t0.
func at(d time.Duration) string { return fmt.Sprintf("+%.3fs", d.Seconds()) }

// rel formats a slot as a time since t0.
func (h *Harness) rel(slot int64) string { return at(time.UnixMilli(slot).Sub(h.rec.t0)) }

const forever = time.Duration(1<<62 - 1)

func endOf(hr *handlerRec) time.Duration {
	if hr.ended {
		return hr.end
	}
	return forever
}

func endSeq(hr *handlerRec) uint64 {
	if hr.ended {
		return hr.endSeq
	}
	return 1<<64 - 1
}

// overlap: one handler started before the other ended, in the order the record
// saw them (which also orders what happened at one instant).
func overlap(a, b *handlerRec) bool { return b.startSeq < endSeq(a) && a.startSeq < endSeq(b) }

func sortHandlers(hs []*handlerRec) {
	slices.SortStableFunc(hs, func(a, b *handlerRec) int {
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		return cmp.Compare(a.fence, b.fence)
	})
}

// checker collects the violations of one seed. Its methods run under rec.mu.
type checker struct {
	h     *Harness
	rec   *record
	vs    []Violation
	byKey map[key][]*handlerRec // scheduled handlers per slot, in start order
	byJob map[string][]*handlerRec
	jobs  map[string]Job
}

func (c *checker) add(inv string, keys []key, inst, format string, args ...any) {
	c.vs = append(c.vs, Violation{Inv: inv, keys: keys, inst: inst, Msg: fmt.Sprintf(format, args...)})
}

// Check judges the record of a seed that has run. History and Active are read
// from history and runs, an observer's view of the stores that takes part in
// nothing. The violations come sorted by invariant.
func (h *Harness) Check(ctx context.Context, history backend.Backend, runs backend.RunStore) []Violation {
	r := h.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &checker{h: h, rec: r, byKey: map[key][]*handlerRec{}, byJob: map[string][]*handlerRec{}, jobs: map[string]Job{}}
	for _, j := range h.plan.Jobs {
		c.jobs[j.Name] = j
	}
	for _, hr := range r.handlers {
		if !hr.ended {
			c.add("6-stop", []key{hr.key}, hr.in.name, "handler attempt=%d of %s slot %s never returned", hr.attempt, hr.key.job, h.rel(hr.key.slot))
		}
		if hr.manual {
			continue
		}
		c.byKey[hr.key] = append(c.byKey[hr.key], hr)
		c.byJob[hr.key.job] = append(c.byJob[hr.key.job], hr)
	}
	for _, hs := range c.byKey {
		sortHandlers(hs)
	}
	for _, hs := range c.byJob {
		sortHandlers(hs)
	}
	c.oneHandler()
	switch r.timing {
	case Exact:
		c.leasesExact()
	case Bounded:
		c.leasesBounded()
	}
	c.handlerFences()
	c.oneFate()
	c.skippedForSomething()
	c.pausedNotRun()
	c.stored(ctx, history, runs)
	c.writtenAgain()
	c.stops()
	slices.SortStableFunc(c.vs, func(a, b Violation) int { return cmp.Compare(a.Inv, b.Inv) })
	return c.vs
}

// oneHandler: 1, one live handler per slot; 1b, per OverlapSkip job.
func (c *checker) oneHandler() {
	h := c.h
	for k, hs := range c.byKey {
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if overlap(a, b) {
					c.add("1-one-handler", []key{k}, "", "%s slot %s: handlers overlap: %s attempt=%d fence=%d [%s, %s) and %s attempt=%d fence=%d [%s, %s)",
						k.job, h.rel(k.slot), a.in.name, a.attempt, a.fence, at(a.start), at(endOf(a)), b.in.name, b.attempt, b.fence, at(b.start), at(endOf(b)))
				}
			}
		}
	}
	for job, hs := range c.byJob {
		if !c.jobs[job].Skip {
			continue
		}
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if a.key != b.key && overlap(a, b) {
					c.add("1b-overlap-skip", []key{a.key, b.key}, "", "%s forbids overlap but slot %s (%s attempt %d, [%s, %s)) and slot %s (%s attempt %d, [%s, %s)) ran at once",
						job, h.rel(a.key.slot), a.in.name, a.attempt, at(a.start), at(endOf(a)), h.rel(b.key.slot), b.in.name, b.attempt, at(b.start), at(endOf(b)))
				}
			}
		}
	}
}

// leasesExact: 2 and 5 from the store's grants as it applied them.
func (c *checker) leasesExact() {
	h := c.h
	for k, gs := range c.rec.grants {
		for i := 1; i < len(gs); i++ {
			prev, g := gs[i-1], gs[i]
			if g.at < prev.end() {
				c.add("2-lease-order", []key{k}, "", "%s slot %s: attempt %d (%s, fence %d) granted at %s while attempt %d's lease (%s, fence %d) lived in the store until %s",
					k.job, h.rel(k.slot), g.attempt, g.inst, g.fence, at(g.at), prev.attempt, prev.inst, prev.fence, at(prev.end()))
			}
			if g.fence <= prev.fence || g.attempt <= prev.attempt {
				c.add("5-fence", []key{k}, "", "%s slot %s: grant %d has fence %d attempt %d after fence %d attempt %d",
					k.job, h.rel(k.slot), i+1, g.fence, g.attempt, prev.fence, prev.attempt)
			}
		}
	}
	for k, hs := range c.byKey {
		for _, hr := range hs {
			if g := c.grantOf(hr); g != nil && g.token == hr.token && endOf(hr) > g.end() {
				c.add("2-lease-order", []key{k}, "", "%s slot %s: %s's handler (attempt %d, fence %d) ran until %s but its lease ended in the store at %s",
					k.job, h.rel(k.slot), hr.in.name, hr.attempt, hr.fence, at(endOf(hr)), at(g.end()))
			}
		}
	}
}

// leasesBounded: 2 and 5 from the won answers, in the order of their fences (the
// answers may have been seen out of order).
func (c *checker) leasesBounded() {
	h := c.h
	slack := h.w.StoreSlack
	for k, gs := range c.rec.grants {
		slices.SortStableFunc(gs, func(a, b *grant) int { return cmp.Compare(a.fence, b.fence) })
		for i := 1; i < len(gs); i++ {
			prev, g := gs[i-1], gs[i]
			if g.attempt <= prev.attempt || g.token == prev.token {
				c.add("5-fence", []key{k}, "", "%s slot %s: fence %d (attempt %d, %s) after fence %d (attempt %d, %s)",
					k.job, h.rel(k.slot), g.fence, g.attempt, g.inst, prev.fence, prev.attempt, prev.inst)
			}
			if g.at+slack < prev.endLo {
				c.add("2-lease-order", []key{k}, "", "%s slot %s: attempt %d (%s) was answered won at %s, but attempt %d's lease (%s) could not expire before %s",
					k.job, h.rel(k.slot), g.attempt, g.inst, at(g.at), prev.attempt, prev.inst, at(prev.endLo))
			}
			for _, hr := range c.byKey[k] {
				if hr.fence == prev.fence && endSeq(hr) > g.atSeq {
					c.add("2-lease-order", []key{k}, "", "%s slot %s: %s's handler (attempt %d) still ran when %s's takeover (attempt %d) was answered at %s; it ended at %s",
						k.job, h.rel(k.slot), hr.in.name, hr.attempt, g.inst, g.attempt, at(g.at), at(endOf(hr)))
				}
			}
		}
	}
}

// grantOf is the grant with hr's fence; nil if the store never granted it.
func (c *checker) grantOf(hr *handlerRec) *grant {
	var found *grant
	for _, g := range c.rec.grants[hr.key] {
		if g.fence == hr.fence {
			found = g
		}
	}
	return found
}

// handlerFences: 5, every handler ran a fence granted to its token, above the
// fence of the slot's handler before it.
func (c *checker) handlerFences() {
	h := c.h
	for k, hs := range c.byKey {
		for i, hr := range hs {
			switch g := c.grantOf(hr); {
			case g == nil:
				c.add("5-fence", []key{k}, "", "%s slot %s: %s ran attempt %d with fence %d, which the store never granted", k.job, h.rel(k.slot), hr.in.name, hr.attempt, hr.fence)
			case g.token != hr.token:
				c.add("5-fence", []key{k}, "", "%s slot %s: %s ran fence %d with token %s, granted to token %s", k.job, h.rel(k.slot), hr.in.name, hr.fence, tok(hr.token), tok(g.token))
			}
			if i > 0 && hr.fence <= hs[i-1].fence {
				c.add("5-fence", []key{k}, "", "%s slot %s: handler of %s started at %s with fence %d, not above the previous handler's fence %d",
					k.job, h.rel(k.slot), hr.in.name, at(hr.start), hr.fence, hs[i-1].fence)
			}
		}
	}
}

// oneFate: 3, a slot runs, or is recorded skipped or late, never two of these.
func (c *checker) oneFate() {
	h := c.h
	fates := map[key]map[string]time.Duration{} // fate → first time
	note := func(k key, fate string, t time.Duration) {
		m := fates[k]
		if m == nil {
			m = map[string]time.Duration{}
			fates[k] = m
		}
		if first, ok := m[fate]; !ok || t < first {
			m[fate] = t
		}
	}
	for k, hs := range c.byKey {
		for _, hr := range hs {
			note(k, "run", hr.start)
		}
	}
	for _, s := range c.rec.saves {
		if !s.manual && (s.status == backend.StatusSkipped || s.status == backend.StatusLate) {
			note(s.key, string(s.status), s.at)
		}
	}
	for k, m := range fates {
		if len(m) < 2 {
			continue
		}
		var parts []string
		for f, t := range m {
			parts = append(parts, fmt.Sprintf("%s at %s", f, at(t)))
		}
		sort.Strings(parts)
		msg := fmt.Sprintf("%s slot %s has more than one fate: %s", k.job, h.rel(k.slot), strings.Join(parts, ", "))
		if run, ok := m["run"]; ok {
			for _, f := range []string{"skipped", "late"} {
				if t, ok := m[f]; ok && t <= run {
					msg += fmt.Sprintf(" (it ran after being recorded %s)", f)
				}
			}
		}
		c.add("3-one-fate", []key{k}, "", "%s", msg)
	}
}

// stored: 4, terminal records in History, and nothing left unfinished in the store.
func (c *checker) stored(ctx context.Context, history backend.Backend, runs backend.RunStore) {
	h := c.h
	for _, j := range h.plan.Jobs {
		recs, err := history.History(ctx, j.Name, 0)
		if err != nil {
			c.add("4-terminal", nil, "", "history of %s: %v", j.Name, err)
			continue
		}
		term := map[int64][]backend.RunRecord{}
		paused := map[int64]bool{} // a slot that fell in a pause and was not run since
		for _, rr := range recs {
			if !rr.Manual && terminal[rr.Status] {
				term[rr.Slot.UnixMilli()] = append(term[rr.Slot.UnixMilli()], rr)
			}
			if !rr.Manual && rr.Status == backend.StatusPaused {
				paused[rr.Slot.UnixMilli()] = true
			}
		}
		for slot, rs := range term {
			if len(rs) > 1 {
				var parts []string
				for _, rr := range rs {
					parts = append(parts, fmt.Sprintf("%s attempt %d by %s", rr.Status, rr.Attempt, rr.Instance))
				}
				c.add("4-terminal", []key{{j.Name, slot}}, "", "%s slot %s has %d terminal records: %s", j.Name, h.rel(slot), len(rs), strings.Join(parts, "; "))
			}
		}
		iv := j.Interval.Milliseconds()
		from := c.rec.t0.Add(h.quietAt + time.Second).UnixMilli()
		to := c.rec.t0.Add(h.endAt - 2*time.Second).UnixMilli()
		for slot := (from + iv - 1) / iv * iv; slot <= to; slot += iv {
			if len(term[slot]) == 0 && !paused[slot] {
				c.add("4-terminal", []key{{j.Name, slot}}, "", "%s slot %s, due in the quiet phase, has no terminal record", j.Name, h.rel(slot))
			}
		}
		active, err := runs.Active(ctx, j.Name)
		if err != nil {
			c.add("4-terminal", nil, "", "active runs of %s: %v", j.Name, err)
			continue
		}
		for _, a := range active {
			c.add("4-terminal", []key{{j.Name, a.Slot.UnixMilli()}}, "", "%s slot %s is still unfinished in the run store after every instance stopped (attempt %d by %s, live %v): never taken over",
				j.Name, h.rel(a.Slot.UnixMilli()), a.Attempt, a.Instance, a.Live)
		}
	}
}

// stops: 6, Stop cancels and waits.
func (c *checker) stops() {
	h := c.h
	slack := 3*h.plan.CallTimeout + h.w.StopSlack
	for _, st := range c.rec.stops {
		if st.reap {
			continue
		}
		name := st.in.name
		if !st.done {
			c.add("6-stop", nil, name, "Stop of %s called at %s never returned", name, at(st.called))
			continue
		}
		if st.returned > st.deadline+slack {
			c.add("6-stop", nil, name, "Stop of %s with deadline %s returned only at %s", name, at(st.deadline), at(st.returned))
		}
		for _, hr := range c.rec.handlers {
			if hr.in != st.in {
				continue
			}
			kind := "scheduled"
			if hr.manual {
				kind = "RunNow"
			}
			switch {
			case hr.startSeq > st.retSeq:
				c.add("6-stop", []key{hr.key}, name, "%s %s handler started at %s, after Stop returned at %s", name, kind, at(hr.start), at(st.returned))
			case endSeq(hr) > st.retSeq:
				c.add("6-stop", []key{hr.key}, name, "Stop of %s returned at %s while its %s handler ran until %s", name, at(st.returned), kind, at(endOf(hr)))
			case hr.start < st.deadline && endOf(hr) > st.deadline+h.w.CancelSlack:
				c.add("6-stop", []key{hr.key}, name, "Stop of %s (deadline %s) did not cancel its %s handler (%s slot %s), which ran until %s",
					name, at(st.deadline), kind, hr.key.job, h.rel(hr.key.slot), at(endOf(hr)))
			}
		}
	}
}

// skippedForSomething: 3b, a slot is stored skipped only while another slot of the
// job was busy: granted a lease before the skip was decided, and not finished
// before the skip's claim was sent. Two claims that back off from each other (a
// tie) leave both slots skipped with neither granted.
func (c *checker) skippedForSomething() {
	h := c.h
	slack := h.w.StoreSlack
	seen := map[key]bool{}
	for _, d := range c.rec.skips {
		// The first overlap answer is the one that stored the decision; later ones
		// answer the deciding token's repeats.
		if seen[d.key] {
			continue
		}
		seen[d.key] = true
		busy := false
		for k, gs := range c.rec.grants {
			if k.job != d.key.job || k.slot == d.key.slot {
				continue
			}
			// The slot's newest grant before the decision, unless it had
			// finished before the skip's claim was sent.
			// Bounded, a claim is applied somewhere between its send and its
			// answer: one sent before the skip was answered may have been applied
			// before the skip was decided.
			var last *grant
			for _, g := range gs {
				before := g.at <= d.at+slack
				if c.rec.timing == Bounded {
					before = g.sent <= d.at+slack
				}
				if before && (last == nil || g.atSeq > last.atSeq) {
					last = g
				}
			}
			if last != nil && (last.finished == 0 || last.finished >= d.sent) {
				busy = true
				break
			}
		}
		if !busy {
			c.add("3b-skipped-for-nothing", []key{d.key}, "", "%s slot %s was stored skipped (claim sent %s, answered %s to %s) while no other slot of the job held a lease",
				d.key.job, h.rel(d.key.slot), at(d.sent), at(d.at), d.inst)
		}
	}
}

// pauseOffsets bounds how far the instances' clocks are apart (each within ±500ms
// of the harness's): an instance may see a pause end this much before the harness
// does.
const pauseOffsets = time.Second

// pausedNotRun: 3c, no scheduled handler of a job starts while a pause of the job
// is in force on every clock (from PauseSlack after it was stored until its end),
// takeovers included.
func (c *checker) pausedNotRun() {
	h := c.h
	pauses := slices.Clone(c.rec.pauses)
	slices.SortStableFunc(pauses, func(a, b pauseRec) int { return cmp.Compare(a.from, b.from) })
	for i, p := range pauses {
		end := p.until - pauseOffsets
		for _, q := range pauses[i+1:] {
			if q.job == p.job { // a later pause of the job replaces this one
				end = min(end, q.from)
				break
			}
		}
		for _, hr := range c.byJob[p.job] {
			if hr.start > p.from+h.w.PauseSlack && hr.start < end {
				c.add("3c-paused", []key{hr.key}, "", "%s slot %s: %s's handler (attempt %d) started at %s while the job was paused (stored at %s, until %s)",
					p.job, h.rel(hr.key.slot), hr.in.name, hr.attempt, at(hr.start), at(p.from), at(p.until))
			}
		}
	}
}

// writtenAgain: 4b, a write that completes a slot (a result, the claim that picks
// who records a slot that did not run) that failed for its caller is written again
// until it succeeds, while its instance lives: an instance that neither crashed
// nor was stopped before the end has a later successful call of the same write.
func (c *checker) writtenAgain() {
	h := c.h
	stoppedEarly := map[*inst]bool{}
	for _, st := range c.rec.stops {
		if st.called < h.endAt {
			stoppedEarly[st.in] = true
		}
	}
	type write struct {
		in     *inst
		op     string
		token  string
		status backend.Status
	}
	lastOK := map[write]time.Duration{}
	for _, w := range c.rec.writes {
		if w.ok {
			lastOK[write{w.in, w.op, w.token, w.status}] = w.at
		}
	}
	reported := map[write]bool{}
	for _, w := range c.rec.writes {
		k := write{w.in, w.op, w.token, w.status}
		if w.ok || w.in.dead.Load() || stoppedEarly[w.in] || reported[k] {
			continue
		}
		if ok, found := lastOK[k]; found && ok >= w.at {
			continue
		}
		reported[k] = true
		c.add("4b-written-again", []key{w.key}, w.in.name, "%s slot %s: %s's %s (tok %s, status %q) failed at %s and was never written again, though %s lived on",
			w.key.job, h.rel(w.key.slot), w.in.name, w.op, tok(w.token), w.status, at(w.at), w.in.name)
	}
}
