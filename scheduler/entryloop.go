package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// entrySet is what this instance follows of the entries of the jobs it
// declares: every entry's run view and next slot, in one heap ordered by when
// each is due, walked by one goroutine (never one per entry).
type entrySet struct {
	mu    sync.Mutex
	byKey map[entryKey]*entryState
	due   timeHeap[*entryState]
	wake  chan struct{} // buffered 1: the heap's head changed
	// synced is closed once the stored entries were read (under mu): at Start,
	// or, after a Start with no job, once the first job registered started
	// the watch.
	synced chan struct{}
	// fresh is closed while the view follows the store. A watch that may have
	// missed changes (EntryChange.Resync) replaces it until the next Synced.
	fresh chan struct{}
	// watching says the watch runs: from Start, or from the first job
	// registered after a Start that had none.
	watching bool
	// orphans are the entries of jobs this instance does not declare, kept
	// to be followed if the job is registered here later.
	orphans map[entryKey]orphan
	// gen is the watch's reading: entries not seen in a new reading were removed
	// while the watch was down.
	gen int
	// catchUps are the entries' catch-ups waiting for one of catchUpWorkers.
	catchUps       []func()
	catchUpWorkers int
	// removed are the run names of entries removed whose unfinished runs are
	// to be looked at (removed.go); removedWorker says one goroutine does.
	removed       []string
	removedWorker bool
}

type entryKey struct{ job, id string }

// orphan is an entry of a job this instance does not declare.
type orphan struct {
	e   Entry
	gen int // the reading that saw it
}

// entryState is one entry as this instance follows it.
type entryState struct {
	j    *job
	e    Entry     // as stored
	next time.Time // the next slot; zero: none
	fire time.Time // when to claim it: next + jitter
	idx  int       // in the heap; -1 when not in it
	gen  int
}

func (st *entryState) dueAt() time.Time { return st.fire }
func (st *entryState) setIndex(i int)   { st.idx = i }

func newEntrySet() *entrySet {
	fresh := make(chan struct{})
	close(fresh)
	return &entrySet{byKey: map[entryKey]*entryState{}, wake: make(chan struct{}, 1), synced: make(chan struct{}),
		fresh: fresh, orphans: map[entryKey]orphan{}}
}

// schedule (re)places st in the heap at its next slot after from.
func (es *entrySet) scheduleLocked(st *entryState, from time.Time) {
	st.next = time.Time{}
	if !st.e.Paused && st.j.ended.Err() == nil && st.j.gone.Err() == nil && !st.j.limitHit.Load() {
		st.next = st.j.sched.Next(from)
	}
	if st.next.IsZero() {
		if st.idx >= 0 {
			heap.Remove(&es.due, st.idx)
		}
		return
	}
	st.fire = st.next.Add(st.j.cfg.jitterDelay())
	if st.idx >= 0 {
		heap.Fix(&es.due, st.idx)
	} else {
		heap.Push(&es.due, st)
	}
	if es.due[0] == st {
		select {
		case es.wake <- struct{}{}:
		default:
		}
	}
}

func (es *entrySet) removeLocked(k entryKey) {
	st, ok := es.byKey[k]
	if !ok {
		return
	}
	if st.idx >= 0 {
		heap.Remove(&es.due, st.idx)
	}
	delete(es.byKey, k)
}

// watchEntries follows the stored entries until the loops stop, reading them
// again after a failed watch.
func (s *Scheduler) watchEntries(store backend.EntryStore) {
	defer s.loops.Done()
	s.loops.Add(1)
	go s.dispatchEntries()
	first := true
	for attempt := 0; s.loopCtx.Err() == nil; attempt++ {
		s.entries.mu.Lock()
		s.entries.gen++
		s.entries.mu.Unlock()
		var owed []adoption
		started := s.clock.Now()
		loaded := 0
		// reading: the watch lists the stored entries, before Synced; an entry
		// it finds then may have runs this instance never saw start.
		reading := true
		err := store.WatchEntries(s.loopCtx, func(c backend.EntryChange) {
			if c.Resync {
				// The view may be stale: no entry slot is claimed first until
				// the store's changes are read again, as in a first reading.
				s.entries.stale()
				reading = true
				return
			}
			if c.Synced {
				s.entriesSynced(first, owed, loaded, started)
				first, owed, reading = false, nil, false
				attempt = -1
				return
			}
			loaded++
			if a, ok := s.entryChanged(c, reading); ok {
				owed = append(owed, a)
			}
		})
		if s.loopCtx.Err() != nil {
			return
		}
		if errors.Is(err, ErrEntriesNotSupported) {
			s.log.Info("the backend's store keeps no schedule entries", "backend", s.backend.Name())
			s.entriesSynced(first, nil, 0, started)
			return
		}
		if err == nil {
			err = errors.New("the watch ended")
		}
		s.entries.stale() // changes go unread until the next watch is synced
		s.log.Warn("backend call failed", "op", "watch_entries", "err", err)
		s.emit(Event{Kind: EventBackendError, Op: "watch_entries", Err: err})
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(max(attempt, 0)))) {
			return
		}
	}
}

// entriesSynced ends a reading of the stored entries: entries it did not see
// were removed meanwhile; on the first, the runs the entries owe are adopted.
func (s *Scheduler) entriesSynced(first bool, owed []adoption, loaded int, started time.Time) {
	es := s.entries
	var removed []string
	es.mu.Lock()
	for k, st := range es.byKey {
		if st.gen != es.gen {
			es.removeLocked(k)
			removed = append(removed, st.j.name)
		}
	}
	for k, o := range es.orphans {
		if o.gen != es.gen {
			delete(es.orphans, k)
		}
	}
	n, orphans := len(es.byKey), len(es.orphans)
	es.mu.Unlock()
	es.markSynced()
	if first {
		s.log.Info("schedule entries loaded", "entries", n, "orphaned", orphans, "read", loaded, "took", s.clock.Now().Sub(started))
		if lister, ok := s.runs.(backend.EntryRunLister); ok {
			s.besideIfRunning(func() { s.findRemovedEntries(lister, nil) })
		}
	}
	s.queueRemoved(removed...)
	if len(owed) > 0 {
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			s.adoptAll(owed)
		}()
	}
}

// entryChanged applies one change of the watch. Read in a listing of the stored
// entries (reading: the first, or one after the watch failed), an entry newly
// followed starts its catch-up and returns what it owes its unfinished runs.
func (s *Scheduler) entryChanged(c backend.EntryChange, reading bool) (adoption, bool) {
	// Hand over hand: a job registered or removed meanwhile moves its entries
	// under both locks, before or after this change, never beside it.
	s.mu.Lock()
	p := s.jobs[c.Entry.Job]
	s.entries.mu.Lock()
	s.mu.Unlock()
	a, owes, refused, removed := s.entryChangedLocked(c, p, reading)
	s.entries.mu.Unlock()
	if refused != nil { // the hook may read the entries: not under their lock
		s.emit(*refused)
	}
	if removed != "" {
		s.queueRemoved(removed)
	}
	return a, owes
}

// entryChangedLocked is entryChanged under s.entries.mu, for p, the entry's job
// declared here (nil: none). It returns the event of an entry it cannot run, and
// the run name of a followed entry it removed.
func (s *Scheduler) entryChangedLocked(c backend.EntryChange, p *job, reading bool) (_ adoption, _ bool, _ *Event, removed string) {
	e := c.Entry
	k := entryKey{e.Job, e.ID}
	es := s.entries
	if p == nil {
		if c.Removed {
			delete(es.orphans, k)
		} else {
			es.orphans[k] = orphan{e: e, gen: es.gen}
		}
		return adoption{}, false, nil, ""
	}
	if c.Removed {
		// A removal the store reports without a revision (a SQL watcher that
		// learnt it from a new listing, its tombstone pruned) removes whatever
		// revision is followed: the watch delivers it after every earlier change.
		if st, ok := es.byKey[k]; ok && (e.Revision == 0 || st.e.Revision <= e.Revision) {
			es.removeLocked(k)
			return adoption{}, false, nil, st.j.name
		}
		return adoption{}, false, nil, ""
	}
	old, known := es.byKey[k]
	if known && old.e.Revision >= e.Revision {
		old.gen = es.gen
		return adoption{}, false, nil, ""
	}
	j, err := s.entryJob(p, e)
	if err != nil {
		// Stored by another version, or a zone this host lacks: never run
		// silently wrong, say so on every change.
		s.log.Error("schedule entry cannot run here", "job", e.Job, "entry", e.ID, "err", err)
		if known {
			es.removeLocked(k)
		}
		return adoption{}, false, &Event{Kind: EventBackendError, Job: e.Job, Entry: e.ID, Op: "entry", Err: err}, ""
	}
	if j.deadlineDropped != nil {
		s.log.Warn("schedule entry runs without its job's deadline: its slots are not judged", "job", e.Job, "entry", e.ID, "err", j.deadlineDropped)
	}
	st := &entryState{j: j, e: e, idx: -1, gen: es.gen}
	if known {
		es.removeLocked(k)
	}
	es.byKey[k] = st
	now := s.clock.Now()
	es.scheduleLocked(st, now.Add(-j.cfg.maxLate))
	switch {
	case !reading || s.runs == nil:
		return adoption{}, false, nil, ""
	case e.Paused:
		// A paused entry catches nothing up, and its loop claims nothing: every
		// unfinished run of it is adopted, so that one whose holder died is
		// taken over and finished paused, not left unfinished.
		return adoption{j: j, before: lastMillis}, true, nil, ""
	}
	return s.recoverWith(j, now, s.queueCatchUp), true, nil, ""
}

// followOrphans follows the entries of j, a job registered on a started
// scheduler, that were orphaned here so far, as the first reading of the
// entries follows them; it returns what they owe their unfinished runs. Called
// with s.mu held.
func (s *Scheduler) followOrphans(j *job) []adoption {
	es := s.entries
	var (
		owed    []adoption
		refused []Event
	)
	es.mu.Lock()
	for k, o := range es.orphans {
		if k.job != j.name {
			continue
		}
		delete(es.orphans, k)
		if a, owes, ev, _ := s.entryChangedLocked(backend.EntryChange{Entry: o.e}, j, true); owes {
			owed = append(owed, a)
		} else if ev != nil {
			refused = append(refused, *ev)
		}
	}
	es.mu.Unlock()
	if len(refused) > 0 { // the hook may read the jobs: not under s.mu
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			for _, e := range refused {
				s.emit(e)
			}
		}()
	}
	return owed
}

// orphanJob stops following the entries of job, removed from this
// instance: they are kept as orphans. Called with s.mu held.
func (es *entrySet) orphanJob(job string) {
	es.mu.Lock()
	defer es.mu.Unlock()
	for k, st := range es.byKey {
		if k.job == job {
			es.removeLocked(k)
			es.orphans[k] = orphan{e: st.e, gen: st.gen}
		}
	}
}

// maxEntryCatchUps bounds the entries whose missed slots are caught up at once:
// a replica that starts after downtime may find every entry owing slots.
const maxEntryCatchUps = 32

// queueCatchUp runs an entry's catch-up on one of at most maxEntryCatchUps
// workers, in the order queued. Called with s.entries.mu held.
func (s *Scheduler) queueCatchUp(catchUp func()) {
	es := s.entries
	es.catchUps = append(es.catchUps, catchUp)
	if es.catchUpWorkers >= maxEntryCatchUps {
		return
	}
	es.catchUpWorkers++
	s.handlers.Add(1)
	go func() {
		defer s.handlers.Done()
		for {
			es.mu.Lock()
			if len(es.catchUps) == 0 || s.loopCtx.Err() != nil {
				es.catchUps = nil
				es.catchUpWorkers--
				es.mu.Unlock()
				return
			}
			next := es.catchUps[0]
			es.catchUps[0] = nil
			es.catchUps = es.catchUps[1:]
			es.mu.Unlock()
			next()
		}
	}()
}

// dispatchEntries claims each entry's slots when they are due, until the loops
// stop.
func (s *Scheduler) dispatchEntries() {
	defer s.loops.Done()
	es := s.entries
	type slot struct {
		j    *job
		slot time.Time
	}
	var due []slot
	for {
		es.mu.Lock()
		now := s.clock.Now()
		due = due[:0]
		for len(es.due) > 0 && !es.due[0].fire.After(now) {
			st := es.due[0]
			due = append(due, slot{st.j, st.next})
			es.scheduleLocked(st, st.next)
		}
		var wait time.Duration = -1
		if len(es.due) > 0 {
			wait = es.due[0].fire.Sub(now)
		}
		es.mu.Unlock()
		for _, d := range due {
			s.handlers.Add(1)
			go func() {
				defer s.handlers.Done()
				if s.entrySlotStands(d.j, d.slot) {
					s.handleSlot(d.j, d.slot, claimScheduled)
				}
			}()
		}
		if !s.waitEntries(wait) {
			return
		}
	}
}

// entrySlotStands waits, for j's entry slot due, until the view follows the
// store again (entryViewHolds), and reports whether the entry is still followed
// in the version j runs (a change read meanwhile replaced it, or removed it).
func (s *Scheduler) entrySlotStands(j *job, slot time.Time) bool {
	return s.entryViewHolds(s.loopCtx, j, slot, slot.Add(j.cfg.maxLate)) == nil && s.entries.follows(j)
}

// entryViewHolds waits, before a claim of j's entry slot that is not a
// takeover, until the view of the entries follows the store. A view still
// stale at by gives the slot up here, reported late (an instance that follows
// the store records it); the error says why.
func (s *Scheduler) entryViewHolds(ctx context.Context, j *job, slot, by time.Time) error {
	select {
	case <-s.entries.freshView():
		return nil
	default:
	}
	t := s.clock.NewTimer(by.Sub(s.clock.Now()))
	defer t.Stop()
	select {
	case <-s.entries.freshView():
		return nil
	case <-t.C():
		err := errors.New("scheduler: the schedule entries were not read again before the slot's start deadline")
		s.log.Warn("entry slot given up", j.logAttr(), "slot", slot, "err", err)
		s.emit(Event{Kind: EventLate, Job: j.name, Slot: slot, Outcome: backend.OutcomeLate, Err: err})
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitEntries waits d (forever when negative) or until the heap's head changes;
// false once the loops stop.
func (s *Scheduler) waitEntries(d time.Duration) bool {
	var tc <-chan time.Time
	if d >= 0 {
		t := s.clock.NewTimer(d)
		defer t.Stop()
		tc = t.C()
	}
	select {
	case <-s.loopCtx.Done():
		return false
	case <-s.entries.wake:
	case <-tc:
	}
	return true
}

// stale marks the view stale until the next Synced.
func (es *entrySet) stale() {
	es.mu.Lock()
	defer es.mu.Unlock()
	select {
	case <-es.fresh:
		es.fresh = make(chan struct{})
	default:
	}
}

// isStale reports whether the view waits to be read again (stale).
func (es *entrySet) isStale() bool {
	select {
	case <-es.freshView():
		return false
	default:
		return true
	}
}

// freshView returns a channel closed while the view follows the store.
func (es *entrySet) freshView() <-chan struct{} {
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.fresh
}

// view returns the run view of entry id of job, if it is followed.
func (es *entrySet) view(name, id string) (*job, bool) {
	es.mu.Lock()
	defer es.mu.Unlock()
	st, ok := es.byKey[entryKey{name, id}]
	if !ok {
		return nil, false
	}
	return st.j, true
}

// views returns the run views of the entries of job followed now, by ID.
func (es *entrySet) views(name string) []*job {
	es.mu.Lock()
	defer es.mu.Unlock()
	var out []*job
	for k, st := range es.byKey {
		if k.job == name {
			out = append(out, st.j)
		}
	}
	slices.SortFunc(out, func(a, b *job) int { return strings.Compare(a.entry.id, b.entry.id) })
	return out
}

// follows reports whether j is the run view of an entry followed now.
func (es *entrySet) follows(j *job) bool {
	es.mu.Lock()
	defer es.mu.Unlock()
	st, ok := es.byKey[entryKey{j.entry.job, j.entry.id}]
	return ok && st.j == j
}

// markSynced says the stored entries were read, once, and that the view is
// fresh again.
func (es *entrySet) markSynced() {
	es.mu.Lock()
	defer es.mu.Unlock()
	select {
	case <-es.synced:
	default:
		close(es.synced)
	}
	select {
	case <-es.fresh:
	default:
		close(es.fresh)
	}
}

// EntriesLoaded waits until this instance has read the stored schedule entries
// once after Start (at once when the backend keeps none, or while no job is
// registered: after the first job's registration, until they were read), or
// ctx ends.
func (s *Scheduler) EntriesLoaded(ctx context.Context) error {
	s.mu.Lock()
	started := s.state == stateStarted || s.state == stateStopped
	s.mu.Unlock()
	if !started {
		return ErrNotStarted
	}
	s.entries.mu.Lock()
	synced := s.entries.synced
	s.entries.mu.Unlock()
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EntryCounts returns how many schedule entries this instance follows (of the
// jobs it declares, paused ones included) and how many stored entries belong to
// jobs it does not declare: those are orphaned here, never run by it.
func (s *Scheduler) EntryCounts() (followed, orphaned int) {
	s.entries.mu.Lock()
	defer s.entries.mu.Unlock()
	return len(s.entries.byKey), len(s.entries.orphans)
}

// entryFacts is this instance's view of j's entry, for its claims and settles.
// It is the incarnation it follows, or gone when it follows the entry no more.
// It is zero and false for a job's own runs, and once the job was removed here.
func (s *Scheduler) entryFacts(j *job) (incarnation uint64, gone bool) {
	if j.entry == nil || j.gone.Err() != nil {
		return 0, false
	}
	s.entries.mu.Lock()
	defer s.entries.mu.Unlock()
	st, ok := s.entries.byKey[entryKey{j.entry.job, j.entry.id}]
	if !ok {
		return 0, true
	}
	return st.e.Incarnation, false
}

// entryPaused reports whether j runs an entry this instance sees paused.
func (s *Scheduler) entryPaused(j *job) bool {
	if j.entry == nil {
		return false
	}
	s.entries.mu.Lock()
	defer s.entries.mu.Unlock()
	st, ok := s.entries.byKey[entryKey{j.entry.job, j.entry.id}]
	return ok && st.e.Paused
}
