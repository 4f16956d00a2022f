package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/anarchon/anarchon/backend"
)

// Manual runs. With leases a manual run holds a lease of its own, so every
// instance sees it running (Active). Its slot is the trigger's instant, moved on
// by a millisecond while that is one of the job's scheduled slots. A job that
// forbids overlap refuses it while another run holds the job (ErrJobBusy). A
// manual run whose instance died is ended lost, never run again.

// maxManualSlotTries bounds the slots a manual claim tries when the one it picked
// is taken (another instance's manual run claimed the same millisecond), and
// maxManualSkip how many milliseconds at most it moves on after one.
const (
	maxManualSlotTries = 16
	maxManualSkip      = 64
)

// RunNow runs the job at once on this instance, recorded as a manual run (never
// de-duplicated), and returns its record. The scheduler must be started. The handler's
// context carries ctx's values; it is cancelled when ctx is done, and by Stop like
// any other handler.
//
// A manual run is refused, with nothing run, while WithMaxManualRuns manual runs of
// the job are in progress on this instance (ErrTooManyManualRuns). On a backend
// with leases it holds a lease like any run (see Active), and a job that forbids
// overlap refuses it while another of its runs, on any instance, holds a lease
// (ErrJobBusy). A job whose overlap policy is OverlapCancelOther asks the run in
// progress to end instead. RunNow waits for it to end (for as long as ctx
// allows) before its run starts; the request stands when ctx ends first. OnStart
// tells the caller when its handler starts; an error returned before that ran
// nothing.
func (s *Scheduler) RunNow(ctx context.Context, name string, opts ...RunNowOption) (RunRecord, error) {
	return s.runNow(ctx, name, "", opts)
}

// RunEntryNow runs schedule entry id of job at once on this instance, as RunNow
// runs a job. The run is a manual run with the entry's payload (Run.Entry and
// Run.Payload set), recorded under the entry's run name (EntryHistory). It has
// the job's handler and policies as they apply to the entry (overlap is the
// entry's own). An entry stored but not followed here yet is waited for, for a
// moment; one not stored is ErrEntryNotFound. A paused entry runs, as a paused
// job's RunNow does. The manual runs of a job's entries count against the
// job's WithMaxManualRuns.
func (s *Scheduler) RunEntryNow(ctx context.Context, job, id string, opts ...RunNowOption) (RunRecord, error) {
	if err := backend.ValidateEntryID(id); err != nil {
		return RunRecord{}, err
	}
	return s.runNow(ctx, job, id, opts)
}

// runNow is RunNow, of entry id of job name when id is not "".
func (s *Scheduler) runNow(ctx context.Context, name, id string, opts []RunNowOption) (RunRecord, error) {
	var o runNowConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	what := fmt.Sprintf("run %q now", name)
	if id != "" {
		what = fmt.Sprintf("run entry %q of %q now", id, name)
	}
	if !utf8.ValidString(o.by) || len(o.by) > MaxPauseText {
		return RunRecord{}, fmt.Errorf("%w: RequestedBy must be valid UTF-8 of at most %d bytes", ErrInvalidOption, MaxPauseText)
	}
	s.mu.Lock()
	j, ok := s.jobs[name]
	state := s.state
	if ok && state == stateStarted {
		s.handlers.Add(1) // under the lock that Stop changes the state under
	}
	s.mu.Unlock()
	if !ok {
		return RunRecord{}, fmt.Errorf("%w: %q", ErrJobNotFound, name)
	}
	switch state {
	case stateNew, stateStarting:
		return RunRecord{}, fmt.Errorf("%s: %w: call Start first", what, ErrNotStarted)
	case stateStopped:
		return RunRecord{}, fmt.Errorf("%s: %w: the scheduler was stopped", what, ErrNotStarted)
	}
	defer s.handlers.Done()
	p := j // the job whose manual runs are counted
	if id != "" {
		var err error
		if j, err = s.followedEntry(ctx, p, id); err != nil {
			return RunRecord{}, fmt.Errorf("scheduler: %s: %w", what, err)
		}
	}
	if n := p.manual.Add(1); int(n) > p.cfg.maxManual {
		p.manual.Add(-1)
		return RunRecord{}, fmt.Errorf("%s: %w: %d in progress on %s, at most %d (WithMaxManualRuns)",
			what, ErrTooManyManualRuns, n-1, s.instance, p.cfg.maxManual)
	}
	defer p.manual.Add(-1)
	// The handler's context carries the caller's values (a trigger's trace
	// context, say) and ends with the caller's or with a hard stop.
	hctx, hcancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hcancel(nil)
	defer context.AfterFunc(s.hardCtx, func() { hcancel(context.Cause(s.hardCtx)) })()
	defer context.AfterFunc(ctx, func() { hcancel(context.Cause(ctx)) })()
	m := &manualCall{ctx: ctx, handlerCtx: hctx, cfg: o}
	rec, err := s.runManual(j, m)
	if err == nil && j.entry != nil {
		rec.Job, rec.Entry = j.entry.job, j.entry.id
	}
	return rec, err
}

// maxEntryWait bounds how long RunEntryNow waits for the view to follow an entry
// it finds stored, and entryPoll how often it looks.
const (
	maxEntryWait = 2 * time.Second
	entryPoll    = 20 * time.Millisecond
)

// followedEntry returns the run view of entry id of p, waiting (within ctx and
// maxEntryWait) for this instance to follow it when the store has it.
func (s *Scheduler) followedEntry(ctx context.Context, p *job, id string) (*job, error) {
	if err := s.EntriesLoaded(ctx); err != nil {
		return nil, err
	}
	if j, ok := s.entries.view(p.name, id); ok {
		return j, nil
	}
	if _, err := s.GetEntry(ctx, p.name, id); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := s.clock.Now().Add(maxEntryWait)
	for s.clock.Now().Before(deadline) {
		if !s.sleepUntil(wctx, s.clock.Now().Add(entryPoll)) {
			return nil, context.Cause(ctx)
		}
		if j, ok := s.entries.view(p.name, id); ok {
			return j, nil
		}
	}
	return nil, fmt.Errorf("%w: entry %q of job %q is stored but not followed by %s (it cannot run its schedule here: see its log)",
		ErrInvalidEntry, id, p.name, s.instance)
}

// runManual claims a slot off j's schedule for m and runs it, trying the next
// free millisecond while the one it picked is another manual run's.
func (s *Scheduler) runManual(j *job, m *manualCall) (RunRecord, error) {
	slot, ok := time.UnixMilli(s.clock.Now().UnixMilli()).UTC(), true
	if s.store.leased() {
		slot, ok = j.manualSlot(s.clock.Now())
	}
	for try := 0; ok && try < maxManualSlotTries; try++ {
		a := s.newAttempt(j, slot, claimManual)
		a.man, a.rc.RequestedBy = m, m.cfg.by
		res, err := s.decide(a)
		if err != nil {
			return RunRecord{}, fmt.Errorf("scheduler: run %s now: %w", j.quoted(), err)
		}
		switch res.Outcome {
		case backend.OutcomeWon:
			out := s.execute(a)
			return RunRecord{
				Job: j.name, Slot: a.rc.Slot, Instance: s.instance, Token: a.rc.Token, Attempt: max(a.res.Attempt, 1), Manual: true,
				RequestedBy: m.cfg.by, Status: out.Status, ClaimedAt: a.answered, StartedAt: out.StartedAt, FinishedAt: out.FinishedAt,
				Duration: out.FinishedAt.Sub(out.StartedAt), Error: out.Error, Fence: a.res.Fence,
			}, nil
		case backend.OutcomeOverlap:
			if j.cfg.overlap.Buffers() {
				return RunRecord{}, fmt.Errorf("run %s now: %w: another run of it holds its lease and %d are buffered already (overlap policy %s)",
					j.quoted(), ErrJobBusy, a.rc.Buffers(), j.cfg.overlap)
			}
			return RunRecord{}, fmt.Errorf("run %s now: %w: another run of it holds its lease", j.quoted(), ErrJobBusy)
		case backend.OutcomeLate:
			return RunRecord{}, fmt.Errorf("scheduler: run %s now: the run store's clock is more than the clock skew allowance (%v) ahead of this instance's", j.quoted(), s.maxSkew)
		}
		// The millisecond is taken: another instance's manual run has it. Its
		// later ones may follow it closely, so skip a random stretch.
		slot, ok = j.manualSlot(slot.Add(time.Duration(1+rand.N(maxManualSkip)) * time.Millisecond))
	}
	if !ok {
		return RunRecord{}, fmt.Errorf("run %s now: %w: every millisecond is one of its slots, and with leases a manual run holds a lease on an instant that is not (an interval of at least 2ms)",
			j.quoted(), ErrInvalidOption)
	}
	return RunRecord{}, fmt.Errorf("scheduler: run %s now: %d slots in a row were taken by other manual runs", j.quoted(), maxManualSlotTries)
}

// manualCall is a RunNow call: the caller's context and options.
type manualCall struct {
	ctx context.Context
	// handlerCtx is the handler's parent: the caller's values, ended with the
	// caller's context or a hard stop.
	handlerCtx context.Context
	cfg        runNowConfig
	toldBuffer bool
}

func (m *manualCall) by() string {
	if m == nil {
		return ""
	}
	return m.cfg.by
}

// taken reports whether res says a's manual slot is another manual run's.
func (m *manualCall) taken(a *attempt, res backend.ClaimResult) bool {
	if m == nil {
		return false
	}
	switch res.Outcome {
	case backend.OutcomeRunning:
		return res.WaitsFor.IsZero()
	case backend.OutcomeBuffered:
		return res.WaitsFor.Equal(a.rc.Slot)
	}
	return res.Outcome == backend.OutcomeRetry
}

// buffered tells the caller, once, that its slot is stored buffered.
func (m *manualCall) buffered(a *attempt, res backend.ClaimResult) {
	if m == nil || m.toldBuffer || res.Outcome != backend.OutcomeBuffered {
		return
	}
	m.toldBuffer = true
	if m.cfg.onBuffered != nil {
		run := Run{Job: a.j.name, Slot: a.rc.Slot, Nominal: a.rc.Slot, Instance: a.rc.Instance, Token: a.rc.Token, Manual: true}
		if a.j.entry != nil {
			run.Job, run.Entry, run.Payload = a.j.entry.job, a.j.entry.id, a.j.entry.payload
		}
		m.cfg.onBuffered(run)
	}
}

// started tells the caller its handler starts.
func (m *manualCall) started(run Run) {
	if m != nil && m.cfg.onStart != nil {
		m.cfg.onStart(run)
	}
}

// onSchedule reports whether t is one of the job's slots.
func (j *job) onSchedule(t time.Time) bool {
	return j.sched.Next(t.Add(-time.Millisecond)).Equal(t)
}

// manualAt reports whether t is the slot of a manual run of the job: one that is
// not one of its slots. For an entry it cannot tell (a slot of its schedule
// before a change is off its schedule now): false; the store's ActiveRun.Manual
// says.
func (j *job) manualAt(t time.Time) bool {
	return j.entry == nil && !j.onSchedule(t)
}

// manualSlot is the first instant from t, at millisecond precision, that is not
// one of the job's slots and is after the manual slots this instance took before,
// so that its own manual runs never meet on one slot. It reports false when the
// job has no such instant within maxManualSearch (every millisecond is a slot).
func (j *job) manualSlot(t time.Time) (time.Time, bool) {
	ms := t.UnixMilli()
	for {
		last := j.lastManual.Load()
		next := max(ms, last+1)
		free := false
		for range maxManualSearch {
			if free = !j.onSchedule(time.UnixMilli(next)); free {
				break
			}
			next++
		}
		if !free {
			return time.Time{}, false
		}
		if j.lastManual.CompareAndSwap(last, next) {
			return time.UnixMilli(next).UTC(), true
		}
	}
}

// maxManualSearch bounds the milliseconds manualSlot looks at.
const maxManualSearch = 1000

// RunNowOption changes one RunNow call.
type RunNowOption func(*runNowConfig)

type runNowConfig struct {
	by         string
	onStart    func(Run)
	onBuffered func(Run)
}

// RequestedBy records who asked for the run (a user, a service, a CLI) with the
// manual run in history.
func RequestedBy(who string) RunNowOption { return func(c *runNowConfig) { c.by = who } }

// OnStart calls fn just before the manual run's handler starts, from RunNow's
// goroutine: a caller that answers "accepted" from fn tells the truth, as an
// error RunNow returns without having called fn means nothing ran. fn must
// return quickly.
func OnStart(fn func(Run)) RunNowOption { return func(c *runNowConfig) { c.onStart = fn } }

// OnBuffered calls fn once, from RunNow's goroutine, when the manual run is stored
// buffered behind the job's run in progress (a buffer overlap policy). RunNow then
// waits for that run to end. The manual run starts later (OnStart), or, if ctx ends
// first, is withdrawn. Run names the buffered slot and its token; Attempt is 0. fn
// must return quickly.
func OnBuffered(fn func(Run)) RunNowOption { return func(c *runNowConfig) { c.onBuffered = fn } }
