package kvlease

import (
	"context"
	"errors"
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
	return lo.Add(hi.Sub(lo) / 2)
}

// localTime converts a server timestamp to the local clock, by the estimate.
func (s *Store) localTime(server time.Time) time.Time {
	now := time.Now()
	return now.Add(server.Sub(s.clock.estimate(now)))
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

// nextFence is the fence of a new holder of a run: the server's time in nanoseconds
// (the low end of this store's estimate, read afresh when it has none), and always
// above the previous holder's fence. So fences grow per run across takeovers, and
// stay above the fences handed out before a bucket was recreated or a memory bucket
// lost its contents in a restart (stream sequences, which would start again at 1),
// as long as the server's clock does not go back by more than the time since.
func (s *Store) nextFence(ctx context.Context, b *bucket, prev *runRecord) (uint64, error) {
	lo, _, ok := s.clock.bounds(time.Now())
	if !ok {
		if err := s.refreshClock(ctx, b); err != nil {
			return 0, err
		}
		lo = s.clock.estimate(time.Now())
	}
	fence := uint64(max(lo.UnixNano(), 1))
	if prev != nil && fence <= prev.Fence {
		fence = prev.Fence + 1
	}
	return fence, nil
}

// pastDeadline reports whether the server's clock is past deadline. It decides from
// the cached estimate of the server's clock when that is unambiguous, and reads the
// server's time (StreamInfo.TimeStamp) otherwise; when the deadline falls within the
// reading's round trip, the middle of the round trip decides.
func (s *Store) pastDeadline(ctx context.Context, b *bucket, deadline time.Time) (bool, error) {
	if deadline.IsZero() {
		return false, nil
	}
	for sampled := false; ; sampled = true {
		lo, hi, ok := s.clock.bounds(time.Now())
		if ok {
			switch {
			case lo.After(deadline):
				return true, nil
			case !hi.After(deadline):
				return false, nil
			case sampled:
				return lo.Add(hi.Sub(lo) / 2).After(deadline), nil
			}
		} else if sampled {
			return false, errors.New("kvlease: the server sent no timestamp")
		}
		if err := s.refreshClock(ctx, b); err != nil {
			return false, err
		}
	}
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
