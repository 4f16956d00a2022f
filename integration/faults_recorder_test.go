package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// The ledger of the fault tests (leader loss, lost acknowledgements, partitioned
// replica): every handler execution and the events that tell what became of the
// slots that did not run. The fault helpers are spread over faults_*_test.go and
// proxy_helpers_test.go; every name in them starts with "fault" so that it cannot
// collide with the helpers of the other integration tests.

// faultExec is one handler execution: one attempt of one slot on one instance.
type faultExec struct {
	run   scheduler.Run
	start time.Time
	end   time.Time // zero while the handler runs
	// cancelled is when the handler saw its context end (zero if it returned on its
	// own), and cause is context.Cause then.
	cancelled time.Time
	cause     error
}

// faultKey names one slot of one job.
type faultKey struct {
	job  string
	slot int64 // Unix ms
}

func (k faultKey) String() string {
	return fmt.Sprintf("%s@%s", k.job, time.UnixMilli(k.slot).UTC().Format("15:04:05.000"))
}

// faultRecorder is the ledger of a fault test, shared by all its instances: every
// handler start and end, and the scheduler events that tell what happened to slots
// that did not run.
type faultRecorder struct {
	mu    sync.Mutex
	execs map[faultKey][]*faultExec // in start order
	// won counts EventClaimed per (slot, attempt): exactly one winner each.
	won map[faultKey]map[int]int
	// claimedTok is the attempt each winning token claimed; unrun counts, per
	// (slot, attempt), won leases released before their handler started (a win
	// whose lease was too old to run under and could not be renewed).
	claimedTok map[faultKey]map[string]int
	unrun      map[faultKey]map[int]int
	late       map[faultKey]int // EventLate, all instances
	skipped    map[faultKey]int // EventSkipped, all instances
	// lostNone counts EventLost with outcome none: a backup found nothing to take over.
	lostNone   map[faultKey]int
	takeovers  int            // EventTakeover
	leaseLost  int            // EventLeaseLost
	errsByOp   map[string]int // EventBackendError by Op
	errSamples map[string][]string
	claimErrs  map[faultKey]int // claim errors by slot
	// claimErrBy counts claim errors by slot and instance; wonAfterErr counts wins
	// by an instance whose earlier claim of the same slot failed (a retry that won).
	claimErrBy  map[faultKey]map[string]int
	wonAfterErr int
	// trace keeps every event of every slot, for failure messages.
	trace map[faultKey][]string
}

func newFaultRecorder() *faultRecorder {
	return &faultRecorder{
		execs:      map[faultKey][]*faultExec{},
		won:        map[faultKey]map[int]int{},
		claimedTok: map[faultKey]map[string]int{},
		unrun:      map[faultKey]map[int]int{},
		late:       map[faultKey]int{},
		skipped:    map[faultKey]int{},
		lostNone:   map[faultKey]int{},
		errsByOp:   map[string]int{},
		errSamples: map[string][]string{},
		claimErrs:  map[faultKey]int{},
		claimErrBy: map[faultKey]map[string]int{},
		trace:      map[faultKey][]string{},
	}
}

// onEvent is every instance's Config.OnEvent. It only counts, under a mutex.
func (r *faultRecorder) onEvent(e scheduler.Event) {
	k := faultKey{e.Job, e.Slot.UnixMilli()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Kind != scheduler.EventScheduled {
		line := fmt.Sprintf("%s %s %s", e.At.Format("15:04:05.000"), e.Instance, e.Kind)
		if e.Outcome != "" {
			line += " " + string(e.Outcome)
		}
		if e.Attempt > 0 {
			line += fmt.Sprintf(" attempt %d", e.Attempt)
		}
		if e.Status != "" {
			line += " " + string(e.Status)
		}
		if e.Op != "" {
			line += " op " + e.Op
		}
		if e.Err != nil {
			line += ": " + e.Err.Error()
		}
		r.trace[k] = append(r.trace[k], line)
	}
	switch e.Kind {
	case scheduler.EventClaimed:
		if r.won[k] == nil {
			r.won[k] = map[int]int{}
		}
		r.won[k][e.Attempt]++
		if r.claimedTok[k] == nil {
			r.claimedTok[k] = map[string]int{}
		}
		r.claimedTok[k][e.Token] = e.Attempt
		if r.claimErrBy[k][e.Instance] > 0 {
			r.wonAfterErr++
		}
	case scheduler.EventLate:
		r.late[k]++
	case scheduler.EventSkipped:
		r.skipped[k]++
	case scheduler.EventLost:
		if e.Outcome == scheduler.OutcomeNone {
			r.lostNone[k]++
		}
	case scheduler.EventTakeover:
		r.takeovers++
	case scheduler.EventLeaseLost:
		r.leaseLost++
		if a, ok := r.claimedTok[k][e.Token]; ok && !r.startedLocked(k, e.Token) {
			if r.unrun[k] == nil {
				r.unrun[k] = map[int]int{}
			}
			r.unrun[k][a]++
		}
	case scheduler.EventBackendError:
		r.errsByOp[e.Op]++
		if e.Op == "claim" {
			r.claimErrs[k]++
			if r.claimErrBy[k] == nil {
				r.claimErrBy[k] = map[string]int{}
			}
			r.claimErrBy[k][e.Instance]++
		}
		if len(r.errSamples[e.Op]) < 3 && e.Err != nil {
			r.errSamples[e.Op] = append(r.errSamples[e.Op], fmt.Sprintf("%s %s: %v", e.Instance, k, e.Err))
		}
	}
}

// handler returns a handler that records its execution and works for a random
// duration in [minWork, maxWork], or until its context ends (a well-behaved handler:
// it stops at once when told its lease is lost).
func (r *faultRecorder) handler(minWork, maxWork time.Duration) scheduler.Handler {
	return func(ctx context.Context, run scheduler.Run) error {
		x := &faultExec{run: run, start: time.Now()}
		k := faultKey{run.Job, run.Slot.UnixMilli()}
		r.mu.Lock()
		r.execs[k] = append(r.execs[k], x)
		r.mu.Unlock()
		t := time.NewTimer(minWork + rand.N(maxWork-minWork+1))
		defer t.Stop()
		select {
		case <-t.C:
			r.mu.Lock()
			x.end = time.Now()
			r.mu.Unlock()
			return nil
		case <-ctx.Done():
			now := time.Now()
			r.mu.Lock()
			x.end, x.cancelled, x.cause = now, now, context.Cause(ctx)
			r.mu.Unlock()
			return context.Cause(ctx)
		}
	}
}

// runningOn returns a slot of job whose handler runs on instance and started at
// least minAge ago, or the zero key.
func (r *faultRecorder) runningOn(instance, job string, minAge time.Duration) faultKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, xs := range r.execs {
		for _, x := range xs {
			if k.job == job && x.run.Instance == instance && x.end.IsZero() && time.Since(x.start) >= minAge {
				return k
			}
		}
	}
	return faultKey{}
}

// resolved reports whether k ran or was reported late or skipped by some instance.
func (r *faultRecorder) resolved(k faultKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.execs[k]) > 0 || r.late[k] > 0 || r.skipped[k] > 0
}

// duplicates lists every (slot, attempt) whose handler started more than once.
func (r *faultRecorder) duplicates() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, xs := range r.execs {
		seen := map[int][]string{}
		for _, x := range xs {
			seen[x.run.Attempt] = append(seen[x.run.Attempt], x.run.Instance)
		}
		for a, who := range seen {
			if len(who) > 1 {
				out = append(out, fmt.Sprintf("%s attempt %d started %d times (%s)", k, a, len(who), strings.Join(who, ", ")))
			}
		}
	}
	sort.Strings(out)
	return out
}

// multipleWinners lists every (slot, attempt) that more than one claim won.
func (r *faultRecorder) multipleWinners() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, byAttempt := range r.won {
		for a, n := range byAttempt {
			if n > 1 {
				out = append(out, fmt.Sprintf("%s attempt %d won %d times", k, a, n))
			}
		}
	}
	sort.Strings(out)
	return out
}

// wins returns how many claims won each attempt of k.
func (r *faultRecorder) wins(k faultKey) map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]int{}
	for a, n := range r.won[k] {
		out[a] = n - r.unrun[k][a]
	}
	return out
}

// startedLocked reports whether token's handler started for k. Under r.mu.
func (r *faultRecorder) startedLocked(k faultKey, token string) bool {
	for _, x := range r.execs[k] {
		if x.run.Token == token {
			return true
		}
	}
	return false
}

// faultTakeover is a run that started with attempt > 1 and what the attempt before
// it was doing then.
type faultTakeover struct {
	key      faultKey
	attempt  int
	by, from string
	// overlap is how long the previous attempt's handler still ran, its context not
	// cancelled, after this attempt's handler started (<= 0: none). It is positive
	// too when the previous attempt's handler started only after this one (a winner
	// that started its handler after its lease had been taken over).
	overlap time.Duration
	// prevOK: the previous attempt's handler had returned on its own (success)
	// before this one started: a finished run was run again.
	prevOK bool
	// prevCause is why the previous attempt's context ended, if it did.
	prevCause error
	// noPrev: no earlier attempt started a handler.
	noPrev bool
	// prevStart and start are when the two handlers started, after the slot.
	prevStart, start time.Duration
}

func (t faultTakeover) String() string {
	switch {
	case t.noPrev:
		return fmt.Sprintf("%s attempt %d on %s: no earlier attempt ran", t.key, t.attempt, t.by)
	case t.prevStart > t.start:
		return fmt.Sprintf("%s attempt %d on %s started (slot%+v) before attempt %d on %s (started slot%+v, after the takeover; it ran until %v after attempt %d started)",
			t.key, t.attempt, t.by, t.start.Round(time.Millisecond), t.attempt-1, t.from, t.prevStart.Round(time.Millisecond), t.overlap.Round(time.Millisecond), t.attempt)
	case t.overlap > 0:
		return fmt.Sprintf("%s attempt %d on %s started (slot%+v) while attempt %d on %s (started slot%+v) still ran with a live context for %v",
			t.key, t.attempt, t.by, t.start.Round(time.Millisecond), t.attempt-1, t.from, t.prevStart.Round(time.Millisecond), t.overlap.Round(time.Millisecond))
	case t.prevOK:
		return fmt.Sprintf("%s attempt %d on %s re-ran a slot whose attempt %d on %s had returned ok %v earlier",
			t.key, t.attempt, t.by, t.attempt-1, t.from, -t.overlap.Round(time.Millisecond))
	default:
		return fmt.Sprintf("%s attempt %d on %s after attempt %d on %s ended (%v)", t.key, t.attempt, t.by, t.attempt-1, t.from, t.prevCause)
	}
}

// takeoversSeen classifies every handler start with attempt > 1 against the attempt
// before it, as far as handlers could tell (their start, end, and context).
func (r *faultRecorder) takeoversSeen(stillRunningAt time.Time) []faultTakeover {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []faultTakeover
	for k, xs := range r.execs {
		for _, x := range xs {
			if x.run.Attempt <= 1 {
				continue
			}
			t := faultTakeover{key: k, attempt: x.run.Attempt, by: x.run.Instance, start: x.start.Sub(x.run.Slot)}
			i := slices.IndexFunc(xs, func(p *faultExec) bool { return p.run.Attempt == x.run.Attempt-1 })
			if i < 0 {
				t.noPrev = true
				out = append(out, t)
				continue
			}
			p := xs[i]
			t.from, t.prevCause, t.prevStart = p.run.Instance, p.cause, p.start.Sub(p.run.Slot)
			end := p.end
			if end.IsZero() {
				end = stillRunningAt
			}
			t.overlap = end.Sub(x.start)
			t.prevOK = p.cancelled.IsZero() && !p.end.IsZero() && !p.end.After(x.start)
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.slot < out[j].key.slot })
	return out
}

// runsBy counts handler starts by instance for slots in [from, to].
func (r *faultRecorder) runsBy(from, to time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, xs := range r.execs {
		if k.slot < from.UnixMilli() || k.slot > to.UnixMilli() {
			continue
		}
		for _, x := range xs {
			out[x.run.Instance]++
		}
	}
	return out
}

// execsOf returns a copy of the executions of k.
func (r *faultRecorder) execsOf(k faultKey) []faultExec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]faultExec, 0, len(r.execs[k]))
	for _, x := range r.execs[k] {
		out = append(out, *x)
	}
	return out
}

// runsOf counts the handler starts of the slots in keys.
func (r *faultRecorder) runsOf(keys []faultKey) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range keys {
		n += len(r.execs[k])
	}
	return n
}

func (r *faultRecorder) errors() (byOp map[string]int, samples map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byOp, samples = map[string]int{}, map[string][]string{}
	for k, v := range r.errsByOp {
		byOp[k] = v
	}
	for k, v := range r.errSamples {
		samples[k] = slices.Clone(v)
	}
	return byOp, samples
}

// classifyTakeovers sorts takeovers into those that overlapped a live previous
// attempt, those that re-ran a slot whose handler had returned ok, and those of an
// attempt whose claimer never got its answer.
func classifyTakeovers(takeovers []faultTakeover) (overlaps, rerunOK, phantom []faultTakeover) {
	for _, to := range takeovers {
		switch {
		case to.noPrev:
			phantom = append(phantom, to)
		case to.overlap > 0:
			overlaps = append(overlaps, to)
		case to.prevOK:
			rerunOK = append(rerunOK, to)
		}
	}
	return overlaps, rerunOK, phantom
}
