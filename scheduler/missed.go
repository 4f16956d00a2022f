package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// MaxMissedRecords bounds how many missed slots of one job a Start records one
// by one: the newest ones. The older missed slots are recorded as one record, at
// the oldest, whose error names the range and how many slots it holds. It is well
// below DefaultHistorySize, so that a job's history still shows what came before.
const MaxMissedRecords = 20

// missedScanLimit bounds how many slots of a job a Start counts for the record of
// a long outage's oldest missed slots; past it the record says "at least".
const missedScanLimit = 100_000

// maxMarkReads bounds how many history reads of starting jobs are in flight at
// once, so that a Start of many jobs does not send them all together.
const maxMarkReads = 8

// markDepths are how many of a job's newest records a Start reads, one reading
// after the other, to find the newest slot its replicas recorded: manual runs,
// backfills and missed records do not count, and may fill the newest ones.
var markDepths = []int{20, 200, 2000}

// markTries bounds the readings of a job's history at Start: past them the
// missed slots go unrecorded (the failures are reported), and catch-up runs.
const markTries = 5

// missed is what a Start records missed for a job: each slot one by one, and the
// older ones as one record at older.first.
type missed struct {
	each  []time.Time
	older missedRange
}

// missedRange is a run of missed slots recorded as one: from first up to, not
// including, until; count of them, at least count when more.
type missedRange struct {
	first, until time.Time
	count        int
	more         bool
}

// recoverJob reads the newest slot j's history records, then runs catch-up
// (run) beside recording missed the slots nobody ran since (recordMissed). The
// reading comes first: catch-up's own records would hide what it skips.
func (s *Scheduler) recoverJob(j *job, now time.Time, run, capped []time.Time) {
	ctx, cancel := s.jobCtx(j)
	defer cancel()
	mark := s.newestRecorded(ctx, j, now.Add(-j.cfg.maxLate))
	if ctx.Err() != nil {
		return
	}
	if !mark.IsZero() {
		j.judgedSince.Store(mark.UnixMilli()) // catch-up's slots after it are judged
	}
	if d := j.cfg.deadline; d > 0 && !mark.IsZero() {
		// The slots whose judgement a stop of the whole fleet may have cut off.
		for t := j.sched.Next(mark.Add(-d - s.maxSkew)); !t.IsZero() && !t.After(mark); t = j.sched.Next(t) {
			s.judgeRecovered(j, t)
		}
	}
	if len(run) > 0 {
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.catchUp(j, run)
		}()
	}
	s.recordMissed(j, now, run, capped, mark)
}

// recordMissed records missed the slots of j due while no instance could claim
// them: those after mark (the newest slot its history records; zero: none, a new
// job owes nothing but the capped slots), up to now minus the max lateness, that
// catch-up does not run (run). The slots of the catch-up window past
// MaxCatchUpSlots (capped) are among them. Each claim stores missed only a slot
// nobody decided, so every instance may ask.
func (s *Scheduler) recordMissed(j *job, now time.Time, run, capped []time.Time, mark time.Time) {
	ctx, cancel := s.jobCtx(j)
	defer cancel()
	if mark.IsZero() && len(capped) > 0 {
		mark = capped[0].Add(-time.Millisecond)
	}
	if mark.IsZero() {
		return
	}
	skip := make(map[int64]bool, len(run))
	for _, t := range run {
		skip[t.UnixMilli()] = true
	}
	m := j.missedSince(mark, now.Add(-j.cfg.maxLate), skip)
	if m.older.count > 0 {
		s.claimMissed(ctx, j, m.older.first, m.older.count, m.older.why())
	}
	for _, slot := range m.each {
		s.claimMissed(ctx, j, slot, 1, "")
		s.judgeLater(j, slot) // once recorded missed
	}
}

// claimMissed claims slot as missed (standing for count slots, recorded with
// why), once no instance may still start it: after its deadline and twice the
// clock skew allowance.
func (s *Scheduler) claimMissed(ctx context.Context, j *job, slot time.Time, count int, why string) {
	if j.limitHit.Load() || !s.sleepUntil(ctx, slot.Add(j.cfg.maxLate+2*s.maxSkew)) {
		return // the job had ended: nothing was owed
	}
	a := s.newAttempt(j, slot, claimMissed)
	a.rc.LateWhy, a.stands = why, count
	s.drive(a)
}

// newestRecorded reads the newest slot of j's schedule up to last that its
// history records, zero when none: a slot its replicas followed. Manual runs are
// off the schedule, a backfill may run slots from before the job existed, and a
// missed record says nobody followed it. It reads deeper while the records it
// read hold none, and gives up after markTries failed readings.
func (s *Scheduler) newestRecorded(ctx context.Context, j *job, last time.Time) time.Time {
	select {
	case s.marks <- struct{}{}:
		defer func() { <-s.marks }()
	case <-ctx.Done():
		return time.Time{}
	}
	failed := 0
	for _, depth := range markDepths {
		for {
			cctx, cancel := s.callCtx(ctx)
			recs, err := s.backend.History(cctx, j.name, depth)
			cancel()
			if err == nil {
				if mark := newest(recs, last); !mark.IsZero() || len(recs) < depth {
					return mark // zero: the whole history holds none
				}
				break
			}
			s.backendError(j, time.Time{}, "history", err)
			if failed++; failed >= markTries {
				s.log.Warn("missed slots not recorded: the job's history could not be read", j.logAttr(), "err", err)
				return time.Time{}
			}
			if !s.sleepUntil(ctx, s.clock.Now().Add(retryDelay(failed))) {
				return time.Time{}
			}
		}
	}
	return time.Time{}
}

// newest is the newest slot up to last of recs that a replica followed.
func newest(recs []RunRecord, last time.Time) time.Time {
	var mark time.Time
	for _, r := range recs {
		if !r.Manual && !r.Backfill && r.Status != StatusMissed && !r.Status.Judgement() && r.Slot.After(mark) && !r.Slot.After(last) {
			mark = r.Slot
		}
	}
	return mark
}

// missedSince lists the slots of j after mark and up to last, but those in skip:
// the newest MaxMissedRecords each, oldest first, and the older ones as a range.
func (j *job) missedSince(mark, last time.Time, skip map[int64]bool) missed {
	first := j.sched.Next(mark)
	for !first.IsZero() && skip[first.UnixMilli()] {
		first = j.sched.Next(first)
	}
	if first.IsZero() || first.After(last) {
		return missed{}
	}
	// The newest slots, from a span back from last that grows until it holds
	// enough of them or reaches mark.
	step := time.Second
	if second := j.sched.Next(first); !second.IsZero() && second.After(first) {
		step = second.Sub(first)
	}
	span := step * time.Duration(MaxMissedRecords+len(skip)+1)
	var each []time.Time
	for {
		from := last.Add(-span)
		if !from.After(mark) || span <= 0 {
			from = mark
		}
		each = each[:0]
		for t := j.sched.Next(from); !t.IsZero() && !t.After(last); t = j.sched.Next(t) {
			if !skip[t.UnixMilli()] {
				each = append(each, t)
			}
		}
		if len(each) > MaxMissedRecords || from.Equal(mark) {
			break
		}
		span *= 4
	}
	if len(each) <= MaxMissedRecords {
		return missed{each: each}
	}
	until := each[len(each)-MaxMissedRecords]
	m := missed{each: each[len(each)-MaxMissedRecords:], older: missedRange{first: first, until: until}}
	for t := first; !t.IsZero() && t.Before(until); t = j.sched.Next(t) {
		if m.older.count == missedScanLimit {
			m.older.more = true
			break
		}
		if !skip[t.UnixMilli()] {
			m.older.count++
		}
	}
	return m
}

// why is the error text of the range's record.
func (r missedRange) why() string {
	n := strconv.Itoa(r.count)
	if r.more {
		n = "at least " + n
	}
	return fmt.Sprintf("one record for %s slots due from %s until %s while no instance could claim them (past %d per job, the older missed slots are recorded as one)",
		n, r.first.UTC().Format(time.RFC3339), r.until.UTC().Format(time.RFC3339), MaxMissedRecords)
}

// owe notes slot, a slot of j this instance gave up claiming.
func (j *job) owe(slot time.Time) {
	ms := slot.UnixMilli()
	for {
		cur := j.owedFrom.Load()
		if cur != 0 && cur <= ms || j.owedFrom.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// payOwed records, once the store answers j's claims again, the slots j gave
// up claiming meanwhile (recordOwed), in the background.
func (s *Scheduler) payOwed(j *job) {
	from := j.owedFrom.Swap(0)
	if from == 0 {
		return
	}
	s.handlers.Add(1)
	go func() {
		defer s.handlers.Done()
		s.recordOwed(j, time.UnixMilli(from))
	}()
}

// recordOwed records missed the slots of j from first up to now minus the max
// lateness that have no record in j's history: this instance gave them up, cut
// off from the store for longer than it remembers a slot, so the store can no
// longer tell whether another instance ran them; the history can. Slots older
// than the history read reaches are left unrecorded.
func (s *Scheduler) recordOwed(j *job, first time.Time) {
	ctx, cancel := s.jobCtx(j)
	defer cancel()
	depth := markDepths[len(markDepths)-1]
	var recs []RunRecord
	if err := s.askStore(ctx, j, first, "history", func(ctx context.Context) (err error) {
		recs, err = s.backend.History(ctx, j.name, depth)
		return err
	}); err != nil {
		return
	}
	recorded := make(map[int64]bool, len(recs))
	from := first.Add(-time.Millisecond)
	oldest := time.Time{}
	for _, r := range recs {
		if r.Status.Judgement() {
			continue
		}
		recorded[r.Slot.UnixMilli()] = true
		if oldest.IsZero() || r.Slot.Before(oldest) {
			oldest = r.Slot
		}
	}
	if len(recs) == depth && oldest.After(from) {
		from = oldest // the history read does not reach the older slots
	}
	m := j.missedSince(from, s.clock.Now().Add(-j.cfg.maxLate), recorded)
	if m.older.count > 0 {
		s.claimMissed(ctx, j, m.older.first, m.older.count, m.older.why())
	}
	for _, slot := range m.each {
		s.claimMissed(ctx, j, slot, 1, "")
	}
}
