package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend/machine"
)

// listenReadyWait bounds how long a first watch waits for the dialect's listener
// to be listening before it relies on polling alone.
const listenReadyWait = 5 * time.Second

// hub wakes a backend's watchers: on its own writes at once, on other replicas'
// writes through the dialect's notifications (Notify/Listen), and on a poll.
type hub struct {
	b *Backend

	mu       sync.Mutex
	runs     map[runKey]map[chan struct{}]struct{}
	topics   map[string]map[chan struct{}]struct{} // by payload: topicPauses, topicEntries, topicCalendars
	started  bool
	ready    chan struct{} // closed while the listener listens; replaced when it fails
	isReady  bool
	stop     context.CancelFunc
	done     chan struct{} // closed when the listener goroutine ended
	closed   chan struct{} // closed by Close: every watch ends
	isClosed bool
}

// The payloads of a change of the pauses, the schedule entries and the
// calendars; a run's is "r:<slot>:<job>".
const (
	topicPauses    = "p"
	topicEntries   = "e"
	topicCalendars = "c"
)

type runKey struct {
	job  string
	slot int64
}

func newHub(b *Backend) *hub {
	return &hub{
		b:      b,
		runs:   map[runKey]map[chan struct{}]struct{}{},
		topics: map[string]map[chan struct{}]struct{}{topicPauses: {}, topicEntries: {}, topicCalendars: {}},
		ready:  make(chan struct{}),
		closed: make(chan struct{}),
	}
}

// wake signals ch without blocking (its buffer of one holds a pending wake).
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// subscribeRun returns a channel woken when (job, slot) may have changed, and the
// function that ends the subscription.
func (h *hub) subscribeRun(ctx context.Context, k runKey) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.runs[k] == nil {
		h.runs[k] = map[chan struct{}]struct{}{}
	}
	h.runs[k][ch] = struct{}{}
	h.mu.Unlock()
	h.listen(ctx)
	return ch, func() {
		h.mu.Lock()
		delete(h.runs[k], ch)
		if len(h.runs[k]) == 0 {
			delete(h.runs, k)
		}
		h.mu.Unlock()
	}
}

// subscribe returns a channel woken when what topic names may have changed, and
// the function that ends the subscription.
func (h *hub) subscribe(ctx context.Context, topic string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.topics[topic][ch] = struct{}{}
	h.mu.Unlock()
	h.listen(ctx)
	return ch, func() {
		h.mu.Lock()
		delete(h.topics[topic], ch)
		h.mu.Unlock()
	}
}

// listen starts the dialect's listener on first use and waits (bounded by ctx and
// listenReadyWait) until it listens, so that a write after the watch started is
// not missed. Without a listener it does nothing: watchers poll.
func (h *hub) listen(ctx context.Context) {
	if h.b.dialect.Listen == nil {
		return
	}
	h.mu.Lock()
	if !h.started && !h.isClosed {
		h.started = true
		lctx, stop := context.WithCancel(context.Background())
		h.stop, h.done = stop, make(chan struct{})
		go h.listenLoop(lctx)
	}
	ready := h.ready
	h.mu.Unlock()
	t := time.NewTimer(listenReadyWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-ctx.Done():
	case <-t.C:
	case <-h.closed:
	}
}

// listenLoop keeps the listener up until the hub is closed. Whenever it (re)starts
// listening every watcher is woken: a change may have been missed meanwhile. While
// it is down, a new watch waits for it (bounded by listenReadyWait), so that a write
// right after the watch started is not missed.
func (h *hub) listenLoop(ctx context.Context) {
	defer close(h.done)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := h.b.dialect.Listen(ctx, h.b.db, func() {
			attempt = 0
			h.mu.Lock()
			if !h.isReady {
				h.isReady = true
				close(h.ready)
			}
			h.mu.Unlock()
			h.wakeAll()
		}, h.deliver)
		if ctx.Err() != nil {
			return
		}
		_ = err // the listener failed (a restarted server): watchers re-read, then listen again
		h.mu.Lock()
		if h.isReady {
			h.isReady = false
			h.ready = make(chan struct{})
		}
		h.mu.Unlock()
		h.wakeAll()
		t := time.NewTimer(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.runs {
		for ch := range subs {
			wake(ch)
		}
	}
	for _, subs := range h.topics {
		for ch := range subs {
			wake(ch)
		}
	}
}

// deliver wakes the watchers a payload names: "r:<slot>:<job>" or a topic.
func (h *hub) deliver(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if subs, ok := h.topics[payload]; ok {
		for ch := range subs {
			wake(ch)
		}
		return
	}
	rest, ok := strings.CutPrefix(payload, "r:")
	if !ok {
		return
	}
	slotText, job, ok := strings.Cut(rest, ":")
	slot, err := strconv.ParseInt(slotText, 10, 64)
	if !ok || err != nil {
		return
	}
	for ch := range h.runs[runKey{job, slot}] {
		wake(ch)
	}
}

// changed tells watchers of (job, slot) that it changed: this process's at once,
// other replicas' through the dialect's Notify (best effort: they poll too).
func (h *hub) changed(ctx context.Context, job string, slot int64) {
	h.notify(ctx, "r:"+strconv.FormatInt(slot, 10)+":"+job)
}

func (h *hub) pausesChanged(ctx context.Context) { h.notify(ctx, topicPauses) }

func (h *hub) notify(ctx context.Context, payload string) {
	h.deliver(payload)
	if h.b.dialect.Notify != "" && len(payload) < 8000 {
		_, _ = h.b.db.ExecContext(ctx, h.b.q(0, h.b.dialect.Notify), payload)
	}
}

// close stops the listener and ends every watch.
func (h *hub) close() {
	h.mu.Lock()
	if h.isClosed {
		h.mu.Unlock()
		return
	}
	h.isClosed = true
	close(h.closed)
	stop, done := h.stop, h.done
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// WatchRun returns a channel closed when (job, slot)'s run may answer a claim
// otherwise. That is when its live lease ends (a timer on the database's
// clock), it changes holder or phase, or a cancel request is stored on it. A
// buffered slot's closes once it is claimed or withdrawn. Other replicas'
// writes reach it by the dialect's notifications or by polling. When the run
// is neither live nor buffered now, the channel is already closed. It is also
// closed when ctx is done, when the backend is closed, and when a read fails.
func (s *RunStore) WatchRun(ctx context.Context, job string, slot time.Time) (<-chan struct{}, error) {
	if err := s.b.Init(ctx); err != nil {
		return nil, err
	}
	k := runKey{job, slot.UnixMilli()}
	sub, unsubscribe := s.b.hub.subscribeRun(ctx, k)
	rctx, cancel := s.b.callCtx(ctx)
	r, now, err := s.read(rctx, k)
	cancel()
	if err != nil {
		unsubscribe()
		return nil, fmt.Errorf("sqlbackend: watch %s: %w", describe(job, slot), err)
	}
	out := make(chan struct{})
	if !waits(r, now) {
		unsubscribe()
		close(out)
		return out, nil
	}
	go func() {
		defer close(out)
		defer unsubscribe()
		s.watch(ctx, k, r, now, sub)
	}()
	return out, nil
}

// waits reports whether a watch of r waits at now: r's lease is live, or r is
// buffered.
func waits(r machine.Run, now time.Time) bool {
	a, ok := r.Active(now)
	return ok && (a.Live || a.Buffered)
}

// watch returns once the run changes from was (read at now), as WatchRun says;
// sub wakes it on a write.
func (s *RunStore) watch(ctx context.Context, k runKey, was machine.Run, now time.Time, sub chan struct{}) {
	r := was
	for {
		wait := s.b.opts.poll
		if r.Live(now) {
			wait = min(r.Expires.Sub(now), wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.b.hub.closed:
			t.Stop()
			return
		case <-sub:
		case <-t.C:
		}
		t.Stop()
		rctx, cancel := s.b.callCtx(ctx)
		var err error
		r, now, err = s.read(rctx, k)
		cancel()
		if err != nil || !waits(r, now) || r.Token != was.Token || r.Phase != was.Phase || (r.Cancel == nil) != (was.Cancel == nil) {
			return
		}
	}
}

// read returns the stored run of k (pending when there is none) and the
// database's now.
func (s *RunStore) read(ctx context.Context, k runKey) (machine.Run, time.Time, error) {
	var (
		r   row
		now int64
	)
	err := s.b.db.QueryRowContext(ctx, s.b.q(0, `SELECT {now}, `+runColumns+` FROM {p}runs WHERE job = ? AND slot = ?`), k.job, k.slot).
		Scan(append([]any{&now}, r.dest()...)...)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return machine.Run{}, time.Time{}, err
	}
	run, _ := r.run()
	return run, timeOf(now), nil
}
