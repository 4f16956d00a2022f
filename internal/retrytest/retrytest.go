// Package retrytest drives a job's retries end to end on a real backend, for the
// repository's tests. A Probe is a job's handler and a scheduler event hook: it
// fails the first attempts of one slot (the target), records every start of that
// slot and its retry, failure and finish events, and checks what a retried slot
// must show: each attempt once, in order, after its backoff, with a bigger fence
// each time on a backend with leases, one retry event per retry, one final failure
// at most, and one history record per attempt. Only tests import it.
//
//	p := retrytest.New(policy, 2, time.Second)
//	s.Every("job", 5*time.Second, p.Handler, scheduler.WithRetry(policy)) // Config.OnEvent: p.Hook
//	p.Wait(t, 20*time.Second)
//	p.Check(t, history, retrytest.Leased)
package retrytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// ErrAttempt is the error of a failing attempt of the target slot.
var ErrAttempt = errors.New("retrytest: attempt failed")

// Start is one handler start of the target slot.
type Start struct {
	scheduler.Run
	At time.Time // by the process's clock, which every instance of a test shares
}

// Probe is the handler and the event hook of one job under test. Its target is the
// first slot whose attempt 1 starts on time (at most late after the slot): a slot
// caught up late at start-up would leave its retries too little room before the
// next slot. Other slots run ok and are not recorded.
type Probe struct {
	policy scheduler.RetryPolicy
	fail   int
	late   time.Duration

	mu      sync.Mutex
	target  time.Time
	starts  []Start
	events  []scheduler.Event // the target's retry, failed and finished events
	ended   chan struct{}     // closed when the target ended: ok, or failed for good
	onRetry func(scheduler.Event)
}

// New returns a probe for a job retried by policy (without jitter) whose target
// slot fails its first fail attempts.
func New(policy scheduler.RetryPolicy, fail int, late time.Duration) *Probe {
	return &Probe{policy: policy, fail: fail, late: late, ended: make(chan struct{})}
}

// OnFirstRetry sets f, called in the event hook of the instance whose attempt 1 of
// the target failed, once its retry is planned (stored, with leases) and before
// that instance goes on: a test crashes it there. Set it before any scheduler
// starts.
func (p *Probe) OnFirstRetry(f func(scheduler.Event)) { p.onRetry = f }

// Handler is the job's handler.
func (p *Probe) Handler(_ context.Context, r scheduler.Run) error {
	now := time.Now()
	p.mu.Lock()
	if p.target.IsZero() && r.Attempt == 1 && !r.Manual && now.Sub(r.Slot) <= p.late {
		p.target = r.Slot
	}
	mine := !r.Manual && r.Slot.Equal(p.target)
	if mine {
		p.starts = append(p.starts, Start{Run: r, At: now})
	}
	p.mu.Unlock()
	if mine && r.Attempt <= p.fail {
		return fmt.Errorf("%w: attempt %d", ErrAttempt, r.Attempt)
	}
	return nil
}

// Hook is the scheduler's event hook (Config.OnEvent).
func (p *Probe) Hook(e scheduler.Event) {
	switch e.Kind {
	case scheduler.EventRetry, scheduler.EventFailed, scheduler.EventFinished:
	default:
		return
	}
	p.mu.Lock()
	if p.target.IsZero() || !e.Slot.Equal(p.target) || e.Manual {
		p.mu.Unlock()
		return
	}
	p.events = append(p.events, e)
	first := e.Kind == scheduler.EventRetry && e.Attempt == 1
	if e.Kind == scheduler.EventFailed || e.Kind == scheduler.EventFinished && e.Status == scheduler.StatusOK {
		select {
		case <-p.ended:
		default:
			close(p.ended)
		}
	}
	f := p.onRetry
	p.mu.Unlock()
	if first && f != nil {
		f(e)
	}
}

// Wait waits until the target slot ended, ok or failed for good, for at most
// within; it fails the test with the starts so far when it did not.
func (p *Probe) Wait(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-p.ended:
	case <-time.After(within):
		t.Fatalf("the target slot did not end within %v: starts %+v, events %+v", within, p.Starts(), p.Events())
	}
}

// Target is the slot under test, zero before its attempt 1 started.
func (p *Probe) Target() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Starts are the target's handler starts, in order.
func (p *Probe) Starts() []Start {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Start(nil), p.starts...)
}

// Events are the target's retry, failed and finished events, in order.
func (p *Probe) Events() []scheduler.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]scheduler.Event(nil), p.events...)
}

// Mode says what a backend promises of the attempts after the first.
type Mode int

const (
	// Leased: each attempt is a claim of its own, by any instance, with a bigger
	// fence, naming the attempt before it.
	Leased Mode = iota
	// InProcess: the winner of the slot runs every attempt (a backend without
	// leases).
	InProcess
)

// Check checks, once every instance stopped, the target's starts and events and
// hist, the job's history (newest first, as History returns it): the attempts the
// policy and the probe's failures call for, each once, in order, after its backoff
// and before the next slot of a job every interval apart (0 for none); a retry
// event for each retried attempt, a final failure only when every attempt failed,
// from the instance of the last attempt; one history record per attempt, with its
// instance and status, none lost.
func (p *Probe) Check(t testing.TB, hist []scheduler.RunRecord, mode Mode, interval time.Duration) {
	t.Helper()
	starts, events, target := p.Starts(), p.Events(), p.Target()
	want := min(p.fail+1, p.policy.Attempts)
	ok := p.fail < p.policy.Attempts
	require.Len(t, starts, want, "attempts of the slot at %s: %+v", target.Format(time.TimeOnly+".000"), starts)
	for i, s := range starts {
		assert.Equal(t, i+1, s.Attempt, "attempts run once each, in order: %+v", starts)
		if interval > 0 {
			assert.True(t, s.At.Before(target.Add(interval)), "attempt %d started at %s, after the next slot", s.Attempt, s.At.Format(time.TimeOnly+".000"))
		}
		if i == 0 {
			continue
		}
		prev := starts[i-1]
		assert.GreaterOrEqual(t, s.At.Sub(prev.At), p.backoff(i), "attempt %d comes after its backoff", s.Attempt)
		switch mode {
		case Leased:
			assert.Greater(t, s.Fence, prev.Fence, "attempt %d has a bigger fence", s.Attempt)
			assert.Equal(t, prev.Instance, s.Previous, "attempt %d names the attempt before it", s.Attempt)
		case InProcess:
			assert.Equal(t, starts[0].Instance, s.Instance, "without leases the winner runs attempt %d", s.Attempt)
		}
	}

	var retries, failed []scheduler.Event
	for _, e := range events {
		switch e.Kind {
		case scheduler.EventRetry:
			retries = append(retries, e)
		case scheduler.EventFailed:
			failed = append(failed, e)
		}
	}
	if assert.Len(t, retries, want-1, "one retry event per retried attempt: %+v", retries) {
		for i, e := range retries {
			assert.Equal(t, i+1, e.Attempt)
			assert.Equal(t, starts[i].Instance, e.Instance, "the retry event comes from the instance whose attempt failed")
		}
	}
	if ok {
		assert.Empty(t, failed, "the slot ended ok: no final failure")
	} else if assert.Len(t, failed, 1, "one final failure, after the last attempt") {
		assert.Equal(t, want, failed[0].Attempt)
		assert.Equal(t, starts[want-1].Instance, failed[0].Instance)
	}

	var recs []scheduler.RunRecord
	for _, r := range hist {
		if r.Slot.Equal(target) && !r.Manual {
			recs = append(recs, r)
		}
	}
	require.Len(t, recs, want, "one history record per attempt: %+v", recs)
	for i, r := range recs {
		n := want - i // newest first
		assert.Equal(t, n, r.Attempt, "history, newest first: %+v", recs)
		wantStatus := scheduler.StatusError
		if ok && n == want {
			wantStatus = scheduler.StatusOK
		}
		assert.Equal(t, wantStatus, r.Status, "attempt %d's record (none recorded lost)", n)
		assert.Equal(t, starts[n-1].Instance, r.Instance, "attempt %d's record names its instance", n)
		if r.Status == scheduler.StatusError {
			assert.Contains(t, r.Error, ErrAttempt.Error())
		}
	}
}

// backoff is the policy's delay before attempt n+1 (no jitter).
func (p *Probe) backoff(n int) time.Duration {
	d := p.policy.Backoff
	if d == 0 {
		d = scheduler.DefaultRetryBackoff
	}
	for i := 1; i < n; i++ {
		d *= 2
	}
	if p.policy.MaxBackoff > 0 {
		d = min(d, p.policy.MaxBackoff)
	}
	return d
}
