package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// startTimeout bounds an instance's Start.
const startTimeout = 15 * time.Second

// Harness carries out one seed's plan and records what happened.
type Harness struct {
	w       *World
	plan    *Plan
	backend func(instance string) (Store, error)
	rec     *record

	mu  sync.Mutex
	cur []*inst // current incarnation per instance slot (nil before the first start)
	gen []int
	// redeployed says the instance slot runs the next release (Job.Next).
	redeployed []bool
	bg         sync.WaitGroup

	quietAt, endAt time.Duration // since t0
	faultAt        atomic.Int64  // since t0; -1 before the fault phase

	// noSettler: the run store is no backend.Settler: the scheduler writes the
	// records beside it, and an attempt whose process died between the two
	// writes has none (set at the first start, under mu).
	noSettler bool
	// noRetrier: the store is no backend.Retrier, so the jobs' retry policies
	// and failures are left out (set at the first start, under mu).
	noRetrier bool
	// noBuffer: the store is no backend.OverlapBufferer, so jobs that buffer
	// skip instead.
	noBuffer bool
	// noCounter: the store is no backend.RunCounter, so jobs run without
	// their run limit.
	noCounter bool
	// noBufferedCounter: the store is no backend.BufferedRunCounter, so jobs
	// that buffer run without their run limit.
	noBufferedCounter bool
	// noEntries: the store is no backend.EntryStore, so jobs with entries run
	// every Interval without them; direct is the harness's own view of the
	// entry store otherwise (set at the first store met, under mu).
	noEntries bool
	direct    backend.EntryStore
	// noCalendars: the store is no backend.CalendarStore, so jobs name no
	// calendar.
	noCalendars bool
	// noMembers: the store is no backend.Membership, so the instances do not
	// share out the slots.
	noMembers bool

	seen map[string]int // set by Check
	cov  map[string]int // set by Check: the pairs of the matrix met
}

// Seen counts what Check met on its way (retries stored, granted, …): the
// summary adds them up, to show the checks were not idle.
func (h *Harness) Seen() map[string]int { return h.seen }

// New prepares a seed of w with plan p. backend gives each new instance its view
// of the seed's shared stores (the harness puts the faults in front); Run calls it
// from its own goroutine, and an error ends the seed. The seed's clock starts now:
// under testing/synctest, call New inside the bubble.
func New(w *World, p *Plan, backend func(instance string) (Store, error)) *Harness {
	h := &Harness{
		w:       w,
		plan:    p,
		backend: backend,
		rec:     newRecord(time.Now(), w),
		cur:     make([]*inst, p.Slots),
		gen:     make([]int, p.Slots),

		redeployed: make([]bool, p.Slots),
	}
	h.faultAt.Store(-1)
	return h
}

// Plan is the seed's plan.
func (h *Harness) Plan() *Plan { return h.plan }

func (h *Harness) now() time.Duration { return h.rec.now() }

// faultStart is when the fault phase started (since t0), or -1 before.
func (h *Harness) faultStart() time.Duration { return time.Duration(h.faultAt.Load()) }

// Run carries out the plan: the fault phase, the quiet phase in which every
// instance slot is up, and a final Stop of every instance. It returns when every
// instance has stopped. An error is the world's (an instance that could not be
// set up); the instances started so far are stopped first.
func (h *Harness) Run() error {
	p := h.plan
	time.Sleep(p.Pre)
	faultStart := h.now()
	h.faultAt.Store(int64(faultStart))
	if err := h.addDirectEntries(); err != nil {
		return err
	}
	for _, a := range p.Actions {
		if d := faultStart + a.At - h.now(); d > 0 {
			time.Sleep(d)
		}
		if err := h.act(a); err != nil {
			h.finalStop()
			return err
		}
	}
	if d := faultStart + p.FaultPhase - h.now(); d > 0 {
		time.Sleep(d)
	}
	h.quietAt = h.now()
	h.rec.global("QUIET: faults end; every down or crashed instance slot gets a fresh instance")
	h.mu.Lock()
	for s, in := range h.cur {
		if in == nil || in.down || in.dead.Load() {
			if err := h.startLocked(s); err != nil {
				h.mu.Unlock()
				h.finalStop()
				return err
			}
		}
	}
	h.mu.Unlock()
	time.Sleep(p.QuietPhase)
	h.endAt = h.now()
	h.finalStop()
	return nil
}

func (h *Harness) finalStop() {
	h.rec.global("END: stopping every instance with a %v deadline", h.w.FinalStop)
	h.mu.Lock()
	for _, in := range h.cur {
		if in != nil && !in.down && !in.dead.Load() {
			h.stopLocked(in, h.w.FinalStop, false)
		}
	}
	h.mu.Unlock()
	h.bg.Wait()
	h.rec.global("all stopped")
}

func (h *Harness) act(a Action) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch a.Kind {
	case ActAddEntry, ActUpdateEntry, ActRemoveEntry:
		return h.entryAct(a)
	case ActCrashHolders:
		j := h.plan.Jobs[a.Job]
		for _, in := range h.rec.running(backend.EntryRunName(j.Name, j.Entries[a.E.Entry].ID)) {
			if in == h.cur[in.slot] && !in.down && !in.dead.Load() {
				in.crash()
				h.stopLocked(in, 0, true)
			}
		}
		return nil
	}
	in := h.cur[a.Slot]
	up := in != nil && !in.down && !in.dead.Load()
	if up && in.frozen() && a.Kind != ActCrash && a.Kind != ActPause && a.Kind != ActRedeploy {
		// A frozen process hears nothing: what an operator asks waits.
		h.rec.instLog(in, "%s not done: the process is frozen", a.Kind)
		return nil
	}
	if a.Kind == ActRedeploy {
		h.redeployed[a.Slot] = true
		if !up || in.frozen() {
			return nil // the next start runs the next release
		}
		h.rec.instLog(in, "REDEPLOY: stopped, and started again with the next release")
		h.stopLocked(in, a.Dur, false)
		return h.startLocked(a.Slot)
	}
	if !up {
		if a.Kind == ActStart || a.Kind == ActRestart {
			return h.startLocked(a.Slot)
		}
		return nil
	}
	switch a.Kind {
	case ActCrash:
		in.crash()
		h.stopLocked(in, 0, true) // reap the dead process's goroutines; its calls reach nothing
	case ActPause:
		in.pause(a.Dur)
	case ActFreeze:
		in.freeze(a.Dur)
	case ActStop:
		h.stopLocked(in, a.Dur, false)
	case ActRunNow:
		h.runNow(in, h.plan.Jobs[a.Job].Name)
	case ActPauseJob:
		h.pauseJob(in, h.plan.Jobs[a.Job].Name, a.Dur)
	case ActBackfill:
		h.backfill(in, h.plan.Jobs[a.Job].Name, a.Dur, a.Rerun)
	case ActCalendar:
		if j := h.job(h.plan.Jobs[a.Job]); j.Calendar {
			h.calendar(in, j.Name, a.Drop)
		}
	}
	return nil
}

// calendar stores, through in, the calendar of job, whose days hold every slot
// of the run (the day before the run to the day after it, in UTC), or deletes
// it; it records the call and its answer.
func (h *Harness) calendar(in *inst, job string, drop bool) {
	h.rec.instLog(in, "CALENDAR of %s called (drop %v)", job, drop)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		called := h.now()
		name := CalendarName(job)
		var err error
		if drop {
			err = in.sched.DeleteCalendar(context.Background(), name, 0)
		} else {
			day := h.rec.t0.UTC()
			_, err = in.sched.PutCalendar(context.Background(), scheduler.Calendar{Name: name, Zone: "UTC", By: in.name,
				Ranges: []scheduler.DateRange{{From: day.AddDate(0, 0, -1).Format(time.DateOnly), To: day.AddDate(0, 0, 1).Format(time.DateOnly)}}}, 0)
		}
		h.rec.calendarWritten(in, job, drop, called, err)
	}()
}

func (h *Harness) startLocked(slot int) error {
	h.gen[slot]++
	name := string(rune('A' + slot))
	if h.gen[slot] > 1 {
		name += strconv.Itoa(h.gen[slot])
	}
	skew := int(h.plan.skew() / time.Millisecond)
	off := MS(int(Mix(h.plan.Seed, 7, uint64(slot), uint64(h.gen[slot]))%uint64(2*skew+1)) - skew)
	store, err := h.backend(name)
	if err != nil {
		return fmt.Errorf("backend of %s: %w", name, err)
	}
	h.entriesSupported(store)
	if _, ok := store.(backend.CalendarStore); !ok && !h.noCalendars {
		h.noCalendars = true
		if slices.ContainsFunc(h.plan.Jobs, func(j Job) bool { return j.Calendar }) {
			h.rec.global("the store is no backend.CalendarStore: jobs name no calendar")
		}
	}
	_, members := store.(backend.Membership)
	if !members && h.plan.Turns && !h.noMembers {
		h.noMembers = true
		h.rec.global("the store is no backend.Membership: every instance claims every slot")
	}
	if _, ok := store.Runs().(backend.Settler); !ok && !h.noSettler {
		h.noSettler = true
		h.rec.global("the run store is no backend.Settler: the scheduler writes the records beside it")
	}
	if _, ok := store.Runs().(backend.Retrier); !ok && !h.noRetrier {
		h.noRetrier = true
		for _, j := range h.plan.Jobs {
			if j.Retry != nil {
				h.rec.global("the run store is no backend.Retrier: no retry policy, no failing attempts")
				break
			}
		}
	}
	if b, ok := store.Runs().(backend.OverlapBufferer); (!ok || !b.BuffersOverlap()) && !h.noBuffer {
		h.noBuffer = true
		for _, j := range h.plan.Jobs {
			if j.Buffer > 0 {
				h.rec.global("the run store is no backend.OverlapBufferer: jobs that buffer skip instead")
				break
			}
		}
	}
	if c, ok := store.Runs().(backend.RunCounter); (!ok || !c.CountsRuns()) && !h.noCounter {
		h.noCounter = true
		for _, j := range h.plan.Jobs {
			if j.MaxRuns > 0 {
				h.rec.global("the run store is no backend.RunCounter: jobs run without their run limit")
				break
			}
		}
	}
	if c, ok := store.Runs().(backend.BufferedRunCounter); (!ok || !c.CountsBufferedRuns()) && !h.noBufferedCounter {
		h.noBufferedCounter = true
		for _, j := range h.plan.Jobs {
			if j.MaxRuns > 0 && j.Buffer > 0 {
				h.rec.global("the run store is no backend.BufferedRunCounter: jobs that buffer run without their run limit")
				break
			}
		}
	}
	in := &inst{h: h, slot: slot, name: name, offset: off, crashed: make(chan struct{}), calls: map[string]uint64{}, jobs: map[string]Job{}, release: h.redeployed[slot], fr: newFreezer()}
	h.tryAbsurd(in, store)
	if h.w.CrashBetweenWrites != nil {
		h.w.CrashBetweenWrites(store, in.crashBetweenWrites)
	}
	s, err := scheduler.New(scheduler.Config{
		Backend:     faulty(in, store),
		Instance:    name,
		Clock:       freezeClock{in: in, offset: off},
		OnEvent:     in.onEvent,
		CallTimeout: h.plan.CallTimeout,
		Turns:       h.plan.Turns && members,
	})
	if err != nil {
		return fmt.Errorf("new scheduler %s: %w", name, err)
	}
	for _, j := range h.plan.Jobs {
		if in.release {
			j = j.Redeployed()
		}
		j = h.job(j)
		in.jobs[j.Name] = j
		opts := []scheduler.JobOption{
			scheduler.WithLease(j.Lease), scheduler.WithMaxLate(j.MaxLate), scheduler.WithHistory(h.w.HistoryKeep, 0),
		}
		switch {
		case j.Skip:
			opts = append(opts, scheduler.WithOverlap(backend.OverlapSkip))
		case j.CancelOther:
			opts = append(opts, scheduler.WithOverlap(backend.OverlapCancelOther))
		case j.Buffer == 1:
			opts = append(opts, scheduler.WithOverlap(backend.OverlapBufferOne))
		case j.Buffer > 1:
			opts = append(opts, scheduler.WithOverlap(backend.OverlapBufferAll), scheduler.WithBufferCap(j.Buffer))
		}
		if j.CatchUp != backend.CatchUpNone {
			opts = append(opts, scheduler.WithCatchUp(j.CatchUp, j.Window))
		}
		if j.MaxRuns > 0 {
			opts = append(opts, scheduler.WithMaxRuns(j.MaxRuns))
		}
		if j.Spread > 0 {
			opts = append(opts, scheduler.WithSpread(j.Spread))
		}
		if j.Deadline > 0 {
			opts = append(opts, scheduler.WithDeadline(j.Deadline))
		}
		if j.slots() > 1 {
			opts = append(opts, scheduler.WithConcurrency(j.slots()))
		}
		if j.Calendar {
			opts = append(opts, scheduler.WithCalendars(CalendarName(j.Name)))
		}
		if j.Retry != nil {
			opts = append(opts, scheduler.WithRetry(*j.Retry))
			if j.Timeout > 0 {
				opts = append(opts, scheduler.WithTimeout(j.Timeout))
			}
		}
		register := func() error { return s.Every(j.Name, j.Interval, in.handler(j), opts...) }
		if j.Declared {
			register = func() error { return s.Declare(j.Name, in.handler(j), opts...) }
		}
		if err := register(); err != nil {
			return fmt.Errorf("register %s on %s: %w", j.Name, name, err)
		}
	}
	in.sched = s
	h.cur[slot] = in
	h.rec.instLog(in, "START (clock offset %v, next release %v)", off, in.release)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	return nil
}

// job is j as the instances register it: without its retry policy, failures
// and timeout when the store cannot store retries, without its entries when it
// keeps none.
func (h *Harness) job(j Job) Job {
	if h.noRetrier {
		j.Retry, j.Fail, j.Timeout = nil, Failing{}, 0
	}
	if h.noBuffer && j.Buffer > 0 {
		j.Buffer, j.Skip = 0, true
	}
	if h.noCounter || h.noBufferedCounter && j.Buffer > 0 {
		j.MaxRuns = 0
	}
	if h.noEntries {
		j.Entries, j.Declared = nil, false
	}
	if h.noCalendars {
		j.Calendar = false
	}
	return j
}

// stopLocked stops in in the background with a deadline of timeout.
func (h *Harness) stopLocked(in *inst, timeout time.Duration, reap bool) {
	in.down = true
	st := &stop{in: in, called: h.now(), deadline: h.now() + timeout, reap: reap}
	h.rec.addStop(st)
	h.rec.instLog(in, "STOP called (deadline +%v, reap of a crashed instance: %v)", timeout, reap)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := in.sched.Stop(ctx)
		h.rec.stopReturned(st, err)
	}()
}

func (h *Harness) runNow(in *inst, job string) {
	h.rec.instLog(in, "RUNNOW %s called", job)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		rr, err := in.sched.RunNow(context.Background(), job)
		h.rec.instLog(in, "RUNNOW %s returned: status %q err %v", job, rr.Status, err)
	}()
}

// backfill backfills job through in over the d before its clock's now.
func (h *Harness) backfill(in *inst, job string, d time.Duration, rerun bool) {
	h.rec.instLog(in, "BACKFILL %s over the last %v (rerun %v) called", job, d, rerun)
	var opts []scheduler.BackfillOption
	if rerun {
		opts = append(opts, scheduler.BackfillRerun())
	}
	h.bg.Go(func() {
		to := in.sched.Clock().Now()
		res, err := in.sched.Backfill(context.Background(), job, to.Add(-d), to, opts...)
		var outcomes []string
		for _, s := range res.Slots {
			outcomes = append(outcomes, fmt.Sprintf("%s %s", s.Slot.Sub(h.rec.t0).Round(time.Millisecond), s.Outcome))
		}
		h.rec.instLog(in, "BACKFILL %s returned: %v; %v", job, errText(err), outcomes)
	})
}

// pauseJob pauses job for d through in (Until is d after in's clock's now), and
// records the pause once it is stored.
func (h *Harness) pauseJob(in *inst, job string, d time.Duration) {
	h.rec.instLog(in, "PAUSE JOB %s for %v called", job, d)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		called := h.now()
		until := in.sched.Clock().Now().Add(d)
		err := in.sched.Pause(context.Background(), job, scheduler.PauseOptions{Reason: "model check", By: in.name, Until: until})
		h.rec.pauseStored(in, job, called, until.Sub(h.rec.t0)-in.offset, err)
	}()
}

// inst is one incarnation of an instance slot: one process.
type inst struct {
	h      *Harness
	slot   int
	name   string
	sched  *scheduler.Scheduler
	offset time.Duration // of its clock from the harness's
	down   bool          // Stop was called (under h.mu)
	// release: it runs the jobs' next release; jobs are the jobs as it
	// registered them.
	release bool
	jobs    map[string]Job

	crashed chan struct{}
	dead    atomic.Bool
	// cut is set when the process dies between two writes of a call, before
	// it is reaped: that call's error says it may be applied in part.
	cut atomic.Bool
	fr  *freezer

	pauseMu    sync.Mutex
	pauseUntil time.Duration

	callMu sync.Mutex
	calls  map[string]uint64
}

// crashBetweenWrites decides whether in's process dies between two writes of
// a store call (at step): now and then while in is flaky, drawn from the seed.
// The process is reaped in the background: the store's call holds no lock of
// the harness.
func (in *inst) crashBetweenWrites(job string, slot time.Time, step string) bool {
	f, _ := in.decide("step-"+step, job, slot)
	if f != lostAnswer || in.dead.Load() {
		return false
	}
	in.cut.Store(true)
	in.h.rec.slotLog(in, job, slot, "CRASH between two writes of the store (after step %q)", step)
	in.h.rec.faultHit(job, "crash between two writes")
	in.h.bg.Go(func() {
		h := in.h
		h.mu.Lock()
		defer h.mu.Unlock()
		if !in.dead.Load() {
			in.crash()
			h.stopLocked(in, 0, true)
		}
	})
	return true
}

func (in *inst) crash() {
	in.dead.Store(true)
	close(in.crashed)
	in.h.rec.instLog(in, "CRASH: from now on every store call hangs and fails, handlers are gone")
}

func (in *inst) pause(d time.Duration) {
	in.pauseMu.Lock()
	in.pauseUntil = max(in.pauseUntil, in.h.now()+d)
	until := in.pauseUntil
	in.pauseMu.Unlock()
	in.h.rec.instLog(in, "PAUSE heartbeats until +%v", until.Round(time.Millisecond))
}

func (in *inst) paused() time.Duration {
	in.pauseMu.Lock()
	defer in.pauseMu.Unlock()
	return in.pauseUntil
}

// handler runs for a duration drawn from the seed and the run, respecting ctx; a
// crash ends it at once (the process is gone). A scheduled attempt of a job with
// a retry policy ends as its Fate says: a failure returns its error after a
// quarter of the duration, a hang waits for the job's timeout.
func (in *inst) handler(j Job) scheduler.Handler {
	w := in.h.w
	return func(ctx context.Context, r scheduler.Run) error {
		in.waitThaw() // a frozen process starts nothing
		if in.dead.Load() {
			return fmt.Errorf("%s is dead", in.name)
		}
		// An entry's runs draw by its run name, apart from the job's and from
		// its other entries'.
		name := runName(r)
		fate := FateOK
		if !r.Manual {
			run := j
			run.Name = name
			fate = run.Fate(in.h.plan.Seed, r.Slot, r.Attempt)
		}
		hr := in.h.rec.handlerStart(in, r, fate)
		var d time.Duration
		u := Unit(Mix(in.h.plan.Seed, Str(name), uint64(r.Slot.UnixMilli()), uint64(r.Attempt), Str(in.name)))
		if r.Manual {
			d = w.ManualMin + time.Duration(u*float64(w.ManualSpread))
		} else {
			d = time.Duration(u * float64(j.MaxRun))
		}
		if fate == FateError || fate == FateNoRetry {
			d /= 4
		}
		d = d.Round(time.Millisecond)
		var timer <-chan time.Time
		if fate != FateHang {
			t := time.NewTimer(d)
			defer t.Stop()
			timer = t.C
		}
		var cancelled, crashed bool
		select {
		case <-timer:
		case <-ctx.Done():
			cancelled = true
		case <-in.crashed:
			crashed = true
		}
		if !crashed {
			// A frozen process's handler does nothing until it thaws.
			select {
			case <-in.thawCh():
			case <-in.crashed:
				crashed = true
			}
		}
		switch {
		case !cancelled && !crashed:
			switch fate {
			case FateError:
				in.h.rec.handlerEnd(hr, endFailed, "failed after "+d.String())
				return fmt.Errorf("modelcheck: attempt %d fails", r.Attempt)
			case FateNoRetry:
				in.h.rec.handlerEnd(hr, endFailed, "failed (not to be retried) after "+d.String())
				return scheduler.NoRetry(fmt.Errorf("modelcheck: attempt %d fails for good", r.Attempt))
			}
			in.h.rec.handlerEnd(hr, endOK, "returned after "+d.String())
			return nil
		case cancelled:
			how := endCancelled
			if errors.Is(context.Cause(ctx), scheduler.ErrHandlerTimeout) {
				how = endTimeout
			}
			in.h.rec.handlerEnd(hr, how, "cancelled: "+context.Cause(ctx).Error())
			return context.Cause(ctx)
		default:
			in.h.rec.handlerEnd(hr, endCrashed, "gone with its crashed process")
			return fmt.Errorf("%s crashed", in.name)
		}
	}
}

func (in *inst) onEvent(e scheduler.Event) {
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
		fmt.Fprintf(&b, " tok=%s", tok(e.Token))
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
	name := e.Job
	if e.Entry != "" {
		name = backend.EntryRunName(e.Job, e.Entry)
	}
	if e.Kind == scheduler.EventDeadlineMissed {
		in.h.rec.deadlineTold(name, e.Slot, in.name)
	}
	if e.Kind == scheduler.EventExcluded {
		in.h.rec.excludedTold(name, e.Slot, in.name)
	}
	in.h.rec.slotLog(in, name, e.Slot, "%s", b.String())
}

// runName is the name r's slot is claimed and recorded under: its entry's run
// name, or its job's.
func runName(r scheduler.Run) string {
	if r.Entry != "" {
		return backend.EntryRunName(r.Job, r.Entry)
	}
	return r.Job
}

// tok shortens a token for the trace.
func tok(t string) string {
	if len(t) > 6 {
		return t[:6]
	}
	return t
}
