package scheduler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Turns (Config.Turns) share out a fleet's slots. For each job or entry, the
// live members of this instance's group are ranked by a hash. The first claims
// at the slot, the second a grace later, the others once those two are gone.
// Turns decide who claims when; the store still decides each slot's fate.
// docs/concepts.md ("Turns") has the reasoning.

const (
	// memberBeat is how often an instance stores that it is alive, and
	// memberTTL how long a beat keeps it a member.
	memberBeat = time.Second
	memberTTL  = 3 * memberBeat
	// turnGrace is the most the second member waits after the slot before it
	// claims (half the job's max lateness when that is shorter).
	turnGrace = time.Second
)

// turns is this instance's view of its group's members and the slots it left to
// the members ranked above it.
type turns struct {
	store backend.Membership

	mu sync.Mutex
	// all are the live members as the store's watch last told them. While
	// known is false (before the first answer, and once the watch failed for
	// memberTTL) every slot is claimed at its time.
	all   []backend.Member
	known bool
	group string
	// view is the instance names of all in group, this instance's included,
	// sorted.
	view []string
	// waiting are the slots left to members ranked above, by run name and slot.
	waiting map[turnKey]*turnWait
	// changed is closed and replaced when the view changes.
	changed chan struct{}
	// ended are the jobs and entries whose run limit this instance saw
	// reached; regroup wakes the beat when one is added.
	ended   map[*job]bool
	regroup chan struct{}
}

type turnKey struct {
	run  string
	slot int64
}

// turnWait is a slot left to the members ranked above this instance.
type turnWait struct {
	j     *job
	slot  time.Time
	above []string
	// until is when the slot is dropped: the members above had time to claim
	// it or to be seen gone.
	until time.Time
}

func newTurns(store backend.Membership) *turns {
	return &turns{store: store, waiting: map[turnKey]*turnWait{}, changed: make(chan struct{}), ended: map[*job]bool{}, regroup: make(chan struct{}, 1)}
}

// rank returns, for run, the members of the view ranked above instance, best
// first, and whether the view is known. Ties of the hash are broken by name.
func (t *turns) rank(run, instance string) (above []string, known bool, changed <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known {
		return nil, false, t.changed
	}
	type scored struct {
		name  string
		score uint64
	}
	mine := turnScore(run, instance)
	var ups []scored
	for _, m := range t.view {
		if m == instance {
			continue
		}
		if sc := turnScore(run, m); sc > mine || sc == mine && m < instance {
			ups = append(ups, scored{m, sc})
		}
	}
	slices.SortFunc(ups, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, u := range ups {
		above = append(above, u.name)
	}
	return above, true, t.changed
}

// turnScore is the rendezvous hash of run and instance: FNV-1a, then the
// SplitMix64 finalizer, the same in every process.
func turnScore(run, instance string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(run))
	h.Write([]byte{0})
	h.Write([]byte(instance))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// groupOf is the group of an instance declaring jobs and having seen the run
// limit of ended reached: a digest of their names. An instance that no longer
// claims a job's slots must not be left its turns.
func groupOf(jobs, ended []string) string {
	h := sha256.New()
	for _, names := range [][]string{jobs, ended} {
		names = slices.Clone(names)
		slices.Sort(names)
		for _, n := range names {
			h.Write([]byte(n))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// limitReached notes that j's loop ended by its run limit on this instance.
func (t *turns) limitReached(j *job) {
	t.mu.Lock()
	t.ended[j] = true
	t.mu.Unlock()
	select {
	case t.regroup <- struct{}{}:
	default:
	}
}

// endedNames are the run names of the jobs and entries still registered whose
// run limit this instance saw reached.
func (t *turns) endedNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for j := range t.ended {
		if j.gone.Err() != nil {
			delete(t.ended, j)
			continue
		}
		out = append(out, j.name)
	}
	return out
}

// set takes all as the live members, or forgets them when known is false, and
// returns the slots whose first two members above this one are no longer in the
// view (they are claimed now) and the members that left the view.
func (t *turns) set(all []backend.Member, known bool, instance string) (release []*turnWait, gone []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before := t.view
	t.all, t.known = all, known
	release = t.refreshLocked(instance)
	if t.known {
		for _, m := range before {
			if !slices.Contains(t.view, m) {
				gone = append(gone, m)
			}
		}
	}
	return release, gone
}

// setGroup takes group as this instance's, and returns the slots to claim now.
func (t *turns) setGroup(group, instance string) []*turnWait {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.group == group {
		return nil
	}
	t.group = group
	return t.refreshLocked(instance)
}

func (t *turns) refreshLocked(instance string) []*turnWait {
	view := []string{instance}
	for _, m := range t.all {
		if m.Group == t.group && m.Instance != instance {
			view = append(view, m.Instance)
		}
	}
	slices.Sort(view)
	view = slices.Compact(view)
	if !t.known {
		view = nil
	}
	if slices.Equal(view, t.view) { // a known view holds this instance: never empty
		return nil
	}
	t.view = view
	close(t.changed)
	t.changed = make(chan struct{})
	var release []*turnWait
	for k, w := range t.waiting {
		// The first two above claim the slot: it is left to them while one
		// of them lives.
		if !t.known || !slices.ContainsFunc(w.above[:min(2, len(w.above))], func(m string) bool { return slices.Contains(view, m) }) {
			release = append(release, w)
			delete(t.waiting, k)
		}
	}
	return release
}

// wait leaves j's slot to the members above until until.
func (t *turns) wait(j *job, slot time.Time, above []string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.waiting[turnKey{j.name, slot.UnixMilli()}] = &turnWait{j: j, slot: slot, above: above, until: until}
}

// expire drops the slots whose time to be claimed above has passed.
func (t *turns) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, w := range t.waiting {
		if now.After(w.until) {
			delete(t.waiting, k)
		}
	}
}

// members returns the view: nil while unknown.
func (t *turns) members() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.view)
}

// Members returns the instances this one shares its slots with (Config.Turns):
// the live members of its group, itself included, sorted. Nil without turns, and
// while the membership is not known (every slot is then claimed at its time).
func (s *Scheduler) Members() []string {
	if s.turns == nil {
		return nil
	}
	return s.turns.members()
}

// takeTurn decides when this instance claims j's scheduled slot: it returns once
// the slot is to be claimed now, false when it is left to the members ranked
// above (or the loops stopped).
func (s *Scheduler) takeTurn(j *job, slot time.Time) bool {
	t := s.turns
	if t == nil || j.cfg.noTurns() {
		return true
	}
	ctx, cancel := s.jobCtx(j)
	defer cancel()
	grace := min(turnGrace, j.cfg.maxLate/2)
	for first := true; ; first = false {
		above, known, changed := t.rank(j.name, s.instance)
		switch {
		case !known || len(above) == 0:
			// First at the slot, or made first by a change while waiting.
			return first || s.afterOnTime(ctx, j, slot)
		case len(above) >= 2:
			// Kept while it may still be claimed on time, or its deadline
			// judged, by a member that is then seen gone.
			until := slot.Add(j.cfg.maxLate + 2*memberTTL + s.maxSkew)
			if j.cfg.deadline > 0 {
				until = later(until, j.nominal(slot).Add(j.cfg.deadline+2*memberTTL+s.maxSkew))
			}
			t.wait(j, slot, above, until)
			return false
		}
		// Second in turn: claim a grace after the slot, or at once when the
		// first is seen gone meanwhile.
		timer := s.clock.NewTimer(max(slot.Add(grace).Sub(s.clock.Now()), 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C():
			return s.afterOnTime(ctx, j, slot)
		case <-changed:
			timer.Stop()
		}
	}
}

// afterOnTime waits, before a claim a turn let this instance send late by its own
// clock, until no instance could still claim j's slot on time: a member ranked
// above whose clock is behind may yet run it. False once ctx ends.
func (s *Scheduler) afterOnTime(ctx context.Context, j *job, slot time.Time) bool {
	deadline := slot.Add(j.cfg.maxLate)
	if !s.clock.Now().After(deadline) {
		return true
	}
	return s.sleepUntil(ctx, deadline.Add(s.maxSkew))
}

// noTurns says the job's slots are claimed by every member at their time: a job
// whose max lateness leaves no room for a second member's grace.
func (c jobConfig) noTurns() bool { return c.maxLate < 2*time.Millisecond }

// claimReleased claims, each in its own goroutine, the slots left to members
// that are gone from the view.
func (s *Scheduler) claimReleased(release []*turnWait) {
	for _, w := range release {
		if w.j.gone.Err() != nil {
			continue
		}
		s.handlers.Add(1)
		go func() {
			defer s.handlers.Done()
			ctx, cancel := s.jobCtx(w.j)
			defer cancel()
			if !s.afterOnTime(ctx, w.j, w.slot) {
				return
			}
			s.judgeLater(w.j, w.slot)
			if w.j.entry == nil || s.entrySlotStands(w.j, w.slot) {
				s.drive(s.newAttempt(w.j, w.slot, claimScheduled))
			}
		}()
	}
}

// firstMembers stores this instance as a member and reads the members once,
// before the loops start, so that the first slots are claimed in turn rather
// than by every instance. A store that does not answer in time leaves the view
// unknown: the slots are claimed at their time until the watch answers.
func (s *Scheduler) firstMembers(ctx context.Context) {
	t := s.turns
	group := s.group()
	t.setGroup(group, s.instance)
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := t.store.Beat(cctx, backend.Member{Instance: s.instance, Group: group}, memberTTL); err != nil {
		return // the beat loop reports it
	}
	wctx, stop := context.WithTimeout(cctx, min(s.callTO, 2*memberBeat))
	defer stop()
	_ = t.store.WatchMembers(wctx, func(all []backend.Member) {
		t.set(slices.Clone(all), true, s.instance)
		stop()
	})
}

// group is this instance's group now: a digest of the jobs it declares (their
// names and what places their slots: schedule, zone, spread), the run limits it
// saw reached, and whether its view of the schedule entries is stale. An
// instance that would not claim a slot the others would is in a group apart.
func (s *Scheduler) group() string {
	s.mu.Lock()
	names := make([]string, 0, len(s.order)+1)
	for _, j := range s.order {
		names = append(names, j.name+"\x00"+j.sched.String()+"\x00"+j.cfg.location.String()+"\x00"+j.cfg.spreadWindow.String())
	}
	watching := s.entries.watching
	s.mu.Unlock()
	if watching && s.entries.isStale() {
		names = append(names, "\x00entries stale")
	}
	return groupOf(names, s.turns.endedNames())
}

// beatMembers stores this instance as a member every memberBeat, at once when
// its jobs change, until the loops stop; then it leaves.
func (s *Scheduler) beatMembers() {
	defer s.loops.Done()
	t := s.turns
	for {
		s.mu.Lock()
		jobsChanged := s.jobsChanged
		s.mu.Unlock()
		group := s.group()
		s.claimReleased(t.setGroup(group, s.instance))
		ctx, cancel := s.callCtx(s.loopCtx)
		err := t.store.Beat(ctx, backend.Member{Instance: s.instance, Group: group}, memberTTL)
		cancel()
		if errors.Is(err, backend.ErrMembershipNotSupported) {
			return // watchMembers says so
		}
		if err != nil && s.loopCtx.Err() == nil {
			s.log.Warn("storing this instance as a member failed", "err", err)
			s.emit(Event{Kind: EventBackendError, Op: "beat", Err: err})
		}
		t.expire(s.clock.Now())
		timer := s.clock.NewTimer(memberBeat)
		select {
		case <-s.loopCtx.Done():
			timer.Stop()
			ctx, cancel := s.writeCtx()
			if err := t.store.Leave(ctx, s.instance); err != nil {
				s.log.Warn("leaving the members failed: the others see this instance gone once its last beat expires", "err", err)
			}
			cancel()
			return
		case <-timer.C():
		case <-jobsChanged:
			timer.Stop()
		case <-t.regroup:
			timer.Stop()
		}
	}
}

// watchMembers keeps the view of the members until the loops stop. Once the
// watch has failed for memberTTL, the view is unknown and every slot is claimed
// at its time until the watch is back.
func (s *Scheduler) watchMembers() {
	defer s.loops.Done()
	t := s.turns
	var down time.Time // since when the watch fails
	for attempt := 0; s.loopCtx.Err() == nil; attempt++ {
		err := t.store.WatchMembers(s.loopCtx, func(all []backend.Member) {
			attempt, down = 0, time.Time{}
			release, gone := t.set(slices.Clone(all), true, s.instance)
			s.claimReleased(release)
			if len(gone) > 0 {
				s.log.Info("members left this group (gone, or now declaring differently): taking over what they held", "left", gone, "members", t.members())
				s.besideIfRunning(func() { s.adoptFromGone(gone) })
			}
		})
		if s.loopCtx.Err() != nil {
			return
		}
		if down.IsZero() {
			down = s.clock.Now()
		}
		if !s.clock.Now().Before(down.Add(memberTTL)) {
			// Down long enough that members may have died unseen.
			release, _ := t.set(nil, false, s.instance)
			s.claimReleased(release)
		}
		if errors.Is(err, backend.ErrMembershipNotSupported) {
			s.log.Error("Config.Turns: the backend's store keeps no members; every instance claims every slot", "err", err)
			return
		}
		if err != nil {
			s.log.Warn("watching the members failed; every slot is claimed at its time until the watch is back", "err", err)
			s.emit(Event{Kind: EventBackendError, Op: "watch_members", Err: err})
		}
		if !s.sleepUntil(s.loopCtx, s.clock.Now().Add(retryDelay(attempt))) {
			return
		}
	}
}

// adoptFromGone takes over, as Start does, the unfinished runs that members gone
// from the view held: a run, a buffered slot, a stored retry, of the jobs and
// entries for which this instance is now first or second. The others stood by
// for none of them once their slots' time had passed.
func (s *Scheduler) adoptFromGone(gone []string) {
	t := s.turns
	s.mu.Lock()
	byName := make(map[string]*job, len(s.order))
	var names []string
	for _, j := range s.order {
		byName[j.name] = j
		names = append(names, j.name)
	}
	s.mu.Unlock()
	if el, ok := s.runs.(backend.EntryRunLister); ok && len(names) > 0 {
		ctx, cancel := s.callCtx(s.loopCtx)
		entryNames, err := el.EntryRunNames(ctx, slices.Clone(names))
		cancel()
		if err != nil {
			s.log.Warn("backend call failed", "op", "entry_run_names", "err", err)
		}
		names = append(names, entryNames...)
	}
	// One read of every job when the store lists many at once, else one each.
	lister, many := s.runs.(backend.ActiveLister)
	batches := [][]string{names}
	if !many {
		lister, batches = activeOfOne{s.runs}, nil
		for _, n := range names {
			batches = append(batches, []string{n})
		}
	}
	for _, batch := range batches {
		s.readActive(lister, batch, func(name string, runs []ActiveRun) {
			j := byName[name]
			if job, id, isEntry := backend.SplitEntryRunName(name); isEntry {
				j, _ = s.entries.view(job, id)
			}
			if j == nil || j.gone.Err() != nil {
				return
			}
			if above, known, _ := t.rank(name, s.instance); known && len(above) > 1 {
				return
			}
			for _, r := range runs {
				if !slices.Contains(gone, r.Instance) {
					continue
				}
				s.onceBeside(j, r.Slot, func() { s.handleSlot(j, r.Slot, claimAdopt) })
			}
		})
	}
}
