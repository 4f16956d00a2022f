package scheduler_test

// A randomised model check of the lease path (issue 10, "Beyond the cases").
//
// Every seed builds a small world under testing/synctest (virtual time): 3–5
// scheduler instances sharing one MemoryBackend and its MemoryRunStore, each with its
// own clock offset (±500 ms) and its own faulty view of the store (see
// modelcheck_faults_test.go: lost answers, lost requests, slow requests, crashes,
// paused heartbeats), running 1–3 Every jobs with leases. A plan drawn from the seed
// crashes, pauses, stops and restarts instances and calls RunNow during a fault
// phase; a quiet phase follows in which every instance slot is up and healthy, and
// then every instance is stopped with a generous deadline. Everything that happened
// (store calls as the store applied them, handler lifetimes, events, faults) is
// recorded with its virtual time and checked against the lease rules of SPEC.md §4:
//
//	1   at most one live handler per (job, slot) at any instant
//	1b  a job with OverlapSkip never has two live handlers at once (any slots)
//	2   a new attempt is granted only after the previous attempt's lease ended in
//	    the store, and a holder's handler has returned before its lease ends
//	3   a slot's fate is one of run, skipped, late — never two, and it never runs
//	    after it was recorded skipped or late
//	4   at most one terminal record (ok, error, timeout, skipped, late) per slot in
//	    History; exactly one for every slot due in the quiet phase; and no
//	    unfinished run left in the run store's Active list at the end
//	5   fences (and attempt numbers) strictly grow per slot across attempts
//	6   Stop cancels handlers (scheduled and RunNow) when its context ends, returns
//	    soon after, and no handler of the instance runs after Stop returned
//
// Seeds: ANARCHON_MODEL_SEEDS=N runs seeds 1..N (default 500), ANARCHON_MODEL_SEED=K
// runs seed K alone and prints its whole trace on failure (ANARCHON_MODEL_TRACE=1
// prints it always).

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

const (
	mcDefaultSeeds = 500
	// mcFaultPhase is how long faults are injected after the instances start.
	mcFaultPhase = 20 * time.Second
	// mcQuietPhase follows: every instance slot is up, no fault is injected. It is
	// longer than a lease plus the longest scheduled handler, twice over.
	mcQuietPhase = 12 * time.Second
	// mcFinalStop is the deadline of the final Stop: long enough for every handler.
	mcFinalStop = 60 * time.Second
	// mcCancelSlack is how long after Stop's context ended a handler may still run.
	mcCancelSlack = 100 * time.Millisecond
)

func TestModelCheck(t *testing.T) {
	seeds, single := mcSeeds(t)
	sum := &mcSummary{fails: map[string][]uint64{}, example: map[string]string{}}
	start := time.Now()
	t.Cleanup(func() { sum.report(t, len(seeds), time.Since(start)) })
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			var current atomic.Pointer[mcHarness]
			watchdog := time.AfterFunc(mcWallLimit, func() { mcLivelock(seed, current.Load()) })
			defer watchdog.Stop()
			synctest.Test(t, func(t *testing.T) {
				h := newMCHarness(t, mcNewPlan(seed))
				current.Store(h)
				h.run()
				vs := h.check()
				trace := single && os.Getenv("ANARCHON_MODEL_TRACE") != ""
				if len(vs) > 0 || trace {
					h.reportSeed(t, vs, sum, single)
				}
			})
		})
	}
}

// mcWallLimit is how much real time one seed may take. A seed takes well under a
// second; one that takes this long has stopped virtual time: some goroutine runs
// without ever waiting (a busy loop), so the bubble never idles and its clock never
// advances.
const mcWallLimit = time.Minute

// mcLivelock reports a seed whose virtual time stopped, with the end of its trace,
// and ends the test binary (the bubble cannot be stopped from outside), so that the
// run fails at once with every goroutine's stack instead of at the test timeout.
func mcLivelock(seed uint64, h *mcHarness) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nmodel check: seed %d made no progress in %v of real time: virtual time stopped, a goroutine spins without waiting (livelock)\n", seed, mcWallLimit)
	fmt.Fprintf(&b, "replay: ANARCHON_MODEL_SEED=%d go test -race -run TestModelCheck ./scheduler/\n", seed)
	if h != nil {
		b.WriteString(h.plan.String())
		tr := h.traceText(nil, "", 0)
		lines := strings.Split(strings.TrimRight(tr, "\n"), "\n")
		if len(lines) > 80 {
			lines = append([]string{lines[0], "  … (earlier lines left out)"}, lines[len(lines)-79:]...)
		}
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	fmt.Fprint(os.Stderr, b.String())
	panic(fmt.Sprintf("model check: seed %d livelocked (see above)", seed))
}

func mcSeeds(t *testing.T) ([]uint64, bool) {
	if s := os.Getenv("ANARCHON_MODEL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ANARCHON_MODEL_SEED=%q: %v", s, err)
		}
		return []uint64{seed}, true
	}
	n := mcDefaultSeeds
	if s := os.Getenv("ANARCHON_MODEL_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("ANARCHON_MODEL_SEEDS=%q: want a positive number", s)
		}
		n = v
	}
	from := uint64(1)
	if s := os.Getenv("ANARCHON_MODEL_SEED_FROM"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ANARCHON_MODEL_SEED_FROM=%q: %v", s, err)
		}
		from = v
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = from + uint64(i)
	}
	return seeds, false
}

// ---- the plan ----

type mcJob struct {
	name     string
	interval time.Duration
	lease    time.Duration
	maxLate  time.Duration
	skip     bool
	catchUp  scheduler.CatchUpPolicy
	window   time.Duration
	maxRun   time.Duration // scheduled handlers run for [0, maxRun]
}

type mcActKind string

const (
	mcActStart   mcActKind = "start"
	mcActCrash   mcActKind = "crash"
	mcActPause   mcActKind = "pause"
	mcActStop    mcActKind = "stop"
	mcActRestart mcActKind = "restart"
	mcActRunNow  mcActKind = "runnow"
)

type mcAction struct {
	at   time.Duration // since the start of the fault phase
	kind mcActKind
	slot int           // instance slot
	dur  time.Duration // pause length, Stop's deadline
	job  int
}

type mcWindow struct {
	from, to time.Duration // since the start of the fault phase
	p        float64
}

type mcPlan struct {
	seed    uint64
	pre     time.Duration // virtual time before the fault phase starts
	callTO  time.Duration
	slots   int
	jobs    []mcJob
	actions []mcAction
	flaky   [][]mcWindow // per instance slot
}

func mcMS(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func mcNewPlan(seed uint64) *mcPlan {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := &mcPlan{seed: seed, pre: mcMS(r.IntN(10000)), callTO: time.Duration(1+r.IntN(3)) * time.Second, slots: 3 + r.IntN(3)}
	for i := range 1 + r.IntN(3) {
		iv := time.Duration(1+r.IntN(5)) * time.Second
		j := mcJob{
			name:     fmt.Sprintf("job%d", i),
			interval: iv,
			lease:    mcMS(1000 + r.IntN(2001)),
			maxLate:  mcMS(200 + r.IntN(int(iv/time.Millisecond)-199)),
			skip:     r.IntN(3) == 0,
			window:   mcMS(3000 + r.IntN(12000)),
			maxRun:   mcMS(50 + r.IntN(int(2*iv/time.Millisecond))),
		}
		switch r.IntN(4) {
		case 0:
			j.catchUp = scheduler.CatchUpLatest
		case 1:
			j.catchUp = scheduler.CatchUpAll
		}
		p.jobs = append(p.jobs, j)
	}
	faultMS := int(mcFaultPhase / time.Millisecond)
	p.flaky = make([][]mcWindow, p.slots)
	for s := range p.slots {
		p.actions = append(p.actions, mcAction{at: mcMS(r.IntN(1000)), kind: mcActStart, slot: s})
		if r.Float64() < 0.3 {
			p.actions = append(p.actions, mcAction{at: mcMS(1000 + r.IntN(faultMS-2000)), kind: mcActCrash, slot: s})
		}
		for range r.IntN(3) {
			p.actions = append(p.actions, mcAction{at: mcMS(1000 + r.IntN(faultMS-2000)), kind: mcActPause, slot: s, dur: mcMS(200 + r.IntN(4000))})
		}
		if r.Float64() < 0.35 {
			at := mcMS(1500 + r.IntN(faultMS-3000))
			stop := mcAction{at: at, kind: mcActStop, slot: s}
			if r.IntN(3) > 0 {
				stop.dur = mcMS(r.IntN(2500))
			}
			p.actions = append(p.actions, stop)
			if r.IntN(2) == 0 { // a manual run that Stop has to cancel
				p.actions = append(p.actions, mcAction{at: at - mcMS(r.IntN(1500)), kind: mcActRunNow, slot: s, job: r.IntN(len(p.jobs))})
			}
			if back := at + mcMS(r.IntN(4000)); back < mcFaultPhase {
				p.actions = append(p.actions, mcAction{at: back, kind: mcActRestart, slot: s})
			}
		}
		for range r.IntN(3) {
			from := mcMS(r.IntN(faultMS - 1000))
			p.flaky[s] = append(p.flaky[s], mcWindow{from: from, to: min(mcFaultPhase, from+mcMS(1000+r.IntN(7000))), p: 0.1 + 0.5*r.Float64()})
		}
	}
	for range r.IntN(3) {
		p.actions = append(p.actions, mcAction{at: mcMS(1000 + r.IntN(faultMS-2000)), kind: mcActRunNow, slot: r.IntN(p.slots), job: r.IntN(len(p.jobs))})
	}
	slices.SortStableFunc(p.actions, func(a, b mcAction) int { return cmp.Compare(a.at, b.at) })
	return p
}

func (p *mcPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d instances, call timeout %v, fault phase from +%v for %v, then quiet %v\n", p.seed, p.slots, p.callTO, p.pre, mcFaultPhase, mcQuietPhase)
	for _, j := range p.jobs {
		fmt.Fprintf(&b, "  %s: every %v, lease %v, maxLate %v, overlap skip %v, catch-up %s/%v, handler ≤ %v\n", j.name, j.interval, j.lease, j.maxLate, j.skip, j.catchUp, j.window, j.maxRun)
	}
	for _, a := range p.actions {
		fmt.Fprintf(&b, "  +%v %s %c", (p.pre + a.at).Round(time.Millisecond), a.kind, 'A'+a.slot)
		switch a.kind {
		case mcActPause:
			fmt.Fprintf(&b, " heartbeats for %v", a.dur)
		case mcActStop:
			fmt.Fprintf(&b, " with a %v deadline", a.dur)
		case mcActRunNow:
			fmt.Fprintf(&b, " %s", p.jobs[a.job].name)
		}
		b.WriteByte('\n')
	}
	for s, ws := range p.flaky {
		for _, w := range ws {
			fmt.Fprintf(&b, "  flaky %c from +%v to +%v, p=%.2f\n", 'A'+s, p.pre+w.from, p.pre+w.to, w.p)
		}
	}
	return b.String()
}

// ---- deterministic randomness for decisions taken inside goroutines ----

func mcMix(parts ...uint64) uint64 {
	h := uint64(0x243f6a8885a308d3)
	for _, x := range parts {
		h ^= x
		h += 0x9e3779b97f4a7c15
		z := h
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		h = z ^ (z >> 31)
	}
	return h
}

func mcStr(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func mcUnit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// ---- the harness ----

type mcHarness struct {
	t    *testing.T
	plan *mcPlan
	b    *scheduler.MemoryBackend
	rec  *mcRec

	mu  sync.Mutex
	cur []*mcInst // current incarnation per instance slot (nil before the first start)
	gen []int
	all []*mcInst
	bg  sync.WaitGroup

	quietAt, endAt time.Duration // since t0
	faultAt        atomic.Int64  // since t0; -1 before the fault phase
}

// faultStart is when the fault phase started (since t0), or -1 before.
func (h *mcHarness) faultStart() time.Duration { return time.Duration(h.faultAt.Load()) }

func newMCHarness(t *testing.T, p *mcPlan) *mcHarness {
	h := &mcHarness{
		t:    t,
		plan: p,
		b:    scheduler.NewMemoryBackendWithClock(scheduler.SystemClock{}),
		rec:  newMCRec(time.Now()),
		cur:  make([]*mcInst, p.slots),
		gen:  make([]int, p.slots),
	}
	h.faultAt.Store(-1)
	return h
}

func (h *mcHarness) now() time.Duration { return time.Since(h.rec.t0) }

func (h *mcHarness) run() {
	p := h.plan
	time.Sleep(p.pre)
	faultStart := h.now()
	h.faultAt.Store(int64(faultStart))
	for _, a := range p.actions {
		if d := faultStart + a.at - h.now(); d > 0 {
			time.Sleep(d)
		}
		h.act(a)
	}
	if d := faultStart + mcFaultPhase - h.now(); d > 0 {
		time.Sleep(d)
	}
	h.quietAt = h.now()
	h.rec.global("QUIET: faults end; every down or crashed instance slot gets a fresh instance")
	h.mu.Lock()
	for s, in := range h.cur {
		if in == nil || in.down || in.dead.Load() {
			h.startLocked(s)
		}
	}
	h.mu.Unlock()
	time.Sleep(mcQuietPhase)
	h.endAt = h.now()
	h.rec.global("END: stopping every instance with a %v deadline", mcFinalStop)
	h.mu.Lock()
	for _, in := range h.cur {
		if in != nil && !in.down && !in.dead.Load() {
			h.stopLocked(in, mcFinalStop, false)
		}
	}
	h.mu.Unlock()
	h.bg.Wait()
	h.rec.global("all stopped")
}

func (h *mcHarness) act(a mcAction) {
	h.mu.Lock()
	defer h.mu.Unlock()
	in := h.cur[a.slot]
	up := in != nil && !in.down && !in.dead.Load()
	switch a.kind {
	case mcActStart, mcActRestart:
		if !up {
			h.startLocked(a.slot)
		}
	case mcActCrash:
		if up {
			in.crash()
			h.stopLocked(in, 0, true) // reap the dead process's goroutines; its calls reach nothing
		}
	case mcActPause:
		if up {
			in.pause(a.dur)
		}
	case mcActStop:
		if up {
			h.stopLocked(in, a.dur, false)
		}
	case mcActRunNow:
		if up {
			h.runNow(in, h.plan.jobs[a.job].name)
		}
	}
}

func (h *mcHarness) startLocked(slot int) *mcInst {
	h.gen[slot]++
	name := string(rune('A' + slot))
	if h.gen[slot] > 1 {
		name += strconv.Itoa(h.gen[slot])
	}
	off := mcMS(int(mcMix(h.plan.seed, 7, uint64(slot), uint64(h.gen[slot]))%1001) - 500)
	in := &mcInst{h: h, slot: slot, name: name, offset: off, crashed: make(chan struct{}), calls: map[string]uint64{}}
	s, err := scheduler.New(scheduler.Config{
		Backend:     &mcBackend{in: in, b: h.b},
		Instance:    name,
		Clock:       scheduler.OffsetClock{Offset: off},
		OnEvent:     in.onEvent,
		CallTimeout: h.plan.callTO,
	})
	if err != nil {
		h.t.Fatalf("new scheduler %s: %v", name, err)
	}
	for _, j := range h.plan.jobs {
		opts := []scheduler.JobOption{
			scheduler.WithLease(j.lease), scheduler.WithMaxLate(j.maxLate), scheduler.WithHistory(100000, 0),
		}
		if j.skip {
			opts = append(opts, scheduler.WithOverlap(scheduler.OverlapSkip))
		}
		if j.catchUp != scheduler.CatchUpNone {
			opts = append(opts, scheduler.WithCatchUp(j.catchUp, j.window))
		}
		if err := s.Every(j.name, j.interval, in.handler(j), opts...); err != nil {
			h.t.Fatalf("register %s on %s: %v", j.name, name, err)
		}
	}
	in.sched = s
	h.cur[slot] = in
	h.all = append(h.all, in)
	h.rec.instLog(in, "START (clock offset %v)", off)
	if err := s.Start(context.Background()); err != nil {
		h.t.Fatalf("start %s: %v", name, err)
	}
	return in
}

// stopLocked stops in in the background with a deadline of timeout.
func (h *mcHarness) stopLocked(in *mcInst, timeout time.Duration, reap bool) {
	in.down = true
	st := &mcStop{in: in, called: h.now(), deadline: h.now() + timeout, reap: reap}
	h.rec.addStop(st)
	h.rec.instLog(in, "STOP called (deadline +%v, reap of a crashed instance: %v)", timeout, reap)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := in.sched.Stop(ctx)
		h.rec.stopReturned(st, h.now(), err)
	}()
}

func (h *mcHarness) runNow(in *mcInst, job string) {
	h.rec.instLog(in, "RUNNOW %s called", job)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		rr, err := in.sched.RunNow(context.Background(), job)
		h.rec.instLog(in, "RUNNOW %s returned: status %q err %v", job, rr.Status, err)
	}()
}

// mcInst is one incarnation of an instance slot: one process.
type mcInst struct {
	h      *mcHarness
	slot   int
	name   string
	offset time.Duration
	sched  *scheduler.Scheduler
	down   bool // Stop was called (under h.mu)

	crashed chan struct{}
	dead    atomic.Bool

	pauseMu    sync.Mutex
	pauseUntil time.Duration

	callMu sync.Mutex
	calls  map[string]uint64
}

func (in *mcInst) crash() {
	in.dead.Store(true)
	close(in.crashed)
	in.h.rec.instLog(in, "CRASH: from now on every store call hangs and fails, handlers are gone")
}

func (in *mcInst) pause(d time.Duration) {
	in.pauseMu.Lock()
	in.pauseUntil = max(in.pauseUntil, in.h.now()+d)
	until := in.pauseUntil
	in.pauseMu.Unlock()
	in.h.rec.instLog(in, "PAUSE heartbeats until +%v", until.Round(time.Millisecond))
}

func (in *mcInst) paused() time.Duration {
	in.pauseMu.Lock()
	defer in.pauseMu.Unlock()
	return in.pauseUntil
}

// handler runs for a duration drawn from the seed and the run, respecting ctx; a
// crash ends it at once (the process is gone).
func (in *mcInst) handler(j mcJob) scheduler.Handler {
	return func(ctx context.Context, r scheduler.Run) error {
		if in.dead.Load() {
			return fmt.Errorf("%s is dead", in.name)
		}
		hr := in.h.rec.handlerStart(in, r)
		var d time.Duration
		u := mcUnit(mcMix(in.h.plan.seed, mcStr(r.Job), uint64(r.Slot.UnixMilli()), uint64(r.Attempt), mcStr(in.name)))
		if r.Manual {
			d = 10*time.Second + time.Duration(u*float64(20*time.Second))
		} else {
			d = time.Duration(u * float64(j.maxRun))
		}
		d = d.Round(time.Millisecond)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			in.h.rec.handlerEnd(hr, "returned after "+d.String())
			return nil
		case <-ctx.Done():
			in.h.rec.handlerEnd(hr, "cancelled: "+context.Cause(ctx).Error())
			return context.Cause(ctx)
		case <-in.crashed:
			in.h.rec.handlerEnd(hr, "gone with its crashed process")
			return fmt.Errorf("%s crashed", in.name)
		}
	}
}

func (in *mcInst) onEvent(e scheduler.Event) {
	if e.Kind == scheduler.EventScheduled {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "event %s", e.Kind)
	if e.Outcome != "" {
		fmt.Fprintf(&b, " outcome=%s", e.Outcome)
	}
	if e.Attempt != 0 {
		fmt.Fprintf(&b, " attempt=%d", e.Attempt)
	}
	if e.Token != "" {
		fmt.Fprintf(&b, " tok=%s", mcTok(e.Token))
	}
	if e.Status != "" {
		fmt.Fprintf(&b, " status=%s", e.Status)
	}
	if e.Manual {
		b.WriteString(" manual")
	}
	if e.Op != "" {
		fmt.Fprintf(&b, " op=%s", e.Op)
	}
	if e.Err != nil {
		msg := e.Err.Error()
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		fmt.Fprintf(&b, " err=%q", msg)
	}
	in.h.rec.slotLog(in, e.Job, e.Slot, "%s", b.String())
}

func mcTok(tok string) string {
	if len(tok) > 6 {
		return tok[:6]
	}
	return tok
}

// ---- the record ----

type mcKey struct {
	job  string
	slot int64 // unix ms
}

type mcEntry struct {
	at   time.Duration
	inst string
	job  string
	slot int64 // 0: not about one slot
	text string
}

type mcHandler struct {
	in      *mcInst
	key     mcKey
	manual  bool
	token   string
	fence   uint64
	attempt int
	start   time.Duration
	end     time.Duration
	ended   bool
	how     string
	// startSeq and endSeq order the start and the end among everything recorded,
	// also between records at the same virtual instant.
	startSeq, endSeq uint64
}

// mcGrant is one lease as the store granted it (a won claim with a new fence), with
// what the store applied to it afterwards.
type mcGrant struct {
	key     mcKey
	token   string
	inst    string
	fence   uint64
	attempt int
	at      time.Duration
	expiry  time.Duration
	release time.Duration // 0: none
	finish  time.Duration // 0: none
}

// end is when the lease stopped being live in the store.
func (g *mcGrant) end() time.Duration {
	e := g.expiry
	if g.release > 0 && g.release < e {
		e = g.release
	}
	if g.finish > 0 && g.finish < e {
		e = g.finish
	}
	return e
}

type mcSave struct {
	key     mcKey
	at      time.Duration
	inst    string
	status  scheduler.Status
	token   string
	attempt int
	manual  bool
}

type mcStop struct {
	in       *mcInst
	called   time.Duration
	deadline time.Duration
	returned time.Duration
	retSeq   uint64
	done     bool
	err      error
	reap     bool
}

type mcRec struct {
	t0 time.Time

	mu       sync.Mutex
	seq      uint64
	entries  []mcEntry
	handlers []*mcHandler
	grants   map[mcKey][]*mcGrant
	saves    []mcSave
	stops    []*mcStop
}

func newMCRec(t0 time.Time) *mcRec {
	return &mcRec{t0: t0, grants: map[mcKey][]*mcGrant{}}
}

func (r *mcRec) now() time.Duration { return time.Since(r.t0) }

// mcMaxEntries bounds the trace (a livelocked seed would grow it without end).
const mcMaxEntries = 200_000

func (r *mcRec) add(e mcEntry) {
	r.mu.Lock()
	r.appendLocked(e)
	r.mu.Unlock()
}

func (r *mcRec) appendLocked(e mcEntry) {
	if len(r.entries) >= mcMaxEntries {
		r.entries = append(r.entries[:0], r.entries[mcMaxEntries/2:]...)
	}
	r.entries = append(r.entries, e)
}

func (r *mcRec) global(format string, args ...any) {
	r.add(mcEntry{at: r.now(), text: fmt.Sprintf(format, args...)})
}

func (r *mcRec) instLog(in *mcInst, format string, args ...any) {
	r.add(mcEntry{at: r.now(), inst: in.name, text: fmt.Sprintf(format, args...)})
}

func (r *mcRec) slotLog(in *mcInst, job string, slot time.Time, format string, args ...any) {
	e := mcEntry{at: r.now(), inst: in.name, job: job, text: fmt.Sprintf(format, args...)}
	if !slot.IsZero() {
		e.slot = slot.UnixMilli()
	}
	r.add(e)
}

func (r *mcRec) handlerStart(in *mcInst, run scheduler.Run) *mcHandler {
	hr := &mcHandler{in: in, key: mcKey{run.Job, run.Slot.UnixMilli()}, manual: run.Manual, token: run.Token, fence: run.Fence, attempt: run.Attempt}
	r.mu.Lock()
	r.seq++
	hr.start, hr.startSeq = r.now(), r.seq
	r.handlers = append(r.handlers, hr)
	r.mu.Unlock()
	r.slotLog(in, run.Job, run.Slot, "HANDLER START attempt=%d fence=%d tok=%s manual=%v", run.Attempt, run.Fence, mcTok(run.Token), run.Manual)
	return hr
}

func (r *mcRec) handlerEnd(hr *mcHandler, how string) {
	r.mu.Lock()
	r.seq++
	hr.end, hr.endSeq, hr.ended, hr.how = r.now(), r.seq, true, how
	r.mu.Unlock()
	r.add(mcEntry{at: r.now(), inst: hr.in.name, job: hr.key.job, slot: hr.key.slot, text: fmt.Sprintf("HANDLER END attempt=%d fence=%d: %s", hr.attempt, hr.fence, how)})
}

func (r *mcRec) addStop(st *mcStop) {
	r.mu.Lock()
	r.stops = append(r.stops, st)
	r.mu.Unlock()
}

func (r *mcRec) stopReturned(st *mcStop, at time.Duration, err error) {
	r.mu.Lock()
	r.seq++
	st.returned, st.retSeq, st.done, st.err = at, r.seq, true, err
	r.mu.Unlock()
	r.instLog(st.in, "STOP returned: %v", err)
}

// latestGrant is the newest grant of key; nil if none. Under r.mu.
func (r *mcRec) latestGrant(key mcKey) *mcGrant {
	gs := r.grants[key]
	if len(gs) == 0 {
		return nil
	}
	return gs[len(gs)-1]
}

// The store calls below are recorded when the store applied them, with its answer,
// whatever the caller was told afterwards.

func (r *mcRec) claimApplied(in *mcInst, rc scheduler.RunClaim, res scheduler.ClaimResult, err error, fault string) {
	key := mcKey{rc.Job, rc.Slot.UnixMilli()}
	now := r.now()
	var txt string
	if err != nil {
		txt = fmt.Sprintf("store claim tok=%s takeoverOnly=%v → error %v%s", mcTok(rc.Token), rc.TakeoverOnly, err, fault)
	} else {
		exp := ""
		if !res.Expires.IsZero() {
			exp = fmt.Sprintf(" expires=%s", mcAt(res.Expires.Sub(r.t0)))
		}
		if res.Status != "" {
			exp += " status=" + string(res.Status)
		}
		txt = fmt.Sprintf("store claim tok=%s takeoverOnly=%v → %s attempt=%d fence=%d holder=%s%s%s",
			mcTok(rc.Token), rc.TakeoverOnly, res.Outcome, res.Attempt, res.Fence, res.Holder, exp, fault)
	}
	r.mu.Lock()
	if err == nil && res.Outcome == scheduler.OutcomeWon {
		g := r.latestGrant(key)
		exp := res.Expires.Sub(r.t0)
		if g == nil || g.fence != res.Fence {
			r.grants[key] = append(r.grants[key], &mcGrant{key: key, token: rc.Token, inst: in.name, fence: res.Fence, attempt: res.Attempt, at: now, expiry: exp})
		} else if exp > g.expiry {
			g.expiry = exp
		}
	}
	r.appendLocked(mcEntry{at: now, inst: in.name, job: rc.Job, slot: key.slot, text: txt})
	r.mu.Unlock()
}

func (r *mcRec) heartbeatApplied(in *mcInst, job string, slot time.Time, token string, lease time.Duration, err error, fault string) {
	key := mcKey{job, slot.UnixMilli()}
	now := r.now()
	r.mu.Lock()
	if g := r.latestGrant(key); err == nil && g != nil && g.token == token {
		g.expiry = now + lease
	}
	r.appendLocked(mcEntry{at: now, inst: in.name, job: job, slot: key.slot, text: fmt.Sprintf("store heartbeat tok=%s → %v%s", mcTok(token), errText(err), fault)})
	r.mu.Unlock()
}

func (r *mcRec) releaseApplied(in *mcInst, job string, slot time.Time, token string, err error, fault string) {
	key := mcKey{job, slot.UnixMilli()}
	now := r.now()
	r.mu.Lock()
	if g := r.latestGrant(key); err == nil && g != nil && g.token == token && now < g.end() {
		g.release = now
	}
	r.appendLocked(mcEntry{at: now, inst: in.name, job: job, slot: key.slot, text: fmt.Sprintf("store release tok=%s → %v%s", mcTok(token), errText(err), fault)})
	r.mu.Unlock()
}

func (r *mcRec) finishApplied(in *mcInst, job string, slot time.Time, token string, status scheduler.Status, err error, fault string) {
	key := mcKey{job, slot.UnixMilli()}
	now := r.now()
	r.mu.Lock()
	if g := r.latestGrant(key); err == nil && g != nil && g.token == token && g.finish == 0 {
		g.finish = now
	}
	r.appendLocked(mcEntry{at: now, inst: in.name, job: job, slot: key.slot, text: fmt.Sprintf("store finish tok=%s status=%s → %v%s", mcTok(token), status, errText(err), fault)})
	r.mu.Unlock()
}

func (r *mcRec) saveApplied(in *mcInst, job string, res scheduler.StoredResult, err error, fault string) {
	key := mcKey{job, res.Slot.UnixMilli()}
	now := r.now()
	r.mu.Lock()
	if err == nil {
		r.saves = append(r.saves, mcSave{key: key, at: now, inst: in.name, status: res.Status, token: res.Token, attempt: res.Attempt, manual: res.Manual})
	}
	r.appendLocked(mcEntry{at: now, inst: in.name, job: job, slot: key.slot, text: fmt.Sprintf("history save tok=%s for %s attempt=%d status=%s manual=%v → %v%s", mcTok(res.Token), res.Instance, res.Attempt, res.Status, res.Manual, errText(err), fault)})
	r.mu.Unlock()
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "error " + err.Error()
}

// ---- the check ----

type mcViolation struct {
	inv  string
	keys []mcKey // slots the trace should show; none: the instance's entries
	inst string
	msg  string
}

var mcTerminal = map[scheduler.Status]bool{
	scheduler.StatusOK: true, scheduler.StatusError: true, scheduler.StatusTimeout: true,
	scheduler.StatusSkipped: true, scheduler.StatusLate: true,
}

func (h *mcHarness) rel(slot int64) string {
	return fmt.Sprintf("+%.3fs", float64(time.UnixMilli(slot).Sub(h.rec.t0))/float64(time.Second))
}

func mcAt(d time.Duration) string { return fmt.Sprintf("+%.3fs", d.Seconds()) }

func (h *mcHarness) check() []mcViolation {
	r := h.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	var vs []mcViolation
	add := func(inv string, keys []mcKey, inst, format string, args ...any) {
		vs = append(vs, mcViolation{inv: inv, keys: keys, inst: inst, msg: fmt.Sprintf(format, args...)})
	}
	jobs := map[string]mcJob{}
	for _, j := range h.plan.jobs {
		jobs[j.name] = j
	}
	inf := time.Duration(1<<62 - 1)
	endOf := func(hr *mcHandler) time.Duration {
		if hr.ended {
			return hr.end
		}
		return inf
	}
	endSeq := func(hr *mcHandler) uint64 {
		if hr.ended {
			return hr.endSeq
		}
		return 1<<64 - 1
	}
	// Two handlers overlap when one started before the other ended, in the order
	// the record saw them (which also orders what happened at one virtual instant).
	overlap := func(a, b *mcHandler) bool { return b.startSeq < endSeq(a) && a.startSeq < endSeq(b) }

	byKey := map[mcKey][]*mcHandler{}
	byJob := map[string][]*mcHandler{}
	for _, hr := range r.handlers {
		if !hr.ended {
			add("6-stop", []mcKey{hr.key}, hr.in.name, "handler attempt=%d of %s slot %s never returned", hr.attempt, hr.key.job, h.rel(hr.key.slot))
		}
		if hr.manual {
			continue
		}
		byKey[hr.key] = append(byKey[hr.key], hr)
		byJob[hr.key.job] = append(byJob[hr.key.job], hr)
	}

	// 1: one live handler per slot; 1b: per OverlapSkip job.
	for key, hs := range byKey {
		sortHandlers(hs)
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if overlap(a, b) {
					add("1-one-handler", []mcKey{key}, "", "%s slot %s: handlers overlap: %s attempt=%d fence=%d [%s, %s) and %s attempt=%d fence=%d [%s, %s)",
						key.job, h.rel(key.slot), a.in.name, a.attempt, a.fence, mcAt(a.start), mcAt(endOf(a)), b.in.name, b.attempt, b.fence, mcAt(b.start), mcAt(endOf(b)))
				}
			}
		}
	}
	for job, hs := range byJob {
		if !jobs[job].skip {
			continue
		}
		sortHandlers(hs)
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if a.key != b.key && overlap(a, b) {
					add("1b-overlap-skip", []mcKey{a.key, b.key}, "", "%s forbids overlap but slot %s (%s, [%s, %s)) and slot %s (%s, [%s, %s)) ran at once",
						job, h.rel(a.key.slot), a.in.name, mcAt(a.start), mcAt(endOf(a)), h.rel(b.key.slot), b.in.name, mcAt(b.start), mcAt(endOf(b)))
				}
			}
		}
	}

	// 2 and 5 from the store's grants and the handlers.
	for key, gs := range r.grants {
		for i := 1; i < len(gs); i++ {
			prev, g := gs[i-1], gs[i]
			if g.at < prev.end() {
				add("2-lease-order", []mcKey{key}, "", "%s slot %s: attempt %d (%s, fence %d) granted at %s while attempt %d's lease (%s, fence %d) lived in the store until %s",
					key.job, h.rel(key.slot), g.attempt, g.inst, g.fence, mcAt(g.at), prev.attempt, prev.inst, prev.fence, mcAt(prev.end()))
			}
			if g.fence <= prev.fence || g.attempt <= prev.attempt {
				add("5-fence", []mcKey{key}, "", "%s slot %s: grant %d has fence %d attempt %d after fence %d attempt %d",
					key.job, h.rel(key.slot), i+1, g.fence, g.attempt, prev.fence, prev.attempt)
			}
		}
	}
	for key, hs := range byKey {
		gs := r.grants[key]
		for i, hr := range hs {
			var g *mcGrant
			for _, x := range gs {
				if x.fence == hr.fence {
					g = x
				}
			}
			switch {
			case g == nil:
				add("5-fence", []mcKey{key}, "", "%s slot %s: %s ran attempt %d with fence %d, which the store never granted", key.job, h.rel(key.slot), hr.in.name, hr.attempt, hr.fence)
			case g.token != hr.token:
				add("5-fence", []mcKey{key}, "", "%s slot %s: %s ran fence %d with token %s, granted to token %s", key.job, h.rel(key.slot), hr.in.name, hr.fence, mcTok(hr.token), mcTok(g.token))
			case endOf(hr) > g.end():
				add("2-lease-order", []mcKey{key}, "", "%s slot %s: %s's handler (attempt %d, fence %d) ran until %s but its lease ended in the store at %s",
					key.job, h.rel(key.slot), hr.in.name, hr.attempt, hr.fence, mcAt(endOf(hr)), mcAt(g.end()))
			}
			if i > 0 && hr.fence <= hs[i-1].fence {
				add("5-fence", []mcKey{key}, "", "%s slot %s: handler of %s started at %s with fence %d, not above the previous handler's fence %d",
					key.job, h.rel(key.slot), hr.in.name, mcAt(hr.start), hr.fence, hs[i-1].fence)
			}
		}
	}

	// 3: one fate per slot.
	fates := map[mcKey]map[string]time.Duration{} // fate → first time
	note := func(key mcKey, fate string, at time.Duration) {
		m := fates[key]
		if m == nil {
			m = map[string]time.Duration{}
			fates[key] = m
		}
		if t, ok := m[fate]; !ok || at < t {
			m[fate] = at
		}
	}
	for key, hs := range byKey {
		for _, hr := range hs {
			note(key, "run", hr.start)
		}
	}
	for _, s := range r.saves {
		if !s.manual && (s.status == scheduler.StatusSkipped || s.status == scheduler.StatusLate) {
			note(s.key, string(s.status), s.at)
		}
	}
	for key, m := range fates {
		if len(m) < 2 {
			continue
		}
		var parts []string
		for f, at := range m {
			parts = append(parts, fmt.Sprintf("%s at %s", f, mcAt(at)))
		}
		sort.Strings(parts)
		msg := fmt.Sprintf("%s slot %s has more than one fate: %s", key.job, h.rel(key.slot), strings.Join(parts, ", "))
		if run, ok := m["run"]; ok {
			for _, f := range []string{"skipped", "late"} {
				if at, ok := m[f]; ok && at <= run {
					msg += fmt.Sprintf(" (it ran after being recorded %s)", f)
				}
			}
		}
		add("3-one-fate", []mcKey{key}, "", "%s", msg)
	}

	// 4: terminal records in History, and nothing left unfinished in the store.
	ctx := context.Background()
	for _, j := range h.plan.jobs {
		recs, err := h.b.History(ctx, j.name, 0)
		if err != nil {
			add("4-terminal", nil, "", "history of %s: %v", j.name, err)
			continue
		}
		terminal := map[int64][]scheduler.RunRecord{}
		for _, rr := range recs {
			if !rr.Manual && mcTerminal[rr.Status] {
				terminal[rr.Slot.UnixMilli()] = append(terminal[rr.Slot.UnixMilli()], rr)
			}
		}
		for slot, rs := range terminal {
			if len(rs) > 1 {
				var parts []string
				for _, rr := range rs {
					parts = append(parts, fmt.Sprintf("%s attempt %d by %s", rr.Status, rr.Attempt, rr.Instance))
				}
				add("4-terminal", []mcKey{{j.name, slot}}, "", "%s slot %s has %d terminal records: %s", j.name, h.rel(slot), len(rs), strings.Join(parts, "; "))
			}
		}
		iv := j.interval.Milliseconds()
		from := r.t0.Add(h.quietAt + time.Second).UnixMilli()
		to := r.t0.Add(h.endAt - 2*time.Second).UnixMilli()
		for slot := (from + iv - 1) / iv * iv; slot <= to; slot += iv {
			if len(terminal[slot]) == 0 {
				add("4-terminal", []mcKey{{j.name, slot}}, "", "%s slot %s, due in the quiet phase, has no terminal record", j.name, h.rel(slot))
			}
		}
		active, err := h.b.Runs().Active(ctx, j.name)
		if err != nil {
			add("4-terminal", nil, "", "active runs of %s: %v", j.name, err)
			continue
		}
		for _, a := range active {
			add("4-terminal", []mcKey{{j.name, a.Slot.UnixMilli()}}, "", "%s slot %s is still unfinished in the run store after every instance stopped (attempt %d by %s, live %v): never taken over",
				j.name, h.rel(a.Slot.UnixMilli()), a.Attempt, a.Instance, a.Live)
		}
	}

	// 6: Stop cancels and waits.
	slack := 3*h.plan.callTO + time.Second
	for _, st := range r.stops {
		if st.reap {
			continue
		}
		name := st.in.name
		if !st.done {
			add("6-stop", nil, name, "Stop of %s called at %s never returned", name, mcAt(st.called))
			continue
		}
		if st.returned > st.deadline+slack {
			add("6-stop", nil, name, "Stop of %s with deadline %s returned only at %s", name, mcAt(st.deadline), mcAt(st.returned))
		}
		for _, hr := range r.handlers {
			if hr.in != st.in {
				continue
			}
			kind := "scheduled"
			if hr.manual {
				kind = "RunNow"
			}
			switch {
			case hr.startSeq > st.retSeq:
				add("6-stop", []mcKey{hr.key}, name, "%s %s handler started at %s, after Stop returned at %s", name, kind, mcAt(hr.start), mcAt(st.returned))
			case endSeq(hr) > st.retSeq:
				add("6-stop", []mcKey{hr.key}, name, "Stop of %s returned at %s while its %s handler ran until %s", name, mcAt(st.returned), kind, mcAt(endOf(hr)))
			case hr.start < st.deadline && endOf(hr) > st.deadline+mcCancelSlack:
				add("6-stop", []mcKey{hr.key}, name, "Stop of %s (deadline %s) did not cancel its %s handler (%s slot %s), which ran until %s",
					name, mcAt(st.deadline), kind, hr.key.job, h.rel(hr.key.slot), mcAt(endOf(hr)))
			}
		}
	}
	slices.SortStableFunc(vs, func(a, b mcViolation) int { return cmp.Compare(a.inv, b.inv) })
	return vs
}

func sortHandlers(hs []*mcHandler) {
	slices.SortStableFunc(hs, func(a, b *mcHandler) int {
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		return cmp.Compare(a.fence, b.fence)
	})
}

// ---- reporting ----

type mcSummary struct {
	mu      sync.Mutex
	failed  []uint64
	fails   map[string][]uint64 // invariant → seeds
	example map[string]string   // invariant → one example
}

func (s *mcSummary) report(t *testing.T, seeds int, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) == 0 {
		t.Logf("model check: %d seeds, no violation (%v)", seeds, took.Round(time.Millisecond))
		return
	}
	var b strings.Builder
	slices.Sort(s.failed)
	fmt.Fprintf(&b, "model check: %d of %d seeds failed (%v)\n", len(s.failed), seeds, took.Round(time.Millisecond))
	invs := make([]string, 0, len(s.fails))
	for inv := range s.fails {
		invs = append(invs, inv)
	}
	sort.Strings(invs)
	for _, inv := range invs {
		seeds := s.fails[inv]
		slices.Sort(seeds)
		fmt.Fprintf(&b, "  %-16s %3d seeds: %s\n", inv, len(seeds), mcSeedList(seeds, 30))
	}
	for _, inv := range invs {
		fmt.Fprintf(&b, "\n==== example for %s ====\n%s", inv, s.example[inv])
	}
	t.Errorf("%s", b.String())
}

func mcSeedList(seeds []uint64, limit int) string {
	var parts []string
	for i, s := range seeds {
		if i == limit {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(seeds)-limit))
			break
		}
		parts = append(parts, strconv.FormatUint(s, 10))
	}
	return strings.Join(parts, " ")
}

func (h *mcHarness) replay() string {
	return fmt.Sprintf("ANARCHON_MODEL_SEED=%d go test -race -run TestModelCheck ./scheduler/", h.plan.seed)
}

func (h *mcHarness) reportSeed(t *testing.T, vs []mcViolation, sum *mcSummary, full bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "replay: %s\n", h.replay())
	for i, v := range vs {
		if i == 8 && !full {
			fmt.Fprintf(&b, "… and %d more violations\n", len(vs)-i)
			break
		}
		fmt.Fprintf(&b, "[%s] %s\n", v.inv, v.msg)
	}
	if full {
		b.WriteString(h.plan.String())
		b.WriteString(h.traceText(nil, "", 0))
	}
	if len(vs) > 0 {
		t.Errorf("%s", b.String())
	} else {
		t.Logf("%s", b.String())
	}

	sum.mu.Lock()
	defer sum.mu.Unlock()
	if len(vs) > 0 {
		sum.failed = append(sum.failed, h.plan.seed)
	}
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v.inv] {
			continue
		}
		seen[v.inv] = true
		sum.fails[v.inv] = append(sum.fails[v.inv], h.plan.seed)
		if _, ok := sum.example[v.inv]; !ok {
			sum.example[v.inv] = fmt.Sprintf("seed %d: %s\nreplay: %s\n%s%s", h.plan.seed, v.msg, h.replay(), h.plan.String(), h.traceText(v.keys, v.inst, 120))
		}
	}
}

// traceText lists the recorded entries in time order: those about keys (all when
// keys and inst are empty), those of inst, and the global ones (instance starts,
// stops, crashes, pauses).
func (h *mcHarness) traceText(keys []mcKey, inst string, limit int) string {
	r := h.rec
	r.mu.Lock()
	entries := slices.Clone(r.entries)
	r.mu.Unlock()
	slices.SortStableFunc(entries, func(a, b mcEntry) int { return cmp.Compare(a.at, b.at) })
	want := map[mcKey]bool{}
	for _, k := range keys {
		want[k] = true
	}
	var lines []string
	for _, e := range entries {
		all := len(keys) == 0 && inst == ""
		global := e.job == "" && e.slot == 0
		switch {
		case all, global, want[mcKey{e.job, e.slot}], inst != "" && e.inst == inst:
		default:
			continue
		}
		where := ""
		if e.job != "" {
			where = e.job
			if e.slot != 0 {
				where += " slot " + h.rel(e.slot)
			}
		}
		lines = append(lines, fmt.Sprintf("  %10s %-4s %-20s %s", mcAt(e.at), e.inst, where, e.text))
	}
	if limit > 0 && len(lines) > limit {
		// Keep the end of the story when it is long: the violation is usually there,
		// but keep the first lines (starts) too.
		head := lines[:20]
		tail := lines[len(lines)-(limit-20):]
		lines = append(append(slices.Clone(head), fmt.Sprintf("  … %d lines left out …", len(lines)-limit)), tail...)
	}
	return "trace (virtual time since the seed began; instance; job and slot):\n" + strings.Join(lines, "\n") + "\n"
}
