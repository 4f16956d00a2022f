package kvlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// serverClock estimates the server's clock from its own readings, so a claim can
// judge a deadline by the server's time without asking for it every time.
//
// A sample is a server timestamp (StreamInfo.TimeStamp) taken between two local
// readings, sent and recv. The server's time at a later local time now then lies in
// [ts + (now-recv), ts + (now-sent)], widened by a drift allowance, because local
// durations come from the monotonic clock and clocks run at nearly the same rate.
// A sample is used for clockSampleTTL, then taken again.
type serverClock struct {
	mu         sync.Mutex
	ok         bool
	ts         time.Time
	sent, recv time.Time
	// last is the latest estimate given: estimates never go back.
	last time.Time
}

const (
	clockSampleTTL = 10 * time.Second
	// clockDrift is the allowance per elapsed second (1000 ppm, well above NTP's
	// 500 ppm slew limit), plus clockSlack for rounding.
	clockDrift = time.Millisecond
	clockSlack = time.Millisecond
)

// observe records the server time ts read between local times sent and recv.
func (c *serverClock) observe(ts, sent, recv time.Time) {
	if ts.IsZero() {
		return
	}
	c.mu.Lock()
	c.ok, c.ts, c.sent, c.recv = true, ts, sent, recv
	c.mu.Unlock()
}

// bounds returns an interval holding the server's time at local time now, or
// ok=false when there is no fresh sample.
func (c *serverClock) bounds(now time.Time) (lo, hi time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	age := now.Sub(c.sent)
	if !c.ok || age < 0 || now.Sub(c.recv) > clockSampleTTL {
		return time.Time{}, time.Time{}, false
	}
	drift := time.Duration(age.Seconds()*float64(clockDrift)) + clockSlack
	return c.ts.Add(now.Sub(c.recv) - drift), c.ts.Add(age + drift), true
}

// estimate returns the server's time at now, best guess: the middle of bounds, or
// now itself without a sample.
func (c *serverClock) estimate(now time.Time) time.Time {
	lo, hi, ok := c.bounds(now)
	if !ok {
		return now
	}
	e := lo.Add(hi.Sub(lo) / 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Before(c.last) {
		return c.last
	}
	c.last = e
	return e
}

// now is the store's clock: the estimate of the server's time, read afresh
// when the last reading is too old to use.
func (s *Store) now(ctx context.Context, b *bucket) (time.Time, error) {
	if _, _, ok := s.clock.bounds(time.Now()); !ok {
		if err := s.refreshClock(ctx, b); err != nil {
			return time.Time{}, err
		}
	}
	return s.clock.estimate(time.Now()), nil
}

// sampleClock reads the server's time, with a stream information request that opts
// may narrow (a subject filter) to serve the caller too.
func (s *Store) sampleClock(ctx context.Context, b *bucket, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	var sent time.Time
	err := s.attempt(ctx, func(ctx context.Context) (err error) {
		sent = time.Now()
		info, err = b.stream.Info(ctx, opts...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kvlease: stream info: %w", err)
	}
	s.clock.observe(info.TimeStamp, sent, time.Now())
	return info, nil
}

// clockCall is a reading of the server's time in flight, shared by every claim
// that needs one meanwhile (so a busy store sends one request, not one per claim).
type clockCall struct {
	done chan struct{}
	err  error
}

// refreshClock reads the server's time, or waits for the reading already in flight.
func (s *Store) refreshClock(ctx context.Context, b *bucket) error {
	s.mu.Lock()
	if c := s.clockCall; c != nil {
		s.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &clockCall{done: make(chan struct{})}
	s.clockCall = c
	s.mu.Unlock()
	_, c.err = s.sampleClock(ctx, b)
	s.mu.Lock()
	s.clockCall = nil
	s.mu.Unlock()
	close(c.done)
	return c.err
}
