package integration

// A randomised model check of the lease path on the real stores: the kvlease RunStore
// and the JetStream LeasedBackend on an embedded nats-server, in real time (NATS
// cannot run under testing/synctest). It is the short variant of the scheduler
// package's TestModelCheck (scheduler/modelcheck_test.go): each seed runs 3 instances,
// each with its own connection, kvlease store and backend, seen through a faulty
// wrapper (lost answers, lost and slow requests, crashes, paused heartbeats), with
// clock offsets, stops, restarts and RunNow calls during a fault phase, then a quiet
// phase, then a final Stop. The invariants are those of the scheduler's model check,
// judged with what real time allows (a store call is applied somewhere between its
// send and its answer; the record orders what it saw with sequence numbers):
//
//	1   at most one live handler per (job, slot); 1b: per OverlapSkip job
//	2   a takeover is answered only after the previous holder's handler returned, and
//	    not before the previous lease could have ended in the store
//	3   a slot's fate is one of run, skipped, late
//	4   at most one terminal record per slot in History, exactly one for the slots due
//	    in the quiet phase, and no unfinished run left in the store's Active list
//	5   fences and attempts strictly grow per slot
//	6   Stop cancels handlers (scheduled and RunNow) once its context ends
//
// ANARCHON_KV_MODEL_SEEDS=N runs seeds 1..N (default 12, 4 at a time);
// ANARCHON_KV_MODEL_SEED=K runs seed K alone and prints its whole trace on failure.

import (
	"cmp"
	"context"
	"errors"
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
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

const (
	kmcDefaultSeeds = 12
	kmcConcurrent   = 4
	kmcInstances    = 3
	kmcFaultPhase   = 5 * time.Second
	kmcQuietPhase   = 5 * time.Second
	kmcFinalStop    = 15 * time.Second
	kmcCallTimeout  = time.Second
	// kmcCancelSlack is how long after Stop's context ended a handler may still run
	// (real time: goroutine scheduling under -race).
	kmcCancelSlack = 500 * time.Millisecond
	// kmcStoreSlack absorbs the rounding of the server's TTL clock when comparing a
	// takeover with the earliest time the previous lease could have expired.
	kmcStoreSlack = 250 * time.Millisecond
)

func TestModelCheckKV(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time model check")
	}
	seeds, single := kmcSeeds(t)
	srv := startServer(t, embedded.Options{})
	start := time.Now()

	results := make([]*kmcSeedRun, len(seeds))
	sem := make(chan struct{}, kmcConcurrent)
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = kmcRunSeed(srv, kmcNewPlan(seed))
		}()
	}
	wg.Wait()

	failed := map[string][]uint64{}
	examples := map[string]string{}
	for _, r := range results {
		t.Run("seed="+strconv.FormatUint(r.plan.seed, 10), func(t *testing.T) {
			if r.setupErr != nil {
				t.Fatalf("setup: %v", r.setupErr)
			}
			if len(r.violations) == 0 {
				if single && os.Getenv("ANARCHON_MODEL_TRACE") != "" {
					t.Logf("%s%s", r.plan, r.traceText(nil, "", 0))
				}
				return
			}
			var b strings.Builder
			fmt.Fprintf(&b, "replay: ANARCHON_KV_MODEL_SEED=%d go test -race -run TestModelCheckKV ./integration/\n", r.plan.seed)
			for i, v := range r.violations {
				if i == 8 && !single {
					fmt.Fprintf(&b, "… and %d more\n", len(r.violations)-i)
					break
				}
				fmt.Fprintf(&b, "[%s] %s\n", v.inv, v.msg)
			}
			if single {
				b.WriteString(r.plan.String())
				b.WriteString(r.traceText(nil, "", 0))
			}
			t.Errorf("%s", b.String())
			seen := map[string]bool{}
			for _, v := range r.violations {
				if seen[v.inv] {
					continue
				}
				seen[v.inv] = true
				failed[v.inv] = append(failed[v.inv], r.plan.seed)
				if _, ok := examples[v.inv]; !ok {
					examples[v.inv] = fmt.Sprintf("seed %d: %s\n%s%s", r.plan.seed, v.msg, r.plan, r.traceText(v.keys, v.inst, 100))
				}
			}
		})
	}
	if len(failed) == 0 {
		t.Logf("kv model check: %d seeds, no violation (%v)", len(seeds), time.Since(start).Round(time.Millisecond))
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kv model check: %d seeds (%v)\n", len(seeds), time.Since(start).Round(time.Millisecond))
	invs := make([]string, 0, len(failed))
	for inv := range failed {
		invs = append(invs, inv)
	}
	sort.Strings(invs)
	for _, inv := range invs {
		fmt.Fprintf(&b, "  %-16s %2d seeds: %v\n", inv, len(failed[inv]), failed[inv])
	}
	for _, inv := range invs {
		fmt.Fprintf(&b, "\n==== example for %s ====\n%s", inv, examples[inv])
	}
	t.Errorf("%s", b.String())
}

func kmcSeeds(t *testing.T) ([]uint64, bool) {
	if s := os.Getenv("ANARCHON_KV_MODEL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ANARCHON_KV_MODEL_SEED=%q: %v", s, err)
		}
		return []uint64{seed}, true
	}
	n := kmcDefaultSeeds
	if s := os.Getenv("ANARCHON_KV_MODEL_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("ANARCHON_KV_MODEL_SEEDS=%q: want a positive number", s)
		}
		n = v
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds, false
}

// ---- the plan ----

type kmcJob struct {
	name     string
	interval time.Duration
	lease    time.Duration // whole seconds: the server counts TTLs in seconds
	maxLate  time.Duration
	skip     bool
	catchUp  scheduler.CatchUpPolicy
	window   time.Duration
	maxRun   time.Duration
}

type kmcAction struct {
	at   time.Duration // since the start of the fault phase
	kind string        // start, crash, pause, stop, restart, runnow
	inst int
	dur  time.Duration
	job  int
}

type kmcWindow struct {
	from, to time.Duration
	p        float64
}

type kmcPlan struct {
	seed    uint64
	jobs    []kmcJob
	actions []kmcAction
	flaky   [][]kmcWindow
}

func kmcMS(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func kmcNewPlan(seed uint64) *kmcPlan {
	r := rand.New(rand.NewPCG(seed, seed^0x6b76_6d6f_6465_6c21))
	p := &kmcPlan{seed: seed, flaky: make([][]kmcWindow, kmcInstances)}
	for i := range 1 + r.IntN(2) {
		iv := time.Duration(1+r.IntN(2)) * time.Second
		j := kmcJob{
			name:     fmt.Sprintf("kmc%d_j%d", seed, i),
			interval: iv,
			lease:    time.Duration(1+r.IntN(2)) * time.Second,
			maxLate:  kmcMS(300 + r.IntN(int(iv/time.Millisecond)-299)),
			skip:     r.IntN(3) == 0,
			window:   kmcMS(2000 + r.IntN(4000)),
			maxRun:   kmcMS(50 + r.IntN(int(iv/time.Millisecond))),
		}
		switch r.IntN(4) {
		case 0:
			j.catchUp = scheduler.CatchUpLatest
		case 1:
			j.catchUp = scheduler.CatchUpAll
		}
		p.jobs = append(p.jobs, j)
	}
	faultMS := int(kmcFaultPhase / time.Millisecond)
	for s := range kmcInstances {
		p.actions = append(p.actions, kmcAction{at: kmcMS(r.IntN(300)), kind: "start", inst: s})
		if r.Float64() < 0.3 {
			p.actions = append(p.actions, kmcAction{at: kmcMS(500 + r.IntN(faultMS-1000)), kind: "crash", inst: s})
		}
		if r.Float64() < 0.5 {
			p.actions = append(p.actions, kmcAction{at: kmcMS(500 + r.IntN(faultMS-1000)), kind: "pause", inst: s, dur: kmcMS(300 + r.IntN(2500))})
		}
		if r.Float64() < 0.3 {
			at := kmcMS(800 + r.IntN(faultMS-1500))
			stop := kmcAction{at: at, kind: "stop", inst: s}
			if r.IntN(3) > 0 {
				stop.dur = kmcMS(r.IntN(1500))
			}
			p.actions = append(p.actions, stop)
			if r.IntN(2) == 0 {
				p.actions = append(p.actions, kmcAction{at: at - kmcMS(r.IntN(700)), kind: "runnow", inst: s, job: r.IntN(len(p.jobs))})
			}
			if back := at + kmcMS(r.IntN(2000)); back < kmcFaultPhase {
				p.actions = append(p.actions, kmcAction{at: back, kind: "restart", inst: s})
			}
		}
		for range r.IntN(3) {
			from := kmcMS(r.IntN(faultMS - 500))
			p.flaky[s] = append(p.flaky[s], kmcWindow{from: from, to: min(kmcFaultPhase, from+kmcMS(500+r.IntN(2500))), p: 0.1 + 0.4*r.Float64()})
		}
	}
	slices.SortStableFunc(p.actions, func(a, b kmcAction) int { return cmp.Compare(a.at, b.at) })
	return p
}

func (p *kmcPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d instances, call timeout %v, fault phase %v, quiet %v\n", p.seed, kmcInstances, kmcCallTimeout, kmcFaultPhase, kmcQuietPhase)
	for _, j := range p.jobs {
		fmt.Fprintf(&b, "  %s: every %v, lease %v, maxLate %v, overlap skip %v, catch-up %s/%v, handler ≤ %v\n", j.name, j.interval, j.lease, j.maxLate, j.skip, j.catchUp, j.window, j.maxRun)
	}
	for _, a := range p.actions {
		fmt.Fprintf(&b, "  +%v %s %c", a.at, a.kind, 'A'+a.inst)
		switch a.kind {
		case "pause":
			fmt.Fprintf(&b, " heartbeats for %v", a.dur)
		case "stop":
			fmt.Fprintf(&b, " with a %v deadline", a.dur)
		case "runnow":
			fmt.Fprintf(&b, " %s", p.jobs[a.job].name)
		}
		b.WriteByte('\n')
	}
	for s, ws := range p.flaky {
		for _, w := range ws {
			fmt.Fprintf(&b, "  flaky %c from +%v to +%v, p=%.2f\n", 'A'+s, w.from, w.to, w.p)
		}
	}
	return b.String()
}

func kmcMix(parts ...uint64) uint64 {
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

func kmcStr(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func kmcUnit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// ---- one seed ----

type kmcKey struct {
	job  string
	slot int64
}

type kmcEntry struct {
	at   time.Duration
	inst string
	key  kmcKey
	text string
}

type kmcHandler struct {
	in                     *kmcInst
	key                    kmcKey
	manual                 bool
	token                  string
	fence                  uint64
	attempt                int
	start, end             time.Duration
	startSeq, endSeq       uint64
	ended                  bool
	how                    string
	crashedBeforeReturning bool
}

// kmcGrant is a lease the store granted (a won answer with a new fence), as far as
// the record can tell in real time.
type kmcGrant struct {
	key       kmcKey
	token     string
	inst      string
	fence     uint64
	attempt   int
	sent      time.Duration // the winning call was sent (the grant is applied after)
	answered  time.Duration
	answerSeq uint64
	// endLo is the earliest the lease can have ended in the store: a lease TTL after
	// the send of the last successful claim or heartbeat, or the send of the release
	// or finish that ended it.
	endLo time.Duration
}

type kmcSave struct {
	key    kmcKey
	at     time.Duration
	status scheduler.Status
	manual bool
}

type kmcStop struct {
	in       *kmcInst
	called   time.Duration
	deadline time.Duration
	returned time.Duration
	retSeq   uint64
	done     bool
	reap     bool
}

type kmcViolation struct {
	inv  string
	keys []kmcKey
	inst string
	msg  string
}

type kmcSeedRun struct {
	plan     *kmcPlan
	srv      *embedded.Server
	bucket   string
	t0       time.Time
	faultAt  time.Duration
	quietAt  time.Duration
	endAt    time.Duration
	setupErr error

	mu       sync.Mutex
	seq      uint64
	entries  []kmcEntry
	handlers []*kmcHandler
	grants   map[kmcKey][]*kmcGrant
	saves    []kmcSave
	stops    []*kmcStop

	cur   []*kmcInst
	gen   []int
	all   []*kmcInst
	bg    sync.WaitGroup
	clean []func()

	violations []kmcViolation
}

func (r *kmcSeedRun) now() time.Duration { return time.Since(r.t0) }

func (r *kmcSeedRun) log(in *kmcInst, key kmcKey, format string, args ...any) {
	name := ""
	if in != nil {
		name = in.name
	}
	r.mu.Lock()
	r.entries = append(r.entries, kmcEntry{at: r.now(), inst: name, key: key, text: fmt.Sprintf(format, args...)})
	r.mu.Unlock()
}

func kmcRunSeed(srv *embedded.Server, p *kmcPlan) *kmcSeedRun {
	r := &kmcSeedRun{
		plan: p, srv: srv, t0: time.Now(), grants: map[kmcKey][]*kmcGrant{},
		bucket: fmt.Sprintf("kmc_%d", p.seed),
		cur:    make([]*kmcInst, kmcInstances), gen: make([]int, kmcInstances),
	}
	defer func() {
		for i := len(r.clean) - 1; i >= 0; i-- {
			r.clean[i]()
		}
	}()
	r.faultAt = r.now()
	for _, a := range p.actions {
		if d := r.faultAt + a.at - r.now(); d > 0 {
			time.Sleep(d)
		}
		if err := r.act(a); err != nil {
			r.setupErr = err
			r.finalStop()
			return r
		}
	}
	if d := r.faultAt + kmcFaultPhase - r.now(); d > 0 {
		time.Sleep(d)
	}
	r.quietAt = r.now()
	r.log(nil, kmcKey{}, "QUIET: faults end; every down or crashed instance gets a fresh one")
	for s, in := range r.cur {
		if in == nil || in.down || in.dead.Load() {
			if _, err := r.start(s); err != nil {
				r.setupErr = err
				r.finalStop()
				return r
			}
		}
	}
	time.Sleep(kmcQuietPhase)
	r.endAt = r.now()
	r.finalStop()
	r.check()
	return r
}

func (r *kmcSeedRun) finalStop() {
	r.log(nil, kmcKey{}, "END: stopping every instance with a %v deadline", kmcFinalStop)
	for _, in := range r.cur {
		if in != nil && !in.down && !in.dead.Load() {
			r.stop(in, kmcFinalStop, false)
		}
	}
	r.bg.Wait()
	r.log(nil, kmcKey{}, "all stopped")
}

func (r *kmcSeedRun) act(a kmcAction) error {
	in := r.cur[a.inst]
	up := in != nil && !in.down && !in.dead.Load()
	switch a.kind {
	case "start", "restart":
		if !up {
			_, err := r.start(a.inst)
			return err
		}
	case "crash":
		if up {
			in.dead.Store(true)
			close(in.crashed)
			r.log(in, kmcKey{}, "CRASH: every store call from now on hangs and fails; its handlers are gone")
			r.stop(in, 0, true)
		}
	case "pause":
		if up {
			until := r.now() + a.dur
			in.pauseUntil.Store(int64(until))
			r.log(in, kmcKey{}, "PAUSE heartbeats until +%v", until.Round(time.Millisecond))
		}
	case "stop":
		if up {
			r.stop(in, a.dur, false)
		}
	case "runnow":
		if up {
			job := r.plan.jobs[a.job].name
			r.log(in, kmcKey{}, "RUNNOW %s called", job)
			r.bg.Add(1)
			go func() {
				defer r.bg.Done()
				rr, err := in.sched.RunNow(context.Background(), job)
				r.log(in, kmcKey{}, "RUNNOW %s returned: status %q err %v", job, rr.Status, err)
			}()
		}
	}
	return nil
}

func (r *kmcSeedRun) start(slot int) (*kmcInst, error) {
	r.gen[slot]++
	name := string(rune('A' + slot))
	if r.gen[slot] > 1 {
		name += strconv.Itoa(r.gen[slot])
	}
	off := kmcMS(int(kmcMix(r.plan.seed, 7, uint64(slot), uint64(r.gen[slot]))%1001) - 500)
	nc, err := r.srv.Connect()
	if err != nil {
		return nil, err
	}
	r.clean = append(r.clean, nc.Close)
	j, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}
	store, err := kvlease.New(j, kvlease.WithBucket(r.bucket), kvlease.WithStorage(natsjs.MemoryStorage))
	if err != nil {
		return nil, err
	}
	r.clean = append(r.clean, store.Close)
	b, err := jetstream.NewLeased(j, store, jetstream.WithStorage(natsjs.MemoryStorage))
	if err != nil {
		return nil, err
	}
	in := &kmcInst{r: r, slot: slot, name: name, crashed: make(chan struct{}), calls: map[string]uint64{}, nc: nc}
	s, err := scheduler.New(scheduler.Config{
		Backend:     &kmcBackend{in: in, b: b},
		Instance:    name,
		Clock:       scheduler.OffsetClock{Offset: off},
		OnEvent:     in.onEvent,
		CallTimeout: kmcCallTimeout,
	})
	if err != nil {
		return nil, err
	}
	for _, job := range r.plan.jobs {
		opts := []scheduler.JobOption{scheduler.WithLease(job.lease), scheduler.WithMaxLate(job.maxLate), scheduler.WithHistory(1000, 0)}
		if job.skip {
			opts = append(opts, scheduler.WithOverlap(scheduler.OverlapSkip))
		}
		if job.catchUp != scheduler.CatchUpNone {
			opts = append(opts, scheduler.WithCatchUp(job.catchUp, job.window))
		}
		if err := s.Every(job.name, job.interval, in.handler(job), opts...); err != nil {
			return nil, err
		}
	}
	in.sched = s
	r.cur[slot] = in
	r.all = append(r.all, in)
	r.log(in, kmcKey{}, "START (clock offset %v)", off)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return in, nil
}

func (r *kmcSeedRun) stop(in *kmcInst, timeout time.Duration, reap bool) {
	in.down = true
	st := &kmcStop{in: in, called: r.now(), deadline: r.now() + timeout, reap: reap}
	r.mu.Lock()
	r.stops = append(r.stops, st)
	r.mu.Unlock()
	r.log(in, kmcKey{}, "STOP called (deadline +%v, reap of a crashed instance: %v)", timeout, reap)
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := in.sched.Stop(ctx)
		r.mu.Lock()
		r.seq++
		st.returned, st.retSeq, st.done = r.now(), r.seq, true
		r.mu.Unlock()
		r.log(in, kmcKey{}, "STOP returned: %v", err)
	}()
}

// ---- an instance and its faulty view of the stores ----

type kmcInst struct {
	r          *kmcSeedRun
	slot       int
	name       string
	nc         *nats.Conn
	sched      *scheduler.Scheduler
	down       bool // Stop called; only the seed's driver goroutine touches it
	dead       atomic.Bool
	crashed    chan struct{}
	pauseUntil atomic.Int64 // since t0

	callMu sync.Mutex
	calls  map[string]uint64
}

func (in *kmcInst) handler(j kmcJob) scheduler.Handler {
	return func(ctx context.Context, run scheduler.Run) error {
		if in.dead.Load() {
			return fmt.Errorf("%s is dead", in.name)
		}
		r := in.r
		key := kmcKey{run.Job, run.Slot.UnixMilli()}
		hr := &kmcHandler{in: in, key: key, manual: run.Manual, token: run.Token, fence: run.Fence, attempt: run.Attempt}
		r.mu.Lock()
		r.seq++
		hr.start, hr.startSeq = r.now(), r.seq
		r.handlers = append(r.handlers, hr)
		r.entries = append(r.entries, kmcEntry{at: hr.start, inst: in.name, key: key, text: fmt.Sprintf("HANDLER START attempt=%d fence=%d tok=%s manual=%v", run.Attempt, run.Fence, kmcTok(run.Token), run.Manual)})
		r.mu.Unlock()
		u := kmcUnit(kmcMix(r.plan.seed, kmcStr(j.name), uint64(run.Slot.UnixMilli()), uint64(run.Attempt), kmcStr(in.name)))
		d := time.Duration(u * float64(j.maxRun))
		if run.Manual {
			d = 3*time.Second + time.Duration(u*float64(3*time.Second))
		}
		d = d.Round(time.Millisecond)
		t := time.NewTimer(d)
		defer t.Stop()
		var how string
		var err error
		select {
		case <-t.C:
			how = "returned after " + d.String()
		case <-ctx.Done():
			err = context.Cause(ctx)
			how = "cancelled: " + err.Error()
		case <-in.crashed:
			how, err = "gone with its crashed process", fmt.Errorf("%s crashed", in.name)
		}
		r.mu.Lock()
		r.seq++
		hr.end, hr.endSeq, hr.ended, hr.how = r.now(), r.seq, true, how
		r.entries = append(r.entries, kmcEntry{at: hr.end, inst: in.name, key: key, text: fmt.Sprintf("HANDLER END attempt=%d fence=%d: %s", run.Attempt, run.Fence, how)})
		r.mu.Unlock()
		return err
	}
}

func (in *kmcInst) onEvent(e scheduler.Event) {
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
	if e.Status != "" {
		fmt.Fprintf(&b, " status=%s", e.Status)
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
	key := kmcKey{job: e.Job}
	if !e.Slot.IsZero() {
		key.slot = e.Slot.UnixMilli()
	}
	in.r.log(in, key, "%s", b.String())
}

func kmcTok(tok string) string {
	if len(tok) > 6 {
		return tok[:6]
	}
	return tok
}

type kmcFault int

const (
	kmcNoFault kmcFault = iota
	kmcLostAnswer
	kmcLostRequest
	kmcSlow
)

func (in *kmcInst) decide(op string, key kmcKey) (kmcFault, time.Duration) {
	r := in.r
	now := r.now()
	var p float64
	for _, w := range r.plan.flaky[in.slot] {
		if now >= r.faultAt+w.from && now < r.faultAt+w.to {
			p = max(p, w.p)
		}
	}
	if p == 0 {
		return kmcNoFault, 0
	}
	k := fmt.Sprintf("%s/%s/%d", op, key.job, key.slot)
	in.callMu.Lock()
	n := in.calls[k]
	in.calls[k] = n + 1
	in.callMu.Unlock()
	x := kmcMix(r.plan.seed, kmcStr(in.name), kmcStr(k), n)
	u, u2 := kmcUnit(x), kmcUnit(kmcMix(x))
	wait := 30*time.Millisecond + time.Duration(u2*float64(900*time.Millisecond)).Round(time.Millisecond)
	switch {
	case u < p*0.6:
		return kmcLostAnswer, wait
	case u < p*0.8:
		return kmcLostRequest, wait
	case u < p:
		return kmcSlow, time.Duration(u2 * float64(300*time.Millisecond)).Round(time.Millisecond)
	}
	return kmcNoFault, 0
}

func kmcWait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var errKMCCrashed = errors.New("modelcheck: instance crashed")

// kmcDo runs one store call of in through its faults; observe gets the store's
// answer with when the call was sent (it is not called when the store never saw it).
func kmcDo[T any](in *kmcInst, ctx context.Context, op string, key kmcKey, apply func(context.Context) (T, error), observe func(sent time.Duration, v T, err error, note string)) (T, error) {
	var zero T
	r := in.r
	if in.dead.Load() {
		kmcWait(ctx, 10*time.Second)
		return zero, fmt.Errorf("%w: %s %s", errKMCCrashed, in.name, op)
	}
	if op == "heartbeat" {
		if until := time.Duration(in.pauseUntil.Load()); until > r.now() {
			r.log(in, key, "heartbeat held by a pause until +%v", until.Round(time.Millisecond))
			if !kmcWait(ctx, until-r.now()) {
				return zero, fmt.Errorf("modelcheck: %s paused, heartbeat not sent: %w", in.name, ctx.Err())
			}
		}
	}
	fault, d := in.decide(op, key)
	switch fault {
	case kmcLostRequest:
		r.log(in, key, "%s REQUEST LOST (never sent; error after %v)", op, d)
		if !kmcWait(ctx, d) {
			return zero, fmt.Errorf("modelcheck: %s request lost: %w", op, ctx.Err())
		}
		return zero, fmt.Errorf("modelcheck: %s request lost, no answer in %v", op, d)
	case kmcSlow:
		if !kmcWait(ctx, d) {
			return zero, fmt.Errorf("modelcheck: %s slow: %w", op, ctx.Err())
		}
	}
	sent := r.now()
	v, err := apply(ctx)
	note := ""
	switch fault {
	case kmcLostAnswer:
		note = fmt.Sprintf(" — ANSWER LOST (caller gets an error after %v)", d)
	case kmcSlow:
		note = fmt.Sprintf(" (request delayed %v)", d)
	}
	observe(sent, v, err, note)
	if fault == kmcLostAnswer {
		if !kmcWait(ctx, d) {
			return zero, fmt.Errorf("modelcheck: %s answer lost: %w", op, ctx.Err())
		}
		return zero, fmt.Errorf("modelcheck: %s answer lost, no answer in %v", op, d)
	}
	return v, err
}

// kmcBackend is one instance's view of its LeasedBackend. It forwards every optional
// interface the LeasedBackend has.
type kmcBackend struct {
	in *kmcInst
	b  *jetstream.LeasedBackend
}

var (
	_ scheduler.Backend       = (*kmcBackend)(nil)
	_ scheduler.ClaimRecorder = (*kmcBackend)(nil)
	_ scheduler.LeaseBackend  = (*kmcBackend)(nil)
	_ scheduler.JobWindower   = (*kmcBackend)(nil)
	_ scheduler.JobChecker    = (*kmcBackend)(nil)
)

func (m *kmcBackend) Name() string                                  { return m.b.Name() }
func (m *kmcBackend) DedupeWindow() time.Duration                   { return m.b.DedupeWindow() }
func (m *kmcBackend) WindowFor(j scheduler.JobLimits) time.Duration { return m.b.WindowFor(j) }
func (m *kmcBackend) CheckJob(j scheduler.JobLimits) error          { return m.b.CheckJob(j) }
func (m *kmcBackend) Init(ctx context.Context) error                { return m.b.Init(ctx) }
func (m *kmcBackend) Close(ctx context.Context) error               { return m.b.Close(ctx) }
func (m *kmcBackend) Runs() scheduler.RunStore                      { return &kmcRuns{in: m.in, s: m.b.Runs()} }
func (m *kmcBackend) PrepareJob(ctx context.Context, j scheduler.JobLimits) error {
	return m.b.PrepareJob(ctx, j)
}

func (m *kmcBackend) History(ctx context.Context, job string, limit int) ([]scheduler.RunRecord, error) {
	return m.b.History(ctx, job, limit)
}

func (m *kmcBackend) Claim(ctx context.Context, in scheduler.ClaimInput) (bool, error) {
	key := kmcKey{in.Job, in.Slot.UnixMilli()}
	return kmcDo(m.in, ctx, "history-claim", key, func(ctx context.Context) (bool, error) {
		return m.b.Claim(ctx, in)
	}, func(_ time.Duration, won bool, err error, note string) {
		m.in.r.log(m.in, key, "history claim tok=%s (to record a slot that did not run) → won=%v %v%s", kmcTok(in.Token), won, kmcErrText(err), note)
	})
}

func (m *kmcBackend) RecordClaim(ctx context.Context, in scheduler.ClaimInput) error {
	key := kmcKey{in.Job, in.Slot.UnixMilli()}
	_, err := kmcDo(m.in, ctx, "record-claim", key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.b.RecordClaim(ctx, in)
	}, func(_ time.Duration, _ struct{}, err error, note string) {
		m.in.r.log(m.in, key, "history record-claim tok=%s attempt=%d → %v%s", kmcTok(in.Token), in.Attempt, kmcErrText(err), note)
	})
	return err
}

func (m *kmcBackend) RecordManualRun(ctx context.Context, in scheduler.ClaimInput) (time.Time, error) {
	return kmcDo(m.in, ctx, "manual-run", kmcKey{job: in.Job}, func(ctx context.Context) (time.Time, error) {
		return m.b.RecordManualRun(ctx, in)
	}, func(_ time.Duration, _ time.Time, err error, note string) {
		m.in.r.log(m.in, kmcKey{job: in.Job}, "history manual run tok=%s → %v%s", kmcTok(in.Token), kmcErrText(err), note)
	})
}

func (m *kmcBackend) SaveResult(ctx context.Context, job string, res scheduler.StoredResult, keep scheduler.Retention) error {
	key := kmcKey{job, res.Slot.UnixMilli()}
	_, err := kmcDo(m.in, ctx, "save", key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.b.SaveResult(ctx, job, res, keep)
	}, func(_ time.Duration, _ struct{}, err error, note string) {
		r := m.in.r
		if err == nil {
			r.mu.Lock()
			r.saves = append(r.saves, kmcSave{key: key, at: r.now(), status: res.Status, manual: res.Manual})
			r.mu.Unlock()
		}
		r.log(m.in, key, "history save tok=%s for %s attempt=%d status=%s → %v%s", kmcTok(res.Token), res.Instance, res.Attempt, res.Status, kmcErrText(err), note)
	})
	return err
}

type kmcRuns struct {
	in *kmcInst
	s  scheduler.RunStore
}

func (m *kmcRuns) Claim(ctx context.Context, rc scheduler.RunClaim) (scheduler.ClaimResult, error) {
	key := kmcKey{rc.Job, rc.Slot.UnixMilli()}
	return kmcDo(m.in, ctx, "claim", key, func(ctx context.Context) (scheduler.ClaimResult, error) {
		return m.s.Claim(ctx, rc)
	}, func(sent time.Duration, res scheduler.ClaimResult, err error, note string) {
		r := m.in.r
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seq++
		now := r.now()
		if err == nil && res.Outcome == scheduler.OutcomeWon {
			gs := r.grants[key]
			var g *kmcGrant
			for _, x := range gs {
				if x.fence == res.Fence {
					g = x
				}
			}
			ttl := rc.Lease.Round(time.Second) // whole seconds, as kvlease stores it
			if ttl < rc.Lease {
				ttl += time.Second
			}
			if g == nil {
				r.grants[key] = append(gs, &kmcGrant{key: key, token: rc.Token, inst: m.in.name, fence: res.Fence, attempt: res.Attempt,
					sent: sent, answered: now, answerSeq: r.seq, endLo: sent + ttl})
			}
		}
		var txt string
		if err != nil {
			txt = fmt.Sprintf("store claim tok=%s takeoverOnly=%v → error %v%s", kmcTok(rc.Token), rc.TakeoverOnly, err, note)
		} else {
			txt = fmt.Sprintf("store claim tok=%s takeoverOnly=%v → %s attempt=%d fence=%d holder=%s status=%s%s",
				kmcTok(rc.Token), rc.TakeoverOnly, res.Outcome, res.Attempt, res.Fence, res.Holder, res.Status, note)
		}
		r.entries = append(r.entries, kmcEntry{at: now, inst: m.in.name, key: key, text: txt})
	})
}

// latestGrant is the newest grant of key held by token; nil if none. Under r.mu.
func (r *kmcSeedRun) latestGrant(key kmcKey, token string) *kmcGrant {
	gs := r.grants[key]
	if len(gs) == 0 || gs[len(gs)-1].token != token {
		return nil
	}
	return gs[len(gs)-1]
}

func (m *kmcRuns) Heartbeat(ctx context.Context, job string, slot time.Time, token string, lease time.Duration) error {
	key := kmcKey{job, slot.UnixMilli()}
	_, err := kmcDo(m.in, ctx, "heartbeat", key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.s.Heartbeat(ctx, job, slot, token, lease)
	}, func(sent time.Duration, _ struct{}, err error, note string) {
		r := m.in.r
		r.mu.Lock()
		defer r.mu.Unlock()
		ttl := lease.Round(time.Second)
		if ttl < lease {
			ttl += time.Second
		}
		if g := r.latestGrant(key, token); g != nil && err == nil {
			g.endLo = max(g.endLo, sent+ttl)
		}
		r.entries = append(r.entries, kmcEntry{at: r.now(), inst: m.in.name, key: key, text: fmt.Sprintf("store heartbeat tok=%s → %v%s", kmcTok(token), kmcErrText(err), note)})
	})
	return err
}

func (m *kmcRuns) ended(key kmcKey, token string, sent time.Duration, err error) {
	r := m.in.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.latestGrant(key, token); g != nil && err == nil && sent < g.endLo {
		g.endLo = sent
	}
}

func (m *kmcRuns) Finish(ctx context.Context, job string, slot time.Time, token string, status scheduler.Status) error {
	key := kmcKey{job, slot.UnixMilli()}
	_, err := kmcDo(m.in, ctx, "finish", key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.s.Finish(ctx, job, slot, token, status)
	}, func(sent time.Duration, _ struct{}, err error, note string) {
		m.ended(key, token, sent, err)
		m.in.r.log(m.in, key, "store finish tok=%s status=%s → %v%s", kmcTok(token), status, kmcErrText(err), note)
	})
	return err
}

func (m *kmcRuns) Release(ctx context.Context, job string, slot time.Time, token string) error {
	key := kmcKey{job, slot.UnixMilli()}
	_, err := kmcDo(m.in, ctx, "release", key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.s.Release(ctx, job, slot, token)
	}, func(sent time.Duration, _ struct{}, err error, note string) {
		m.ended(key, token, sent, err)
		m.in.r.log(m.in, key, "store release tok=%s → %v%s", kmcTok(token), kmcErrText(err), note)
	})
	return err
}

func (m *kmcRuns) Active(ctx context.Context, job string) ([]scheduler.ActiveRun, error) {
	return kmcDo(m.in, ctx, "active", kmcKey{job: job}, func(ctx context.Context) ([]scheduler.ActiveRun, error) {
		return m.s.Active(ctx, job)
	}, func(_ time.Duration, runs []scheduler.ActiveRun, err error, note string) {
		m.in.r.log(m.in, kmcKey{job: job}, "store active → %d runs %v%s", len(runs), kmcErrText(err), note)
	})
}

func (m *kmcRuns) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	w, ok := m.s.(scheduler.LeaseWatcher)
	if !ok {
		return nil, errors.New("modelcheck: the store cannot watch")
	}
	if m.in.dead.Load() {
		return nil, fmt.Errorf("%w: %s watch", errKMCCrashed, m.in.name)
	}
	if f, _ := m.in.decide("watch", kmcKey{job, slot.UnixMilli()}); f != kmcNoFault {
		return nil, errors.New("modelcheck: watch failed")
	}
	return w.WatchRun(ctx, job, slot)
}

var _ scheduler.LeaseWatcher = (*kmcRuns)(nil)

func kmcErrText(err error) string {
	if err == nil {
		return "ok"
	}
	return "error " + err.Error()
}

// ---- the check ----

var kmcTerminal = map[scheduler.Status]bool{
	scheduler.StatusOK: true, scheduler.StatusError: true, scheduler.StatusTimeout: true,
	scheduler.StatusSkipped: true, scheduler.StatusLate: true,
}

func kmcAt(d time.Duration) string { return fmt.Sprintf("+%.3fs", d.Seconds()) }

func (r *kmcSeedRun) rel(slot int64) string { return kmcAt(time.UnixMilli(slot).Sub(r.t0)) }

func (r *kmcSeedRun) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	add := func(inv string, keys []kmcKey, inst, format string, args ...any) {
		r.violations = append(r.violations, kmcViolation{inv: inv, keys: keys, inst: inst, msg: fmt.Sprintf(format, args...)})
	}
	jobs := map[string]kmcJob{}
	for _, j := range r.plan.jobs {
		jobs[j.name] = j
	}
	endSeq := func(h *kmcHandler) uint64 {
		if h.ended {
			return h.endSeq
		}
		return 1<<64 - 1
	}
	overlap := func(a, b *kmcHandler) bool { return b.startSeq < endSeq(a) && a.startSeq < endSeq(b) }

	byKey := map[kmcKey][]*kmcHandler{}
	byJob := map[string][]*kmcHandler{}
	for _, h := range r.handlers {
		if !h.ended {
			add("6-stop", []kmcKey{h.key}, h.in.name, "handler attempt=%d of %s slot %s never returned", h.attempt, h.key.job, r.rel(h.key.slot))
		}
		if h.manual {
			continue
		}
		byKey[h.key] = append(byKey[h.key], h)
		byJob[h.key.job] = append(byJob[h.key.job], h)
	}
	order := func(hs []*kmcHandler) {
		slices.SortStableFunc(hs, func(a, b *kmcHandler) int { return cmp.Compare(a.startSeq, b.startSeq) })
	}
	for key, hs := range byKey {
		order(hs)
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if overlap(a, b) {
					add("1-one-handler", []kmcKey{key}, "", "%s slot %s: handlers overlap: %s attempt=%d [%s, %s) and %s attempt=%d [%s, %s)",
						key.job, r.rel(key.slot), a.in.name, a.attempt, kmcAt(a.start), kmcAt(a.end), b.in.name, b.attempt, kmcAt(b.start), kmcAt(b.end))
				}
			}
			if i > 0 && a.fence <= hs[i-1].fence {
				add("5-fence", []kmcKey{key}, "", "%s slot %s: handler of %s (attempt %d) started with fence %d, not above the previous handler's %d",
					key.job, r.rel(key.slot), a.in.name, a.attempt, a.fence, hs[i-1].fence)
			}
		}
	}
	for job, hs := range byJob {
		if !jobs[job].skip {
			continue
		}
		order(hs)
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if a.key != b.key && overlap(a, b) {
					add("1b-overlap-skip", []kmcKey{a.key, b.key}, "", "%s forbids overlap but slot %s (%s attempt %d, [%s, %s)) and slot %s (%s attempt %d, [%s, %s)) ran at once",
						job, r.rel(a.key.slot), a.in.name, a.attempt, kmcAt(a.start), kmcAt(a.end), r.rel(b.key.slot), b.in.name, b.attempt, kmcAt(b.start), kmcAt(b.end))
				}
			}
		}
	}

	// 2 and 5 from the grants.
	for key, gs := range r.grants {
		slices.SortStableFunc(gs, func(a, b *kmcGrant) int { return cmp.Compare(a.fence, b.fence) })
		for i, g := range gs {
			if i > 0 {
				prev := gs[i-1]
				if g.attempt <= prev.attempt || g.token == prev.token {
					add("5-fence", []kmcKey{key}, "", "%s slot %s: fence %d (attempt %d, %s) after fence %d (attempt %d, %s)",
						key.job, r.rel(key.slot), g.fence, g.attempt, g.inst, prev.fence, prev.attempt, prev.inst)
				}
				if g.answered+kmcStoreSlack < prev.endLo {
					add("2-lease-order", []kmcKey{key}, "", "%s slot %s: attempt %d (%s) was answered won at %s, but attempt %d's lease (%s) could not expire before %s",
						key.job, r.rel(key.slot), g.attempt, g.inst, kmcAt(g.answered), prev.attempt, prev.inst, kmcAt(prev.endLo))
				}
				for _, h := range byKey[key] {
					if h.fence == prev.fence && endSeq(h) > g.answerSeq {
						add("2-lease-order", []kmcKey{key}, "", "%s slot %s: %s's handler (attempt %d) still ran when %s's takeover (attempt %d) was answered at %s; it ended at %s",
							key.job, r.rel(key.slot), h.in.name, h.attempt, g.inst, g.attempt, kmcAt(g.answered), kmcAt(h.end))
					}
				}
			}
		}
		for _, h := range byKey[key] {
			known := false
			for _, g := range gs {
				known = known || (g.fence == h.fence && g.token == h.token)
			}
			if !known {
				add("5-fence", []kmcKey{key}, "", "%s slot %s: %s ran fence %d, which no answer granted to its token", key.job, r.rel(key.slot), h.in.name, h.fence)
			}
		}
	}

	// 3: one fate.
	fates := map[kmcKey]map[string]time.Duration{}
	note := func(key kmcKey, fate string, at time.Duration) {
		if fates[key] == nil {
			fates[key] = map[string]time.Duration{}
		}
		if t, ok := fates[key][fate]; !ok || at < t {
			fates[key][fate] = at
		}
	}
	for key, hs := range byKey {
		for _, h := range hs {
			note(key, "run", h.start)
		}
	}
	for _, s := range r.saves {
		if !s.manual && (s.status == scheduler.StatusSkipped || s.status == scheduler.StatusLate) {
			note(s.key, string(s.status), s.at)
		}
	}
	for key, m := range fates {
		if len(m) > 1 {
			var parts []string
			for f, at := range m {
				parts = append(parts, fmt.Sprintf("%s at %s", f, kmcAt(at)))
			}
			sort.Strings(parts)
			add("3-one-fate", []kmcKey{key}, "", "%s slot %s has more than one fate: %s", key.job, r.rel(key.slot), strings.Join(parts, ", "))
		}
	}

	// 4: History and Active, read through a fresh connection.
	if err := r.checkStored(add); err != nil {
		add("4-terminal", nil, "", "reading the stores: %v", err)
	}

	// 6: Stop.
	slack := 3*kmcCallTimeout + 2*time.Second
	for _, st := range r.stops {
		if st.reap {
			continue
		}
		name := st.in.name
		if !st.done {
			add("6-stop", nil, name, "Stop of %s never returned", name)
			continue
		}
		if st.returned > st.deadline+slack {
			add("6-stop", nil, name, "Stop of %s with deadline %s returned only at %s", name, kmcAt(st.deadline), kmcAt(st.returned))
		}
		for _, h := range r.handlers {
			if h.in != st.in {
				continue
			}
			kind := "scheduled"
			if h.manual {
				kind = "RunNow"
			}
			switch {
			case h.startSeq > st.retSeq:
				add("6-stop", []kmcKey{h.key}, name, "%s %s handler started at %s, after Stop returned at %s", name, kind, kmcAt(h.start), kmcAt(st.returned))
			case endSeq(h) > st.retSeq:
				add("6-stop", []kmcKey{h.key}, name, "Stop of %s returned at %s while its %s handler ran until %s", name, kmcAt(st.returned), kind, kmcAt(h.end))
			case h.start < st.deadline && h.end > st.deadline+kmcCancelSlack:
				add("6-stop", []kmcKey{h.key}, name, "Stop of %s (deadline %s) did not cancel its %s handler, which ran until %s", name, kmcAt(st.deadline), kind, kmcAt(h.end))
			}
		}
	}
	slices.SortStableFunc(r.violations, func(a, b kmcViolation) int { return cmp.Compare(a.inv, b.inv) })
}

// checkStored reads History and Active through an observer that takes part in
// nothing. Called under r.mu.
func (r *kmcSeedRun) checkStored(add func(inv string, keys []kmcKey, inst, format string, args ...any)) error {
	nc, err := r.srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	j, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	store, err := kvlease.New(j, kvlease.WithBucket(r.bucket), kvlease.WithStorage(natsjs.MemoryStorage))
	if err != nil {
		return err
	}
	defer store.Close()
	b, err := jetstream.NewLeased(j, store, jetstream.WithStorage(natsjs.MemoryStorage))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer b.Close(ctx) //nolint:errcheck // only what the observer opened
	for _, job := range r.plan.jobs {
		recs, err := b.History(ctx, job.name, 0)
		if err != nil {
			return fmt.Errorf("history of %s: %w", job.name, err)
		}
		terminal := map[int64][]scheduler.RunRecord{}
		for _, rr := range recs {
			if !rr.Manual && kmcTerminal[rr.Status] {
				terminal[rr.Slot.UnixMilli()] = append(terminal[rr.Slot.UnixMilli()], rr)
			}
		}
		for slot, rs := range terminal {
			if len(rs) > 1 {
				var parts []string
				for _, rr := range rs {
					parts = append(parts, fmt.Sprintf("%s attempt %d by %s", rr.Status, rr.Attempt, rr.Instance))
				}
				add("4-terminal", []kmcKey{{job.name, slot}}, "", "%s slot %s has %d terminal records: %s", job.name, r.rel(slot), len(rs), strings.Join(parts, "; "))
			}
		}
		iv := job.interval.Milliseconds()
		from := r.t0.Add(r.quietAt + time.Second).UnixMilli()
		to := r.t0.Add(r.endAt - 2*time.Second).UnixMilli()
		for slot := (from + iv - 1) / iv * iv; slot <= to; slot += iv {
			if len(terminal[slot]) == 0 {
				add("4-terminal", []kmcKey{{job.name, slot}}, "", "%s slot %s, due in the quiet phase, has no terminal record", job.name, r.rel(slot))
			}
		}
		active, err := store.Active(ctx, job.name)
		if err != nil {
			return fmt.Errorf("active runs of %s: %w", job.name, err)
		}
		for _, a := range active {
			add("4-terminal", []kmcKey{{job.name, a.Slot.UnixMilli()}}, "", "%s slot %s is still unfinished in the run store after every instance stopped (attempt %d by %s, live %v): never taken over",
				job.name, r.rel(a.Slot.UnixMilli()), a.Attempt, a.Instance, a.Live)
		}
	}
	return nil
}

// traceText lists the recorded entries in time order: those about keys (all when keys
// and inst are empty), those of inst, and the ones about no slot.
func (r *kmcSeedRun) traceText(keys []kmcKey, inst string, limit int) string {
	r.mu.Lock()
	entries := slices.Clone(r.entries)
	r.mu.Unlock()
	slices.SortStableFunc(entries, func(a, b kmcEntry) int { return cmp.Compare(a.at, b.at) })
	want := map[kmcKey]bool{}
	for _, k := range keys {
		want[k] = true
	}
	var lines []string
	for _, e := range entries {
		all := len(keys) == 0 && inst == ""
		global := e.key == kmcKey{}
		if !all && !global && !want[e.key] && (inst == "" || e.inst != inst) {
			continue
		}
		where := ""
		if e.key.job != "" {
			where = e.key.job
			if e.key.slot != 0 {
				where += " slot " + r.rel(e.key.slot)
			}
		}
		lines = append(lines, fmt.Sprintf("  %9s %-3s %-28s %s", kmcAt(e.at), e.inst, where, e.text))
	}
	if limit > 0 && len(lines) > limit {
		lines = append(append(slices.Clone(lines[:15]), fmt.Sprintf("  … %d lines left out …", len(lines)-limit)), lines[len(lines)-(limit-15):]...)
	}
	return "trace (real time since the seed began; instance; job and slot):\n" + strings.Join(lines, "\n") + "\n"
}
