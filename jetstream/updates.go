package jetstream

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Another instance may widen a job's stream after this one prepared it (another
// release, other options, catch-up beside instances without leases): claims must
// then be stored for the wider window, or a server restart inside it forgets them.
// Another instance may change its claim mode too (fleetmode.go).
// The server announces every stream update on StreamUpdatedSubject; the backend
// follows those of the streams it caches and reads each updated stream's window
// again, one stream every updatePace.

// StreamUpdatedSubject is the subject on which nats-server announces each stream
// update, the stream's name in place of the wildcard. A replica's user must be
// allowed to subscribe to it (fleet.Permissions' replica role is); without it an
// instance keeps the window it read when it prepared each job.
const StreamUpdatedSubject = "$JS.EVENT.ADVISORY.STREAM.UPDATED.*"

// updatePace spaces the reads of updated streams, so that an upgrade that widens
// every job's stream at once does not flood the JetStream API.
const updatePace = 20 * time.Millisecond

// streamUpdatedPrefix is StreamUpdatedSubject without its wildcard.
const streamUpdatedPrefix = "$JS.EVENT.ADVISORY.STREAM.UPDATED."

// updates follows the stream update advisories for one backend. A reader of the
// updated streams runs while any is pending, so an idle backend holds no goroutine
// of its own.
type updates struct {
	once    sync.Once
	mu      sync.Mutex
	sub     *nats.Subscription
	pending map[string]bool // streams to read again
	reading bool            // a reader runs
	done    chan struct{}   // closed by stop
	wg      sync.WaitGroup
}

// follow subscribes to the update advisories, once. A failed subscription leaves
// the windows as prepared.
func (b *Backend) follow() {
	u := &b.upd
	u.once.Do(func() {
		nc := b.js.Conn()
		if nc == nil || b.closed.Load() {
			return
		}
		u.pending, u.done = map[string]bool{}, make(chan struct{})
		sub, err := nc.Subscribe(StreamUpdatedSubject, func(m *nats.Msg) {
			name := strings.TrimPrefix(m.Subject, streamUpdatedPrefix)
			if b.cachedStream(name) == nil {
				return
			}
			u.mu.Lock()
			defer u.mu.Unlock()
			if u.sub == nil { // stopped
				return
			}
			u.pending[name] = true
			if !u.reading {
				u.reading = true
				u.wg.Add(1)
				go b.rereadUpdated()
			}
		})
		if err != nil {
			b.cfg.log.Warn("jetstream: cannot follow stream updates; each job keeps the duplicate window read when it was prepared", "err", err)
			return
		}
		u.mu.Lock()
		u.sub = sub
		u.mu.Unlock()
	})
}

// rereadUpdated reads the window of each stream announced updated, one every
// updatePace, until none is pending or the backend is closed.
func (b *Backend) rereadUpdated() {
	u := &b.upd
	defer u.wg.Done()
	for {
		u.mu.Lock()
		var name string
		for name = range u.pending {
			break
		}
		if name == "" {
			u.reading = false
			u.mu.Unlock()
			return
		}
		delete(u.pending, name)
		u.mu.Unlock()
		if st := b.cachedStream(name); st != nil {
			b.reread(st)
		}
		select {
		case <-time.After(updatePace):
		case <-u.done:
			u.mu.Lock()
			u.reading = false
			u.mu.Unlock()
			return
		}
	}
}

// reread reads st's stream again and takes its duplicate window and claim
// mode. A failed read keeps those known before.
func (b *Backend) reread(st *jobStream) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.callTimeout)
	defer cancel()
	info, err := st.stream.Info(ctx)
	if err != nil {
		b.cfg.log.Debug("jetstream: read of an updated stream failed; its duplicate window is as read before", "stream", st.stream.CachedInfo().Config.Name, "err", err)
		return
	}
	if w := info.Config.Duplicates; w != st.dupWindow() {
		st.setWindow(w)
		b.cfg.log.Info("jetstream: a job stream's duplicate window changed", "job", st.job, "window", w, "claims stored for", st.ttl())
	}
	if old := st.lastMode(); st.setMode(info.Config.Metadata) {
		b.modeChanged(st, old)
	}
}

// stop ends the following of updates and waits for the reader.
func (u *updates) stop() {
	u.mu.Lock()
	sub := u.sub
	u.sub = nil
	u.mu.Unlock()
	if sub == nil {
		return
	}
	_ = sub.Unsubscribe()
	close(u.done)
	u.wg.Wait()
}
