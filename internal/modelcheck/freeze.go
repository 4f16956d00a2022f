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

// frozenEnd is hr's effective end, with its order: a handler of a process
// frozen while it ran that ended as the process thawed (within CancelSlack)
// did nothing after the freeze began, which is then its end.
func (c *checker) frozenEnd(hr *handlerRec) (time.Duration, uint64, bool) {
	for _, s := range hr.in.freezes() {
		if hr.ended && hr.start < s.from && hr.end > s.from && hr.end <= s.to+c.h.w.CancelSlack {
			return s.from, s.fromSeq, true
		}
	}
	return 0, 0, false
}

// effEnd is hr's end as the rules of leases judge it (frozenEnd), with its
// order.
func (c *checker) effEnd(hr *handlerRec) (time.Duration, uint64) {
	if at, seq, ok := c.frozenEnd(hr); ok {
		return at, seq
	}
	return endOf(hr), endSeq(hr)
}

// overlap: one handler started before the other ended, in the order the record
// saw them (which also orders what happened at one instant); a frozen
// handler's end as effEnd has it.
func (c *checker) overlap(a, b *handlerRec) bool {
	_, aEnd := c.effEnd(a)
	_, bEnd := c.effEnd(b)
	return b.startSeq < aEnd && a.startSeq < bEnd
}
