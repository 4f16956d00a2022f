package scheduler

import (
	"context"
	"fmt"
)

// Middleware wraps a job's handler: it returns the handler that runs in its place,
// which usually calls next. Config.Middleware applies a list of them to every job's
// handler, for scheduled and manual runs alike. A plug-in (tracing, logging, a
// limiter) thus sees every attempt without the jobs knowing of it:
//
//	func logRuns(next scheduler.Handler) scheduler.Handler {
//		return func(ctx context.Context, run scheduler.Run) error {
//			err := next(ctx, run)
//			log.Printf("%s attempt %d: %v", run.Job, run.Attempt, err)
//			return err
//		}
//	}
//
// A middleware gets the handler's context, cancelled as the handler's is (see
// Handler). It returns the error the run ends with. The scheduler decides the
// run's status from that error and the context's cause, as for a handler. A panic
// of the handler reaches a middleware as an error matching ErrHandlerPanic. A
// panic of a middleware is recovered like a handler's.
type Middleware func(next Handler) Handler

// wrap applies the scheduler's middleware to h, the first outermost. A panic of
// h is turned into an error (callHandler) before any middleware sees it.
func (s *Scheduler) wrap(name string, h Handler) (Handler, error) {
	if len(s.middleware) == 0 {
		return h, nil
	}
	inner := h
	h = func(ctx context.Context, run Run) error { return s.callHandler(ctx, inner, run) }
	for i := len(s.middleware) - 1; i >= 0; i-- {
		if h = s.middleware[i](h); h == nil {
			return nil, fmt.Errorf("job %q: %w: Config.Middleware[%d] returned a nil handler", name, ErrNilHandler, i)
		}
	}
	return h, nil
}
