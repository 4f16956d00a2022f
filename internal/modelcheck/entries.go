package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
)

// EntryPlan is one schedule entry of a job, added as the fault phase begins.
type EntryPlan struct {
	ID       string
	Interval time.Duration
	Payload  string
	// Direct entries are written through the store before any instance
	// starts; the others are added by an instance (an ActAddEntry).
	Direct bool
}

// EntryAct is what an entry action does: to which entry, and a change's new
// interval and payload (an add's payload, when it adds the entry again).
type EntryAct struct {
	Entry   int // index into the job's Entries
	Every   time.Duration
	Payload string
	// Racer is another instance slot that changes the same revision at once
	// (its payload ends in "/racer"); -1: none.
	Racer int
}

// AddEntries turns, from a stream of its own (so that the rest of a seed's plan
// stays what it was), about a quarter of p's jobs into jobs run through schedule
// entries: two thirds declared only (scheduler.Declare), the others Every jobs
// with entries too. Each has 1–3 entries every 1–5s (longer than the job's
// retry backoff), added through the store before the instances start or by an
// instance in the first 1.5s of the fault phase; during the fault phase, some
// are changed (a new interval or payload, now and then by two instances racing
// on one revision) and some removed. Jobs that buffer run their handlers at most
// half their shortest entry interval.
func (p *Plan) AddEntries() {
	r := rand.New(rand.NewPCG(p.Seed^0x656e_7472_6965_73, p.Seed))
	faultMS := int(p.FaultPhase / time.Millisecond)
	for i := range p.Jobs {
		j := &p.Jobs[i]
		if r.IntN(4) != 0 {
			continue
		}
		j.Declared = r.IntN(3) > 0
		shortest := time.Duration(1<<63 - 1)
		interval := func() time.Duration {
			for {
				iv := time.Duration(1+r.IntN(5)) * time.Second
				if j.Retry == nil || iv > j.Retry.Backoff {
					shortest = min(shortest, iv)
					return iv
				}
			}
		}
		for e := range 1 + r.IntN(3) {
			ep := EntryPlan{ID: fmt.Sprintf("e%d", e), Interval: interval(), Payload: fmt.Sprintf("%s/e%d/v0", j.Name, e), Direct: r.IntN(2) == 0}
			j.Entries = append(j.Entries, ep)
			if !ep.Direct {
				p.Actions = append(p.Actions, Action{At: MS(r.IntN(1500)), Kind: ActAddEntry, Slot: r.IntN(p.Slots), Job: i, E: &EntryAct{Entry: e, Racer: -1}})
			}
			for v := range r.IntN(3) {
				act := &EntryAct{Entry: e, Every: ep.Interval, Payload: fmt.Sprintf("%s/e%d/v%d", j.Name, e, v+1), Racer: -1}
				if r.IntN(2) == 0 {
					act.Every = interval()
				}
				slot := r.IntN(p.Slots)
				if p.Slots > 1 && r.IntN(2) == 0 {
					act.Racer = (slot + 1 + r.IntN(p.Slots-1)) % p.Slots
				}
				p.Actions = append(p.Actions, Action{At: MS(2000 + r.IntN(faultMS-4000)), Kind: ActUpdateEntry, Slot: slot, Job: i, E: act})
			}
			if r.IntN(10) < 3 {
				p.Actions = append(p.Actions, Action{At: MS(2000 + r.IntN(faultMS-3000)), Kind: ActRemoveEntry, Slot: r.IntN(p.Slots), Job: i, E: &EntryAct{Entry: e, Racer: -1}})
			}
		}
		if j.Buffer > 0 {
			j.MaxRun = min(j.MaxRun, shortest/2)
		}
	}
	p.SortActions()
}

// AddHolderCrashes follows, from a stream of its own (so that the rest of a
// seed's plan stays what it was), half of p's entry removals with a crash of
// the instances running one of the entry's slots 50–550 ms later: no instance
// follows the entry any more, and the run's lease expires with its holder gone.
// The crashed slots come back at the latest as the quiet phase begins, after
// the removal. Call it after AddEntries.
func (p *Plan) AddHolderCrashes() {
	r := rand.New(rand.NewPCG(p.Seed^0x686f_6c64_6572_73, p.Seed))
	var crashes []Action
	for _, a := range p.Actions {
		if a.Kind != ActRemoveEntry || r.IntN(2) == 0 {
			continue
		}
		crashes = append(crashes, Action{At: min(a.At+MS(50+r.IntN(501)), p.FaultPhase), Kind: ActCrashHolders, Job: a.Job, E: &EntryAct{Entry: a.E.Entry, Racer: -1}})
	}
	p.Actions = append(p.Actions, crashes...)
	p.SortActions()
}

// AddReadds removes a third of p's entries while one of their slots runs, and
// adds each again at once with the same ID: a new incarnation, a new payload.
// Now and then the instances running the slot crash just before. The run of
// the removed incarnation is then left for a takeover, which must end it
// cancelled, never run it again. It draws from a stream of its own, so that
// the rest of a seed's plan stays what it was. Call it after AddEntries.
func (p *Plan) AddReadds() {
	r := rand.New(rand.NewPCG(p.Seed^0x7265_6164_6473, p.Seed))
	faultMS := int(p.FaultPhase / time.Millisecond)
	for i, j := range p.Jobs {
		for e := range j.Entries {
			if r.IntN(3) != 0 {
				continue
			}
			at := MS(2500 + r.IntN(faultMS-4000))
			if r.IntN(2) == 0 {
				p.Actions = append(p.Actions, Action{At: at, Kind: ActCrashHolders, Job: i, E: &EntryAct{Entry: e, Racer: -1}})
			}
			rm := at + MS(r.IntN(300))
			p.Actions = append(p.Actions,
				Action{At: rm, Kind: ActRemoveEntry, Slot: r.IntN(p.Slots), Job: i, E: &EntryAct{Entry: e, Racer: -1}},
				Action{At: rm + MS(r.IntN(300)), Kind: ActAddEntry, Slot: r.IntN(p.Slots), Job: i,
					E: &EntryAct{Entry: e, Payload: fmt.Sprintf("%s/e%d/again", j.Name, e), Racer: -1}})
		}
	}
	p.SortActions()
}

// hasEntries reports whether some job of p has entries.
func (p *Plan) hasEntries() bool {
	for _, j := range p.Jobs {
		if len(j.Entries) > 0 {
			return true
		}
	}
	return false
}

// entryTries bounds how often an instance adds an entry whose add failed.
const entryTries = 5

// harnessName is the writer of the entries the harness writes through the store.
const harnessName = "harness"

// directEntries is the harness's own view of the entry store, without faults; nil
// when the store keeps no entries. Under h.mu.
func (h *Harness) directEntriesLocked() (backend.EntryStore, error) {
	if h.direct != nil || h.noEntries {
		return h.direct, nil
	}
	store, err := h.backend(harnessName)
	if err != nil {
		return nil, fmt.Errorf("backend of the harness: %w", err)
	}
	h.entriesSupported(store)
	if es, ok := store.(backend.EntryStore); ok {
		h.direct = es
	}
	return h.direct, nil
}

// entriesSupported notes, at the first store it meets, whether it keeps
// entries. Under h.mu.
func (h *Harness) entriesSupported(store Store) {
	if h.direct != nil || h.noEntries {
		return
	}
	if _, ok := store.(backend.EntryStore); !ok {
		h.noEntries = true
		if h.plan.hasEntries() {
			h.rec.global("the store is no backend.EntryStore: jobs with entries run every Interval, without entries")
		}
	}
}

// addDirectEntries writes the Direct entries through the store, before any
// instance starts.
func (h *Harness) addDirectEntries() error {
	if !h.plan.hasEntries() {
		return nil
	}
	h.mu.Lock()
	es, err := h.directEntriesLocked()
	h.mu.Unlock()
	if err != nil || es == nil {
		return err
	}
	for _, j := range h.plan.Jobs {
		for _, ep := range j.Entries {
			if ep.Direct {
				h.writeDirect(es, "create", backend.Entry{Job: j.Name, ID: ep.ID, EntrySpec: backend.EntrySpec{Every: ep.Interval, Payload: []byte(ep.Payload)}}, 0)
			}
		}
	}
	return nil
}

// writeDirect creates, or deletes, an entry through the store without faults.
// A created entry gets an incarnation drawn from the seed, as AddEntry draws
// one.
func (h *Harness) writeDirect(es backend.EntryStore, op string, e backend.Entry, rev uint64) error {
	e.Updated, e.By = time.Now().UTC().Truncate(time.Millisecond), harnessName
	if op == "create" {
		e.Incarnation = Mix(h.plan.Seed, Str(e.RunName()), uint64(e.Updated.UnixMilli())) | 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.plan.CallTimeout)
	defer cancel()
	sent := h.now()
	var err error
	switch op {
	case "create":
		e.Revision, err = es.CreateEntry(ctx, e)
	case "delete":
		err = es.DeleteEntry(ctx, e.Job, e.ID, rev)
	}
	h.rec.entryWritten(entryWrite{inst: harnessName, op: op, e: e, base: rev, err: err, sent: sent}, "")
	return err
}

// entryAct carries out an entry action (under h.mu). Its calls run in the
// background: a racing change is two calls at once.
func (h *Harness) entryAct(a Action) error {
	es, err := h.directEntriesLocked()
	if err != nil || es == nil {
		return err
	}
	j := h.plan.Jobs[a.Job]
	ep := j.Entries[a.E.Entry]
	up := func(slot int) *inst {
		if in := h.cur[slot]; in != nil && !in.down && !in.dead.Load() {
			return in
		}
		return nil
	}
	in := up(a.Slot)
	switch a.Kind {
	case ActAddEntry:
		spec := scheduler.EntrySpec{Every: ep.Interval, Payload: []byte(ep.Payload)}
		if a.E.Payload != "" {
			spec.Payload = []byte(a.E.Payload) // added again
		}
		// An entry added again may meet its removal still on its way.
		again := a.E.Payload != ""
		h.bg.Go(func() {
			for try := range entryTries {
				var err error
				if in == nil {
					h.rec.global("ADD ENTRY %s/%s through the store (%c is down), again %v", j.Name, ep.ID, 'A'+a.Slot, again)
					err = h.writeDirect(es, "create", backend.Entry{Job: j.Name, ID: ep.ID, EntrySpec: spec}, 0)
				} else {
					var e backend.Entry
					e, err = in.sched.AddEntry(context.Background(), j.Name, ep.ID, spec)
					h.rec.instLog(in, "ADD ENTRY %s/%s every %v (try %d, again %v) → rev %d %v", j.Name, ep.ID, ep.Interval, try+1, again, e.Revision, errText(err))
				}
				exists := errors.Is(err, backend.ErrEntryExists)
				if err == nil || exists && !again || in == nil && !exists || in != nil && in.dead.Load() || !wait(context.Background(), 200*time.Millisecond) {
					return
				}
			}
		})
	case ActRemoveEntry:
		h.bg.Go(func() {
			if in == nil {
				h.rec.global("REMOVE ENTRY %s/%s through the store (%c is down)", j.Name, ep.ID, 'A'+a.Slot)
				h.writeDirect(es, "delete", backend.Entry{Job: j.Name, ID: ep.ID}, 0)
				return
			}
			err := in.sched.RemoveEntry(context.Background(), j.Name, ep.ID, 0)
			h.rec.instLog(in, "REMOVE ENTRY %s/%s → %v", j.Name, ep.ID, errText(err))
		})
	case ActUpdateEntry:
		if in == nil {
			return nil
		}
		var racer *inst
		if a.E.Racer >= 0 && a.E.Racer != a.Slot {
			racer = up(a.E.Racer)
		}
		h.bg.Go(func() { h.updateEntry(es, backend.Entry{Job: j.Name, ID: ep.ID}, a.E, in, racer) })
	}
	return nil
}

// updateEntry reads the revision of the entry ref names (its Job and ID) from
// the store and changes it as act says through in and, at the same instant,
// through racer when it is not nil: both on that revision.
func (h *Harness) updateEntry(es backend.EntryStore, ref backend.Entry, act *EntryAct, in, racer *inst) {
	job, id := ref.Job, ref.ID
	ctx, cancel := context.WithTimeout(context.Background(), h.plan.CallTimeout)
	cur, err := es.GetEntry(ctx, job, id)
	cancel()
	if err != nil {
		h.rec.instLog(in, "UPDATE ENTRY %s/%s not tried: %v", job, id, err)
		return
	}
	name := backend.EntryRunName(job, id)
	race := &entryRace{name: name, base: cur.Revision}
	var wg sync.WaitGroup
	for i, x := range []*inst{in, racer} {
		if x == nil {
			continue
		}
		spec := cur.EntrySpec
		spec.Every, spec.Payload = act.Every, []byte(act.Payload)
		if i == 1 {
			spec.Payload = []byte(act.Payload + "/racer")
		}
		wg.Go(func() {
			e, err := x.sched.UpdateEntry(context.Background(), job, id, spec, cur.Revision)
			h.rec.raceCall(race, x, string(spec.Payload), err)
			h.rec.instLog(x, "UPDATE ENTRY %s/%s on rev %d to every %v payload %q → rev %d %v", job, id, cur.Revision, spec.Every, spec.Payload, e.Revision, errText(err))
		})
	}
	wg.Wait()
}
