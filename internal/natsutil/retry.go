package natsutil

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Bounds of Backoff.
const (
	backoffBase = 50 * time.Millisecond
	backoffMax  = time.Second
)

// Backoff is the wait before retry n (n >= 1): 50ms doubling up to 1s, each drawn
// at random from its upper half, so that instances that failed together do not ask
// again together.
func Backoff(n int) time.Duration {
	d := backoffMax
	if n < 6 {
		d = min(backoffBase<<max(n-1, 0), backoffMax)
	}
	return d/2 + rand.N(d/2+1)
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

// Retry runs op, each run bounded by attempt, until it returns nil or an error that
// again does not accept, or ctx ends; then it returns the last error wrapped with
// ctx's. It reports how many runs were followed by another.
func Retry(ctx context.Context, attempt time.Duration, again func(error) bool, op func(context.Context) error) (int, error) {
	for n := 0; ; n++ {
		_, err := Attempt(ctx, attempt, func(ctx context.Context) (struct{}, error) { return struct{}{}, op(ctx) })
		if err == nil || !again(err) {
			return n, err
		}
		if serr := Sleep(ctx, Backoff(n+1)); serr != nil {
			return n, fmt.Errorf("no definite answer before the deadline (last: %w): %w", err, serr)
		}
	}
}
