package natsutil

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff is the wait between retries: Base before the first, doubling up to Max,
// each drawn at random from the upper half of its bound so that instances that
// failed together do not ask again together.
type Backoff struct {
	Base, Max time.Duration
}

// Backoffs of the packages that share this one, named by what they wait for.
var (
	// SetupBackoff is for a request that got no answer from a cluster that is
	// electing its leaders or a server coming back: 50ms doubling to 1s.
	SetupBackoff = Backoff{Base: 50 * time.Millisecond, Max: time.Second}
	// ClaimBackoff is for a claim that is still undecided, mostly the same message
	// id in flight on a replicated stream (10158), which the stream settles within
	// milliseconds: 5ms doubling to 500ms.
	ClaimBackoff = Backoff{Base: 5 * time.Millisecond, Max: 500 * time.Millisecond}
	// ContentionBackoff is for a compare-and-set lost to a concurrent writer of the
	// same key: the winner is done in about a round trip, so 2ms doubling to 40ms.
	ContentionBackoff = Backoff{Base: 2 * time.Millisecond, Max: 40 * time.Millisecond}
)

// Delay is the wait before retry n (n >= 1).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return d/2 + rand.N(d/2+1)
}

// Wait sleeps Delay(n), or until ctx ends, and then returns ctx's error.
func (b Backoff) Wait(ctx context.Context, n int) error { return Sleep(ctx, b.Delay(n)) }

// Retry runs op, each run bounded by attempt (0: ctx alone), until it returns nil
// or an error that again does not accept, or ctx ends; then it returns the last
// error wrapped with ctx's (or as it is, when it is ctx's). It waits Delay(n) before
// retry n, and reports how many runs were followed by another.
func (b Backoff) Retry(ctx context.Context, attempt time.Duration, again func(error) bool, op func(context.Context) error) (int, error) {
	for n := 0; ; n++ {
		_, err := Attempt(ctx, attempt, func(ctx context.Context) (struct{}, error) { return struct{}{}, op(ctx) })
		if err == nil || !again(err) {
			return n, err
		}
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return n, err // ctx's own end: nothing to add to it
		}
		if serr := b.Wait(ctx, n+1); serr != nil {
			return n, fmt.Errorf("no definite answer before the deadline (last: %w): %w", err, serr)
		}
	}
}

// Retry is SetupBackoff.Retry.
func Retry(ctx context.Context, attempt time.Duration, again func(error) bool, op func(context.Context) error) (int, error) {
	return SetupBackoff.Retry(ctx, attempt, again, op)
}

// Sleep waits d, or until ctx ends, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Attempt runs op with a context bounded by attempt (0: ctx alone).
func Attempt[T any](ctx context.Context, attempt time.Duration, op func(context.Context) (T, error)) (T, error) {
	if attempt <= 0 {
		return op(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	return op(actx)
}
