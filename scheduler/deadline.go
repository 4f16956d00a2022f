package scheduler

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// WithDeadline says each slot of the job must have ended ok within d of its
// time: a slot that has not is recorded StatusDeadline in the job's history
// (once, by the first instance to judge it), with an EventDeadlineMissed.
// Each schedule entry of the job has the same deadline, unless it sets its own
// (EntrySpec.Deadline). The deadline counts from the slot's schedule time, before
// a spread window moves it (Run.Nominal), and must exceed that window.
//
// Every instance that follows the job judges each slot d plus the clock skew
// allowance after it, from the slot's records: a slot it ran and saw end ok
// costs nothing; the others cost a read of the job's history. A slot is judged
// also when nobody started it (every replica down or cut off: its missed
// record). The slot's records must still be in the history when it is judged:
// the history must hold four records for each slot the deadline spans (a job
// that retries: its attempts plus two, as each attempt is a record), and its
// TTL must exceed d, checked at registration.
//
// Paused slots and slots past the run limit are not judged: they were decided
// not to run; nor are the slots of an entry removed before their deadline. The first instance back after the whole fleet was down judges
// the slots due while it was down, up to MaxMissedRecords of them (the older
// ones are recorded missed as one record), and the slots just before, whose
// judgement the stop may have cut off (with leases), those that have a record.
// A judgement the store does not answer is made again later, from the records
// the store holds once it answers.
func WithDeadline(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d <= 0 {
			return optErr("deadline %v must be positive", d)
		}
		c.deadline = d
		return nil
	}
}

// checkDeadline refuses a deadline whose slots' records could be gone from the
// history when it is judged, or that a spread window reaches. It notes the
// schedule's shortest gap, which bounds the history a judgement reads.
func (c *jobConfig) checkDeadline(sched Schedule, interval, skew time.Duration) error {
	d := c.deadline
	if d == 0 {
		return nil
	}
	if c.spreadWindow > 0 && d <= c.spreadWindow {
		return optErr("deadline %v must exceed the spread window %v: a slot could be moved past its deadline", d, c.spreadWindow)
	}
	if c.historyTTL > 0 && c.historyTTL <= d+skew {
		return optErr("deadline %v: the history TTL %v must exceed it and the clock skew allowance %v, or a slot's records could be gone when it is judged", d, c.historyTTL, skew)
	}
	c.deadlineGap = MaxDuration // one slot
	if isOnce(sched) {
		return nil
	}
	if _, none := sched.(noSchedule); none {
		return nil
	}
	gap := max(spreadGap(sched, interval), time.Millisecond)
	c.deadlineGap = gap
	spans := int((d+skew)/gap) + 1
	if need := c.recordsPerSlot() * spans; c.historySize < need {
		return optErr("deadline %v spans up to %d slots (one every %v, up to %d records each): the job's history must keep at least %d records (WithHistory), it keeps %d",
			d, spans, gap, c.recordsPerSlot(), need, c.historySize)
	}
	return nil
}

// deadlineRecords is how many records per slot a judged deadline counts on
// finding in the history, at least: attempts, a judgement, a manual run now and
// then.
const deadlineRecords = 4

// recordsPerSlot is how many records per slot a judged deadline counts on
// finding in the job's history: deadlineRecords, or, for a job that retries,
// one per attempt (each is a record of its own), a judgement and a manual run.
func (c *jobConfig) recordsPerSlot() int {
	if c.retry == nil {
		return deadlineRecords
	}
	return max(deadlineRecords, c.retry.Attempts+2)
}

// judgement is a slot's deadline this instance will judge.
type judgement struct {
	j *job
	// slot is the slot (moved by a spread), due its deadline, at when to judge
	// it: the deadline plus the clock skew allowance.
	slot, due, at time.Time
	// ok says this instance saw the slot end ok by its deadline.
	ok bool
	// incarnation is the entry's this instance followed when the slot came
	// due: a slot of an entry removed since (or removed and added again) is
	// not judged.
	incarnation uint64
	// recovered says only a Start planned it, for a slot before the newest
	// recorded one whose judgement a stop may have cut off: a slot with no
	// record was never followed (before the job existed, or a schedule changed
	// since) and is not judged.
	recovered bool
	// unanswered says a write of its judgement may have been stored unanswered:
	// a judgement stored under this instance's name is then this instance's to
	// tell.
	unanswered bool
	// tries counts the judgements that could not be made or stored.
	tries int
	index int
}

type judgeKey struct {
	name string
	slot int64
}

// judgements are the deadlines this instance will judge, soonest first.
type judgements struct {
	mu    sync.Mutex
	queue timeHeap[*judgement]
	byKey map[judgeKey]*judgement
	wake  chan struct{}
}

func (g *judgement) dueAt() time.Time { return g.at }
func (g *judgement) setIndex(i int)   { g.index = i }

// judgeLater plans the judgement of slot of j, a job or entry with a deadline.
func (s *Scheduler) judgeLater(j *job, slot time.Time) { s.planJudgement(j, slot, false) }

// judgeRecovered plans the judgement of slot of j, a slot before the newest
// one its history records, whose judgement a stop may have cut off: a slot
// with no record is not judged.
func (s *Scheduler) judgeRecovered(j *job, slot time.Time) { s.planJudgement(j, slot, true) }

func (s *Scheduler) planJudgement(j *job, slot time.Time, recovered bool) {
	if j.cfg.deadline <= 0 {
		return
	}
	due := j.nominal(slot).Add(j.cfg.deadline)
	js := &s.judged
	js.mu.Lock()
	k := judgeKey{j.name, slot.UnixMilli()}
	inc, _ := s.entryFacts(j)
	if g, ok := js.byKey[k]; ok {
		switch {
		case g.j != j && g.j.gone.Err() != nil:
			// The job was removed here and registered again: the slot is
			// the new registration's to judge.
			g.j, g.due, g.at, g.incarnation, g.ok, g.recovered = j, due, due.Add(s.maxSkew), inc, false, recovered
			heap.Fix(&js.queue, g.index)
		case !recovered:
			g.recovered = false // followed: judged whatever its records
		}
	} else {
		g = &judgement{j: j, slot: slot, due: due, at: due.Add(s.maxSkew), incarnation: inc, recovered: recovered}
		js.byKey[k] = g
		heap.Push(&js.queue, g)
	}
	first := js.queue[0] == js.byKey[k]
	js.mu.Unlock()
	if first {
		js.poke()
	}
}

// poke wakes the judging loop to look at the queue again.
func (js *judgements) poke() {
	select {
	case js.wake <- struct{}{}:
	default:
	}
}

// judgeAgain plans gs again, judgements that could not be made or stored (the
// store did not answer), after a delay that grows with their tries: the slot
// is decided by the store's records once it answers, not dropped by a timer.
// Past MaxPendingRecords judgements waiting, a judgement is dropped and logged.
func (s *Scheduler) judgeAgain(gs []*judgement) {
	js := &s.judged
	now := s.clock.Now()
	var dropped []*judgement
	js.mu.Lock()
	for _, g := range gs {
		k := judgeKey{g.j.name, g.slot.UnixMilli()}
		if cur, ok := js.byKey[k]; ok {
			cur.unanswered = cur.unanswered || g.unanswered
			continue
		}
		if len(js.queue) >= MaxPendingRecords {
			dropped = append(dropped, g)
			continue
		}
		g.tries++
		g.at = now.Add(judgeAgainDelay(g.tries))
		js.byKey[k] = g
		heap.Push(&js.queue, g)
	}
	js.mu.Unlock()
	js.poke()
	for _, g := range dropped {
		s.log.Warn("deadline not judged: too many judgements wait for the store", g.j.logAttr(), "slot", g.slot, "deadline", g.due)
	}
}

// judgeAgainDelay is the delay before the try after tries failed judgements:
// doubling from a second up to a minute.
func judgeAgainDelay(tries int) time.Duration {
	return min(time.Second<<min(tries, 6), time.Minute)
}

// sawOK notes that this instance saw slot of j end ok at end: its judgement,
// if any, reads nothing when end is by the deadline.
func (s *Scheduler) sawOK(j *job, slot, end time.Time) {
	js := &s.judged
	js.mu.Lock()
	defer js.mu.Unlock()
	if g := js.byKey[judgeKey{j.name, slot.UnixMilli()}]; g != nil && !end.After(g.due) {
		g.ok = true
	}
}

// judgeDeadlines judges the planned deadlines as they come due, until the
// loops stop. Those due together are judged with one history read per job.
func (s *Scheduler) judgeDeadlines() {
	defer s.loops.Done()
	js := &s.judged
	for {
		now := s.clock.Now()
		js.mu.Lock()
		var due []*judgement
		for len(js.queue) > 0 && !js.queue[0].at.After(now) {
			g := heap.Pop(&js.queue).(*judgement)
			delete(js.byKey, judgeKey{g.j.name, g.slot.UnixMilli()})
			due = append(due, g)
		}
		var next time.Time
		if len(js.queue) > 0 {
			next = js.queue[0].at
		}
		js.mu.Unlock()
		s.judgeAll(due)
		var timer Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = s.clock.NewTimer(next.Sub(s.clock.Now()))
			fire = timer.C()
		}
		select {
		case <-s.loopCtx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-js.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// judgeAll judges gs, grouped by job (or entry).
func (s *Scheduler) judgeAll(gs []*judgement) {
	byJob := map[*job][]*judgement{}
	var order []*job
	for _, g := range gs {
		if g.ok || g.j.gone.Err() != nil {
			continue
		}
		if inc, gone := s.entryFacts(g.j); gone || inc != g.incarnation {
			continue // the entry was removed: an operator ended its slots
		}
		if byJob[g.j] == nil {
			order = append(order, g.j)
		}
		byJob[g.j] = append(byJob[g.j], g)
	}
	for _, j := range order {
		s.judge(j, byJob[j])
	}
}

// judge judges gs, deadlines of j's slots, from one read of j's history.
func (s *Scheduler) judge(j *job, gs []*judgement) {
	ctx, cancel := s.jobCtx(j)
	defer cancel()
	oldest := gs[0].slot
	for _, g := range gs {
		if g.slot.Before(oldest) {
			oldest = g.slot
		}
	}
	var recs []RunRecord
	depth := j.judgeDepth(oldest, s.clock.Now())
	for {
		err := s.askStore(ctx, j, oldest, "history", func(ctx context.Context) (err error) {
			recs, err = s.history(ctx, j.name, depth)
			return err
		})
		if ctx.Err() != nil && err != nil {
			return
		}
		if err != nil {
			s.log.Warn("deadlines not judged yet: the history could not be read; judged again later", j.logAttr(), "slot", oldest, "slots", len(gs), "err", err)
			s.judgeAgain(gs)
			return
		}
		if len(recs) < depth || depth == j.cfg.historySize || reaches(recs, oldest) && eachRecorded(recs, gs) {
			break
		}
		// Manual runs filled the newest; or a store that finds runs by arrival
		// (JetStream) filled them with older slots' records written since (a
		// backfill), and a slot of gs has none in the read.
		depth = min(4*depth, j.cfg.historySize)
	}
	for _, g := range gs {
		if len(recs) == depth && !reaches(recs, g.slot) {
			s.log.Warn("deadline not judged: the slot's records are no longer in the history", j.logAttr(), "slot", g.slot, "history", j.cfg.historySize)
			continue
		}
		if g.unanswered {
			if r, ok := judgedIn(recs, g.slot); ok {
				if r.Instance == s.instance { // this instance's write, its answer lost
					s.tellDeadline(j, g, r.Error)
				}
				continue
			}
		}
		if g.recovered && !recorded(recs, g.slot) {
			continue // never followed: nothing was owed
		}
		why, missed := machine.Deadline(recs, g.slot, g.due)
		if !missed {
			continue
		}
		s.recordDeadline(ctx, j, g, why)
	}
}

// judgedIn finds the judgement of slot in recs.
func judgedIn(recs []RunRecord, slot time.Time) (RunRecord, bool) {
	for _, r := range recs {
		if r.Status.Judgement() && r.Slot.Equal(slot) {
			return r, true
		}
	}
	return RunRecord{}, false
}

// eachRecorded reports whether recs hold a record of each slot of gs.
func eachRecorded(recs []RunRecord, gs []*judgement) bool {
	for _, g := range gs {
		if !recorded(recs, g.slot) {
			return false
		}
	}
	return true
}

// recorded reports whether recs hold a record of slot, a manual run's aside.
func recorded(recs []RunRecord, slot time.Time) bool {
	for _, r := range recs {
		if !r.Manual && r.Slot.Equal(slot) {
			return true
		}
	}
	return false
}

// judgeDepth is how many of j's newest records hold every record of its slots
// from oldest on, at now: recordsPerSlot for each slot since, at most the
// history j keeps.
func (j *job) judgeDepth(oldest, now time.Time) int {
	gap := max(j.cfg.deadlineGap, time.Millisecond)
	slots := int64(max(now.Sub(oldest), 0)/gap) + 2
	return int(min(int64(j.cfg.historySize), int64(j.cfg.recordsPerSlot())*slots+16))
}

// reaches reports whether recs, a full read of a history, newest first, holds
// every record of slot: its oldest record is older. (A store that finds runs by
// arrival may hold older slots' records written later and not slot's: judge
// reads deeper while a judged slot has no record in the read.)
func reaches(recs []RunRecord, slot time.Time) bool {
	return len(recs) > 0 && recs[len(recs)-1].Slot.Before(slot)
}

// recordDeadline stores the judgement that g's slot missed its deadline, and
// reports it when this instance stored it first.
func (s *Scheduler) recordDeadline(ctx context.Context, j *job, g *judgement, why string) {
	now := s.clock.Now()
	text := fmt.Sprintf("not ended ok by its deadline %s (%v after the slot): %s",
		g.due.UTC().Format(time.RFC3339Nano), j.cfg.deadline, why)
	rec := backend.StoredResult{
		Slot:       g.slot,
		Token:      backend.DeadlineToken(g.slot),
		Instance:   s.instance,
		Attempt:    1,
		Status:     StatusDeadline,
		FinishedAt: now,
		Error:      backend.TruncateText(text, backend.MaxErrorText),
	}
	keep := backend.Retention{Size: j.cfg.historySize, TTL: j.cfg.historyTTL}
	first := true
	err := s.askStore(ctx, j, g.slot, "record_deadline", func(ctx context.Context) (err error) {
		if once, ok := s.backend.(backend.OnceRecorder); ok {
			first, err = once.RecordOnce(ctx, j.name, rec, keep)
		} else {
			err = s.backend.SaveResult(ctx, j.name, rec, keep)
		}
		if err != nil {
			g.unanswered = true // the write may have been stored, its answer lost
		}
		return err
	})
	if ctx.Err() != nil && err != nil {
		return
	}
	if err != nil {
		s.log.Warn("deadline missed, not recorded yet: the store did not answer; judged again later", j.logAttr(), "slot", g.slot, "deadline", g.due, "why", why, "err", err)
		s.judgeAgain([]*judgement{g})
		return
	}
	if !first {
		if g.unanswered {
			// A try before may have stored it: the history tells whose it is.
			s.judgeAgain([]*judgement{g})
		}
		return
	}
	s.tellDeadline(j, g, backend.TruncateText(text, backend.MaxErrorText))
}

// tellDeadline reports the judgement this instance stored that g's slot
// missed its deadline, text its record's error.
func (s *Scheduler) tellDeadline(j *job, g *judgement, text string) {
	s.log.Warn("deadline missed: the slot had not ended ok by its deadline", j.logAttr(), "slot", g.slot, "deadline", g.due, "why", text)
	s.emit(Event{Kind: EventDeadlineMissed, Job: j.name, Slot: g.slot, Status: StatusDeadline, Next: g.due, Err: errors.New(text)})
}

// askStore calls f, a call to the store about j's slot, until it is answered:
// at most markTries times, retryDelay apart, each failure reported as op. It
// returns f's last error (nil once answered), or ctx's.
func (s *Scheduler) askStore(ctx context.Context, j *job, slot time.Time, op string, f func(context.Context) error) error {
	for try := 0; ; try++ {
		cctx, cancel := s.callCtx(ctx)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.backendError(j, slot, op, err)
		if try+1 >= markTries || !s.sleepUntil(ctx, s.clock.Now().Add(retryDelay(try))) {
			return cmp.Or(ctx.Err(), err)
		}
	}
}
