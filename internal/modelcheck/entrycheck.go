package modelcheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// entryQuiet is how long into the quiet phase, after the entry's last write,
// every instance surely follows the entry's last version: a write sent in the
// fault phase reaches the store within a call timeout, and a watch cut there is
// read again within its retry delay.
const entryQuiet = 3 * time.Second

// addEntryJobs adds to c.jobs every entry the store created, as a Job named by
// its run name with its job's policies and its latest interval.
func (c *checker) addEntryJobs() {
	for _, w := range c.rec.entryWrites {
		name := w.e.RunName()
		if _, ok := c.jobs[name]; ok || w.op != "create" || w.err != nil {
			continue
		}
		j := c.jobs[w.e.Job]
		j.Name, j.Entries, j.Declared = name, nil, false
		vs := c.versions(name)
		j.Interval = vs[len(vs)-1].e.Every
		c.jobs[name] = j
	}
}

// checked lists what the stored records are judged for: the plan's jobs, then
// their entries by run name.
func (c *checker) checked() []Job {
	var out, entries []Job
	for _, j := range c.h.plan.Jobs {
		out = append(out, c.jobs[j.Name])
	}
	for name, j := range c.jobs {
		if isEntryRun(name) {
			entries = append(entries, j)
		}
	}
	slices.SortFunc(entries, func(a, b Job) int { return strings.Compare(a.Name, b.Name) })
	return append(out, entries...)
}

// versions are the versions of the entry named name the store applied, in the
// order it applied them.
func (c *checker) versions(name string) []entryWrite {
	var out []entryWrite
	for _, w := range c.rec.entryWrites {
		if w.err == nil && w.op != "delete" && w.e.RunName() == name {
			out = append(out, w)
		}
	}
	return out
}

// lastWrite is the entry's last write the store applied.
func (c *checker) lastWrite(name string) (entryWrite, bool) {
	for i := len(c.rec.entryWrites) - 1; i >= 0; i-- {
		if w := c.rec.entryWrites[i]; w.err == nil && w.e.RunName() == name {
			return w, true
		}
	}
	return entryWrite{}, false
}

// removed reports whether name is an entry's run name whose entry's last
// write the store applied was its removal.
func (c *checker) removed(name string) bool {
	w, ok := c.lastWrite(name)
	return ok && w.op == "delete"
}

// onEntry reports whether slot (unix ms) is a slot of version e: on its grid
// and after it was written.
func onEntry(e backend.Entry, slot, off int64) bool {
	return (slot-off)%e.Every.Milliseconds() == 0 && slot > e.Updated.UnixMilli()
}

// nextOn is the first slot of version e after slot (unix ms), its slots moved
// by off (a spread).
func nextOn(e backend.Entry, slot, off int64) int64 {
	iv := e.Every.Milliseconds()
	from := max(slot, e.Updated.UnixMilli()) - off
	return (from/iv+1)*iv + off
}

// quietSlots are j's slots due in the quiet phase that must end with a terminal
// record (4): a job's on its interval (none for a job declared for its
// entries); an entry's on its last version, from entryQuiet after its last
// write, none once it was removed.
func (c *checker) quietSlots(j Job) []int64 {
	h := c.h
	from := c.rec.t0.Add(h.quietAt + time.Second).UnixMilli()
	to := c.rec.t0.Add(h.endAt - 2*time.Second).UnixMilli()
	iv := j.Interval.Milliseconds()
	switch {
	case j.Declared:
		return nil
	case isEntryRun(j.Name):
		w, ok := c.lastWrite(j.Name)
		if !ok || w.op == "delete" {
			return nil
		}
		from = c.rec.t0.Add(max(h.quietAt, w.at) + entryQuiet).UnixMilli()
		from = max(from, w.e.Updated.UnixMilli()+1)
		iv = w.e.Every.Milliseconds()
	}
	var out []int64
	off := j.offset()
	for slot := (from-off+iv-1)/iv*iv + off; slot <= to; slot += iv {
		out = append(out, slot)
	}
	return out
}

// entryRules: 10, the rules of schedule entries.
func (c *checker) entryRules() {
	c.entryChanges()
	c.entryFollowed()
	c.entryReached()
	c.entryIncarnations()
	c.entryStaleView()
}

// entryStaleView: 10f, an instance claims no entry's slot first while its view
// of the entries may be stale: from its watch's end or Resync until its next
// reading ends Synced (the slowest request allowed: a claim sent just before
// may arrive after).
func (c *checker) entryStaleView() {
	h := c.h
	slow := h.w.Faults.SlowMax
	judged := map[entryClaim]bool{}
	for _, cl := range c.rec.entryClaims {
		f := entryClaim{in: cl.in, name: cl.name, slot: cl.slot}
		if judged[f] || cl.takeoverOnly {
			continue
		}
		judged[f] = true
		if e := c.staleSince(cl.in, cl.at-slow); e != nil && !c.syncedBetween(cl.in, e.at, cl.at) {
			why := "its watch ended"
			if e.resync {
				why = "its watch said Resync"
			}
			c.add("10f-entry-stale-view", []key{{cl.name, cl.slot}, watchKey}, cl.in.name, "%s: %s claimed slot %s first at %s while its view of the entries was stale (since %s: %s)",
				cl.name, cl.in.name, h.rel(cl.slot), at(cl.at), at(e.at), why)
		}
	}
}

// staleSince returns the event since which in's view of the entries was stale
// at t (its last watch event at or before t ended the watch or said Resync),
// or nil.
func (c *checker) staleSince(in *inst, t time.Duration) *watchEvent {
	var last *watchEvent
	for i := range c.rec.watches {
		e := &c.rec.watches[i]
		if e.in == in && e.at <= t && !e.disconnected {
			last = e
		}
	}
	if last == nil || last.synced {
		return nil
	}
	return last
}

// syncedBetween reports whether a reading of in's watch ended Synced in (from, to].
func (c *checker) syncedBetween(in *inst, from, to time.Duration) bool {
	for _, e := range c.rec.watches {
		if e.in == in && e.synced && e.at > from && e.at <= to {
			return true
		}
	}
	return false
}

// entryIncarnations: 10d, every attempt of an entry's slot is granted to a
// claim of the incarnation the slot's first attempt was granted for: a run of
// an entry removed and added again with the same ID is ended, never run again
// for the new one. 10e, no attempt of an entry's slot after the first (a
// takeover, a retry) is granted to an instance that had seen the entry removed
// before it claimed, and stopped following it (the slowest request allowed).
func (c *checker) entryIncarnations() {
	h := c.h
	for k, gs := range c.rec.grants {
		if !isEntryRun(k.job) || len(gs) == 0 {
			continue
		}
		first := gs[0]
		for _, g := range gs[1:] {
			if first.incarnation != 0 && g.incarnation != 0 && g.incarnation != first.incarnation {
				c.add("10d-entry-incarnation", []key{k, {k.job, 0}}, "", "%s slot %s: attempt %d (%s) was granted to a claim of incarnation %d; attempt %d (%s) was of incarnation %d",
					k.job, h.rel(k.slot), g.attempt, g.inst, g.incarnation, first.attempt, first.inst, first.incarnation)
			}
			if c.unfollowed(g, g.sent-h.w.Faults.SlowMax, g.sent) {
				c.add("10e-entry-removed-run", []key{k, {k.job, 0}, watchKey}, "", "%s slot %s: attempt %d was granted to %s at %s, which had seen the entry removed and followed it no more",
					k.job, h.rel(k.slot), g.attempt, g.inst, at(g.at))
			}
		}
		if first.incarnation != 0 && len(gs) > 1 {
			c.seen["entry slots with more than one attempt"]++
		}
		// A slot buffered for one incarnation is run for that one only.
		for _, b := range c.rec.buffers {
			if b.key == k && b.incarnation != 0 && first.incarnation != 0 && b.incarnation != first.incarnation && first.atSeq > b.seq {
				c.add("10d-entry-incarnation", []key{k, {k.job, 0}}, "", "%s slot %s: buffered for incarnation %d (by %s), its first attempt was granted to %s for incarnation %d",
					k.job, h.rel(k.slot), b.incarnation, b.inst, first.inst, first.incarnation)
				break
			}
		}
	}
}

// unfollowed reports whether g's instance followed g's entry once, had
// stopped following it (saw it removed) before from, and followed no version
// of it from then until to: whenever it prepared its claim.
func (c *checker) unfollowed(g *grant, from, to time.Duration) bool {
	var inst *inst
	ended := false
	for _, f := range c.rec.follows[g.key.job] {
		if f.in.name != g.inst {
			continue
		}
		inst = f.in
		if f.from <= to && from < f.to {
			return false
		}
		ended = ended || f.to <= from
	}
	return inst != nil && ended
}

// entryChanges: 10a, of the changes based on one revision of an entry the store
// applies at most one; of two instances changing one revision at once, when
// both calls reached the store, exactly one is applied and the other answered
// ErrEntryConflict; and a caller is told what the store answered unless the
// answer was lost on its way.
func (c *checker) entryChanges() {
	type base struct {
		name string
		rev  uint64
	}
	applied := map[base][]entryWrite{}
	for _, w := range c.rec.entryWrites {
		if w.op == "update" && w.err == nil {
			b := base{w.e.RunName(), w.base}
			applied[b] = append(applied[b], w)
		}
	}
	for b, ws := range applied {
		if len(ws) > 1 {
			var who []string
			for _, w := range ws {
				who = append(who, fmt.Sprintf("%s at %s (rev %d)", w.inst, at(w.at), w.e.Revision))
			}
			c.add("10a-entry-cas", []key{{b.name, 0}}, "", "entry %s: %d changes based on revision %d were applied: %s", b.name, len(ws), b.rev, strings.Join(who, ", "))
		}
	}
	for _, race := range c.rec.races {
		var reached []entryWrite
		for _, call := range race.calls {
			var w *entryWrite
			for i := range c.rec.entryWrites {
				if x := &c.rec.entryWrites[i]; x.op == "update" && x.inst == call.in.name && x.base == race.base && x.e.RunName() == race.name && string(x.e.Payload) == call.payload {
					w = x
				}
			}
			switch {
			case w != nil:
				reached = append(reached, *w)
			case call.err == nil:
				c.add("10a-entry-cas", []key{{race.name, 0}}, call.in.name, "entry %s: %s's change on revision %d succeeded but the store never applied it", race.name, call.in.name, race.base)
				continue
			}
			if w == nil || w.lost {
				continue
			}
			conflict := errors.Is(w.err, backend.ErrEntryConflict)
			if (w.err == nil) != (call.err == nil) || conflict != errors.Is(call.err, backend.ErrEntryConflict) {
				c.add("10a-entry-cas", []key{{race.name, 0}}, call.in.name, "entry %s: %s's change on revision %d was answered %v by the store, but its caller got %v",
					race.name, call.in.name, race.base, errText(w.err), errText(call.err))
			}
		}
		if len(race.calls) < 2 {
			continue
		}
		c.seen["entry change races"]++
		if len(reached) < 2 {
			continue
		}
		c.seen["entry change races that reached the store"]++
		won, lost := 0, 0
		for _, w := range reached {
			switch {
			case w.err == nil:
				won++
			case errors.Is(w.err, backend.ErrEntryConflict):
				lost++
			}
		}
		if won != 1 || lost != len(reached)-1 {
			var how []string
			for _, w := range reached {
				how = append(how, fmt.Sprintf("%s: %s", w.inst, errText(w.err)))
			}
			c.add("10a-entry-cas", []key{{race.name, 0}}, "", "entry %s: %d instances changed revision %d at once; the store answered %s, not one win and conflicts",
				race.name, len(reached), race.base, strings.Join(how, "; "))
		}
	}
}

// followSlack is how much later than it saw the entry replaced or removed an
// instance may claim one of its slots: the store's clock may be read this much
// apart from the record's (Bounded).
func (c *checker) followSlack() time.Duration {
	if c.rec.timing == Bounded {
		return c.h.w.StoreSlack
	}
	return 0
}

// entryFollowed: 10b, an instance claims an entry's slot first (not as a
// takeover of a run stored before) only for a slot of a version of the entry it
// followed when the slot came due: on that version's interval, after its
// Updated, and due by its own clock no later than when its watch delivered the
// version's replacement or removal. A handler of an entry runs with the payload
// of a version its instance followed.
func (c *checker) entryFollowed() {
	h := c.h
	slack := c.followSlack()
	type first struct {
		in   *inst
		name string
		slot int64
	}
	judged := map[first]bool{}
	for _, cl := range c.rec.entryClaims {
		f := first{cl.in, cl.name, cl.slot}
		if judged[f] {
			continue
		}
		judged[f] = true
		if cl.takeoverOnly {
			continue
		}
		c.seen["entry slots claimed first"]++
		ok := false
		var had []string
		for _, fw := range c.rec.follows[cl.name] {
			if fw.in != cl.in {
				continue
			}
			had = append(had, fmt.Sprintf("rev %d every %v updated %s from %s to %s", fw.e.Revision, fw.e.Every, at(fw.e.Updated.Sub(c.rec.t0)), at(fw.from), at(fw.to)))
			due := time.UnixMilli(cl.slot).Sub(c.rec.t0) - cl.in.offset // by the harness's clock
			if onEntry(fw.e, cl.slot, c.jobs[cl.name].offset()) && due <= fw.to+slack {
				ok = true
				break
			}
		}
		if !ok {
			c.add("10b-entry-followed", []key{{cl.name, cl.slot}, {cl.name, 0}, watchKey}, "", "%s: %s claimed slot %s at %s, a slot of no version of the entry it followed when it came due (clock offset %v; followed: %s)",
				cl.name, cl.in.name, h.rel(cl.slot), at(cl.at), cl.in.offset, strings.Join(had, "; "))
		}
	}
	for _, hr := range c.rec.handlers {
		if hr.manual || !isEntryRun(hr.key.job) {
			continue
		}
		c.seen["entry handlers"]++
		ok := false
		for _, fw := range c.rec.follows[hr.key.job] {
			ok = ok || fw.in == hr.in && string(fw.e.Payload) == hr.payload
		}
		if !ok {
			c.add("10b-entry-followed", []key{hr.key, {hr.key.job, 0}}, "", "%s slot %s: %s's handler (attempt %d) ran with payload %q, which no version of the entry it followed carries",
				hr.key.job, h.rel(hr.key.slot), hr.in.name, hr.attempt, hr.payload)
		}
	}
}

// writtenAfter reports whether version e of an entry was written after the
// write at index i of the record (an entry added again after its removal).
func (c *checker) writtenAfter(e backend.Entry, i int) bool {
	for _, w := range c.rec.entryWrites[i+1:] {
		if w.err == nil && w.op != "delete" && w.e.RunName() == e.RunName() && w.e.Revision == e.Revision {
			return true
		}
	}
	return false
}

// watchUp reports whether in's entry watch was up from t to t+d: its last
// event at or before t was a reading that ended Synced, it did not end before
// t+d, and the process was not frozen meanwhile.
func (c *checker) watchUp(in *inst, t, d time.Duration) bool {
	for _, s := range in.freezes() {
		if s.from < t+d && s.to > t {
			return false // a frozen process reads nothing
		}
	}
	up := false
	for _, e := range c.rec.watches {
		if e.in != in {
			continue
		}
		switch {
		case e.at <= t:
			up = e.synced
		case e.at <= t+d && !e.synced:
			return false
		}
	}
	return up
}

// entryReached: 10c, an instance whose entry watch is up sees an entry's
// change or removal within World.EntrySlack of the store applying it: it stops
// following the version it replaced by then. With 10b: no slot of a removed
// entry due after its removal + EntrySlack (by the claiming instance's clock) is
// claimed first by an instance whose watch was up.
func (c *checker) entryReached() {
	slack := c.h.w.entrySlack()
	for i, w := range c.rec.entryWrites {
		if w.err != nil || w.op == "create" {
			continue
		}
		name := w.e.RunName()
		c.seen["entry changes and removals"]++
		for _, fw := range c.rec.follows[name] {
			if fw.from > w.at || fw.to <= w.at+slack || w.op == "update" && fw.e.Revision >= w.e.Revision || c.writtenAfter(fw.e, i) {
				continue
			}
			if !c.watchUp(fw.in, w.at, slack) {
				continue
			}
			what := "change to rev " + fmt.Sprint(w.e.Revision)
			if w.op == "delete" {
				what = "removal"
			}
			until := "its end"
			if fw.to != forever {
				until = at(fw.to)
			}
			c.add("10c-entry-reached", []key{{name, 0}, watchKey}, fw.in.name, "%s: the %s, stored at %s, reached %s only at %s though its watch was up; it went on following rev %d",
				name, what, at(w.at), fw.in.name, until, fw.e.Revision)
		}
	}
}
