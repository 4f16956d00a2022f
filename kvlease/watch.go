package kvlease

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
)

// watchSlack is how long after a lease's expected end a watch fires even without
// having seen the server's expiry marker (a safety net: the marker normally arrives
// within milliseconds of the expiry).
const watchSlack = time.Second

// WatchRun returns a channel closed when a new Claim of (job, slot) could decide
// differently: its lease is released, expires (the server's marker), changes holder,
// or ends with the run finished, or the lease comes to carry a cancel request
// (OverlapCancelOther). A heartbeat by the holder does not close it. When no
// lease is live at the start the channel closes at once. It also closes when ctx is
// done or the store is closed.
//
// All watches of a Store share ONE watcher on the bucket's lease keys (one consumer
// on the server however many backups wait), started by the first WatchRun. A waiter
// is registered, then the baseline is taken: the lease as this store's own Claim
// just read it (answering running) when that reading was sent after the shared
// watcher started, else a read from the stream leader. The shared watcher's updates
// count only when newer than the baseline (a watcher's consumer may be served by a
// replica a little behind the leader); every update newer than a reading sent after
// the watcher started reaches the watcher, and the updates it delivered before the
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
	ls, ok := s.mem.takeHint(k, started)
	var run runEntry
	switch {
	case ok:
	case b.direct: // both keys in one request, as the lease key alone would cost
		run, ls, err = s.readBoth(callCtx, b, k)
	default:
		ls, err = s.readLease(callCtx, b, k)
		if err == nil && ls.rec == nil {
			run, err = s.readRun(callCtx, b, k)
		}
	}
	if err != nil {
		s.mem.hub.remove(w)
		return nil, fmt.Errorf("kvlease: watch %s: %w", backendutil.DescribeRun(job, slot), err)
	}
	if ls.rec == nil {
		// No live lease: a claim may decide differently now, unless the slot is
		// stored buffered. A buffered slot's watch fires on any newer write of
		// its lease key (a claim taking it, or its withdrawal, which purges it),
		// whichever key was read first: a claim between the two readings wrote
		// the lease key after the reading of it, or the run record before the
		// reading of that.
		if run.rec == nil || !run.rec.buffered() {
			s.mem.hub.fire(w)
			return w.ch, nil
		}
		stopCtx := context.AfterFunc(ctx, func() { s.mem.hub.fire(w) })
		s.mem.hub.arm(w, ls.rev, "", true, func() { stopCtx() })
		return w.ch, nil
	}
	stopCtx := context.AfterFunc(ctx, func() { s.mem.hub.fire(w) })
	end := time.AfterFunc(s.untilEnd(ls), func() { s.mem.hub.fire(w) })
	s.mem.hub.arm(w, ls.rev, ls.watched(), false, func() { stopCtx(); end.Stop() })
	return w.ch, nil
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
	// carried in the last hintTTL.
	finished map[string]finishedRun
	// pending are the calls of leaseSince waiting for a key's next update.
	pending map[string][]chan struct{}
	nextGC  time.Time
}

type finishedRun struct {
	rec runRecord
	at  time.Time
}

type lastSeen struct {
	lease leaseEntry // the update as the lease key's last message
	at    time.Time
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
		s.watchers.Add(1)
		go func() {
			defer s.watchers.Done()
			h.run(s, kw)
		}()
	}
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
			changed = changed || (u.lease.rev > rev && (anyWrite || u.lease.watched() != token))
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

// run delivers the shared watcher's updates until it stops (Close, or the watcher
// failed); then every waiter fires, and the next WatchRun starts a new watcher.
func (h *watchHub) run(s *Store, kw jetstream.KeyWatcher) {
	defer stopWatcher(kw)
	defer func() {
		h.mu.Lock()
		h.running = false
		for _, chs := range h.pending {
			for _, ch := range chs {
				close(ch)
			}
		}
		h.pending = nil
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
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			h.deliver(e)
		}
	}
}

// deliver fires the waiters of e's key whose lease e ends or replaces.
func (h *watchHub) deliver(e jetstream.KeyValueEntry) {
	next, _ := decodeLease(entryFromKV(e)) // a value that is no lease ends the lease
	holder := next.watched()
	now := time.Now()
	var done *runRecord
	if e.Operation() == jetstream.KeyValuePurge && len(e.Value()) > 0 {
		var rec runRecord
		if json.Unmarshal(e.Value(), &rec) == nil && rec.Token != "" && rec.Attempt >= 1 && rec.State != "" && rec.finished() {
			done = &rec
		}
	}
	h.mu.Lock()
	h.remember(e.Key(), lastSeen{next, now}, now)
	for _, ch := range h.pending[e.Key()] {
		close(ch)
	}
	delete(h.pending, e.Key())
	if done != nil {
		if h.finished == nil {
			h.finished = make(map[string]finishedRun)
		}
		h.finished[e.Key()] = finishedRun{*done, now}
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
	if old, ok := h.last[key]; !ok || u.lease.rev > old.lease.rev {
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
		if u, ok := h.last[key]; ok && u.lease.rev >= rev {
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
		return u, ok && u.lease.rev >= rev
	}
}

// finishedRun returns the finished run record of k's slot that a Finish's purge
// carried to the shared watcher in the last hintTTL, if any.
func (h *watchHub) finishedRun(k runKeys) (*runRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.finished[k.lease]
	if !ok || time.Since(f.at) > hintTTL {
		return nil, false
	}
	return &f.rec, true
}

// untilEnd is the local wait until a little after lease's end by the server's clock.
func (s *Store) untilEnd(lease leaseEntry) time.Duration {
	return lease.expires().Sub(s.clock.estimate(time.Now())) + watchSlack
}
