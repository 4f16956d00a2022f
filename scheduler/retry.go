package scheduler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Retry limits.
const (
	// MaxRetryAttempts bounds RetryPolicy.Attempts.
	MaxRetryAttempts = 100
	// DefaultRetryBackoff is the first retry's delay when RetryPolicy gives none.
	DefaultRetryBackoff = time.Second
)

// RetryPolicy says how a failed slot of a job is tried again (WithRetry). A slot's
// attempt that ends error or timeout (a panic is an error) is retried after a
// backoff. The backoff doubles each time up to MaxBackoff. Retries stop once
// Attempts attempts have run, the handler marks its error NoRetry, or Retryable
// says no.
//
// A retry never starts after the job's next slot is due: a retry whose time
// would come after it is not made, and the slot ends with its last failure. A
// backfilled slot's retries are bounded by the policy alone, its next slot being
// past. A retry may start up to the job's max lateness after its time, as a slot
// may.
//
// With leases (a backend whose run store is a backend.Retrier) the failed attempt
// is stored with its retry and its lease released. Any instance may claim the next
// attempt at its time, so a retry survives the death of the instance that failed.
// Without one, the instance that ran the slot retries it in its own process, and a
// retry dies with it. Manual runs (RunNow) are not retried.
type RetryPolicy struct {
	// Attempts is how many attempts a slot may have in all, the first and any
	// takeover's included (an attempt the store granted too late to run, and
	// released unrun, counts too): 2 to MaxRetryAttempts.
	Attempts int
	// Backoff is the delay before the first retry; zero means DefaultRetryBackoff.
	Backoff time.Duration
	// MaxBackoff caps the delay as it doubles; zero means no cap beyond the next slot.
	MaxBackoff time.Duration
	// Jitter adds up to this fraction of each delay at random, in [0, 1].
	Jitter float64
	// Retryable reports whether a failure is retried; nil retries every one. It is
	// given the handler's error, or the timeout's cause (ErrHandlerTimeout).
	Retryable func(error) bool
}

// ErrNoRetry matches an error a handler wrapped with NoRetry.
var ErrNoRetry = errors.New("scheduler: not to be retried")

// NoRetry wraps err so that its run is not retried, whatever the job's RetryPolicy.
// The run's error text is err's.
func NoRetry(err error) error {
	if err == nil {
		return nil
	}
	return noRetryError{err}
}

type noRetryError struct{ err error }

func (e noRetryError) Error() string        { return e.err.Error() }
func (e noRetryError) Unwrap() error        { return e.err }
func (e noRetryError) Is(target error) bool { return target == ErrNoRetry }

// WithRetry retries the job's failed slots as p says. Registration refuses a policy
// whose first retry could never come before the next slot.
func WithRetry(p RetryPolicy) JobOption {
	return func(c *jobConfig) error {
		switch {
		case p.Attempts < 2 || p.Attempts > MaxRetryAttempts:
			return optErr("retry attempts %d is not between 2 and %d (the first attempt included)", p.Attempts, MaxRetryAttempts)
		case p.Backoff < 0:
			return optErr("retry backoff %v is negative", p.Backoff)
		case p.MaxBackoff < 0:
			return optErr("retry max backoff %v is negative", p.MaxBackoff)
		case p.Jitter < 0 || p.Jitter > 1:
			return optErr("retry jitter %v is not between 0 and 1", p.Jitter)
		}
		if p.Backoff == 0 {
			p.Backoff = DefaultRetryBackoff
		}
		if p.MaxBackoff != 0 && p.MaxBackoff < p.Backoff {
			return optErr("retry max backoff %v is below the backoff %v", p.MaxBackoff, p.Backoff)
		}
		c.retry = &p
		return nil
	}
}

// checkRetry refuses a retry policy whose first retry, with its jitter, comes at or
// after the next slot of a job whose slots are gap apart.
// limits is p in numbers, its defaults filled in; nil for none.
func (p *RetryPolicy) limits() *backend.RetryLimits {
	if p == nil {
		return nil
	}
	backoff := p.Backoff
	if backoff == 0 {
		backoff = DefaultRetryBackoff
	}
	return &backend.RetryLimits{Attempts: p.Attempts, Backoff: backoff, MaxBackoff: p.MaxBackoff, Jitter: p.Jitter,
		Filtered: p.Retryable != nil}
}

func (p *RetryPolicy) check(gap time.Duration) error {
	if p == nil || gap <= 0 {
		return nil
	}
	if first := p.maxDelay(1); first >= gap {
		return optErr("the first retry comes up to %v after a failure, not before the next slot (%v apart): no retry could run (lower the backoff or its jitter)", first, gap)
	}
	return nil
}

// delay is the wait before the retry that follows failed attempt n (1 for the first).
func (p *RetryPolicy) delay(n int) time.Duration {
	d := p.base(n)
	if p.Jitter > 0 {
		d = satAdd(d, rand.Float64()*p.Jitter*float64(d))
	}
	return d
}

// maxDelay is the longest delay can return.
func (p *RetryPolicy) maxDelay(n int) time.Duration {
	d := p.base(n)
	return satAdd(d, p.Jitter*float64(d))
}

// satAdd is d plus j nanoseconds (j >= 0), saturating at the longest Duration: a
// backoff near it with its jitter must not wrap around to a negative delay.
func satAdd(d time.Duration, j float64) time.Duration {
	if j >= float64(math.MaxInt64-d) {
		return math.MaxInt64
	}
	return d + time.Duration(j)
}

func (p *RetryPolicy) base(n int) time.Duration {
	d := p.Backoff
	for i := 1; i < n; i++ {
		if p.MaxBackoff > 0 && d >= p.MaxBackoff || d > time.Duration(1<<62)/2 {
			break
		}
		d *= 2
	}
	if p.MaxBackoff > 0 {
		d = min(d, p.MaxBackoff)
	}
	return d
}

// failedOnItsOwn reports whether a run that ended with st failed on its own (its
// handler's error or timeout), not by a lease, a stop or another attempt. Only
// such failures are retried, logged at warn and counted as a slot's failure.
func failedOnItsOwn(st Status) bool { return st == StatusError || st == StatusTimeout }

// retryable reports whether an attempt that ended with status, its handler having
// returned err (or its context ended by cause), is retried by p.
func (p *RetryPolicy) retryable(status Status, err, cause error) bool {
	if p == nil || !failedOnItsOwn(status) || errors.Is(err, ErrNoRetry) {
		return false
	}
	if p.Retryable == nil {
		return true
	}
	if err == nil {
		err = cause
	}
	return p.Retryable(err)
}

// retryPlan is the retry that follows a failed attempt: when and for how long it
// may start, by this instance's clock.
type retryPlan struct {
	at     time.Time
	within time.Duration
}

// window is what is left at now of p's start window, for the store; nil once it
// has passed (or without a plan).
func (p *retryPlan) window(now time.Time) *backend.RetryWindow {
	if p == nil {
		return nil
	}
	by := p.at.Add(p.within)
	if !now.Before(by) {
		return nil
	}
	delay := max(p.at.Sub(now), 0)
	return &backend.RetryWindow{Delay: delay, Within: by.Sub(now.Add(delay))}
}

// planRetry returns the retry of a's failed attempt, if the job's policy gives one.
// A retry starts before the job's next slot. The retries of a backfilled slot,
// whose next slot is past, are bounded by the policy alone. Why says why not, when
// there is none although the failure was retryable.
func (s *Scheduler) planRetry(a *attempt, status Status, err, cause error) (plan *retryPlan, ok bool, why string) {
	j := a.j
	p := j.cfg.retry
	if a.man != nil || !p.retryable(status, err, cause) {
		return nil, false, ""
	}
	n := max(a.res.Attempt, 1)
	if n >= p.Attempts {
		return nil, false, fmt.Sprintf("no retry left: attempt %d of %d", n, p.Attempts)
	}
	now := s.clock.Now()
	plan = &retryPlan{at: now.Add(p.delay(n)), within: j.cfg.maxLate}
	if next := j.sched.Next(a.rc.Slot); !next.IsZero() && a.bf == nil && !a.res.Backfill {
		left := next.Sub(plan.at)
		if left <= 0 {
			return nil, false, fmt.Sprintf("no retry: its time %s is not before the next slot %s", plan.at.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339))
		}
		plan.within = min(plan.within, left)
	}
	return plan, true, ""
}
