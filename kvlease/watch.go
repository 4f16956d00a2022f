package kvlease

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// watchSlack is how long after a lease's expected end a watch fires even without
// having seen the server's expiry marker (a safety net: the marker normally arrives
// within milliseconds of the expiry).
const watchSlack = time.Second

// WatchRun returns a channel closed when a new Claim of (job, slot) could decide
// differently. That is when its lease is released, expires (the server's marker),
// changes holder, or ends with the run finished. It is also when the lease comes to
// carry a cancel request (OverlapCancelOther). A heartbeat by the holder does not
// close it. When no lease is live at the start the channel closes at once. It also
// closes when ctx is done or the store is closed.
//
// All watches of a Store share ONE watcher on the bucket's lease keys (one consumer
// on the server however many backups wait), started by the first WatchRun. A waiter
// is registered, then the baseline is taken: the lease as this store's own Claim
// just read it (answering running) when that reading was sent after the shared
// watcher started, else a read from the stream leader. The shared watcher's updates
// count only when newer than the baseline (a watcher's consumer may be served by a
// replica a little behind the leader). Every update newer than a reading sent after
// the watcher started reaches the watcher. The updates it delivered before the
// waiter was registered are kept for a while by key. So a backup that stands by
// right after its claim costs no read of its own: one shared watch, no read per
// slot.
func (s *Store) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := backend.ValidateRunName(job); err != nil {
		return nil, err
	}
	callCtx, cancel := s.callContext(ctx)
	defer cancel()
	b, err := s.bucketFor(callCtx)
	if err != nil {
		return nil, err
	}
	k := keysFor(job, slot)
	w := &waiter{ch: make(chan struct{}), key: k.lease, base: ^uint64(0)}
	started, err := s.mem.hub.add(s, b, w)
	if err != nil {
		return nil, fmt.Errorf("kvlease: watch %s: %w", backendutil.DescribeRun(job, slot), err)
	}
	v := view{slot: slot}
	if h, ok := s.mem.takeHint(k, started); ok {
		v.lease, v.lv = h.lease, h.lv
	} else if v, _, err = s.readView(callCtx, b, job, slot, false); err == nil {
		s.clearPending(b, job, v, s.writePending(callCtx, job, v))
	}
	if err != nil {
		s.mem.hub.remove(w)
		return nil, fmt.Errorf("kvlease: watch %s: %w", backendutil.DescribeRun(job, slot), err)
	}
	cur, _ := v.runOf("", s.clock.estimate(time.Now()))
	switch {
	case cur.Phase == machine.Buffered:
		// A buffered slot's watch fires on any newer write of its lease key: a
		// claim taking it, or its withdrawal, which purges it.
		stopCtx := context.AfterFunc(ctx, func() { s.mem.hub.fire(w) })
		s.mem.hub.arm(w, v.lease.rev, "", true, func() { stopCtx() })
	case v.lv == nil || !cur.Live(s.clock.estimate(time.Now())):
		s.mem.hub.fire(w) // no live lease: a claim may decide differently now
	default:
		stopCtx := context.AfterFunc(ctx, func() { s.mem.hub.fire(w) })
		end := time.AfterFunc(s.untilEnd(v), func() { s.mem.hub.fire(w) })
		s.mem.hub.arm(w, v.lease.rev, watched(v.lv), false, func() { stopCtx(); end.Stop() })
	}
	return w.ch, nil
}

// watched is what a watch of a lease waits to change: its holder's token, and
// whether it carries a cancel request. A heartbeat changes neither.
func watched(lv *leaseValue) string {
	switch {
	case lv == nil:
		return ""
	case lv.Cancel != nil:
		return lv.Token + " cancel"
	}
	return lv.Token
}

// waiter is one WatchRun waiting for a lease key to change.
type waiter struct {
	ch    chan struct{}
	key   string
	base  uint64 // revision read from the leader; older updates are ignored
	token string // the lease's watched() at base
	// anyWrite: every newer revision fires the waiter (a buffered slot's)
	anyWrite bool
	once     sync.Once
	cleanup  func()
	// early holds the updates seen before the waiter was armed: they count if newer
	// than the leader's reading.
	early []seen
}

// seen is one update of a lease key: its revision and holder ("" when it ended).
type seen struct {
	rev   uint64
	token string
}

// watchHub fans the updates of one shared watcher out to the waiters by key.
type watchHub struct {
	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
	running bool
	// started is when the running watcher's consumer existed (local time): a
	// reading sent after it is followed by every newer update.
	started time.Time
	// last holds the newest update the watcher delivered of each lease key in the
	// last hintTTL, with when it came.
	last map[string]lastSeen
	// finished holds, by lease key, the finished run records that Finish's purges
	// carried in the last hintTTL. A newer revision of the slot's keys, delivered
	// or written by this store, drops it.
	finished map[string]finishedRun
	// wrote holds, by lease key, the newest revision of a slot's keys this store
	// wrote while the watcher runs, until the watcher delivers past it. floor
	// stands for the revisions dropped when wrote was full.
	wrote map[string]uint64
	floor uint64
	// delivered is the newest revision the running watcher delivered.
	delivered uint64
	// pending are the calls of leaseSince waiting for a key's next update.
	pending map[string][]chan struct{}
	nextGC  time.Time
	// gen counts the watchers started; used is when the last waiter was
	// added.
	gen  uint64
	used time.Time
	// idle replaces watcherIdle when set (tests).
	idle time.Duration
}

// watcherIdle is how long the shared watcher runs on with no waiter and no
// read waiting for it: a store whose claims rarely stand by (Config.Turns) does
// not receive every lease update of the bucket.
const watcherIdle = 10 * time.Second

type finishedRun struct {
	run machine.Run
	rev uint64
	at  time.Time
}

// lastSeen is an update of a lease key as its last message, and when it came.
type lastSeen struct {
	entry
	lv *leaseValue
	at time.Time
}

// add registers w, starting the shared watcher when it is not running, and returns
// when the running watcher started.
func (h *watchHub) add(s *Store, b *bucket, w *waiter) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.done.Err() != nil {
		return time.Time{}, ErrClosed
	}
	if !h.running {
		kw, err := b.kv.WatchFiltered(s.done, []string{leasePrefix + ">"}, jetstream.UpdatesOnly())
		if err != nil {
			return time.Time{}, err
		}
		h.running, h.started = true, time.Now()
		h.gen++
		gen := h.gen
		s.watchers.Add(1)
		go func() {
			defer s.watchers.Done()
			h.run(s, kw, gen)
		}()
	}
	h.used = time.Now()
	if h.waiters == nil {
		h.waiters = make(map[string]map[*waiter]struct{})
	}
	set := h.waiters[w.key]
	if set == nil {
		set = make(map[*waiter]struct{})
		h.waiters[w.key] = set
	}
	set[w] = struct{}{}
	return h.started, nil
}

// arm sets what w waits to change, and what to stop when it fires; until armed,
// only a closing watcher fires it. A waiter that already fired is cleaned up at once.
func (h *watchHub) arm(w *waiter, rev uint64, token string, anyWrite bool, cleanup func()) {
	h.mu.Lock()
	_, waiting := h.waiters[w.key][w]
	changed := false
	if waiting {
		w.base, w.token, w.anyWrite, w.cleanup = rev, token, anyWrite, cleanup
		for _, u := range w.early {
			changed = changed || (u.rev > rev && (anyWrite || u.token != token))
		}
		if u, ok := h.last[w.key]; ok { // delivered before w was registered
			changed = changed || (u.rev > rev && (anyWrite || watched(u.lv) != token))
		}
		w.early = nil
	}
	h.mu.Unlock()
	switch {
	case !waiting:
		cleanup()
	case changed:
		h.fire(w)
	}
}

func (h *watchHub) remove(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.waiters[w.key]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(h.waiters, w.key)
		}
	}
}

// fire closes w's channel once and forgets it.
func (h *watchHub) fire(w *waiter) {
	h.mu.Lock()
	if set := h.waiters[w.key]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(h.waiters, w.key)
		}
	}
	cleanup := w.cleanup
	w.cleanup = nil
	h.mu.Unlock()
	if cleanup != nil {
		cleanup()
	}
	w.once.Do(func() { close(w.ch) })
}

// run delivers the shared watcher's updates until it stops (Close, the watcher
// failed, or it was idle for watcherIdle); then every waiter fires, and the next
// WatchRun starts a new watcher.
func (h *watchHub) run(s *Store, kw jetstream.KeyWatcher, gen uint64) {
	defer stopWatcher(kw)
	h.mu.Lock()
	after := cmp.Or(h.idle, watcherIdle)
	h.mu.Unlock()
	idle := time.NewTicker(max(after/4, time.Millisecond))
	defer idle.Stop()
	defer func() {
		h.mu.Lock()
		if h.gen != gen || !h.running {
			h.mu.Unlock()
			return // stopped idle: a later watcher's state is not this one's
		}
		h.stopLocked()
		var all []*waiter
		for _, set := range h.waiters {
			for w := range set {
				all = append(all, w)
			}
		}
		h.mu.Unlock()
		for _, w := range all {
			h.fire(w)
		}
	}()
	for {
		select {
		case <-s.done.Done():
			return
		case <-idle.C:
			h.mu.Lock()
			if len(h.waiters) == 0 && len(h.pending) == 0 && time.Since(h.used) >= after {
				h.stopLocked()
				h.mu.Unlock()
				return
			}
			h.mu.Unlock()
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			h.deliver(e)
			if s.watchHook != nil {
				s.watchHook(e.Key(), e.Operation() == jetstream.KeyValuePurge)
			}
		}
	}
}

// stopLocked forgets what only a running watcher keeps current. h.mu is held.
func (h *watchHub) stopLocked() {
	h.running = false
	// A finished run seen is the slot's state only while newer updates are
	// delivered.
	h.finished = nil
	// A new watcher delivers only updates newer than its start.
	h.wrote, h.floor, h.delivered = nil, 0, 0
	for _, chs := range h.pending {
		for _, ch := range chs {
			close(ch)
		}
	}
	h.pending = nil
}

// deliver fires the waiters of e's key whose lease e ends or replaces.
func (h *watchHub) deliver(e jetstream.KeyValueEntry) {
	ent := entryFromKV(e)
	next, _ := decodeLease(ent) // a value that is no lease ends the lease
	holder := watched(next)
	now := time.Now()
	var done *machine.Run
	if e.Operation() == jetstream.KeyValuePurge && len(e.Value()) > 0 {
		var rec runJSON
		if json.Unmarshal(e.Value(), &rec) == nil && rec.Token != "" && rec.Phase == machine.Finished {
			r := machine.Run(rec)
			done = &r
		}
	}
	rev := e.Revision()
	h.mu.Lock()
	h.delivered = max(h.delivered, rev)
	h.remember(e.Key(), lastSeen{ent, next, now}, now)
	for _, ch := range h.pending[e.Key()] {
		close(ch)
	}
	delete(h.pending, e.Key())
	switch f, ok := h.finished[e.Key()]; {
	case done != nil && rev > h.wrote[e.Key()] && rev > h.floor:
		if h.finished == nil {
			h.finished = make(map[string]finishedRun)
		}
		h.finished[e.Key()] = finishedRun{*done, rev, now}
	case ok && f.rev < rev:
		delete(h.finished, e.Key())
	}
	set := h.waiters[e.Key()]
	if len(set) == 0 {
		h.mu.Unlock()
		return
	}
	var fire []*waiter
	for w := range set {
		if w.base == ^uint64(0) {
			w.early = append(w.early, seen{e.Revision(), holder})
			continue // not armed yet: arm decides
		}
		if e.Revision() <= w.base {
			continue // already known
		}
		if holder != w.token || w.anyWrite {
			fire = append(fire, w) // expired, released, finished, or a new holder
		}
	}
	h.mu.Unlock()
	for _, w := range fire {
		h.fire(w)
	}
}

// remember keeps u as key's newest update, and forgets updates older than hintTTL
// now and then. h.mu is held.
func (h *watchHub) remember(key string, u lastSeen, now time.Time) {
	if h.last == nil {
		h.last = make(map[string]lastSeen)
	}
	if old, ok := h.last[key]; !ok || u.rev > old.rev {
		h.last[key] = u
	}
	if now.After(h.nextGC) {
		for k, v := range h.last {
			if now.Sub(v.at) > hintTTL {
				delete(h.last, k)
			}
		}
		for k, v := range h.finished {
			if now.Sub(v.at) > hintTTL {
				delete(h.finished, k)
			}
		}
		for k, rev := range h.wrote {
			if rev <= h.delivered {
				delete(h.wrote, k)
			}
		}
		h.nextGC = now.Add(hintTTL)
	}
}

// leaseSince returns the newest update of a lease key the running shared watcher
// delivered, if its revision is at least rev, waiting up to wait for the watcher to
// deliver it. The watcher delivers every update in order, so an update at rev or
// later is the key's state at that revision or after it.
func (h *watchHub) leaseSince(ctx context.Context, key string, rev uint64, wait time.Duration) (lastSeen, bool) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		h.mu.Lock()
		if u, ok := h.last[key]; ok && u.rev >= rev {
			h.mu.Unlock()
			return u, true
		}
		if !h.running {
			h.mu.Unlock()
			return lastSeen{}, false
		}
		ch := make(chan struct{})
		if h.pending == nil {
			h.pending = make(map[string][]chan struct{})
		}
		h.pending[key] = append(h.pending[key], ch)
		h.mu.Unlock()
		select {
		case <-ch: // an update of the key, or the watcher stopped: look again
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		h.mu.Lock()
		chs := h.pending[key]
		for i, c := range chs {
			if c == ch {
				chs = append(chs[:i:i], chs[i+1:]...)
				break
			}
		}
		if len(chs) == 0 {
			delete(h.pending, key)
		} else {
			h.pending[key] = chs
		}
		u, ok := h.last[key]
		h.mu.Unlock()
		return u, ok && u.rev >= rev
	}
}

// written notes a write of key's slot this store made, stored at rev: a finished
// run seen at an older revision is no longer the slot's state.
func (h *watchHub) written(key string, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.finished[key]; ok && f.rev < rev {
		delete(h.finished, key)
	}
	if !h.running || rev <= h.delivered || rev <= h.wrote[key] {
		return // no older update can come any more
	}
	if h.wrote == nil {
		h.wrote = make(map[string]uint64)
	}
	if len(h.wrote) >= maxHeld {
		for _, r := range h.wrote {
			h.floor = max(h.floor, r)
		}
		clear(h.wrote)
	}
	h.wrote[key] = rev
}

// finishedRun returns the finished run record of k's slot that a Finish's purge
// carried to the shared watcher in the last hintTTL, if any, and if nothing newer
// of the slot was delivered or written by this store since.
func (h *watchHub) finishedRun(k runKeys) (machine.Run, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.finished[k.lease]
	if !ok || time.Since(f.at) > hintTTL {
		return machine.Run{}, false
	}
	return f.run, true
}

// untilEnd is the local wait until a little after lease's end by the server's clock.
func (s *Store) untilEnd(v view) time.Duration {
	return v.lease.created.Add(v.lv.lease()).Sub(s.clock.estimate(time.Now())) + watchSlack
}
