package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// MaxBackfillSlots bounds the slots of one Backfill request: a longer range is
// refused, before anything runs, with how many slots it holds.
const MaxBackfillSlots = 1000

// maxBackfillCount bounds how far the slots of a refused range are counted.
const maxBackfillCount = 100 * MaxBackfillSlots

// ErrBackfillNotSupported: Backfill on a backend without leases (no run store),
// which cannot run a past slot once across the fleet.
var ErrBackfillNotSupported = errors.New("scheduler: backfill needs a backend with leases")

// BackfillOption changes one Backfill call.
type BackfillOption func(*backfillConfig) error

type backfillConfig struct {
	rerun       bool
	concurrency int
	onStart     func(BackfillResult)
}

// BackfillOnStart calls fn once the range is checked and its slots are sorted,
// just before the taken ones (BackfillPending) are claimed, from Backfill's
// goroutine: an error Backfill returns without having called fn means nothing
// ran. fn must return quickly.
func BackfillOnStart(fn func(BackfillResult)) BackfillOption {
	return func(c *backfillConfig) error {
		c.onStart = fn
		return nil
	}
}

func (c *backfillConfig) started(res BackfillResult) {
	if c.onStart != nil {
		c.onStart(BackfillResult{Job: res.Job, From: res.From, To: res.To, Rerun: res.Rerun, Slots: append([]BackfillSlot(nil), res.Slots...)})
	}
}

// BackfillRerun also takes the slots that ran (a record ok, error, timeout,
// cancelled, lost, superseded or running), each as a new attempt: the one after
// the slot's newest attempt in History, taken only while the run store holds
// that attempt, so that of several reruns that read the same attempt one runs the
// slot (and a slot whose attempt moved on meanwhile is reported
// BackfillElsewhere). A rerun that reads History after another one ended runs the
// slot again, as a further attempt.
func BackfillRerun() BackfillOption {
	return func(c *backfillConfig) error {
		c.rerun = true
		return nil
	}
}

// BackfillConcurrency runs up to n of the taken slots at once, oldest first.
// Defaults to 1: one after the other. It must be between 1 and MaxBackfillSlots.
func BackfillConcurrency(n int) BackfillOption {
	return func(c *backfillConfig) error {
		if n < 1 || n > MaxBackfillSlots {
			return optErr("backfill concurrency %d is not between 1 and %d", n, MaxBackfillSlots)
		}
		c.concurrency = n
		return nil
	}
}

// BackfillOutcome says what a Backfill did with one slot of its range.
type BackfillOutcome string

// Backfill outcomes. The list may grow; treat an outcome you do not know as
// BackfillElsewhere.
const (
	// BackfillRan: this instance ran the slot; Status and Attempt say how its
	// last attempt ended (retries included).
	BackfillRan BackfillOutcome = "ran"
	// BackfillAlreadyRan: history shows the slot ran, so it was not taken
	// (without BackfillRerun); Status is its newest record's.
	BackfillAlreadyRan BackfillOutcome = "already_ran"
	// BackfillElsewhere: the run store answered that another attempt has the
	// slot (done, or run meanwhile by another backfill, catch-up or the job's
	// loop); Status is how it ended, when known.
	BackfillElsewhere BackfillOutcome = "elsewhere"
	// BackfillSkipped: stored skipped, not run, as another slot of a job that
	// forbids overlap held its lease.
	BackfillSkipped BackfillOutcome = "skipped"
	// BackfillPaused: the job is paused: the slot was finished paused, not run.
	BackfillPaused BackfillOutcome = "paused"
	// BackfillLate: the run store judged the claim past its deadline (its clock
	// is ahead of this instance's by more than the clock skew allowance).
	BackfillLate BackfillOutcome = "late"
	// BackfillNotRun: not run by this instance: the scheduler stopped first, or
	// the run store could not be reached (Error says).
	BackfillNotRun BackfillOutcome = "not_run"
	// BackfillPending: taken, and not ended when Backfill's context ended. The
	// slot goes on.
	BackfillPending BackfillOutcome = "pending"
)

// BackfillSlot is one slot of a Backfill range and what happened to it.
type BackfillSlot struct {
	Slot    time.Time
	Outcome BackfillOutcome
	// Status is the slot's status as the outcome says (zero when unknown).
	Status Status
	// Attempt and Instance are the attempt that Status is of, when known.
	Attempt  int
	Instance string
	// Error is the run's error text, or why the slot was not run.
	Error string
}

// BackfillResult is what a Backfill did: every slot of its range, oldest first.
type BackfillResult struct {
	Job      string
	From, To time.Time
	Rerun    bool
	Slots    []BackfillSlot
}

// Count returns how many slots ended with outcome o.
func (r BackfillResult) Count(o BackfillOutcome) int {
	n := 0
	for _, s := range r.Slots {
		if s.Outcome == o {
			n++
		}
	}
	return n
}

// Backfill runs the job's slots in [from, to) that never ran, on demand: those
// without a record in History, or whose records are only late, paused or
// skipped. Slots that ran are left alone and reported (BackfillAlreadyRan),
// unless BackfillRerun takes them too. It needs a backend with leases
// (ErrBackfillNotSupported) and a started scheduler (ErrNotStarted); from and
// to must be set, from before to, and to not after now by the scheduler's clock
// (ErrInvalidOption). A range holding more than MaxBackfillSlots slots is
// refused, with how many it holds, before anything runs.
//
// Each slot taken is claimed through the run store like a catch-up slot, so it
// runs once across the fleet, whoever else backfills or catches up on it at the
// same time: with a lease, backups and takeovers, the job's retries, and its
// pause (a paused job's slots are finished paused). It may start now (its
// deadline is now + the job's max lateness); a slot stored late, skipped or
// paused is reopened as the next attempt. A slot the run store no longer
// remembers (older than it keeps finished runs) is claimed afresh: its attempt
// numbers start again at 1. Which slots ran is read from History, so a slot
// whose records have left the job's history (WithHistory) counts as never run.
// The taken slots run oldest first, one at a time (BackfillConcurrency), never
// beside another run of a job that forbids overlap: a slot that meets one is
// stored skipped and reported so. History marks every attempt run so as a
// backfill (RunRecord.Backfill), and the handler sees Run.Backfill.
//
// Backfill returns once every taken slot has ended. When ctx ends first it
// returns what it knows with an error matching ctx's: the slots not ended are
// BackfillPending and go on, as does the rest of the range; Stop ends them like
// any run.
func (s *Scheduler) Backfill(ctx context.Context, name string, from, to time.Time, opts ...BackfillOption) (BackfillResult, error) {
	o := backfillConfig{concurrency: 1}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return BackfillResult{}, fmt.Errorf("backfill %q: %w", name, err)
		}
	}
	s.mu.Lock()
	j, ok := s.jobs[name]
	state := s.state
	if ok && state == stateStarted {
		s.handlers.Add(1) // under the lock that Stop changes the state under; handed to the runs
	}
	s.mu.Unlock()
	if !ok {
		return BackfillResult{}, fmt.Errorf("%w: %q", ErrJobNotFound, name)
	}
	switch state {
	case stateNew, stateStarting:
		return BackfillResult{}, fmt.Errorf("backfill %q: %w: call Start first", name, ErrNotStarted)
	case stateStopped:
		return BackfillResult{}, fmt.Errorf("backfill %q: %w: the scheduler was stopped", name, ErrNotStarted)
	}
	handed := false
	defer func() {
		if !handed {
			s.handlers.Done()
		}
	}()
	if s.runs == nil {
		return BackfillResult{}, fmt.Errorf("backfill %q: %w: the %s backend has no run store to claim past slots through", name, ErrBackfillNotSupported, s.backend.Name())
	}
	slots, err := s.backfillSlots(j, from, to)
	if err != nil {
		return BackfillResult{}, err
	}
	res := BackfillResult{Job: name, From: from, To: to, Rerun: o.rerun, Slots: make([]BackfillSlot, len(slots))}
	if len(slots) == 0 {
		o.started(res)
		return res, nil
	}
	hist, err := s.History(ctx, name, 0)
	if err != nil {
		return BackfillResult{}, fmt.Errorf("scheduler: backfill %q: read its history: %w", name, err)
	}
	newest := newestRecords(hist)
	var taken []*backfillSlot
	for i, slot := range slots {
		res.Slots[i] = BackfillSlot{Slot: slot, Outcome: BackfillPending}
		if r, ran := newest.ran(slot); ran && !o.rerun {
			res.Slots[i] = BackfillSlot{Slot: slot, Outcome: BackfillAlreadyRan, Status: r.Status, Attempt: r.Attempt, Instance: r.Instance}
			continue
		}
		bf := &backfillSlot{index: i, rerun: o.rerun, out: res.Slots[i]}
		if r := newest.newest(slot); r != nil {
			bf.rerunAttempt = r.Attempt
		}
		taken = append(taken, bf)
	}
	o.started(res)
	if len(taken) == 0 {
		return res, nil
	}
	s.log.Info("backfill", "job", name, "from", from, "to", to, "slots", len(slots), "taken", len(taken), "rerun", o.rerun)
	done := make(chan struct{})
	handed = true
	go func() {
		defer s.handlers.Done()
		defer close(done)
		s.backfill(j, taken, o.concurrency)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	for _, bf := range taken {
		res.Slots[bf.index] = bf.result()
	}
	select {
	case <-done:
		return res, nil
	default:
		return res, fmt.Errorf("scheduler: backfill %q: stopped waiting, %d of %d taken slots not ended (they go on): %w",
			name, res.Count(BackfillPending), len(taken), context.Cause(ctx))
	}
}

// backfillSlots lists, oldest first, the job's slots in [from, to), after
// checking the range.
func (s *Scheduler) backfillSlots(j *job, from, to time.Time) ([]time.Time, error) {
	now := s.clock.Now()
	switch {
	case from.IsZero() || to.IsZero():
		return nil, optErr("backfill %q: from and to must both be set", j.name)
	case !from.Before(to):
		return nil, optErr("backfill %q: from (%s) must be before to (%s)", j.name, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	case to.After(now):
		return nil, optErr("backfill %q: to (%s) is in the future (now is %s): only past slots are backfilled", j.name, to.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	var slots []time.Time
	n := 0
	for t := j.sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = j.sched.Next(t) {
		if n++; n > maxBackfillCount {
			return nil, optErr("backfill %q: the range holds more than %d slots, at most %d per request: narrow the range", j.name, maxBackfillCount, MaxBackfillSlots)
		}
		if n <= MaxBackfillSlots {
			slots = append(slots, t)
		}
	}
	if n > MaxBackfillSlots {
		return nil, optErr("backfill %q: the range holds %d slots, at most %d per request: narrow the range", j.name, n, MaxBackfillSlots)
	}
	return slots, nil
}

// backfill claims the taken slots oldest first, at most concurrency at a time.
// The slots not claimed before Stop are not run.
func (s *Scheduler) backfill(j *job, taken []*backfillSlot, concurrency int) {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, bf := range taken {
		select {
		case sem <- struct{}{}:
		case <-s.loopCtx.Done():
			for _, rest := range taken[i:] {
				rest.notRun(ErrStopped)
			}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a := s.newAttempt(j, bf.out.Slot, claimBackfill)
			a.bf = bf
			s.drive(a)
			bf.notRun(errors.New("the claim ended without an answer")) // only if nothing was said
		}()
	}
}

// ran reports whether a slot with status ran, or may have: anything but late,
// paused, skipped and limit (a status this version does not know included).
func ran(status Status) bool {
	switch status {
	case StatusLate, StatusPaused, StatusSkipped, StatusLimit:
		return false
	}
	return status != ""
}

// slotRecords is a job's history by slot (Unix ms): for each slot, the newest
// record, and the newest that ran.
type slotRecords map[int64][2]*RunRecord

func newestRecords(hist []RunRecord) slotRecords {
	out := make(slotRecords)
	for i := range hist {
		r := &hist[i]
		if r.Manual {
			continue
		}
		k := r.Slot.UnixMilli()
		e := out[k]
		if e[0] == nil { // newest first
			e[0] = r
		}
		if e[1] == nil && ran(r.Status) {
			e[1] = r
		}
		out[k] = e
	}
	return out
}

// newest returns the newest record of slot (its newest attempt), if any.
func (h slotRecords) newest(slot time.Time) *RunRecord { return h[slot.UnixMilli()][0] }

// ran returns the newest record of slot that ran, if any.
func (h slotRecords) ran(slot time.Time) (*RunRecord, bool) {
	r := h[slot.UnixMilli()][1]
	return r, r != nil
}

// backfillSlot is what one taken slot of a Backfill reports, written by the
// claim that handles it (and by the retries and takeovers this instance stands
// by for after it), read by Backfill.
type backfillSlot struct {
	index int
	rerun bool
	// rerunAttempt is the slot's newest attempt in history, the one a rerun
	// may take.
	rerunAttempt int

	mu  sync.Mutex
	out BackfillSlot
	// ranHere: an attempt of the slot ran on this instance; later answers only
	// say how the slot ended.
	ranHere bool
}

func (b *backfillSlot) result() BackfillSlot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out
}

// ran: an attempt ran here and ended with status.
func (b *backfillSlot) ran(status Status, attempt int, instance, errText string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ranHere = true
	b.out.Outcome, b.out.Status, b.out.Attempt, b.out.Instance, b.out.Error = BackfillRan, status, attempt, instance, errText
}

// decided: the slot was stored with status and not run (skipped, late, paused).
func (b *backfillSlot) decided(o BackfillOutcome, status Status) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.out.Status = status
	if !b.ranHere {
		b.out.Outcome = o
	}
}

// elsewhere: the store answered another attempt has the slot (res).
func (b *backfillSlot) elsewhere(res backend.ClaimResult) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ranHere {
		b.out.Outcome, b.out.Error = BackfillElsewhere, ""
	}
	if res.Status != "" {
		b.out.Status = res.Status
	}
	if res.Attempt > 0 {
		b.out.Attempt, b.out.Instance = res.Attempt, res.Holder
	}
}

// notRun: this instance did not run the slot (err says why), unless it ran an
// attempt or something else was said already.
func (b *backfillSlot) notRun(err error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ranHere || b.out.Outcome != BackfillPending {
		return
	}
	b.out.Outcome, b.out.Error = BackfillNotRun, err.Error()
}
