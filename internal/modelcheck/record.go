package modelcheck

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// key is one (job, slot).
type key struct {
	job  string
	slot int64 // unix ms; 0: not about one slot
}

type entry struct {
	at   time.Duration
	inst string
	key  key
	text string
}

type handlerRec struct {
	in       *inst
	key      key
	manual   bool
	token    string
	fence    uint64
	attempt  int
	start    time.Duration
	end      time.Duration
	ended    bool
	how      string
	fate     AttemptFate // what the handler meant to do
	result   endKind     // how it ended
	payload  string      // Run.Payload: an entry's
	backfill bool        // Run.Backfill

	// startSeq and endSeq order the start and the end among everything recorded,
	// also between records at the same instant.
	startSeq, endSeq uint64
}

// endKind is how a handler ended.
type endKind int

const (
	endOK        endKind = iota // returned nil
	endFailed                   // returned its failure (FateError, FateNoRetry)
	endTimeout                  // its context ended with the job's timeout
	endCancelled                // its context ended otherwise (Stop, a lost lease)
	endCrashed                  // its process crashed
)

// retryRec is a Retry the store applied to a lease: the failed attempt's slot is
// to be tried again.
type retryRec struct {
	// call is when the scheduler called Retry (it computes delay from its clock
	// then); seen is when the record saw the store apply it (Exact) or answer it
	// (Bounded), sent when the request left the faults (Bounded: it was applied
	// after).
	call, sent, seen time.Duration
	delay, within    time.Duration
	// stored: the store kept the slot for the retry (it finishes a run
	// instead when a later slot asked it to end, or its entry is gone), as
	// the view saw it at once; a grant answered Retried after it says so too.
	stored bool
}

// grant is one lease the store granted (a won claim with a new fence), with what
// the store applied to it afterwards, as far as the record can know.
type grant struct {
	key     key
	token   string
	inst    string
	fence   uint64
	attempt int
	at      time.Duration // the won answer was recorded
	atSeq   uint64
	sent    time.Duration // the won claim was sent (Bounded: it was applied after)

	// Exact: when the store would expire the lease, and when a release or a finish
	// ended it (0: none).
	expiry, release, finish time.Duration

	// Bounded: the earliest the lease can have ended in the store: a lease TTL
	// after the send of the last successful claim or heartbeat, or the send of the
	// release or finish that ended it.
	endLo time.Duration

	// finished is when a Finish of this lease was applied (Exact) or answered
	// (Bounded: applied by then); 0: none.
	finished time.Duration

	// retried: the store answered the won claim Retried (the previous attempt
	// stored a retry). retry is the first Retry of this lease the store
	// applied; nil: none.
	retried bool
	retry   *retryRec
	// reopened: the store answered the won claim Reopened (a slot finished
	// without running, or a backfill's rerun); manual and backfill, and the
	// entry incarnation, are the claim's.
	reopened, manual, backfill bool
	incarnation                uint64
}

// retryFrom and retryBy (Exact) are the window the store keeps for the retry g
// stored: by the store's clock, which under synctest is the record's.
func (g *grant) retryFrom() time.Duration { return g.retry.seen + g.retry.delay }
func (g *grant) retryBy() time.Duration   { return g.retry.seen + g.retry.delay + g.retry.within }

// end (Exact) is when the lease stopped being live in the store.
func (g *grant) end() time.Duration {
	e := g.expiry
	if g.release > 0 && g.release < e {
		e = g.release
	}
	if g.finish > 0 && g.finish < e {
		e = g.finish
	}
	return e
}

type save struct {
	key     key
	at      time.Duration
	inst    string
	status  backend.Status
	token   string
	attempt int
	manual  bool
}

// writeCall is one call of a write that completes a slot (a result, the claim that
// picks who records a slot that did not run), as its caller saw it.
type writeCall struct {
	in     *inst
	op     string
	key    key
	token  string
	status backend.Status
	at     time.Duration
	ok     bool
}

// pauseRec is a pause of job stored at from (Pause returned) that lasts until
// until, by the harness's clock (the pausing instance's Until less its offset).
type pauseRec struct {
	job         string
	from, until time.Duration
}

// skipRec is a claim answered overlap: the store stored the slot skipped.
type skipRec struct {
	key      key
	inst     string
	sent, at time.Duration
	seq      uint64 // buffered answers: the order they were recorded in
	// overlap is the claim's policy (a backfill's claim keeps out of the
	// way as OverlapSkip does, whatever the job's).
	overlap backend.OverlapPolicy
	// incarnation is the claim's entry incarnation.
	incarnation uint64
}

// limitObs is a store's answer to a claim that counts runs.
type limitObs struct {
	key  key
	inst string
	seq  uint64
	// counted: a first win (attempt 1, not retried), a paused slot reopened
	// (catch-up), or a buffered answer; limit: answered limit, or done with StatusLimit; failed: an error
	// or a late decision (the store may have counted the slot and not run it).
	counted, limit, failed bool
	// cut: the claim's process died during the call. A store that writes a
	// claim in more than one write may have counted the slot and lost the
	// count's mark, so its next claim counts the slot again.
	cut bool
	// reached: the answer said LimitReached.
	reached bool
	// sent and at are when the claim was sent and when its answer was
	// recorded: answers of one instant may be recorded in another order than
	// the store applied them.
	sent, at time.Duration
}

// absurdTry is an absurd value an instance's scheduler was given.
type absurdTry struct {
	inst, name string
	err        error
}

// askedLocked notes that k's run was asked to end, the first time. Under r.mu.
func (r *record) askedLocked(k key) {
	if _, ok := r.cancelAsked[k]; !ok {
		r.seq++
		r.cancelAsked[k] = seen{at: r.now(), seq: r.seq}
	}
}

// seen is when the record saw something, with its order.
type seen struct {
	at  time.Duration
	seq uint64
}

// frozen records that in freezes for d, and returns the record's order of it.
func (r *record) frozen(in *inst, d time.Duration) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	r.appendLocked(entry{at: r.now(), inst: in.name, text: fmt.Sprintf("FREEZE for %v: the process does nothing, its clock stands still", d)})
	return r.seq
}

// absurdTried records whether an absurd value was refused.
func (r *record) absurdTried(in *inst, name string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.absurd = append(r.absurd, absurdTry{inst: in.name, name: name, err: err})
	r.appendLocked(entry{at: r.now(), inst: in.name, text: fmt.Sprintf("ABSURD %s → %v", name, errText(err))})
}

// settleRec is a Settle the store answered.
type settleRec struct {
	key  key
	inst string
	s    backend.Settlement
	err  error
	at   time.Duration
	seq  uint64
}

// decision is a claim answered with a decision stored under its token.
type decision struct {
	key     key
	inst    string
	token   string
	outcome backend.ClaimOutcome
	// status is the answer's (late or missed for OutcomeLate).
	status backend.Status
	at     time.Duration
	seq    uint64
}

type stop struct {
	in       *inst
	called   time.Duration
	deadline time.Duration
	returned time.Duration
	retSeq   uint64
	done     bool
	err      error
	reap     bool
}

// record is everything that happened in one seed, with its time since t0.
type record struct {
	t0     time.Time
	timing Timing
	ttl    func(time.Duration) time.Duration

	mu       sync.Mutex
	seq      uint64
	entries  []entry
	handlers []*handlerRec
	grants   map[key][]*grant
	saves    []save
	writes   []writeCall
	pauses   []pauseRec
	skips    []skipRec
	// buffers are the claims answered buffered.
	buffers []skipRec
	// limits are the answers to claims that count runs (RunClaim.Counts), in
	// the order they were recorded.
	limits []limitObs
	// decisions are the claims the store answered with a decision of its own
	// for the claim's token: the slot skipped, late, limit or paused, or
	// buffered (by Settler stores, recorded under that token).
	decisions []decision
	// settles are the Settle calls the store answered.
	settles []settleRec
	// told counts the EventDeadlineMissed of each slot, by instance.
	told map[key]map[string]int
	// toldExcluded counts the EventExcluded of each slot, by instance.
	toldExcluded map[key]map[string]int
	// cals are the calendar writes (ActCalendar), in the order called.
	cals []calWrite
	// hits are the faults that struck each job's calls (coverage.go).
	hits map[string]map[string]bool
	// absurd are the absurd values tried at instance starts (rule 11).
	absurd []absurdTry
	// cancelAsked are the runs a later slot's claim asked to end
	// (OverlapCancelOther), or whose heartbeat was answered so: the first
	// time the record saw that, and its order.
	cancelAsked map[key]seen
	// mayBeAsked are the runs of earlier slots a claim that asked cancelAsked's
	// to end may have asked too: a run that ends lost may end so.
	mayBeAsked map[key]bool
	stops      []*stop

	entryRecord
}

func newRecord(t0 time.Time, w *World) *record {
	return &record{t0: t0, timing: w.Timing, ttl: w.leaseTTL, grants: map[key][]*grant{}, cancelAsked: map[key]seen{}, mayBeAsked: map[key]bool{}, entryRecord: newEntryRecord()}
}

func (r *record) now() time.Duration { return time.Since(r.t0) }

// maxEntries bounds the trace (a livelocked seed would grow it without end).
const maxEntries = 200_000

func (r *record) add(e entry) {
	r.mu.Lock()
	r.appendLocked(e)
	r.mu.Unlock()
}

func (r *record) appendLocked(e entry) {
	if len(r.entries) >= maxEntries {
		r.entries = append(r.entries[:0], r.entries[maxEntries/2:]...)
	}
	r.entries = append(r.entries, e)
}

func (r *record) global(format string, args ...any) {
	r.add(entry{at: r.now(), text: fmt.Sprintf(format, args...)})
}

func (r *record) instLog(in *inst, format string, args ...any) {
	r.add(entry{at: r.now(), inst: in.name, text: fmt.Sprintf(format, args...)})
}

func slotKey(job string, slot time.Time) key {
	k := key{job: job}
	if !slot.IsZero() {
		k.slot = slot.UnixMilli()
	}
	return k
}

func (r *record) slotLog(in *inst, job string, slot time.Time, format string, args ...any) {
	r.add(entry{at: r.now(), inst: in.name, key: slotKey(job, slot), text: fmt.Sprintf(format, args...)})
}

// running lists the instances whose handler of a slot of name (a run name) has
// not returned.
func (r *record) running(name string) []*inst {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*inst
	for _, hr := range r.handlers {
		if hr.key.job == name && !hr.ended && !slices.Contains(out, hr.in) {
			out = append(out, hr.in)
		}
	}
	return out
}

func (r *record) handlerStart(in *inst, run scheduler.Run, fate AttemptFate) *handlerRec {
	hr := &handlerRec{in: in, key: key{runName(run), run.Slot.UnixMilli()}, manual: run.Manual, token: run.Token, fence: run.Fence, attempt: run.Attempt, fate: fate, payload: string(run.Payload), backfill: run.Backfill}
	r.mu.Lock()
	r.seq++
	hr.start, hr.startSeq = r.now(), r.seq
	r.handlers = append(r.handlers, hr)
	r.appendLocked(entry{at: hr.start, inst: in.name, key: hr.key, text: fmt.Sprintf("HANDLER START attempt=%d fence=%d tok=%s manual=%v", run.Attempt, run.Fence, tok(run.Token), run.Manual)})
	r.mu.Unlock()
	return hr
}

func (r *record) handlerEnd(hr *handlerRec, result endKind, how string) {
	r.mu.Lock()
	r.seq++
	hr.end, hr.endSeq, hr.ended, hr.how, hr.result = r.now(), r.seq, true, how, result
	r.appendLocked(entry{at: hr.end, inst: hr.in.name, key: hr.key, text: fmt.Sprintf("HANDLER END attempt=%d fence=%d: %s", hr.attempt, hr.fence, how)})
	r.mu.Unlock()
}

func (r *record) addStop(st *stop) {
	r.mu.Lock()
	r.stops = append(r.stops, st)
	r.mu.Unlock()
}

func (r *record) stopReturned(st *stop, err error) {
	r.mu.Lock()
	r.seq++
	st.returned, st.retSeq, st.done, st.err = r.now(), r.seq, true, err
	r.mu.Unlock()
	r.instLog(st.in, "STOP returned: %v", err)
}

// latestGrant is the newest grant of k; nil if none. Under r.mu.
func (r *record) latestGrant(k key) *grant {
	gs := r.grants[k]
	if len(gs) == 0 {
		return nil
	}
	return gs[len(gs)-1]
}

// tokenGrant is the newest grant held by token (a token that lost its lease can
// win the slot again, with a new fence); nil if none. Under r.mu.
func (r *record) tokenGrant(k key, token string) *grant {
	gs := r.grants[k]
	for i := len(gs) - 1; i >= 0; i-- {
		if gs[i].token == token {
			return gs[i]
		}
	}
	return nil
}

// The store calls below are recorded when the store applied them (Exact) or when
// their answer came (Bounded, with when they were sent), whatever the caller was
// told afterwards.

// answer is how a store call came back through the faults: the store's error,
// when the call was sent, and the fault's note for the trace.
type answer struct {
	err   error
	sent  time.Duration
	fault string
}

func (r *record) claimApplied(in *inst, rc backend.RunClaim, res backend.ClaimResult, a answer) {
	err, sent, fault := a.err, a.sent, a.fault
	k := key{rc.Job, rc.Slot.UnixMilli()}
	var txt string
	if err != nil {
		txt = fmt.Sprintf("store claim tok=%s takeoverOnly=%v → error %v%s", tok(rc.Token), rc.TakeoverOnly, err, fault)
	} else {
		exp := ""
		if r.timing == Exact && !res.Expires.IsZero() {
			exp = fmt.Sprintf(" expires=%s", at(res.Expires.Sub(r.t0)))
		}
		if res.Status != "" {
			exp += " status=" + string(res.Status)
		}
		if res.Retried {
			exp += " retried"
		}
		if res.Outcome == backend.OutcomeRetry {
			exp += " retryIn=" + res.RetryIn.String()
		}
		txt = fmt.Sprintf("store claim tok=%s takeoverOnly=%v → %s attempt=%d fence=%d holder=%s%s%s",
			tok(rc.Token), rc.TakeoverOnly, res.Outcome, res.Attempt, res.Fence, res.Holder, exp, fault)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.entryClaimLocked(in, rc, now)
	if err == nil && res.Outcome == backend.OutcomeOverlap {
		r.skips = append(r.skips, skipRec{key: k, inst: in.name, sent: sent, at: now, overlap: rc.Overlap})
	}
	if err == nil && res.Outcome == backend.OutcomeBuffered {
		r.seq++
		r.buffers = append(r.buffers, skipRec{key: k, inst: in.name, sent: sent, at: now, seq: r.seq, overlap: rc.Overlap, incarnation: rc.Incarnation})
	}
	if err == nil && res.Outcome == backend.OutcomeRunning && !res.WaitsFor.IsZero() && rc.Overlap == backend.OverlapCancelOther {
		// The answer names the newest run asked to end; any busy run of an
		// earlier slot may have been asked too.
		waits := res.WaitsFor.UnixMilli()
		r.askedLocked(key{rc.Job, waits})
		for g := range r.grants {
			if g.job == rc.Job && g.slot < waits {
				r.mayBeAsked[g] = true
			}
		}
	}
	if errors.Is(err, errCutMidCall) {
		// A lease it may have written is completed, and recorded, by the
		// store: its token is an attempt's.
		r.seq++
		r.decisions = append(r.decisions, decision{key: k, inst: in.name, token: rc.Token, at: now, seq: r.seq})
	}
	switch res.Outcome {
	case backend.OutcomeOverlap, backend.OutcomeLate, backend.OutcomeLimit, backend.OutcomePaused, backend.OutcomeBuffered, backend.OutcomeExcluded:
		if err == nil {
			r.seq++
			r.decisions = append(r.decisions, decision{key: k, inst: in.name, token: rc.Token, outcome: res.Outcome, status: res.Status, at: now, seq: r.seq})
		}
	}
	if rc.Counts() {
		r.seq++
		r.limits = append(r.limits, limitObs{key: k, inst: in.name, seq: r.seq, sent: sent, at: now,
			// A slot stored paused counts when catch-up reopens it (unless it
			// was counted before: the slots are counted once each).
			counted: err == nil && (res.Outcome == backend.OutcomeBuffered || res.Outcome == backend.OutcomeWon && !res.Retried && (res.Attempt == 1 || res.Reopened)),
			limit:   err == nil && (res.Outcome == backend.OutcomeLimit || res.Outcome == backend.OutcomeDone && res.Status == backend.StatusLimit),
			failed:  err != nil || res.Outcome == backend.OutcomeLate, reached: err == nil && res.LimitReached,
			cut: errors.Is(err, errCutMidCall)})
	}
	if err == nil && res.Outcome == backend.OutcomeWon {
		if g := r.grantFor(k, res.Fence); g == nil {
			r.seq++
			g = &grant{key: k, token: rc.Token, inst: in.name, fence: res.Fence, attempt: res.Attempt, at: now, atSeq: r.seq, sent: sent, retried: res.Retried,
				reopened: res.Reopened, manual: rc.Manual, backfill: rc.Backfill || res.Backfill, incarnation: rc.Incarnation}
			switch r.timing {
			case Exact:
				g.expiry = res.Expires.Sub(r.t0)
			case Bounded:
				g.endLo = sent + r.ttl(rc.Lease)
			}
			r.grants[k] = append(r.grants[k], g)
		} else if exp := res.Expires.Sub(r.t0); r.timing == Exact && exp > g.expiry {
			g.expiry = exp
		}
	}
	r.appendLocked(entry{at: now, inst: in.name, key: k, text: txt})
}

// grantFor is the grant a won answer with fence repeats, if any: Exact, the newest
// grant if it has that fence; Bounded (answers may be seen out of order), any
// grant with that fence. Under r.mu.
func (r *record) grantFor(k key, fence uint64) *grant {
	if r.timing == Exact {
		if g := r.latestGrant(k); g != nil && g.fence == fence {
			return g
		}
		return nil
	}
	var found *grant
	for _, g := range r.grants[k] {
		if g.fence == fence {
			found = g
		}
	}
	return found
}

func (r *record) heartbeatApplied(in *inst, run backend.RunKey, lease time.Duration, a answer) {
	token, err := run.Token, a.err
	k := key{run.Job, run.Slot.UnixMilli()}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	// A heartbeat answered a cancel request extended the lease too.
	extended := err == nil || errors.Is(err, backend.ErrCancelRequested)
	if errors.Is(err, backend.ErrCancelRequested) {
		r.askedLocked(k)
	}
	if g := r.tokenGrant(k, token); extended && g != nil {
		switch r.timing {
		case Exact:
			g.expiry = now + lease
		case Bounded:
			g.endLo = max(g.endLo, a.sent+r.ttl(lease))
		}
	}
	r.appendLocked(entry{at: now, inst: in.name, key: k, text: fmt.Sprintf("store heartbeat tok=%s → %v%s", tok(token), errText(err), a.fault)})
}

// endApplied records a release, a finish or a retry (op) that ended run's lease.
// A retry ends the lease like a release (the store keeps the slot unfinished for
// the retry, see retryApplied).
func (r *record) endApplied(in *inst, op string, run backend.RunKey, status backend.Status, a answer) {
	k := key{run.Job, run.Slot.UnixMilli()}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if a.err == nil {
		r.endLocked(k, run.Token, op, now, a.sent)
	}
	txt := fmt.Sprintf("store %s tok=%s", op, tok(run.Token))
	if op == "finish" {
		txt += " status=" + string(status)
	}
	r.appendLocked(entry{at: now, inst: in.name, key: k, text: fmt.Sprintf("%s → %v%s", txt, errText(a.err), a.fault)})
}

// endLocked notes that the store applied op (release, finish, retry) of token's
// lease of k at now, sent at sent. Under r.mu.
func (r *record) endLocked(k key, token, op string, now, sent time.Duration) {
	// The lease it ended is found by its token, not taken to be the newest: its
	// answer (Bounded), or its record at the same virtual instant (Exact: the two
	// answers race to the record), can come after the takeover it made way for.
	g := r.tokenGrant(k, token)
	if g == nil {
		return
	}
	if op == "finish" && g.finished == 0 {
		g.finished = now
	}
	switch {
	case r.timing == Bounded:
		g.endLo = min(g.endLo, sent)
	case (op == "release" || op == "retry") && now < g.end():
		g.release = now
	case op == "finish" && g.finish == 0:
		g.finish = now
	}
}

// retryApplied records a Retry of run's lease in window w that the store
// applied (a repeat changes nothing: the first stands), and ends the lease
// like a release.
func (r *record) retryApplied(in *inst, run backend.RunKey, w backend.RetryWindow, seen settleSeen, fault string) {
	k := key{run.Job, run.Slot.UnixMilli()}
	r.mu.Lock()
	if g := r.tokenGrant(k, run.Token); seen.err == nil && g != nil && g.retry == nil {
		g.retry = &retryRec{call: seen.call, sent: seen.sent, seen: r.now(), delay: w.Delay, within: w.Within, stored: seen.retryStored}
	}
	r.mu.Unlock()
	r.endApplied(in, "retry", run, "", answer{err: seen.err, sent: seen.sent,
		fault: fmt.Sprintf(" (delay %v, within %v; stored %v)%s", w.Delay, w.Within, seen.retryStored, fault)})
}

// settleSeen is what the faulty view saw of one Settle the store answered.
type settleSeen struct {
	err        error
	call, sent time.Duration
	// retryStored: the store kept the slot for the retry it asked for.
	retryStored bool
}

// settleApplied records a Settle the store answered, like the call it
// replaces: a finish, a hand-over (a release), or a retry.
func (r *record) settleApplied(in *inst, s backend.Settlement, seen settleSeen, fault string) {
	k := key{s.Key.Job, s.Key.Slot.UnixMilli()}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	op, txt := "finish", ""
	switch {
	case s.Retry != nil:
		op, txt = "retry", fmt.Sprintf(" retry (delay %v, within %v; stored %v)", s.Retry.Delay, s.Retry.Within, seen.retryStored)
	case s.HandOver:
		op, txt = "release", " hand-over"
	}
	// A settle cut by its process's death may be applied: the store
	// completes it (the next grant tells whether the retry was kept).
	applied := seen.err == nil || errors.Is(seen.err, errCutMidCall)
	if g := r.tokenGrant(k, s.Key.Token); applied && g != nil && s.Retry != nil && g.retry == nil {
		g.retry = &retryRec{call: seen.call, sent: seen.sent, seen: now, delay: s.Retry.Delay, within: s.Retry.Within, stored: seen.retryStored}
	}
	if applied {
		r.endLocked(k, s.Key.Token, op, now, seen.sent)
	}
	r.seq++
	r.settles = append(r.settles, settleRec{key: k, inst: in.name, s: s, err: seen.err, at: now, seq: r.seq})
	r.appendLocked(entry{at: now, inst: in.name, key: k, text: fmt.Sprintf("store settle tok=%s status=%s%s gone=%v inc=%d → %v%s",
		tok(s.Key.Token), s.Status, txt, s.EntryGone, s.Incarnation, errText(seen.err), fault)})
}

func (r *record) saveApplied(in *inst, job string, res backend.StoredResult, err error, fault string) {
	k := key{job, res.Slot.UnixMilli()}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if err == nil {
		r.saves = append(r.saves, save{key: k, at: now, inst: in.name, status: res.Status, token: res.Token, attempt: res.Attempt, manual: res.Manual})
	}
	r.appendLocked(entry{at: now, inst: in.name, key: k, text: fmt.Sprintf("history save tok=%s for %s attempt=%d status=%s manual=%v → %v%s", tok(res.Token), res.Instance, res.Attempt, res.Status, res.Manual, errText(err), fault)})
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "error " + err.Error()
}

// writeCalled records a call of a write that completes a slot, as its caller saw
// it: ok, or failed (whatever the store applied).
func (r *record) writeCalled(in *inst, op string, run backend.RunKey, status backend.Status, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, writeCall{in: in, op: op, key: key{run.Job, run.Slot.UnixMilli()}, token: run.Token, status: status, at: r.now(), ok: err == nil})
}

// pauseStored records a pause asked for at called, stored when err is nil.
func (r *record) pauseStored(in *inst, job string, called, until time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if err == nil {
		r.pauses = append(r.pauses, pauseRec{job: job, from: now, until: until})
	}
	r.appendLocked(entry{at: now, inst: in.name, text: fmt.Sprintf("PAUSE JOB %s (called at %s) until %s → %v", job, at(called), at(until), errText(err))})
}

// calWrite is a write of a job's calendar: called and answered at, stored
// when err is nil (and maybe when not).
type calWrite struct {
	job        string
	drop       bool
	called, at time.Duration
	err        error
}

// calendarWritten records a calendar write of job called at called.
func (r *record) calendarWritten(in *inst, job string, drop bool, called time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.cals = append(r.cals, calWrite{job: job, drop: drop, called: called, at: now, err: err})
	r.appendLocked(entry{at: now, inst: in.name, text: fmt.Sprintf("CALENDAR of %s (drop %v, called at %s) → %v", job, drop, at(called), errText(err))})
}

// excludedTold notes inst's EventExcluded of job's slot.
func (r *record) excludedTold(job string, slot time.Time, inst string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.toldExcluded == nil {
		r.toldExcluded = map[key]map[string]int{}
	}
	k := key{job, slot.UnixMilli()}
	if r.toldExcluded[k] == nil {
		r.toldExcluded[k] = map[string]int{}
	}
	r.toldExcluded[k][inst]++
}

// deadlineTold notes inst's EventDeadlineMissed of job's slot.
func (r *record) deadlineTold(job string, slot time.Time, inst string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.told == nil {
		r.told = map[key]map[string]int{}
	}
	k := key{job, slot.UnixMilli()}
	if r.told[k] == nil {
		r.told[k] = map[string]int{}
	}
	r.told[k][inst]++
}
