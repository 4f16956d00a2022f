package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// MaxPreviewSlots bounds PreviewOptions.N.
const MaxPreviewSlots = 1000

// maxPreviewLead bounds how many slots between now and PreviewOptions.From
// Preview walks to count what they use up: the run limit, the buffer, the
// cancel-other request.
const maxPreviewLead = 10_000

// PreviewOptions say which slots Preview lists.
type PreviewOptions struct {
	// Entry names a schedule entry of the job to preview instead of the job's
	// own schedule.
	Entry string
	// From is where the list starts: a slot at From is listed. Zero means
	// after now, by the scheduler's clock (a slot due now is not listed).
	From time.Time
	// N is how many slots to list: 1 to MaxPreviewSlots.
	N int
}

// PreviewSlot is one slot of a preview and what the fleet will do with it.
type PreviewSlot struct {
	// Slot is when the slot is due: the instant the fleet claims, after the
	// spread moved it (WithSpread).
	Slot time.Time
	// Nominal is the schedule's own time, before the spread: Slot without one.
	Nominal time.Time
	// Runs says the slot is still to run, as this instance sees the fleet now.
	// A note that says "may" leaves it true; a past slot is false.
	Runs bool
	// Notes say what the slot meets besides running on time; none for a slot
	// that simply runs.
	Notes []PreviewNote
}

// PreviewNote is one thing Preview says about a slot: a kind to match and a
// sentence for people.
type PreviewNote struct {
	Kind PreviewKind
	Text string
}

// PreviewKind says what a PreviewNote is about.
type PreviewKind string

// The kinds of PreviewNote. The "may" kinds depend on what Preview cannot know:
// how long a run in progress takes, what other slots meet first.
const (
	// PreviewSpread: the spread window moved the slot later than Nominal.
	PreviewSpread PreviewKind = "spread"
	// PreviewDSTShifted: the cron time does not exist that day, as the clocks
	// jump forward; the slot fires at the instant it would have been (DSTShift).
	PreviewDSTShifted PreviewKind = "dst-shifted"
	// PreviewDSTRepeated: the cron time happens twice that day, as the clocks
	// fall back; the job's DST policy says which occurrences fire.
	PreviewDSTRepeated PreviewKind = "dst-repeated"
	// PreviewStartBound: the start bound leaves no slot before this one.
	PreviewStartBound PreviewKind = "start-bound"
	// PreviewLast: no slot follows: the end bound, or the schedule ends.
	PreviewLast PreviewKind = "last"
	// PreviewPast: the slot is due by now; History says what became of it.
	PreviewPast PreviewKind = "past"
	// PreviewPaused: a pause holds the slot: it is recorded paused, not run.
	PreviewPaused PreviewKind = "paused"
	// PreviewCatchUp: a pause holds the slot, and the job's catch-up runs it
	// when the pause ends.
	PreviewCatchUp PreviewKind = "catch-up"
	// PreviewEntryPaused: the schedule entry is paused: the slot is not run.
	PreviewEntryPaused PreviewKind = "entry-paused"
	// PreviewLimit: the run limit (WithMaxRuns) is reached before the slot:
	// it is not run.
	PreviewLimit PreviewKind = "limit"
	// PreviewMayLimit: the run limit may be reached before the slot.
	PreviewMayLimit PreviewKind = "may-limit"
	// PreviewMaySkip: a run in progress may still hold the job then, and the
	// overlap policy would skip the slot (OverlapSkip, or a full buffer).
	PreviewMaySkip PreviewKind = "may-skip"
	// PreviewMayBuffer: a run in progress may still hold the job then; the
	// slot would be buffered behind it and run once it has ended.
	PreviewMayBuffer PreviewKind = "may-buffer"
	// PreviewMayCancel: a run in progress may still hold the job then; the
	// slot would ask it to end (OverlapCancelOther) and start once it has.
	PreviewMayCancel PreviewKind = "may-cancel"
	// PreviewDeadline: the slot must have ended ok by its deadline
	// (WithDeadline), or is recorded past it.
	PreviewDeadline PreviewKind = "deadline"
	// PreviewExcluded: a calendar the job or entry names holds the slot's day
	// (WithCalendars): it is recorded excluded, not run.
	PreviewExcluded PreviewKind = "excluded"
)

// Preview lists the next o.N slots of job, or of its schedule entry o.Entry,
// from o.From, each with what the fleet will do with it. It reads the schedule,
// its spread, bounds and daylight saving shifts, then what this instance sees
// now: pauses, the entry's pause, the run limit and the runs in progress. A
// slot that no note holds back runs. The list ends early when the schedule has
// no further slot.
//
// Preview says what the fleet does if nothing changes: a pause, a resume or a
// new declaration changes it. It reads the store for the entry, the runs in
// progress and the run count (a run store that is a backend.RunCountReader;
// without it the run limit's notes say "may").
func (s *Scheduler) Preview(ctx context.Context, job string, o PreviewOptions) ([]PreviewSlot, error) {
	if o.N < 1 || o.N > MaxPreviewSlots {
		return nil, fmt.Errorf("%w: preview of %d slots: N must be 1 to %d", ErrInvalidOption, o.N, MaxPreviewSlots)
	}
	if !o.From.IsZero() && (o.From.Before(firstMillis) || o.From.After(lastMillis)) {
		return nil, fmt.Errorf("%w: preview from %v: outside the range of slots (milliseconds since 1970 in 64 bits)", ErrInvalidOption, o.From)
	}
	p, err := s.declared(job)
	if err != nil {
		return nil, err
	}
	j, entry := p, (*Entry)(nil)
	if o.Entry != "" {
		if j, entry, err = s.previewEntry(ctx, p, o.Entry); err != nil {
			return nil, err
		}
	} else if _, none := p.sched.(noSchedule); none {
		return nil, fmt.Errorf("%w: job %q has no schedule of its own: preview one of its entries", ErrInvalidOption, job)
	}
	now := s.clock.Now()
	from := o.From
	if from.IsZero() {
		from = now.Add(time.Nanosecond)
	}
	out := previewSchedule(j.sched, from, o.N)
	st, err := s.previewState(ctx, j, now)
	if err != nil {
		return nil, fmt.Errorf("scheduler: preview of %s: %w", j.quoted(), err)
	}
	lead, whole := leadSlots(j.sched, now, from, st.needsLead())
	if !whole {
		st.unsure = true
	}
	for i := range lead {
		st.note(&lead[i], entry)
	}
	for i := range out {
		st.note(&out[i], entry)
		if d := j.cfg.deadline; d > 0 && out[i].Runs {
			out[i].add(PreviewDeadline, "must have ended ok by %s (%s after the slot), or is recorded past its deadline", stamp(out[i].Nominal.Add(d)), shortDuration(d))
		}
	}
	return out, nil
}

// previewEntry is the run view of entry id of job p, as stored now: the one
// this instance follows when it follows that revision.
func (s *Scheduler) previewEntry(ctx context.Context, p *job, id string) (*job, *Entry, error) {
	e, err := s.GetEntry(ctx, p.name, id)
	if err != nil {
		return nil, nil, err
	}
	s.entries.mu.Lock()
	st, ok := s.entries.byKey[entryKey{e.Job, e.ID}]
	s.entries.mu.Unlock()
	if ok && st.e.Revision == e.Revision && st.j.gone == p.gone {
		return st.j, &e, nil
	}
	j, err := s.entryJob(p, e)
	if err != nil {
		return nil, nil, err
	}
	return j, &e, nil
}

// previewSchedule lists the first n slots of sched at or after from, with what
// the schedule alone says of them: spread, daylight saving, bounds.
func previewSchedule(sched Schedule, from time.Time, n int) []PreviewSlot {
	spread, spreads := spreadOf(sched)
	bounds, _ := boundsOf(sched)
	cs := cronOf(sched)
	var out []PreviewSlot
	prev := from.Add(-time.Nanosecond)
	for len(out) < n {
		t := sched.Next(prev)
		if t.IsZero() || !t.After(prev) {
			break
		}
		ps := PreviewSlot{Slot: t, Nominal: t, Runs: true}
		if spreads {
			ps.Nominal = t.Add(-spread.Offset)
			if spread.Offset > 0 {
				ps.add(PreviewSpread, "moved %v later, from %s, by the spread window %s", spread.Offset, stamp(ps.Nominal), shortDuration(spread.Window))
			}
		}
		if cs != nil {
			ps.Notes = append(ps.Notes, cs.dstNotes(ps.Nominal)...)
		}
		if len(out) == 0 && !bounds.Start.IsZero() && from.Before(bounds.Start) {
			ps.add(PreviewStartBound, "the first slot: the start bound %s leaves none before it", stamp(bounds.Start))
		}
		out = append(out, ps)
		prev = t
	}
	if len(out) > 0 {
		last := &out[len(out)-1]
		if sched.Next(last.Slot).IsZero() {
			switch {
			case isOnce(sched):
				last.add(PreviewLast, "the only slot of a one-time job")
			case !bounds.End.IsZero() && !bounds.Schedule.Next(last.Slot).IsZero():
				last.add(PreviewLast, "the last slot: the end bound %s leaves none after it", stamp(bounds.End))
			default:
				last.add(PreviewLast, "the last slot: the schedule has none after it")
			}
		}
	}
	return out
}

// leadSlots lists the slots after now and before from, at most
// maxPreviewLead of them; whole is false when there are more. None unless
// wanted.
func leadSlots(sched Schedule, now, from time.Time, wanted bool) (lead []PreviewSlot, whole bool) {
	if !wanted || !now.Before(from) {
		return nil, true
	}
	prev := now
	for {
		t := sched.Next(prev)
		if t.IsZero() || !t.After(prev) || !t.Before(from) {
			return lead, true
		}
		if len(lead) == maxPreviewLead {
			return lead, false
		}
		lead = append(lead, PreviewSlot{Slot: t, Nominal: t, Runs: true})
		prev = t
	}
}

func (ps *PreviewSlot) add(kind PreviewKind, format string, args ...any) {
	ps.Notes = append(ps.Notes, PreviewNote{Kind: kind, Text: fmt.Sprintf(format, args...)})
}

// has reports whether the slot has a note of one of kinds.
func (ps *PreviewSlot) has(kinds ...PreviewKind) bool {
	for _, n := range ps.Notes {
		for _, k := range kinds {
			if n.Kind == k {
				return true
			}
		}
	}
	return false
}

// boundsOf is the bounds of sched; false without any.
func boundsOf(sched Schedule) (BoundedSchedule, bool) {
	b, ok := sched.(BoundedSchedule)
	return b, ok
}

// cronOf is the cron schedule under sched's bounds and spread; nil for another.
func cronOf(sched Schedule) *CronSchedule {
	switch s := sched.(type) {
	case *CronSchedule:
		return s
	case BoundedSchedule:
		return cronOf(s.Schedule)
	case SpreadSchedule:
		return cronOf(s.Schedule)
	}
	return nil
}

// stamp writes an instant in a note: UTC, to the millisecond when it has any.
func stamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.999Z07:00")
}

// previewState is what Preview reads once, before it notes the slots in order:
// the pauses, the runs in progress, the run limit; and what the slots noted so
// far used up.
type previewState struct {
	s   *Scheduler
	j   *job
	now time.Time
	// unsure says slots between now and From went uncounted (maxPreviewLead).
	unsure bool

	// catchUps are, by the end of a pause, the slots catch-up runs then.
	catchUps map[int64]map[int64]bool

	// hold is the run in progress that holds the job, and until when it may
	// (zero: no bound); held says there is one.
	held     bool
	hold     ActiveRun
	holdEnd  time.Time
	buffered int
	asked    bool // cancel-other: a slot asked the run to end

	// limit: the runs the limit leaves (left, when known), and the slots
	// noted that run unless the limit stops them (sure) or may run (maybe).
	limited     bool
	left        int
	known       bool
	sure, maybe int
}

// previewState reads what the notes of j's slots need.
func (s *Scheduler) previewState(ctx context.Context, j *job, now time.Time) (*previewState, error) {
	st := &previewState{s: s, j: j, now: now, catchUps: map[int64]map[int64]bool{}}
	if s.runs == nil || j.cfg.maxRuns == 0 && !j.cfg.overlap.Exclusive() {
		return st, nil
	}
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if j.cfg.overlap.Exclusive() {
		active, err := s.runs.Active(cctx, j.name)
		if err != nil {
			return nil, err
		}
		st.holding(active)
	}
	if j.cfg.maxRuns > 0 {
		st.limited, st.known = true, true
		switch r, ok := s.runs.(backend.RunCountReader); {
		case j.limitHit.Load() || j.ended.Err() != nil:
		case ok:
			n, err := r.RunCount(cctx, j.name)
			if err != nil {
				return nil, err
			}
			st.left = max(j.cfg.maxRuns-n, 0)
		default:
			st.left, st.known = j.cfg.maxRuns, false
		}
	}
	return st, nil
}

// needsLead reports whether the slots between now and From change the notes:
// they use up the run limit, the buffer or the cancel-other request.
func (st *previewState) needsLead() bool { return st.limited || st.held }

// holding notes the run in progress that holds the job longest, and until
// when it may: its start plus the job's timeout (and, with retries, its last
// retry's), if its handler honours its context. A buffered slot runs after
// it, each for up to the timeout.
func (st *previewState) holding(active []ActiveRun) {
	j := st.j
	timeout := j.cfg.timeout
	running := 0
	for _, r := range active {
		if r.Buffered {
			st.buffered++
			continue
		}
		end := time.Time{}
		if timeout > 0 {
			start := r.Claimed
			if !r.RetryAt.IsZero() {
				start = r.RetryAt
			}
			if start.IsZero() {
				start = st.now
			}
			end = start.Add(timeout)
			if j.cfg.retry != nil && !r.Manual {
				// A retry starts at the latest max lateness after the next slot.
				if next := j.sched.Next(r.Slot); !next.IsZero() && next.Add(j.cfg.maxLate+timeout).After(end) {
					end = next.Add(j.cfg.maxLate + timeout)
				}
			}
		}
		running++
		switch {
		case !st.held:
			st.held, st.hold, st.holdEnd = true, r, end
		case st.holdEnd.IsZero():
		case end.IsZero() || end.After(st.holdEnd):
			st.hold, st.holdEnd = r, end
		}
	}
	if slots := (backend.RunClaim{Overlap: j.cfg.overlap, Concurrency: j.cfg.concurrency}).Slots(); running < slots {
		st.held = false // fewer runs in progress than may run at once (WithConcurrency)
	}
	if st.held && !st.holdEnd.IsZero() && st.buffered > 0 {
		st.holdEnd = st.holdEnd.Add(time.Duration(st.buffered) * timeout)
	}
}

// note adds to ps what the pauses, the runs in progress and the run limit do
// to it, given the slots noted before it.
func (st *previewState) note(ps *PreviewSlot, entry *Entry) {
	if !ps.Slot.After(st.now) {
		ps.Runs = false
		ps.add(PreviewPast, "due by now: History says what became of it")
		return
	}
	if cal, rule := st.s.excludedBy(st.j, ps.Nominal); cal != "" {
		ps.Runs = false
		ps.add(PreviewExcluded, "not run: excluded by calendar %q (%s), as the calendars stand now", cal, rule)
		return
	}
	if entry != nil && entry.Paused {
		ps.Runs = false
		ps.add(PreviewEntryPaused, "not run: the schedule entry is paused (changed by %s at %s)", entry.By, stamp(entry.Updated))
		return
	}
	if st.paused(ps) {
		st.limit(ps) // a slot catch-up runs counts
		return
	}
	st.overlap(ps)
	st.limit(ps)
}

// paused notes the pause that holds ps, if one does, and whether catch-up runs
// it when the pause ends.
func (st *previewState) paused(ps *PreviewSlot) bool {
	s, j := st.s, st.j
	p, ok := s.pauses.of(j.name, ps.Slot)
	if !ok {
		return false
	}
	end := p.Until
	for range maxPauseSteps { // the end of the pauses that follow it
		q, more := s.pauses.of(j.name, end)
		if end.IsZero() || !more {
			break
		}
		end = q.Until
	}
	who := "job paused"
	if p.Job == "" {
		who = "all jobs paused"
	}
	until := "until resumed"
	if !end.IsZero() {
		until = "until " + stamp(end)
	}
	why := fmt.Sprintf("%s by %s %s: %s", who, p.By, until, p.Reason)
	if !end.IsZero() && st.caughtUp(p, end)[ps.Slot.UnixMilli()] {
		ps.add(PreviewCatchUp, "catch-up runs it when the pause ends (%s)", why)
		return true
	}
	ps.Runs = false
	ps.add(PreviewPaused, "recorded paused, not run: %s", why)
	return true
}

// caughtUp is the set of slots (Unix ms) that catch-up runs when the pause p,
// held until end, ends: those of the job's policy, as pausedSlots picks them.
// None for an entry: only a job's own slots are caught up.
func (st *previewState) caughtUp(p Pause, end time.Time) map[int64]bool {
	s, j := st.s, st.j
	if set, ok := st.catchUps[end.UnixMilli()]; ok {
		return set
	}
	set := map[int64]bool{}
	st.catchUps[end.UnixMilli()] = set
	if j.entry != nil || s.runs == nil || j.cfg.catchUp == CatchUpNone {
		return set
	}
	s.pauses.mu.Lock()
	since, seen := s.pauses.since[j.name]
	s.pauses.mu.Unlock()
	if !seen {
		since = p.At
		if since.IsZero() || since.After(st.now) {
			since = st.now
		}
	}
	for _, t := range j.pausedSlots(since, end, s.excludes(j)) {
		set[t.UnixMilli()] = true
	}
	return set
}

// overlap notes what the job's overlap policy does with ps while the run in
// progress may still hold the job.
func (st *previewState) overlap(ps *PreviewSlot) {
	if !st.held || !st.holdEnd.IsZero() && !ps.Slot.Before(st.holdEnd) {
		return
	}
	j := st.j
	run := "the run of slot " + stamp(st.hold.Slot)
	if st.hold.Manual {
		run = "the manual run"
	}
	run += " in progress (on " + st.hold.Instance + ")"
	until := " (the job has no timeout: how long that run takes decides)"
	if !st.holdEnd.IsZero() {
		until = fmt.Sprintf(", at the latest %s if its handler honours its timeout", stamp(st.holdEnd))
	}
	switch p := j.cfg.overlap; {
	case p == OverlapSkip:
		ps.add(PreviewMaySkip, "may be skipped: %s holds the job until it ends%s", run, until)
	case p == OverlapCancelOther:
		if st.asked {
			return
		}
		st.asked = true
		ps.add(PreviewMayCancel, "if %s still runs then, the slot asks it to end (overlap policy cancel-other) and starts once it has%s", run, until)
	case p.Buffers():
		limit := backend.RunClaim{Overlap: p, BufferCap: j.cfg.bufferCap}.Buffers()
		if st.buffered >= limit {
			ps.add(PreviewMaySkip, "may be skipped: the buffer is full (%d slots) while %s holds the job%s", limit, run, until)
			return
		}
		st.buffered++
		ps.add(PreviewMayBuffer, "may be buffered behind %s, and run once it has ended%s", run, until)
	}
}

// limit notes whether the run limit is reached before ps, from the slots
// noted before it.
func (st *previewState) limit(ps *PreviewSlot) {
	if !st.limited || !ps.Runs {
		return
	}
	n := st.j.cfg.maxRuns
	switch {
	case st.known && st.sure >= st.left, !st.known && st.sure >= n:
		ps.Runs = false
		ps.add(PreviewLimit, "not run: the run limit of %d runs is reached before it", n)
		return
	case !st.known:
		ps.add(PreviewMayLimit, "may be beyond the run limit of %d runs: the store does not say how many it counted", n)
	case st.unsure || st.maybe >= st.left:
		ps.add(PreviewMayLimit, "may be beyond the run limit: %d of %d runs are left, and the slots before it may use them up", st.left, n)
	}
	// A slot the limit may stop counts either way: it runs, or the limit was
	// reached before it.
	st.maybe++
	if !ps.has(PreviewMaySkip, PreviewMayCancel) {
		st.sure++
	}
}

// dstNotes says what daylight saving does to the slot n, one of the schedule's,
// under its policy: a time the clocks skip fires later by the jump (DSTShift,
// DSTSkip gives it no slot); a time they repeat fires at its first, its second
// or both occurrences.
func (s *CronSchedule) dstNotes(n time.Time) []PreviewNote {
	if s.fixed {
		return nil
	}
	local := n.In(s.loc)
	day := local.Format("Mon 2 Jan 2006")
	z := periodAt(n, s.loc)
	var out []PreviewNote
	if jump := time.Duration(z.off-z.prev) * time.Second; jump > 0 && n.Before(z.start.Add(jump)) && !s.lists(z.off, n) {
		wall := n.In(time.FixedZone("", z.prev)) // the skipped wall time: the day may be the one before
		out = append(out, PreviewNote{Kind: PreviewDSTShifted, Text: fmt.Sprintf(
			"%s does not exist on %s in %s (the clocks jump forward %s): shifted by the jump to %s %s, the instant it would have been",
			clockText(wall), wall.Format("Mon 2 Jan 2006"), s.loc, shortDuration(jump), clockText(local), zoneName(local))})
	}
	var back time.Duration
	first, second := n, n
	if d := time.Duration(z.off-z.after) * time.Second; d > 0 && !n.Before(z.end.Add(-d)) {
		back, second = d, n.Add(d) // n is the first occurrence
	} else if d := time.Duration(z.prev-z.off) * time.Second; d > 0 && n.Before(z.start.Add(d)) {
		back, first = d, n.Add(-d) // n is the second
	}
	if back > 0 {
		var fires string
		switch s.dst.Normal().Repeated {
		case DSTLast:
			fires = "it fires once, at the second (" + clockText(local) + " " + zoneName(second.In(s.loc)) + ")"
		case DSTBoth:
			which := "the first"
			if n.Equal(second) {
				which = "the second"
			}
			fires = fmt.Sprintf("it fires at both (%s %s, %s %s); this is %s", clockText(local), zoneName(first.In(s.loc)),
				clockText(local), zoneName(second.In(s.loc)), which)
		default:
			fires = "it fires once, at the first (" + clockText(local) + " " + zoneName(first.In(s.loc)) + ")"
		}
		out = append(out, PreviewNote{Kind: PreviewDSTRepeated, Text: fmt.Sprintf(
			"%s happens twice on %s in %s (the clocks fall back %s): %s", clockText(local), day, s.loc, shortDuration(back), fires)})
	}
	return out
}

// lists reports whether the expression lists the wall time of t at offset
// off (seconds east of UTC), its day included.
func (s *CronSchedule) lists(off int, t time.Time) bool {
	return s.fixedNext(off, t.Add(-time.Nanosecond)).Equal(t)
}

// clockText is the wall-clock time of t: 15:04, or 15:04:05 with seconds.
func clockText(t time.Time) string {
	if t.Second() != 0 {
		return t.Format("15:04:05")
	}
	return t.Format("15:04")
}

// zoneName is t's zone abbreviation, or its offset when the zone has none.
func zoneName(t time.Time) string {
	name, _ := t.Zone()
	if name == "" || name[0] == '+' || name[0] == '-' {
		return t.Format("UTC-07:00")
	}
	return name
}

// shortDuration writes d without zero units: "1h", "30m", "1h30m", "10s".
func shortDuration(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = out[:len(out)-2]
	}
	if strings.HasSuffix(out, "h0m") {
		out = out[:len(out)-2]
	}
	return out
}
