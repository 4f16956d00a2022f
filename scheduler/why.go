package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// MaxWhyRecords bounds how many of a job's newest records Why reads, whatever
// history the job keeps.
const MaxWhyRecords = 10_000

// WhyOptions say which slot Why explains.
type WhyOptions struct {
	// Entry names a schedule entry of the job whose slot to explain. Why
	// needs the entry's schedule: a removed entry is not found
	// (ErrEntryNotFound), though EntryHistory still lists its records.
	Entry string
	// Slot is the slot, at millisecond precision, as History reports it. A
	// manual run's instant is a slot too.
	Slot time.Time
}

// WhyReport is what Why says of one slot.
type WhyReport struct {
	Job   string
	Entry string
	Slot  time.Time
	// Steps say what was decided for the slot and by whom, oldest first, then
	// what is still open. There is always at least one.
	Steps []WhyStep
	// Open says the slot's fate is not settled yet: an attempt runs, the slot
	// is buffered, a retry is stored, or the slot is not decided yet.
	Open bool
	// Read is how many of the job's newest records Why read. Reached says
	// they reach back past the slot: a slot they do not reach may have
	// records that were not read.
	Read    int
	Reached bool
}

// WhyStep is one thing Why says of a slot: a kind to match and a sentence.
type WhyStep struct {
	Kind WhyKind
	Text string
	// Attempt, Instance and Status are those of the record or the stored run
	// the step is about; zero for a step about the slot as a whole.
	Attempt  int
	Instance string
	Status   Status
	// At is the instant the step is about: when an attempt started or a
	// decision was stored, when a lease expires, when a retry may be claimed.
	// Zero when none.
	At time.Time
	// Record is the record the step was built from; nil for a step about the
	// slot as a whole or about a run the run store holds.
	Record *RunRecord
}

// WhyKind says what a WhyStep is about.
type WhyKind string

// The kinds of WhyStep.
const (
	// An attempt that ran, or runs now, and how it came to: the step's Status
	// says how it ended.

	// WhyRan: the slot's first attempt, claimed when the slot came due.
	WhyRan WhyKind = "ran"
	// WhyBuffered: the slot waited, buffered behind another run of the job
	// (OverlapBufferOne, OverlapBufferAll), then ran.
	WhyBuffered WhyKind = "buffered"
	// WhyTakeover: a backup took the run over after the attempt before it
	// lost its lease or handed the run over.
	WhyTakeover WhyKind = "takeover"
	// WhyRetry: a retry after the attempt before it failed (WithRetry).
	WhyRetry WhyKind = "retry"
	// WhyCatchUp: catch-up ran the slot, stored paused, once the pause ended.
	WhyCatchUp WhyKind = "catch-up"
	// WhyBackfill: Backfill asked for the attempt.
	WhyBackfill WhyKind = "backfill"
	// WhyReopened: the slot was decided not to run, then run as a further
	// attempt.
	WhyReopened WhyKind = "reopened"
	// WhyManual: a manual run (RunNow).
	WhyManual WhyKind = "manual"

	// Decisions not to run the slot, as stored.

	// WhySkipped: another run held the job (the overlap policy).
	WhySkipped WhyKind = "skipped"
	// WhyLate: nobody started the slot before its deadline.
	WhyLate WhyKind = "late"
	// WhyMissed: due while no instance could claim it.
	WhyMissed WhyKind = "missed"
	// WhyPaused: the job or the entry was paused; the text is the pause's
	// reason as recorded.
	WhyPaused WhyKind = "paused"
	// WhyLimit: the run limit (WithMaxRuns) was reached.
	WhyLimit WhyKind = "limit"
	// WhyExcluded: a calendar the job or entry names held the slot's day; the
	// text names the calendar and its rule.
	WhyExcluded WhyKind = "excluded"

	// WhyDeadline: the slot was judged not ended ok by its deadline
	// (WithDeadline).
	WhyDeadline WhyKind = "deadline"

	// What is still open.

	// WhyRunning: an attempt holds the run now.
	WhyRunning WhyKind = "running"
	// WhyWaiting: the slot is stored buffered, or waits for an earlier run it
	// asked to end (OverlapCancelOther).
	WhyWaiting WhyKind = "waiting"
	// WhyRetryPending: the last attempt failed and stored a retry.
	WhyRetryPending WhyKind = "retry-pending"
	// WhyCancelAsked: a later slot asked the run to end (OverlapCancelOther).
	WhyCancelAsked WhyKind = "cancel-asked"
	// WhyNotDue: the slot is still to come.
	WhyNotDue WhyKind = "not-due"
	// WhyDue: the slot is due and not decided yet: replicas may still claim it.
	WhyDue WhyKind = "due"

	// Nothing stored.

	// WhyNone: the history holds no record of the slot, and reaches back past it.
	WhyNone WhyKind = "none"
	// WhyBeyondHistory: the slot is older than what the history keeps, or
	// than what Why reads.
	WhyBeyondHistory WhyKind = "beyond-history"
	// WhyNotASlot: the instant is not a slot of the job's schedule as
	// declared on this instance.
	WhyNotASlot WhyKind = "not-a-slot"
)

// Why says what was decided for one slot of job, or of its schedule entry
// o.Entry, and by whom, from the slot's records in the job's history: each
// attempt and how it came to run, each decision not to run it, the deadline's
// judgement. It then says what is still open, from the run store: a running
// attempt, a buffered slot, a stored retry. A slot the history holds no record
// of is said so, with why that may be; an instant that is not a slot is said
// so, with the nearest slots.
//
// Why reads the job's newest records, deeper until they reach the slot, up to
// the history the job keeps (WithHistory) and MaxWhyRecords.
func (s *Scheduler) Why(ctx context.Context, job string, o WhyOptions) (WhyReport, error) {
	if o.Slot.IsZero() {
		return WhyReport{}, fmt.Errorf("%w: why: a slot is required", ErrInvalidOption)
	}
	if o.Slot.Before(firstMillis) || o.Slot.After(lastMillis) {
		return WhyReport{}, fmt.Errorf("%w: why of slot %v: outside the range of slots (milliseconds since 1970 in 64 bits)", ErrInvalidOption, o.Slot)
	}
	if o.Slot.Nanosecond()%int(time.Millisecond) != 0 {
		return WhyReport{}, fmt.Errorf("%w: why of slot %s: slots are whole milliseconds", ErrInvalidOption, o.Slot.UTC().Format(time.RFC3339Nano))
	}
	p, err := s.declared(job)
	if err != nil {
		return WhyReport{}, err
	}
	j, entry := p, (*Entry)(nil)
	if o.Entry != "" {
		if j, entry, err = s.previewEntry(ctx, p, o.Entry); err != nil {
			return WhyReport{}, err
		}
	}
	slot := time.UnixMilli(o.Slot.UnixMilli()).UTC()
	now := s.clock.Now()
	w := &why{s: s, j: j, entry: entry, slot: slot, now: now, out: WhyReport{Job: job, Entry: o.Entry, Slot: slot}}
	if err := w.read(ctx); err != nil {
		return WhyReport{}, fmt.Errorf("scheduler: why of %s slot %s: %w", j.quoted(), stamp(slot), err)
	}
	w.explain()
	return w.out, nil
}

// why is one Why in the making.
type why struct {
	s     *Scheduler
	j     *job
	entry *Entry // as stored now, for an entry's slot
	slot  time.Time
	now   time.Time
	out   WhyReport

	// all are the records read, newest first; mine the slot's, oldest first.
	all  []RunRecord
	mine []RunRecord
	// depth is the last read's limit.
	depth int
	// active are the job's unfinished runs in the run store.
	active []ActiveRun
}

// read reads the job's newest records until they reach the slot, then its
// unfinished runs.
func (w *why) read(ctx context.Context) error {
	s, j := w.s, w.j
	if err := s.init(ctx); err != nil {
		return err
	}
	limit := min(j.cfg.historySize, MaxWhyRecords)
	depth := whyDepth(j.sched, w.slot, w.now, limit)
	for {
		cctx, cancel := s.callCtx(ctx)
		recs, err := s.backend.History(cctx, j.name, depth)
		cancel()
		if err != nil {
			return err
		}
		w.all, w.depth = recs, depth
		if len(recs) < depth || reaches(recs, w.slot) || depth == limit {
			break
		}
		depth = min(4*depth, limit)
	}
	w.out.Read, w.out.Reached = len(w.all), len(w.all) < w.depth || reaches(w.all, w.slot)
	if s.runs != nil {
		cctx, cancel := s.callCtx(ctx)
		active, err := s.runs.Active(cctx, j.name)
		cancel()
		if err != nil {
			return err
		}
		w.active = active
		if _, settles := s.runs.(backend.Settler); settles {
			w.all = withRunning(j.name, w.all, active, 0)
		}
	} else {
		s.showLost(j.name, w.all)
	}
	for _, r := range w.all {
		if r.Slot.Equal(w.slot) {
			if j.entry != nil {
				r.Job, r.Entry = j.entry.job, j.entry.id
			}
			w.mine = append(w.mine, r)
		}
	}
	slices.SortStableFunc(w.mine, func(a, b RunRecord) int {
		if c := cmp.Compare(a.Attempt, b.Attempt); c != 0 {
			return c
		}
		return recordTime(a).Compare(recordTime(b))
	})
	return nil
}

// whyDepth is how many of a job's newest records hold those of slot, at
// first guess: two for each slot of sched since, at most limit.
func whyDepth(sched Schedule, slot, now time.Time, limit int) int {
	n := 0
	for t := sched.Next(slot); !t.IsZero() && !t.After(now) && n < limit; t = sched.Next(t) {
		n++
	}
	return max(min(limit, 2*n+16), 1)
}

// recordTime is when a record's attempt began, or its decision was stored.
func recordTime(r RunRecord) time.Time {
	for _, t := range []time.Time{r.ClaimedAt, r.StartedAt, r.FinishedAt} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// explain builds the steps from what read found.
func (w *why) explain() {
	j := w.j
	var attempts []RunRecord
	var judged []RunRecord
	for _, r := range w.mine {
		if r.Status.Judgement() {
			judged = append(judged, r)
		} else {
			attempts = append(attempts, r)
		}
	}
	onSchedule := j.onSchedule(w.slot)
	manual := slices.ContainsFunc(attempts, func(r RunRecord) bool { return r.Manual })
	if !onSchedule && len(w.mine) == 0 {
		w.notASlot()
		return
	}
	if !onSchedule && !manual {
		w.step(WhyStep{Kind: WhyNotASlot, Text: "not a slot of " + w.what() + " as declared here now: its schedule changed since the records below"})
	}
	if len(w.mine) > 0 && !w.out.Reached {
		w.step(WhyStep{Kind: WhyBeyondHistory, Text: fmt.Sprintf("the %d records read end at this slot: attempts before the first below, if any, are older than what was read", len(w.all))})
	}
	for i, r := range attempts {
		var prev *RunRecord
		if i > 0 {
			prev = &attempts[i-1]
		}
		for len(judged) > 0 && judged[0].FinishedAt.Before(recordTime(r)) {
			w.judgement(judged[0])
			judged = judged[1:]
		}
		w.attempt(r, prev)
	}
	for _, r := range judged {
		w.judgement(r)
	}
	w.open()
	if len(w.mine) == 0 && !w.out.Open {
		w.nothing()
	}
}

// what names the job or entry in a sentence.
func (w *why) what() string {
	if w.j.entry != nil {
		return fmt.Sprintf("entry %q of job %q", w.j.entry.id, w.j.entry.job)
	}
	return fmt.Sprintf("job %q", w.j.name)
}

func (w *why) step(st WhyStep) { w.out.Steps = append(w.out.Steps, st) }

// attempt says what the record r of an attempt tells, after prev, the attempt
// before it (nil for the first).
func (w *why) attempt(r RunRecord, prev *RunRecord) {
	st := WhyStep{Attempt: r.Attempt, Instance: r.Instance, Status: r.Status, At: recordTime(r), Record: &r}
	by := fmt.Sprintf(" (decided by %s at %s)", r.Instance, stamp(r.FinishedAt))
	switch r.Status {
	case StatusSkipped:
		st.Kind, st.Text = WhySkipped, "skipped: "+r.Error+w.holder(r)+by
	case StatusLate:
		st.Kind, st.Text = WhyLate, "late: "+r.Error+by
	case StatusMissed:
		st.Kind, st.Text = WhyMissed, "missed: "+r.Error+fmt.Sprintf(" (recorded by %s at %s, once it could claim)", r.Instance, stamp(r.FinishedAt))
	case StatusPaused:
		st.Kind, st.Text = WhyPaused, "paused: "+r.Error+fmt.Sprintf(" (recorded by %s at %s)", r.Instance, stamp(r.FinishedAt))
	case StatusExcluded:
		st.Kind, st.Text = WhyExcluded, r.Error+fmt.Sprintf(" (recorded by %s at %s)", r.Instance, stamp(r.FinishedAt))
	case StatusLimit:
		limit := ""
		if n := w.j.cfg.maxRuns; n > 0 {
			limit = fmt.Sprintf(" of %d", n)
		}
		st.Kind, st.Text = WhyLimit, "past the run limit"+limit+": "+r.Error+by
	default:
		st.Kind, st.Text = w.ran(r, prev)
		st.Text += ": " + ending(r)
	}
	w.step(st)
}

// ran says how the attempt r, which ran, came to run.
func (w *why) ran(r RunRecord, prev *RunRecord) (WhyKind, string) {
	on := fmt.Sprintf("ran on %s as attempt %d", r.Instance, r.Attempt)
	if r.Status == StatusRunning {
		on = fmt.Sprintf("runs on %s as attempt %d", r.Instance, r.Attempt)
	}
	backfill := ""
	if r.Backfill {
		backfill = ", a backfill"
	}
	switch {
	case r.Manual:
		who := "manual run"
		if r.RequestedBy != "" {
			who += " requested by " + r.RequestedBy
		}
		if prev != nil {
			return WhyManual, fmt.Sprintf("%s, after attempt %d (recorded %s): %s", who, prev.Attempt, prev.Status, on)
		}
		return WhyManual, who + ": " + on
	case prev == nil && r.Backfill:
		return WhyBackfill, "backfilled on request (Backfill): " + on
	case prev == nil:
		if lag := w.lag(r); lag > 0 && w.j.cfg.overlap.Buffers() {
			also := ""
			if w.j.cfg.catchUp != CatchUpNone {
				also = ", or catch-up ran it at a start"
			}
			return WhyBuffered, fmt.Sprintf("buffered, then ran: it waited behind another run of the job (overlap policy %s)%s, and started %s after its slot, past its max lateness; %s",
				w.j.cfg.overlap, also, shortDuration(lag), on)
		}
		return WhyRan, on
	case prev.Status == StatusLost, prev.Status == StatusSuperseded:
		return WhyTakeover, fmt.Sprintf("%s after the lease of %s ended (attempt %d recorded %s)%s", on, prev.Instance, prev.Attempt, prev.Status, backfill)
	case prev.Status == StatusCancelled:
		return WhyTakeover, fmt.Sprintf("%s after %s handed the run over (attempt %d recorded cancelled: %s)%s", on, prev.Instance, prev.Attempt, prev.Error, backfill)
	case prev.Status == StatusError, prev.Status == StatusTimeout:
		failed := string(prev.Status)
		if prev.Error != "" {
			failed = prev.Error
		}
		return WhyRetry, fmt.Sprintf("a retry after attempt %d failed on %s: %s; %s%s", prev.Attempt, prev.Instance, failed, on, backfill)
	case r.Backfill:
		return WhyBackfill, fmt.Sprintf("backfilled on request (Backfill) after attempt %d was recorded %s: %s", prev.Attempt, prev.Status, on)
	case prev.Status == StatusPaused:
		return WhyCatchUp, fmt.Sprintf("caught up once the pause ended (attempt %d was recorded paused): %s", prev.Attempt, on)
	}
	return WhyReopened, fmt.Sprintf("run again after attempt %d was recorded %s: %s", prev.Attempt, prev.Status, on)
}

// lag is how long after its slot, past its max lateness and the clock skew
// allowance, the first attempt r was granted: a scheduled claim never is; zero
// otherwise.
func (w *why) lag(r RunRecord) time.Duration {
	at := r.ClaimedAt
	if at.IsZero() {
		at = r.StartedAt
	}
	if at.IsZero() || !at.After(w.slot.Add(w.j.cfg.maxLate+w.s.maxSkew)) {
		return 0
	}
	return at.Sub(w.slot).Round(time.Millisecond)
}

// ending says how the attempt of r ended.
func ending(r RunRecord) string {
	text := func(what string) string {
		if r.Error == "" {
			return what
		}
		return what + ": " + r.Error
	}
	switch r.Status {
	case StatusRunning:
		return "not ended yet"
	case StatusOK:
		if d := r.Duration.Round(time.Millisecond); d > 0 {
			return "ended ok in " + shortDuration(d)
		}
		return "ended ok"
	case StatusError:
		return text("failed")
	case StatusTimeout:
		return text("timed out")
	case StatusCancelled:
		return text("cancelled")
	case StatusLost:
		return text("lost")
	case StatusSuperseded:
		return text("its result came after a backup had taken the run over (superseded)")
	}
	return text(string(r.Status))
}

// holder names the run that held the job when the skipped record r was stored,
// when the records read show one.
func (w *why) holder(r RunRecord) string {
	t := r.FinishedAt
	var found *RunRecord
	for i := range w.all {
		o := &w.all[i]
		start := o.StartedAt
		if start.IsZero() {
			start = o.ClaimedAt
		}
		switch {
		case o.Slot.Equal(w.slot), o.Status.Judgement(), o.Status.NotRun(), start.IsZero(), start.After(t):
		case o.Status != StatusRunning && o.FinishedAt.Before(t):
		case found == nil || o.Slot.After(found.Slot):
			found = o
		}
	}
	if found == nil {
		return ""
	}
	what := "slot " + stamp(found.Slot)
	if found.Manual {
		what = "a manual run"
	}
	return fmt.Sprintf("; %s held the job then (on %s, attempt %d)", what, found.Instance, found.Attempt)
}

// judgement says what the deadline record r tells.
func (w *why) judgement(r RunRecord) {
	w.step(WhyStep{Kind: WhyDeadline, Attempt: r.Attempt, Instance: r.Instance, Status: r.Status, At: r.FinishedAt, Record: &r,
		Text: fmt.Sprintf("deadline missed, judged by %s at %s: %s", r.Instance, stamp(r.FinishedAt), r.Error)})
}

// open says what the run store holds unfinished of the slot, and what the
// slot waits for when nothing is stored for it yet.
func (w *why) open() {
	for _, a := range w.active {
		if a.Cancel != nil && a.Cancel.Slot.Equal(w.slot) && !a.Slot.Equal(w.slot) {
			w.out.Open = true
			w.step(WhyStep{Kind: WhyWaiting, Instance: a.Cancel.Instance, At: a.Slot,
				Text: fmt.Sprintf("waiting: it asked the run of slot %s (on %s) to end (overlap policy cancel-other), and starts once it has", stamp(a.Slot), a.Instance)})
		}
		if !a.Slot.Equal(w.slot) || !a.Buffered && a.Attempt == 0 && a.RetryAt.IsZero() {
			continue
		}
		w.out.Open = true
		st := WhyStep{Attempt: a.Attempt, Instance: a.Instance}
		switch {
		case a.Buffered:
			st.Kind, st.Attempt = WhyWaiting, 0
			st.Text = fmt.Sprintf("waiting, buffered: stored by %s to run once nothing else holds the job (overlap policy %s)", a.Instance, w.j.cfg.overlap)
		case !a.RetryAt.IsZero():
			st.Kind, st.At = WhyRetryPending, a.RetryAt
			st.Text = fmt.Sprintf("attempt %d failed and stored a retry: any replica may claim attempt %d from %s", a.Attempt, a.Attempt+1, stamp(a.RetryAt))
		case a.Live:
			st.Kind, st.Status, st.At = WhyRunning, StatusRunning, a.Expires
			st.Text = fmt.Sprintf("running on %s as attempt %d: its lease is live until %s (fence %d)", a.Instance, a.Attempt, stamp(a.Expires), a.Fence)
		default:
			st.Kind, st.Status, st.At = WhyRunning, StatusRunning, a.Expires
			st.Text = fmt.Sprintf("attempt %d on %s holds the run, but its lease ended at %s: the next claim takes it over or ends it", a.Attempt, a.Instance, stamp(a.Expires))
		}
		w.step(st)
		if a.Cancel != nil {
			w.step(WhyStep{Kind: WhyCancelAsked, Attempt: a.Attempt, Instance: a.Cancel.Instance, At: a.Cancel.Slot,
				Text: fmt.Sprintf("asked to end by slot %s, from %s (overlap policy cancel-other)", stamp(a.Cancel.Slot), a.Cancel.Instance)})
		}
	}
	if len(w.mine) > 0 || w.out.Open {
		return
	}
	j := w.j
	paused := ""
	if p, ok := w.s.pauses.of(j.name, w.now); ok {
		paused = fmt.Sprintf("; the job is paused now (%s): unless it is resumed by then, the slot is recorded paused", pausedWhy(p))
	} else if w.entry != nil && w.entry.Paused {
		paused = fmt.Sprintf("; the schedule entry is paused now (changed by %s at %s): unless it is resumed by then, the slot is not run, and leaves no record", w.entry.By, stamp(w.entry.Updated))
	}
	switch deadline := w.slot.Add(j.cfg.maxLate); {
	case w.slot.After(w.now):
		w.out.Open = true
		w.step(WhyStep{Kind: WhyNotDue, At: w.slot, Text: fmt.Sprintf("not due yet: due at %s (Preview says what it will meet)%s", stamp(w.slot), paused)})
	case !w.now.After(deadline.Add(w.s.maxSkew)):
		w.out.Open = true
		w.step(WhyStep{Kind: WhyDue, At: deadline, Text: fmt.Sprintf("due and not decided yet: a replica may still claim it until %s (its max lateness)%s", stamp(deadline), paused)})
	}
}

// nothing says that no record of the slot was found, and why that may be.
func (w *why) nothing() {
	j := w.j
	if st, ok := w.missedRange(); ok {
		w.step(st)
		return
	}
	if e := w.entry; e != nil && e.Paused && !e.Updated.After(w.slot) {
		w.step(WhyStep{Kind: WhyNone, Text: fmt.Sprintf("no decision stored: the schedule entry is paused since %s (changed by %s), before this slot, and a paused entry's slots are not run and leave no record",
			stamp(e.Updated), e.By)})
		return
	}
	keeps := fmt.Sprintf("the history keeps %d records per %s (WithHistory)", j.cfg.historySize, map[bool]string{true: "entry", false: "job"}[j.entry != nil])
	if ttl := j.cfg.historyTTL; ttl > 0 {
		keeps += fmt.Sprintf(" and drops them %s after they end", shortDuration(ttl))
		if w.now.Sub(w.slot) > ttl {
			w.step(WhyStep{Kind: WhyBeyondHistory, Text: fmt.Sprintf("no record: the slot is older than %s: %s", shortDuration(ttl), keeps)})
			return
		}
	}
	if !w.out.Reached {
		oldest := w.all[len(w.all)-1].Slot
		text := fmt.Sprintf("no record in the %d newest records, which reach back to slot %s: ", len(w.all), stamp(oldest))
		if w.depth == j.cfg.historySize {
			text += "the slot is older than those: " + keeps
		} else {
			text += fmt.Sprintf("Why reads at most %d of them", MaxWhyRecords)
		}
		w.step(WhyStep{Kind: WhyBeyondHistory, Text: text})
		return
	}
	text := "no decision stored: the history holds no record of this slot"
	if len(w.all) > 0 {
		text += fmt.Sprintf(" (read %d records, back to slot %s)", len(w.all), stamp(w.all[len(w.all)-1].Slot))
	}
	if w.s.runs == nil {
		text += ". Without leases a slot is recorded by the replica that runs it: none ran this one (none was up), or its record is gone: " + keeps
	} else {
		text += ". A slot is recorded once a replica decides it: none was up to claim it and none recorded it missed since" +
			" (the first replica back records missed the slots that fell while the fleet was down, unless the job's history was empty)," +
			" or its record is gone: " + keeps
	}
	w.step(WhyStep{Kind: WhyNone, Text: text + ". History (anarchon history) lists what is kept"})
}

// missedRanges match the error of a missed record that stands for a range of
// slots (missedRange.why).
var missedRanges = regexp.MustCompile(`^one record for (?:at least )?\d+ slots due from (\S+) until (\S+) while`)

// missedRange finds the missed record that stands for the slot among others:
// the record of a long outage's older slots.
func (w *why) missedRange() (WhyStep, bool) {
	for _, r := range w.all {
		if r.Status != StatusMissed || !r.Slot.Before(w.slot) {
			continue
		}
		from, until, ok := parseMissedRange(r.Error)
		if !ok || w.slot.Before(from) || !w.slot.Before(until) {
			continue
		}
		return WhyStep{Kind: WhyMissed, Attempt: r.Attempt, Instance: r.Instance, Status: r.Status, At: r.FinishedAt, Record: &r,
			Text: fmt.Sprintf("missed: the record of slot %s stands for it: %s (recorded by %s at %s, once it could claim)", stamp(r.Slot), r.Error, r.Instance, stamp(r.FinishedAt))}, true
	}
	return WhyStep{}, false
}

// parseMissedRange reads the range of slots a missed record's error names.
func parseMissedRange(text string) (from, until time.Time, ok bool) {
	m := missedRanges.FindStringSubmatch(text)
	if m == nil {
		return time.Time{}, time.Time{}, false
	}
	from, err1 := time.Parse(time.RFC3339, m[1])
	until, err2 := time.Parse(time.RFC3339, m[2])
	return from, until, err1 == nil && err2 == nil
}

// notASlot says the instant is no slot of the job, and names the nearest.
func (w *why) notASlot() {
	st := WhyStep{Kind: WhyNotASlot}
	if _, none := w.j.sched.(noSchedule); none {
		st.Text = fmt.Sprintf("not a slot: %s has no schedule of its own (its slots are its entries'), and no manual run has this instant", w.what())
		w.step(st)
		return
	}
	before, after := slotsAround(w.j.sched, w.slot)
	var near []string
	if !before.IsZero() {
		near = append(near, stamp(before))
	}
	if !after.IsZero() {
		near = append(near, stamp(after))
	}
	st.Text = fmt.Sprintf("this instant is not a slot of %s, and no manual run has it", w.what())
	switch len(near) {
	case 1:
		st.Text += "; the nearest slot is " + near[0]
		if b, ok := boundsOf(w.j.sched); ok && before.IsZero() && !b.Start.IsZero() && w.slot.Before(b.Start) {
			st.Text += " (the start bound " + stamp(b.Start) + " leaves none before it)"
		}
	case 2:
		st.Text += "; the nearest slots are " + near[0] + " and " + near[1]
	default:
		st.Text += "; its schedule has no slot"
	}
	w.step(st)
}

// maxAroundSteps bounds slotsAround's search back: windows that double from
// the gap to the next slot.
const maxAroundSteps = 64

// maxAroundSlots bounds how many slots slotsAround walks in one window.
const maxAroundSlots = 100_000

// slotsAround returns the last slot of sched before t and the first after it
// (zero when none, or none found within its bounds).
func slotsAround(sched Schedule, t time.Time) (before, after time.Time) {
	after = sched.Next(t)
	step := time.Second
	if !after.IsZero() {
		step = max(after.Sub(t), time.Millisecond)
	}
	for range maxAroundSteps {
		from := t.Add(-step)
		if from.Before(firstMillis) {
			from = firstMillis
		}
		n := 0
		for x := sched.Next(from.Add(-time.Nanosecond)); !x.IsZero() && x.Before(t) && n < maxAroundSlots; x = sched.Next(x) {
			before = x
			n++
		}
		if !before.IsZero() || from.Equal(firstMillis) || step > time.Duration(1<<62) {
			return before, after
		}
		step *= 2
	}
	return before, after
}
