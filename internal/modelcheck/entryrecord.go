package modelcheck

import (
	"fmt"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// entryWrite is an entry write the store applied (or answered with an error),
// through an instance's faulty view or the harness's own.
type entryWrite struct {
	inst string
	op   string // create, update, delete
	// e is the entry as written: for create and update with the revision the
	// store gave it, for delete its job and ID.
	e    backend.Entry
	base uint64 // update, delete: the revision it was based on
	err  error
	// sent is when the call left the faults, at when the record saw the store's
	// answer (Exact: when the store applied it).
	sent, at time.Duration
	lost     bool // the answer was lost: the caller got an error
}

// follow is a version of an entry as an instance followed it: from when its
// watch delivered it until the instance saw it replaced or removed (forever
// while it follows it).
type follow struct {
	in       *inst
	e        backend.Entry
	from, to time.Duration
}

// watchEvent is a reading of an instance's entry watch that ended Synced, or a
// watch that ended (failed, cut, or stopped) or could not begin.
type watchEvent struct {
	in     *inst
	at     time.Duration
	synced bool
	// resync: the watch said Resync (reading again, the view stale);
	// disconnected: it misses changes without saying so yet.
	resync, disconnected bool
}

// entryRace is one change of an entry through one or two instances on one
// revision, as the callers saw it.
type entryRace struct {
	name  string
	base  uint64
	calls []raceCall
}

type raceCall struct {
	in      *inst
	payload string // tells its write from the other changes on the revision
	err     error
}

// entryClaim is a claim of an entry's slot the store saw.
type entryClaim struct {
	in           *inst
	name         string
	slot         int64
	takeoverOnly bool
	at           time.Duration
}

// entryRecord is what the record keeps of schedule entries. Under record.mu.
type entryRecord struct {
	entryWrites []entryWrite
	follows     map[string][]*follow         // by run name
	following   map[*inst]map[string]*follow // what each instance follows now
	watches     []watchEvent
	races       []*entryRace
	entryClaims []entryClaim
}

func newEntryRecord() entryRecord {
	return entryRecord{follows: map[string][]*follow{}, following: map[*inst]map[string]*follow{}}
}

// watchKey keys the trace's lines about entry watches, so that only the
// reports of entries' rules show them.
var watchKey = key{job: "entry watch"}

// isEntryRun reports whether name is an entry's run name.
func isEntryRun(name string) bool { return strings.Contains(name, backend.EntrySep) }

// entryWritten records an entry write w the store answered; the record sets
// w.at, and w.lost from the fault's note.
func (r *record) entryWritten(w entryWrite, fault string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.at, w.lost = r.now(), strings.Contains(fault, "ANSWER LOST")
	r.entryWrites = append(r.entryWrites, w)
	txt := fmt.Sprintf("store %s entry", w.op)
	if w.op != "delete" {
		txt += fmt.Sprintf(" every %v payload %q updated %s by %s", w.e.Every, w.e.Payload, at(w.e.Updated.Sub(r.t0)), w.e.By)
	}
	if w.base != 0 || w.op == "update" {
		txt += fmt.Sprintf(" on rev %d", w.base)
	}
	if w.err == nil && w.op != "delete" {
		txt += fmt.Sprintf(" → rev %d", w.e.Revision)
	} else {
		txt += " → " + errText(w.err)
	}
	r.appendLocked(entry{at: w.at, inst: w.inst, key: key{job: w.e.RunName()}, text: txt + fault})
}

// raceCall records what a caller of a change was told.
func (r *record) raceCall(race *entryRace, in *inst, payload string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(race.calls) == 0 {
		r.races = append(r.races, race)
	}
	race.calls = append(race.calls, raceCall{in: in, payload: payload, err: err})
}

// entrySeen records a change in's watch delivered, after the scheduler applied
// it, as the scheduler applies it: a newer revision replaces the version it
// follows, a removal ends it, and the end of a reading (Synced) ends those the
// reading did not hold. reading holds the run names the reading delivered.
func (r *record) entrySeen(in *inst, c backend.EntryChange, reading map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	cur := r.following[in]
	if cur == nil {
		cur = map[string]*follow{}
		r.following[in] = cur
	}
	name := c.Entry.RunName()
	switch f, ok := cur[name]; {
	case c.Resync:
		r.watches = append(r.watches, watchEvent{in: in, at: now, resync: true})
		r.appendLocked(entry{at: now, inst: in.name, key: watchKey, text: "entry watch: Resync (the view may be stale until Synced)"})
		return
	case c.Synced:
		var gone []string
		for name, f := range cur {
			if !reading[name] {
				f.to = now
				delete(cur, name)
				gone = append(gone, name)
			}
		}
		r.watches = append(r.watches, watchEvent{in: in, at: now, synced: true})
		r.appendLocked(entry{at: now, inst: in.name, key: watchKey, text: fmt.Sprintf("entry watch synced: follows %d entries, %d gone since the last reading %v", len(cur), len(gone), gone)})
		return
	case c.Removed:
		if ok && f.e.Revision <= c.Entry.Revision {
			f.to = now
			delete(cur, name)
		}
	default:
		reading[name] = true
		if ok && f.e.Revision >= c.Entry.Revision {
			break
		}
		if ok {
			f.to = now
		}
		nf := &follow{in: in, e: c.Entry, from: now, to: forever}
		cur[name] = nf
		r.follows[name] = append(r.follows[name], nf)
	}
	r.appendLocked(entry{at: now, inst: in.name, key: key{job: name}, text: fmt.Sprintf("entry watch: rev %d removed=%v every %v payload %q", c.Entry.Revision, c.Removed, c.Entry.Every, c.Entry.Payload)})
}

// watchDisconnected records that in's entry watch misses the store's changes
// from now on, until its Resync: down, as far as 10c can tell.
func (r *record) watchDisconnected(in *inst) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.watches = append(r.watches, watchEvent{in: in, at: now, disconnected: true})
	r.appendLocked(entry{at: now, inst: in.name, key: watchKey, text: "entry watch disconnected: the store's changes are missed until it reads them again"})
}

// watchEnded records that in's entry watch ended or could not begin.
func (r *record) watchEnded(in *inst, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.watches = append(r.watches, watchEvent{in: in, at: now})
	r.appendLocked(entry{at: now, inst: in.name, key: watchKey, text: "entry watch ended: " + why})
}

// entryClaimLocked records a claim of an entry's slot the store saw.
func (r *record) entryClaimLocked(in *inst, rc backend.RunClaim, now time.Duration) {
	if isEntryRun(rc.Job) {
		r.entryClaims = append(r.entryClaims, entryClaim{in: in, name: rc.Job, slot: rc.Slot.UnixMilli(), takeoverOnly: rc.TakeoverOnly, at: now})
	}
}
