package anarchontest

import (
	"sync"
	"testing/synctest"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Advance lets d of a synctest bubble's time pass, then waits until every
// goroutine of the bubble is blocked: what was due by then has happened. Call
// it from the test's goroutine inside synctest.Test.
func Advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// AdvanceTo is Advance to the instant t; only the waiting when t has passed.
func AdvanceTo(t time.Time) {
	Advance(time.Until(t))
}

// freezer is what a process knows of its freezes.
type freezer struct {
	mu sync.Mutex
	// thawed is closed while the process runs; replaced while it is frozen.
	thawed chan struct{}
	// at is when, by the fleet's clock, the freeze began; until when it ends.
	at, until time.Time
	// end is closed to end the freeze early.
	end chan struct{}
}

func (f *freezer) init() {
	f.thawed = make(chan struct{})
	close(f.thawed)
}

// frozenAt reports whether the process is frozen, and since when.
func (f *freezer) frozenAt() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
		return time.Time{}, false
	default:
		return f.at, true
	}
}

func (f *freezer) thawedCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.thawed
}

// waitThaw waits while the process is frozen, unless it is killed.
func (p *proc) waitThaw() {
	select {
	case <-p.fr.thawedCh():
	case <-p.killCtx.Done():
	}
}

// freeze freezes the process for d of the fleet's time.
func (p *proc) freeze(d time.Duration) {
	if d <= 0 || p.dead() || p.isStopped() {
		return
	}
	clock := p.r.f.clock
	f := &p.fr
	f.mu.Lock()
	defer f.mu.Unlock()
	now := clock.Now()
	until := now.Add(d)
	select {
	case <-f.thawed:
	default: // frozen already: the later end holds
		if until.After(f.until) {
			f.until = until
		}
		return
	}
	f.thawed, f.end = make(chan struct{}), make(chan struct{})
	f.at, f.until = now, until
	thawed, end := f.thawed, f.end
	go func() {
		defer close(thawed)
		for {
			f.mu.Lock()
			wait := f.until.Sub(clock.Now())
			f.mu.Unlock()
			if wait <= 0 {
				return
			}
			t := clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-end:
				t.Stop()
				return
			}
		}
	}()
}

// thaw ends a freeze now.
func (p *proc) thaw() {
	f := &p.fr
	f.mu.Lock()
	end, thawed := f.end, f.thawed
	f.end = nil
	f.mu.Unlock()
	if end != nil {
		close(end)
		<-thawed
	}
}

// procClock is a process's clock: the fleet's, offset by its replica's skew,
// standing still while the process is frozen.
type procClock struct{ p *proc }

func (c procClock) Now() time.Time {
	skew := c.p.r.skewNow()
	if at, frozen := c.p.fr.frozenAt(); frozen {
		return at.Add(skew)
	}
	return c.p.r.f.clock.Now().Add(skew)
}

// NewTimer returns a timer that fires after d of the fleet's time, or once the
// process thaws when d ends while it is frozen.
func (c procClock) NewTimer(d time.Duration) backend.Timer {
	t := &procTimer{c: make(chan time.Time, 1), stop: make(chan struct{})}
	base := c.p.r.f.clock.NewTimer(d)
	go func() {
		select {
		case <-base.C():
		case <-t.stop:
			base.Stop()
			return
		}
		select {
		case <-c.p.fr.thawedCh():
		case <-c.p.killCtx.Done():
		case <-t.stop:
			return
		}
		t.fire(c.Now())
	}()
	return t
}

type procTimer struct {
	c    chan time.Time
	stop chan struct{}

	mu    sync.Mutex
	ended bool // fired or stopped
}

func (t *procTimer) C() <-chan time.Time { return t.c }

func (t *procTimer) fire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ended {
		t.ended = true
		t.c <- now
	}
}

// Stop reports whether it stopped the timer before it fired.
func (t *procTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return false
	}
	t.ended = true
	close(t.stop)
	return true
}
