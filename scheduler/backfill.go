package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// entry is the one entry to backfill; allEntries asks for every entry.
	entry      string
	allEntries bool
}

// BackfillEntry backfills schedule entry id of the job instead of the job's own
// slots: the entry's slots in the range, claimed and recorded under the entry's
// run name, each once across the fleet. The entry must be followed by this
// instance (RunEntryNow says how it is waited for). Its slots begin after it was
// last stored: a slot of its schedule before a change is not backfilled.
func BackfillEntry(id string) BackfillOption {
	return func(c *backfillConfig) error {
		if err := backend.ValidateEntryID(id); err != nil {
			return err
		}
		if c.allEntries {
			return optErr("BackfillEntry and BackfillAllEntries exclude each other")
		}
		c.entry = id
		return nil
	}
}

// BackfillAllEntries backfills every schedule entry of the job this instance
// follows (as BackfillEntry each), not the job's own slots. MaxBackfillSlots
// bounds the slots of all the entries together; each slot in the result names
// its entry.
func BackfillAllEntries() BackfillOption {
	return func(c *backfillConfig) error {
		if c.entry != "" {
			return optErr("BackfillEntry and BackfillAllEntries exclude each other")
		}
		c.allEntries = true
		return nil
	}
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
		out := res
		out.Slots = append([]BackfillSlot(nil), res.Slots...)
		c.onStart(out)
	}
}

// BackfillRerun also takes the slots that ran (a record ok, error, timeout,
// cancelled, lost, superseded or running), each as a new attempt. That attempt
// follows the slot's newest attempt in History. It is taken only while the run
// store holds that newest attempt, so of several reruns that read it, one runs
// the slot. A slot whose attempt moved on meanwhile is reported
// BackfillElsewhere. A rerun that reads History after another one ended runs the
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
	// BackfillExcluded: a calendar the job or entry names holds the slot's
	// day: it is stored excluded (Status), not run; Error says which calendar.
	BackfillExcluded BackfillOutcome = "excluded"
	// BackfillNotRun: not run by this instance: the scheduler stopped first, or
	// the run store could not be reached (Error says).
	BackfillNotRun BackfillOutcome = "not_run"
	// BackfillPending: taken, and not ended when Backfill's context ended. The
	// slot goes on.
	BackfillPending BackfillOutcome = "pending"
)

// BackfillSlot is one slot of a Backfill range and what happened to it.
type BackfillSlot struct {
	// Entry is the schedule entry the slot is of ("" for the job's own).
	Entry   string
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
	Job string
	// Entry is the entry BackfillEntry named; AllEntries says
	// BackfillAllEntries asked for every entry.
	Entry      string
	AllEntries bool
	From, To   time.Time
	Rerun      bool
	Slots      []BackfillSlot
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
// unless BackfillRerun takes them too. A slot a calendar excludes is never run
// (BackfillExcluded). It needs a backend with leases
// (ErrBackfillNotSupported) and a started scheduler (ErrNotStarted); from and
// to must be set, from before to, and to not after now by the scheduler's clock
// (ErrInvalidOption). A range holding more than MaxBackfillSlots slots is
// refused, with how many it holds, before anything runs.
//
// Each slot taken is claimed through the run store like a catch-up slot. So it
// runs once across the fleet, whoever else backfills or catches up on it at the
// same time. It runs with a lease, backups and takeovers, the job's retries, and
// its pause (a paused job's slots are finished paused). It may start now (its
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
	targets, err := s.backfillTargets(ctx, j, o)
	if err != nil {
		return BackfillResult{}, err
	}
	slots, err := s.backfillSlots(name, targets, from, to)
	if err != nil {
		return BackfillResult{}, err
	}
	res := BackfillResult{Job: name, Entry: o.entry, AllEntries: o.allEntries, From: from, To: to, Rerun: o.rerun,
		Slots: make([]BackfillSlot, len(slots))}
	if len(slots) == 0 {
		o.started(res)
		return res, nil
	}
	hist, err := s.backfillHistory(ctx, slots)
	if err != nil {
		return BackfillResult{}, err
	}
	var taken []*backfillSlot
	for i, ts := range slots {
		res.Slots[i] = BackfillSlot{Entry: ts.entry(), Slot: ts.slot, Outcome: BackfillPending}
		newest := hist[ts.j]
		if r, ran := newest.ran(ts.slot); ran && !o.rerun {
			res.Slots[i] = BackfillSlot{Entry: ts.entry(), Slot: ts.slot, Outcome: BackfillAlreadyRan, Status: r.Status, Attempt: r.Attempt, Instance: r.Instance}
			continue
		}
		if r := newest.newest(ts.slot); r != nil && r.Status == StatusExcluded {
			// Never reopened, not even by a rerun.
			res.Slots[i] = BackfillSlot{Entry: ts.entry(), Slot: ts.slot, Outcome: BackfillExcluded, Status: r.Status,
				Attempt: r.Attempt, Instance: r.Instance, Error: r.Error}
			continue
		}
		bf := &backfillSlot{j: ts.j, index: i, rerun: o.rerun, out: res.Slots[i]}
		if r := newest.newest(ts.slot); r != nil {
			bf.rerunAttempt = r.Attempt
		}
		taken = append(taken, bf)
	}
	o.started(res)
	if len(taken) == 0 {
		return res, nil
	}
	s.log.Info("backfill", "job", name, "entry", o.entry, "all_entries", o.allEntries, "from", from, "to", to,
		"slots", len(slots), "taken", len(taken), "rerun", o.rerun)
	done := make(chan struct{})
	handed = true
	go func() {
		defer s.handlers.Done()
		defer close(done)
		s.backfill(taken, o.concurrency)
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

// backfillTargets are the run views a Backfill of p claims slots of: p's own,
// one entry's, or every entry's that this instance follows (by ID).
func (s *Scheduler) backfillTargets(ctx context.Context, p *job, o backfillConfig) ([]*job, error) {
	switch {
	case o.entry != "":
		j, err := s.followedEntry(ctx, p, o.entry)
		if err != nil {
			return nil, fmt.Errorf("scheduler: backfill entry %q of %q: %w", o.entry, p.name, err)
		}
		return []*job{j}, nil
	case o.allEntries:
		if err := s.EntriesLoaded(ctx); err != nil {
			return nil, fmt.Errorf("scheduler: backfill the entries of %q: %w", p.name, err)
		}
		return s.entries.views(p.name), nil
	case p.sched == Schedule(noSchedule{}):
		return nil, optErr("backfill %q: the job has no schedule of its own: backfill its entries (BackfillEntry, BackfillAllEntries)", p.name)
	}
	return []*job{p}, nil
}

// targetSlot is one slot of a backfill's range and the run view it is of.
type targetSlot struct {
	j    *job
	slot time.Time
}

func (t targetSlot) entry() string {
	if t.j.entry == nil {
		return ""
	}
	return t.j.entry.id
}

// backfillSlots lists, oldest first (then by entry), the targets' slots in
// [from, to), after checking the range.
func (s *Scheduler) backfillSlots(name string, targets []*job, from, to time.Time) ([]targetSlot, error) {
	now := s.clock.Now()
	switch {
	case from.IsZero() || to.IsZero():
		return nil, optErr("backfill %q: from and to must both be set", name)
	case !from.Before(to):
		return nil, optErr("backfill %q: from (%s) must be before to (%s)", name, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	case to.After(now):
		return nil, optErr("backfill %q: to (%s) is in the future (now is %s): only past slots are backfilled", name, to.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	what := "the range"
	if len(targets) > 1 || len(targets) == 1 && targets[0].entry != nil {
		what = "the range, across the entries,"
	}
	var slots []targetSlot
	n := 0
	for _, j := range targets {
		for t := j.sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = j.sched.Next(t) {
			if n++; n > maxBackfillCount {
				return nil, optErr("backfill %q: %s holds more than %d slots, at most %d per request: narrow the range", name, what, maxBackfillCount, MaxBackfillSlots)
			}
			if n <= MaxBackfillSlots {
				slots = append(slots, targetSlot{j, t})
			}
		}
	}
	if n > MaxBackfillSlots {
		return nil, optErr("backfill %q: %s holds %d slots, at most %d per request: narrow the range", name, what, n, MaxBackfillSlots)
	}
	slices.SortStableFunc(slots, func(a, b targetSlot) int {
		if c := a.slot.Compare(b.slot); c != 0 {
			return c
		}
		return strings.Compare(a.entry(), b.entry())
	})
	return slots, nil
}

// backfillHistoryReads bounds the history reads of one Backfill in flight.
const backfillHistoryReads = 8

// backfillHistory reads the history of each run view the slots are of.
func (s *Scheduler) backfillHistory(ctx context.Context, slots []targetSlot) (map[*job]slotRecords, error) {
	var views []*job
	out := map[*job]slotRecords{}
	for _, ts := range slots {
		if _, ok := out[ts.j]; !ok {
			out[ts.j] = nil
			views = append(views, ts.j)
		}
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, backfillHistoryReads)
	)
	for _, j := range views {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			hist, err := s.history(ctx, j.name, 0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("scheduler: backfill %s: read its history: %w", j.quoted(), err)
				}
				return
			}
			out[j] = newestRecords(hist)
		})
	}
	wg.Wait()
	return out, first
}

// backfill claims the taken slots oldest first, at most concurrency at a time.
// The slots not claimed before Stop are not run.
func (s *Scheduler) backfill(taken []*backfillSlot, concurrency int) {
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
			a := s.newAttempt(bf.j, bf.out.Slot, claimBackfill)
			a.bf = bf
			s.drive(a)
			bf.notRun(errors.New("the claim ended without an answer")) // only if nothing was said
		}()
	}
}

// ran reports whether a slot with status ran, or may have: anything but a
// decision not to run it (a status this version does not know included).
func ran(status Status) bool { return status != "" && !status.NotRun() }

// slotRecords is a job's history by slot (Unix ms): for each slot, the newest
// record, and the newest that ran.
type slotRecords map[int64][2]*RunRecord

func newestRecords(hist []RunRecord) slotRecords {
	out := make(slotRecords)
	for i := range hist {
		r := &hist[i]
		if r.Manual || r.Status.Judgement() {
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
	j     *job // the run view claimed: the job's, or an entry's
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

// excluded: the slot is stored excluded (why, when known).
func (b *backfillSlot) excluded(why string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ranHere {
		b.out.Outcome, b.out.Status, b.out.Error = BackfillExcluded, StatusExcluded, why
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
		if res.Status == StatusExcluded {
			b.out.Outcome = BackfillExcluded
		}
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
