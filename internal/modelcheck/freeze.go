package modelcheck

import (
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// A frozen process (SIGSTOP, a long GC pause, a VM paused) does nothing: its
// clock stands still, its timers and handlers wait, it sends no store call and
// reads no answer. When it thaws its clock jumps to the present and whatever
// waited goes on at once: the scheduler finds its lease gone by its clock and
// cancels its handler. ActFreeze freezes an instance for Dur.

// freezer is what an instance knows of its freezes.
type freezer struct {
	mu sync.Mutex
	// thawed is closed while the process runs; replaced while it is frozen.
	thawed chan struct{}
	// frozenAt is when (by the harness's clock) the current freeze began.
	frozenAt time.Time
	spans    []freezeSpan
}

// freezeSpan is one freeze, since t0, with the record's order of its start.
type freezeSpan struct {
	from, to time.Duration
	fromSeq  uint64
}

func newFreezer() *freezer {
	f := &freezer{thawed: make(chan struct{})}
	close(f.thawed)
	return f
}

// waitThaw waits while the process is frozen, or until it crashes.
func (in *inst) waitThaw() {
	in.fr.mu.Lock()
	ch := in.fr.thawed
	in.fr.mu.Unlock()
	select {
	case <-ch:
	case <-in.crashed:
	}
}

// thawCh returns a channel closed while the process runs.
func (in *inst) thawCh() <-chan struct{} {
	in.fr.mu.Lock()
	defer in.fr.mu.Unlock()
	return in.fr.thawed
}

// frozen reports whether the process is frozen now.
func (in *inst) frozen() bool {
	in.fr.mu.Lock()
	defer in.fr.mu.Unlock()
	select {
	case <-in.fr.thawed:
		return false
	default:
		return true
	}
}

// freeze freezes the process for d (a freeze in progress is not extended).
func (in *inst) freeze(d time.Duration) {
	f := in.fr
	f.mu.Lock()
	select {
	case <-f.thawed:
	default:
		f.mu.Unlock()
		return
	}
	f.thawed = make(chan struct{})
	f.frozenAt = time.Now()
	seq := in.h.rec.frozen(in, d)
	f.spans = append(f.spans, freezeSpan{from: in.h.now(), to: in.h.now() + d, fromSeq: seq})
	ch := f.thawed
	f.mu.Unlock()
	time.AfterFunc(d, func() {
		in.h.rec.instLog(in, "THAW: the process runs again; its clock jumps %v", d)
		close(ch)
	})
}

// freezes are the instance's freezes so far.
func (in *inst) freezes() []freezeSpan {
	in.fr.mu.Lock()
	defer in.fr.mu.Unlock()
	return append([]freezeSpan(nil), in.fr.spans...)
}

// freezeClock is an instance's clock: the harness's shifted by its offset,
// standing still while the process is frozen.
type freezeClock struct {
	in     *inst
	offset time.Duration
}

func (c freezeClock) Now() time.Time {
	f := c.in.fr
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
		return time.Now().Add(c.offset)
	default:
		return f.frozenAt.Add(c.offset)
	}
}

// NewTimer returns a timer that fires after d, or once the process thaws when
// d ends while it is frozen.
func (c freezeClock) NewTimer(d time.Duration) backend.Timer {
	t := &freezeTimer{c: make(chan time.Time, 1), stop: make(chan struct{})}
	go func() {
		real := time.NewTimer(d)
		defer real.Stop()
		select {
		case <-real.C:
		case <-t.stop:
			return
		}
		c.in.fr.mu.Lock()
		thawed := c.in.fr.thawed
		c.in.fr.mu.Unlock()
		select {
		case <-thawed:
		case <-t.stop:
			return
		}
		t.c <- c.Now()
	}()
	return t
}

type freezeTimer struct {
	c    chan time.Time
	once sync.Once
	stop chan struct{}
}

func (t *freezeTimer) C() <-chan time.Time { return t.c }

func (t *freezeTimer) Stop() bool {
	stopped := false
	t.once.Do(func() {
		close(t.stop)
		stopped = len(t.c) == 0
	})
	return stopped
}

// frozenEnd is hr's effective end, with its order, for a handler its
// process's freeze reached: one that ended as the process thawed (within
// CancelSlack of the thaw) did nothing after the freeze began. One that began
// then, its process frozen between the scheduler's last look at its lease and
// its start, did nothing at all (thawed: true). Fencing, not the scheduler,
// guards against such a process (the GC pause of the lease literature).
func (c *checker) frozenEnd(hr *handlerRec) (end time.Duration, seq uint64, ok, thawed bool) {
	for _, s := range hr.in.freezes() {
		if !hr.ended || hr.end < s.from || hr.end > s.to+c.h.w.CancelSlack {
			continue
		}
		switch {
		case hr.start < s.from:
			return s.from, s.fromSeq, true, false
		case hr.start <= s.to+c.h.w.CancelSlack:
			return hr.start, hr.startSeq, true, true
		}
	}
	return 0, 0, false, false
}

// effEnd is hr's end as the rules of leases judge it (frozenEnd), with its
// order.
func (c *checker) effEnd(hr *handlerRec) (time.Duration, uint64) {
	if at, seq, ok, _ := c.frozenEnd(hr); ok {
		return at, seq
	}
	return endOf(hr), endSeq(hr)
}

// thawedOnly reports whether hr began only as its frozen process thawed and
// ended at once: it did nothing (frozenEnd).
func (c *checker) thawedOnly(hr *handlerRec) bool {
	_, _, ok, thawed := c.frozenEnd(hr)
	return ok && thawed
}

// overlap: one handler started before the other ended, in the order the record
// saw them (which also orders what happened at one instant); a frozen
// handler's end as effEnd has it.
func (c *checker) overlap(a, b *handlerRec) bool {
	if c.thawedOnly(a) || c.thawedOnly(b) {
		return false
	}
	_, aEnd := c.effEnd(a)
	_, bEnd := c.effEnd(b)
	return b.startSeq < aEnd && a.startSeq < bEnd
}
