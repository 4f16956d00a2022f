package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Runs of removed schedule entries. A removed entry's run finishes on its
// holder. When the holder dies, no instance follows the entry to take it over.
// So an instance that sees the removal, or starts after it, claims the entry's
// unfinished runs saying the entry is gone: the machine ends each cancelled,
// with its record, once no lease holds it.
//
// An instance that starts asks a backend.EntryRunLister which entries of its
// jobs hold runs, and looks at those it does not follow. It ends only the runs
// of entries the entry store no longer holds.

// removedSchedule is the schedule of a removed entry's run view: no slot comes.
type removedSchedule struct{}

func (removedSchedule) Next(time.Time) time.Time { return time.Time{} }
func (removedSchedule) String() string           { return "removed entry" }

// removedEntryJob is the run view of the removed entry whose run name is name,
// on its job declared here: the job's policies, no schedule, no handler. Nil
// when name is no entry's or its job is not declared here.
func (s *Scheduler) removedEntryJob(name string) *job {
	jobName, id, ok := backend.SplitEntryRunName(name)
	if !ok {
		return nil
	}
	s.mu.Lock()
	p := s.jobs[jobName]
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	limits := p.limits
	limits.Job = name
	j := &job{name: name, sched: removedSchedule{}, cfg: p.cfg, limits: limits, entry: &entryRef{job: jobName, id: id}}
	j.ended, j.end = context.Background(), func() {}
	j.gone, j.remove = p.gone, p.remove
	return j
}

// queueRemoved has the unfinished runs of the entries named (run names) looked
// at, by one goroutine at a time that reads the runs of everything queued in one
// reading: a removal of many entries at once asks the store little.
func (s *Scheduler) queueRemoved(names ...string) {
	if len(names) == 0 || s.runs == nil {
		return
	}
	es := s.entries
	es.mu.Lock()
	es.removed = append(es.removed, names...)
	start := !es.removedWorker
	es.removedWorker = true
	es.mu.Unlock()
	if !start {
		return
	}
	if !s.besideIfRunning(s.endRemovedQueued) {
		es.mu.Lock()
		es.removed, es.removedWorker = nil, false
		es.mu.Unlock()
	}
}

// endRemovedQueued looks at the queued entries until none is left.
func (s *Scheduler) endRemovedQueued() {
	es := s.entries
	for {
		es.mu.Lock()
		names := es.removed
		es.removed = nil
		if len(names) == 0 || s.loopCtx.Err() != nil {
			es.removedWorker = false
			es.mu.Unlock()
			return
		}
		es.mu.Unlock()
		s.endRemovedOf(names)
	}
}

// endRemovedOf reads the unfinished runs of the entries named and ends those of
// entries the entry store no longer holds.
func (s *Scheduler) endRemovedOf(names []string) {
	use := func(name string, runs []ActiveRun) {
		if len(runs) == 0 {
			return
		}
		j := s.removedEntryJob(name)
		if j == nil || !s.entryGone(j) {
			return
		}
		for _, r := range runs {
			s.onceBeside(j, r.Slot, func() { s.endRemovedRun(j, r.Slot) })
		}
	}
	if lister, ok := s.runs.(backend.ActiveLister); ok {
		s.readActive(lister, names, use)
		return
	}
	for _, name := range names {
		s.readActive(activeOfOne{s.runs}, []string{name}, use)
	}
}

// entryGone reports whether j's entry, not followed here, is not in the entry
// store, asking until it answers; false once the loops stop.
func (s *Scheduler) entryGone(j *job) bool {
	store, ok := s.backend.(backend.EntryStore)
	if _, gone := s.entryFacts(j); !ok || !gone {
		return false
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := s.callCtx(s.loopCtx)
		_, err := store.GetEntry(ctx, j.entry.job, j.entry.id)
		cancel()
		switch {
		case err == nil:
			return false // stored, and not runnable here: its runs are others'
		case errors.Is(err, ErrEntryNotFound):
			return true
		case s.loopCtx.Err() != nil:
			return false
		}
		s.backendError(j, time.Time{}, "get_entry", err)
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return false
		}
	}
}

// findRemovedEntriesOf looks, beside the caller, for runs of removed entries of
// jobs, registered on a started scheduler whose entries are read already (under
// s.mu), as the first reading does for the jobs declared then.
func (s *Scheduler) findRemovedEntriesOf(jobs []*job) {
	lister, ok := s.runs.(backend.EntryRunLister)
	if !ok {
		return
	}
	names := make([]string, len(jobs))
	for i, j := range jobs {
		names[i] = j.name
	}
	s.handlers.Add(1) // under s.mu, which Stop changes the state under
	go func() {
		defer s.handlers.Done()
		s.findRemovedEntries(lister, names)
	}()
}

// findRemovedEntries asks lister which entries of jobs hold runs (nil jobs: every
// job declared here). It asks once this instance has read the stored entries, and
// looks at the entries it does not follow. A run of an entry removed while no
// instance that followed it was up has no other taker. It asks until answered, or
// until the loops stop.
func (s *Scheduler) findRemovedEntries(lister backend.EntryRunLister, jobs []string) {
	if jobs == nil {
		s.mu.Lock()
		for _, j := range s.order {
			jobs = append(jobs, j.name)
		}
		s.mu.Unlock()
	}
	if len(jobs) == 0 {
		return
	}
	var names []string
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(s.loopCtx, s.callTO*time.Duration(1+len(jobs)/activeJobsPerCallTimeout))
		var err error
		names, err = lister.EntryRunNames(ctx, jobs)
		cancel()
		if err == nil {
			break
		}
		if s.loopCtx.Err() != nil {
			return
		}
		s.log.Warn("backend call failed", "op", "entry_run_names", "jobs", len(jobs), "err", err)
		s.emit(Event{Kind: EventBackendError, Op: "entry_run_names", Err: err})
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return
		}
	}
	var unfollowed []string
	s.entries.mu.Lock()
	for _, name := range names {
		job, id, ok := backend.SplitEntryRunName(name)
		if _, followed := s.entries.byKey[entryKey{job, id}]; ok && !followed {
			unfollowed = append(unfollowed, name)
		}
	}
	s.entries.mu.Unlock()
	s.queueRemoved(unfollowed...)
}

// endRemovedRun ends the unfinished run of slot of j, a removed entry's run
// view: its claims say the entry is gone, so the store ends the run cancelled
// once no attempt holds it, never running it again.
func (s *Scheduler) endRemovedRun(j *job, slot time.Time) {
	s.log.Info("ends the run of a removed schedule entry, not run again", j.logAttr(), "slot", slot)
	s.handleSlot(j, slot, claimAdopt)
}
