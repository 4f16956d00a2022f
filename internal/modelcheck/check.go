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
	"github.com/anarchon/anarchon/scheduler"
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
	backend.StatusSkipped: true, backend.StatusLate: true, backend.StatusLimit: true,
	backend.StatusMissed: true, backend.StatusExcluded: true,
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
	seen  map[string]int // what the checks met, for the summary (Harness.Seen)
	rec   *record
	vs    []Violation
	byKey map[key][]*handlerRec // scheduled handlers per slot, in start order
	byJob map[string][]*handlerRec
	// byParent holds the handlers of a job and of its entries, by the job.
	byParent map[string][]*handlerRec
	// jobs are the plan's jobs as registered, and each entry as a Job named by
	// its run name (the job's policies, its latest interval).
	jobs map[string]Job
	// cov are the pairs of the matrix the seed met (coverage.go).
	cov map[string]int
}

func (c *checker) add(inv string, keys []key, inst, format string, args ...any) {
	msg := strings.ReplaceAll(fmt.Sprintf(format, args...), backend.EntrySep, "/")
	c.vs = append(c.vs, Violation{Inv: inv, keys: keys, inst: inst, Msg: msg})
}

// Check judges the record of a seed that has run. History and Active are read
// from history and runs, an observer's view of the stores that takes part in
// nothing. The violations come sorted by invariant.
func (h *Harness) Check(ctx context.Context, history backend.Backend, runs backend.RunStore) []Violation {
	r := h.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &checker{h: h, rec: r, seen: map[string]int{}, byKey: map[key][]*handlerRec{}, byJob: map[string][]*handlerRec{}, byParent: map[string][]*handlerRec{}, jobs: map[string]Job{}}
	for _, j := range h.plan.Jobs {
		c.jobs[j.Name] = h.job(j).merged(h.job(j.Redeployed()))
	}
	c.addEntryJobs()
	for _, hr := range r.handlers {
		if !hr.ended {
			c.add("6-stop", []key{hr.key}, hr.in.name, "handler attempt=%d of %s slot %s never returned", hr.attempt, hr.key.job, h.rel(hr.key.slot))
		}
		if hr.manual {
			continue
		}
		c.byKey[hr.key] = append(c.byKey[hr.key], hr)
		c.byJob[hr.key.job] = append(c.byJob[hr.key.job], hr)
		c.byParent[backend.JobOf(hr.key.job)] = append(c.byParent[backend.JobOf(hr.key.job)], hr)
	}
	for _, hs := range c.byKey {
		sortHandlers(hs)
	}
	for _, hs := range c.byJob {
		sortHandlers(hs)
	}
	for _, hs := range c.byParent {
		sortHandlers(hs)
	}
	for _, hr := range r.handlers {
		if _, _, ok, _ := c.frozenEnd(hr); ok {
			c.seen["handlers ended as their frozen process thawed"]++
		}
	}
	if h.plan.Turns && !h.noMembers {
		c.seen["seeds whose instances share out the slots (turns)"]++
	}
	for _, in := range c.instances() {
		c.seen["process freezes"] += len(in.freezes())
		if in.release {
			c.seen["instances of a redeployed release"]++
		}
	}
	c.oneHandler()
	c.notAgain()
	switch r.timing {
	case Exact:
		c.leasesExact()
	case Bounded:
		c.leasesBounded()
	}
	c.handlerFences()
	c.retries()
	c.retriesMade()
	c.oneFate()
	c.skippedForSomething()
	c.pausedNotRun()
	c.excludedNotRun()
	c.stored(ctx, history, runs)
	c.runLimits()
	c.writtenAgain()
	c.stops()
	c.entryRules()
	c.absurdRefused()
	c.coverage()
	slices.SortStableFunc(c.vs, func(a, b Violation) int { return cmp.Compare(a.Inv, b.Inv) })
	h.seen, h.cov = c.seen, c.cov
	return c.vs
}

// oneHandler: 1, one live handler per slot; 1b, per job that runs one slot at a
// time (OverlapSkip, OverlapCancelOther).
func (c *checker) oneHandler() {
	h := c.h
	for k, hs := range c.byKey {
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if c.overlap(a, b) {
					c.add("1-one-handler", []key{k}, "", "%s slot %s: handlers overlap: %s attempt=%d fence=%d [%s, %s) and %s attempt=%d fence=%d [%s, %s)",
						k.job, h.rel(k.slot), a.in.name, a.attempt, a.fence, at(a.start), at(endOf(a)), b.in.name, b.attempt, b.fence, at(b.start), at(endOf(b)))
				}
			}
		}
	}
	for job, hs := range c.byJob {
		if !c.jobs[job].Exclusive() {
			continue
		}
		n := c.slotsOf(job)
		for i, b := range hs {
			// b started after hs[:i]: its claim was to keep out of their way
			// once n of them held the job, if its instance's release forbids
			// overlap (a redeploy may change the policy).
			var with []*handlerRec
			for _, a := range hs[:i] {
				if a.key != b.key && c.overlap(a, b) && !slices.ContainsFunc(with, func(w *handlerRec) bool { return w.key == a.key }) {
					with = append(with, a)
				}
			}
			if n > 1 && len(with) > 0 {
				c.seen["handlers run beside others under WithConcurrency"]++
			}
			if len(with) < n || !c.exclusiveOn(b) {
				continue
			}
			a := with[len(with)-1]
			c.add("1b-overlap-skip", []key{a.key, b.key}, "", "%s runs %d slot(s) at once, but slot %s (%s attempt %d, [%s, %s)) ran beside %d others, slot %s (%s attempt %d, [%s, %s)) the last",
				job, n, h.rel(b.key.slot), b.in.name, b.attempt, at(b.start), at(endOf(b)), len(with), h.rel(a.key.slot), a.in.name, a.attempt, at(a.start), at(endOf(a)))
		}
	}
}

// slotsOf is how many slots of the job (or entry) job may run at once.
func (c *checker) slotsOf(job string) int {
	j, ok := c.jobs[job]
	if !ok {
		j = c.jobs[backend.JobOf(job)]
	}
	return j.slots()
}

// exclusiveOn reports whether hr's instance runs hr's job (its entry's
// parent) one slot at a time.
func (c *checker) exclusiveOn(hr *handlerRec) bool {
	j, ok := hr.in.jobs[backend.JobOf(hr.key.job)]
	return !ok || j.Exclusive()
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
			g := c.grantOf(hr)
			if end, _ := c.effEnd(hr); g != nil && g.token == hr.token && end > g.end() && !c.thawedOnly(hr) {
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
				if _, end := c.effEnd(hr); hr.fence == prev.fence && end > g.atSeq && !c.thawedOnly(hr) {
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

// oneFate: 3, a slot runs, or is recorded skipped, late or missed, never two of
// these (a backfill runs a slot stored skipped, late or limit: its handlers are not
// a second fate).
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
		// A slot reopened (a backfill's) runs its attempts from then on, its
		// retries on other instances too.
		reopened := int(^uint(0) >> 1)
		for _, g := range c.rec.grants[k] {
			if g.reopened {
				reopened = min(reopened, g.attempt)
			}
		}
		for _, hr := range hs {
			if !hr.backfill && hr.attempt < reopened {
				note(k, "run", hr.start)
			}
		}
	}
	for _, s := range c.rec.saves {
		if !s.manual && (s.status == backend.StatusSkipped || s.status == backend.StatusLate || s.status == backend.StatusMissed || s.status == backend.StatusLimit) {
			note(s.key, string(s.status), s.at)
		}
	}
	fateOf := map[backend.ClaimOutcome]backend.Status{backend.OutcomeOverlap: backend.StatusSkipped, backend.OutcomeLate: backend.StatusLate, backend.OutcomeLimit: backend.StatusLimit}
	for _, d := range c.rec.decisions {
		if st, ok := fateOf[d.outcome]; ok {
			if d.status == backend.StatusMissed {
				st = d.status
			}
			note(d.key, string(st), d.at)
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
			for _, f := range []string{"skipped", "late", "missed", "limit"} {
				if t, ok := m[f]; ok && t <= run {
					msg += fmt.Sprintf(" (it ran after being recorded %s)", f)
				}
			}
		}
		c.add("3-one-fate", []key{k}, "", "%s", msg)
	}
}

// noneAfterOK: 4, once an attempt's ok stands (ok, the record of its token), no
// attempt of the slot is granted after it, and no handler starts after it.
func (c *checker) noneAfterOK(k key, ok backend.RunRecord) {
	h := c.h
	for _, g := range c.rec.grants[k] {
		if g.token != ok.Token && g.fence > ok.Fence && ok.Fence > 0 {
			c.add("4-terminal", []key{k}, "", "%s slot %s: attempt %d (%s, fence %d) was granted after attempt %d's ok (%s, fence %d)",
				k.job, h.rel(k.slot), g.attempt, g.inst, g.fence, ok.Attempt, ok.Instance, ok.Fence)
		}
	}
	var okh *handlerRec
	for _, hr := range c.byKey[k] {
		if hr.token == ok.Token && hr.result == endOK && (okh == nil || hr.endSeq > okh.endSeq) {
			okh = hr
		}
	}
	if okh == nil {
		return
	}
	for _, hr := range c.byKey[k] {
		if hr.startSeq > okh.endSeq {
			c.add("4-terminal", []key{k}, "", "%s slot %s: %s's handler (attempt %d) started at %s, after attempt %d's ok by %s at %s",
				k.job, h.rel(k.slot), hr.in.name, hr.attempt, at(hr.start), okh.attempt, okh.in.name, at(okh.end))
		}
	}
}

// retryPendingAtEnd reports whether a, left unfinished in the store, is a retry
// whose window was still open a second before the final Stop: nobody had to
// claim it yet. The window is the record's (Exact), or at most the job's max
// lateness after the retry time.
func (c *checker) retryPendingAtEnd(j Job, a backend.ActiveRun) bool {
	if a.RetryAt.IsZero() {
		return false
	}
	by := a.RetryAt.Sub(c.rec.t0) + j.MaxLate
	if c.rec.timing == Exact {
		if g := c.rec.latestGrant(key{j.Name, a.Slot.UnixMilli()}); g != nil && g.retry != nil {
			by = g.retryBy()
		}
	}
	return by > c.h.endAt-time.Second
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
		if seen[d.key] || d.overlap.Buffers() { // 8c judges those
			continue
		}
		seen[d.key] = true
		busy := 0
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
				busy++
			}
		}
		if n := c.slotsOf(d.key.job); busy < n {
			c.add("3b-skipped-for-nothing", []key{d.key}, "", "%s slot %s was stored skipped (claim sent %s, answered %s to %s) while %d other slots of the job held a lease, of %d that may run at once",
				d.key.job, h.rel(d.key.slot), at(d.sent), at(d.at), d.inst, busy, n)
		}
	}
}

// pauseOffsets bounds how far the instances' clocks are apart (each within
// Plan.Skew of the harness's): an instance may see a pause end this much
// before the harness does.
func (c *checker) pauseOffsets() time.Duration { return 2 * c.h.plan.skew() }

// pausedNotRun: 3c, no scheduled handler of a job starts while a pause of the job
// is in force on every clock (from PauseSlack after it was stored until its end),
// takeovers included.
func (c *checker) pausedNotRun() {
	h := c.h
	pauses := slices.Clone(c.rec.pauses)
	slices.SortStableFunc(pauses, func(a, b pauseRec) int { return cmp.Compare(a.from, b.from) })
	for i, p := range pauses {
		end := p.until - c.pauseOffsets()
		for _, q := range pauses[i+1:] {
			if q.job == p.job { // a later pause of the job replaces this one
				end = min(end, q.from)
				break
			}
		}
		for _, hr := range c.byParent[p.job] {
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

// backoff is the delay the policy gives the retry after failed attempt n (no
// jitter), as scheduler.RetryPolicy computes it.
func backoff(p *scheduler.RetryPolicy, n int) time.Duration {
	d := p.Backoff
	for i := 1; i < n; i++ {
		if p.MaxBackoff > 0 && d >= p.MaxBackoff {
			break
		}
		d *= 2
	}
	if p.MaxBackoff > 0 {
		d = min(d, p.MaxBackoff)
	}
	return d
}

// retryable reports whether hr ended in a failure its job's policy retries: an
// error not marked NoRetry, or a timeout.
func retryable(hr *handlerRec) bool {
	return hr.result == endTimeout || hr.result == endFailed && hr.fate == FateError
}

// handlerOf is the handler that ran g's lease; nil if none did.
func (c *checker) handlerOf(g *grant) *handlerRec {
	for _, hr := range c.byKey[g.key] {
		if hr.fence == g.fence && hr.token == g.token {
			return hr
		}
	}
	return nil
}

// nextSlot is when the slot after k is due, since t0: for an entry, the latest
// next slot of its versions (an instance runs the slot with the version it
// follows).
func (c *checker) nextSlot(k key) time.Duration {
	if vs := c.versions(k.job); len(vs) > 0 {
		var next int64
		for _, v := range vs {
			next = max(next, nextOn(v.e, k.slot, c.jobs[k.job].offset()))
		}
		return time.UnixMilli(next).Sub(c.rec.t0)
	}
	return time.UnixMilli(k.slot + c.jobs[k.job].Interval.Milliseconds()).Sub(c.rec.t0)
}

// firstNextSlot is when the slot after k is due, since t0: for an entry, the
// earliest next slot of its versions.
func (c *checker) firstNextSlot(k key) time.Duration {
	next := c.nextSlot(k)
	for _, v := range c.versions(k.job) {
		next = min(next, time.UnixMilli(nextOn(v.e, k.slot, c.jobs[k.job].offset())).Sub(c.rec.t0))
	}
	return next
}

// retries: 7, a retry is stored only after a retryable failure (an error not
// marked NoRetry, or a timeout) of an attempt below the policy's Attempts. The
// window it asks for begins no earlier than the backoff after the handler
// returned and ends before the job's next slot by the clock of the instance
// that asked, counted from its call. The next attempt of a slot whose attempt
// stored a retry is that retry (answered Retried), granted in the window the
// store kept, by the store's clock; no other attempt is answered Retried.
func (c *checker) retries() {
	h := c.h
	var slack time.Duration
	if c.rec.timing == Bounded {
		slack = h.w.StoreSlack
	}
	for k, gs := range c.rec.grants {
		j := c.jobs[k.job]
		for i, g := range gs {
			if g.retried && (i == 0 || gs[i-1].retry == nil) {
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) was answered Retried, but the attempt before it stored no retry",
					k.job, h.rel(k.slot), g.attempt, g.inst)
			}
			// The attempt after a stored retry is its grant, unless a claim
			// ended that attempt paused without granting it, or a backfill
			// reopened the slot after the retry was ended.
			if i > 0 && gs[i-1].retry != nil && (gs[i-1].retry.stored || g.retried) && g.attempt == gs[i-1].attempt+1 && !g.reopened {
				c.seen["retries granted"]++
				c.retryGranted(k, gs[i-1], g, slack)
			}
			rt := g.retry
			if rt == nil {
				continue
			}
			c.seen["retries stored"]++
			hr := c.handlerOf(g)
			switch {
			case j.Retry == nil:
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) stored a retry, but the job has no retry policy", k.job, h.rel(k.slot), g.attempt, g.inst)
				continue
			case g.attempt >= j.Retry.Attempts:
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) stored a retry, though the policy allows %d attempts in all",
					k.job, h.rel(k.slot), g.attempt, g.inst, j.Retry.Attempts)
			case hr == nil:
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) stored a retry, but no handler ran its lease", k.job, h.rel(k.slot), g.attempt, g.inst)
				continue
			case !retryable(hr):
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) stored a retry, but its handler %s", k.job, h.rel(k.slot), g.attempt, g.inst, hr.how)
			}
			if c.rec.timing == Exact && rt.call > hr.end {
				c.seen["retries stored by a later try"]++
			}
			if hr.result == endTimeout {
				c.seen["timeouts retried"]++
			}
			// By the asking instance's clock, the window it sends is [call +
			// delay, call + delay + within].
			if from, want := rt.call+rt.delay, hr.end+backoff(j.Retry, g.attempt); from+slack < want {
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) ended at %s and asked for its retry from %s, before its backoff of %v",
					k.job, h.rel(k.slot), g.attempt, g.inst, at(hr.end), at(from), backoff(j.Retry, g.attempt))
			}
			// A backfilled slot's retries, and a past slot's, are bounded by
			// the policy alone.
			if by, next := rt.call+rt.delay+rt.within, c.nextSlot(k)-hr.in.offset; !g.backfill && c.firstNextSlot(k)-hr.in.offset > hr.end && by > next+slack {
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) asked at %s for a retry until %s, after the next slot (%s by its clock)",
					k.job, h.rel(k.slot), g.attempt, g.inst, at(rt.call), at(by), at(next))
			}
		}
	}
}

// retryGranted: 7, g is the retry prev stored, granted in its window.
func (c *checker) retryGranted(k key, prev, g *grant, slack time.Duration) {
	h := c.h
	rt := prev.retry
	if !g.retried {
		c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) followed attempt %d's stored retry, but was not answered Retried",
			k.job, h.rel(k.slot), g.attempt, g.inst, prev.attempt)
	}
	// Exact: the store applied both calls when the record saw them. Bounded:
	// the retry was applied after its send, the claim before its answer and
	// after its send, and the retry before its answer.
	from, by, won, wonLate := prev.retryFrom(), prev.retryBy(), g.at, g.at
	if c.rec.timing == Bounded {
		from, by, won, wonLate = rt.sent+rt.delay, rt.seen+rt.delay+rt.within, g.at, g.sent
	}
	if won+slack < from {
		c.add("7-retry", []key{k}, "", "%s slot %s: retry attempt %d (%s) was granted at %s, before its stored retry time %s",
			k.job, h.rel(k.slot), g.attempt, g.inst, at(won), at(from))
	}
	if wonLate > by+slack {
		c.add("7-retry", []key{k}, "", "%s slot %s: retry attempt %d (%s) was granted at %s, after its stored window ended at %s",
			k.job, h.rel(k.slot), g.attempt, g.inst, at(wonLate), at(by))
	}
}

// retryMargin is how much room a retry's window needs for retriesMade to expect
// it claimed: the scheduler claims a stored retry a moment after its time.
const retryMargin = 20 * time.Millisecond

// retriesMade: 7, in the quiet phase (no faults, every instance up) a retryable
// failure of an attempt below the policy's Attempts, whose retry comes before
// the job's next slot by its instance's clock, stores its retry, and the retry
// is granted: a slot that fails every attempt runs Attempts attempts. Jobs that
// forbid overlap (a retry waits while another slot holds its lease) and slots
// that a pause of the job or of the holder's heartbeats reaches are left out.
func (c *checker) retriesMade() {
	h := c.h
	for k, hs := range c.byKey {
		j := c.jobs[k.job]
		if j.Retry == nil || j.Exclusive() || len(c.versions(k.job)) > 1 {
			continue // a changed entry's next slot depends on the version its instance ran
		}
		for _, hr := range hs {
			n := hr.attempt
			if !retryable(hr) || n >= j.Retry.Attempts || hr.start < h.quietAt+time.Second || hr.in.paused() > hr.start-time.Second {
				continue
			}
			next := c.nextSlot(k) - hr.in.offset
			due := hr.end + backoff(j.Retry, n)
			if next-due <= retryMargin || next+j.Lease+time.Second > h.endAt || c.pausedBetween(k.job, hr.start, next) {
				continue
			}
			g := c.grantOf(hr)
			if g == nil || g.token != hr.token {
				continue // 5-fence says so
			}
			c.seen["quiet-phase failures expected to retry"]++
			if n == j.Retry.Attempts-1 {
				c.seen["quiet-phase last retries expected"]++
			}
			if g.retry == nil {
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) failed at %s (%s) in the quiet phase and stored no retry, though one fitted at %s before the next slot (%s by its clock)",
					k.job, h.rel(k.slot), n, hr.in.name, at(hr.end), hr.how, at(due), at(next))
				continue
			}
			var followed bool
			for _, g2 := range c.rec.grants[k] {
				followed = followed || g2.fence > g.fence
			}
			if !followed && g.retry.within > retryMargin {
				c.add("7-retry", []key{k}, "", "%s slot %s: attempt %d (%s) stored its retry (from %s, within %v) in the quiet phase, and nobody was granted it",
					k.job, h.rel(k.slot), n, hr.in.name, at(g.retry.call+g.retry.delay), g.retry.within)
			}
		}
	}
}

// pausedBetween reports whether a stored pause of job was in force at some time
// in [from, to], on some instance's clock.
func (c *checker) pausedBetween(job string, from, to time.Duration) bool {
	for _, p := range c.rec.pauses {
		if p.job == backend.JobOf(job) && p.from-c.h.w.PauseSlack <= to && p.until+c.pauseOffsets() >= from {
			return true
		}
	}
	return false
}

// absurdRefused: 11, a scheduler refuses at registration a job option value, or
// a Config, that no job can mean (AbsurdValues).
func (c *checker) absurdRefused() {
	for _, a := range c.rec.absurd {
		c.seen["absurd values tried"]++
		if a.err == nil {
			c.add("11-absurd-refused", nil, a.inst, "%s: %s was accepted", a.inst, a.name)
		}
	}
}

// instances are every incarnation of every instance slot that ran a handler or
// was started (under rec.mu: the handlers' and the stops').
func (c *checker) instances() []*inst {
	seen := map[*inst]bool{}
	var out []*inst
	for _, st := range c.rec.stops {
		if !seen[st.in] {
			seen[st.in] = true
			out = append(out, st.in)
		}
	}
	return out
}

// notAgain: 1c, a manual run is never granted again (its takeover ends it
// lost); 1d, a run a later slot asked to end (cancel-other) is never granted
// again, but reopened by a backfill.
func (c *checker) notAgain() {
	h := c.h
	for k, gs := range c.rec.grants {
		if len(gs) == 0 {
			continue
		}
		if gs[0].manual && len(gs) > 1 {
			c.add("1c-manual-once", []key{k}, "", "%s manual slot %s: attempt %d was granted to %s after %s's manual run",
				k.job, h.rel(k.slot), gs[1].attempt, gs[1].inst, gs[0].inst)
		}
		asked, ok := c.rec.cancelAsked[k]
		if !ok {
			continue
		}
		reopened := false // a backfill's reopen carries no request of the run before
		// The first grant made the run a request could be stored on: it came
		// before, whatever order the record saw two calls of one instant in.
		for _, g := range gs[1:] {
			after := g.atSeq > asked.seq
			if c.rec.timing == Bounded {
				after = g.sent > asked.at
			}
			reopened = reopened || after && g.reopened
			if after && !reopened {
				c.add("1d-asked-to-end", []key{k}, "", "%s slot %s: attempt %d was granted to %s at %s, after a later slot asked its run to end",
					k.job, h.rel(k.slot), g.attempt, g.inst, at(g.at))
			}
		}
	}
}
