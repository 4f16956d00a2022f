package scheduler

import (
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Job defaults. Each can be changed per job with an option.
const (
	// DefaultMaxLate is how late after its slot a job may still start, unless the job
	// says otherwise. A job whose slots are closer together uses the gap between them
	// (the interval of an Every job, the shortest gap of a cron job).
	DefaultMaxLate = time.Minute
	// DefaultLease is the lease of a job on a backend with leases. The winner
	// heartbeats every lease/3; a backup takes over about one lease after the winner
	// dies.
	DefaultLease = 30 * time.Second
	// DefaultHistorySize is how many results a backend keeps per job.
	DefaultHistorySize = 100
	// DefaultCatchUpWindow bounds catch-up when the job gives no window.
	DefaultCatchUpWindow = time.Hour
	// DefaultMaxManualRuns is how many manual runs (RunNow) of one job may be in
	// progress at once on one instance.
	DefaultMaxManualRuns = 4
)

// checkDurations refuses a duration above MaxDuration.
func (c *jobConfig) checkDurations() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"jitter", c.jitter}, {"max lateness", c.maxLate}, {"timeout", c.timeout}, {"lease", c.lease},
		{"catch-up window", c.catchUpWindow}, {"dedupe window", c.window}, {"history TTL", c.historyTTL},
		{"spread window", c.spreadWindow}, {"deadline", c.deadline},
	} {
		if d.v > MaxDuration {
			return fmt.Errorf("%w: %s %v is above MaxDuration (%v)", ErrInvalidOption, d.name, d.v, MaxDuration)
		}
	}
	if c.retry != nil && (c.retry.Backoff > MaxDuration || c.retry.MaxBackoff > MaxDuration) {
		return fmt.Errorf("%w: retry backoff %v or max backoff %v is above MaxDuration (%v)", ErrInvalidOption, c.retry.Backoff, c.retry.MaxBackoff, MaxDuration)
	}
	return nil
}

// JobOption changes one job's settings at registration. An invalid value is an error
// wrapping ErrInvalidOption, returned by Every or Cron.
type JobOption func(*jobConfig) error

type jobConfig struct {
	jitter        time.Duration
	maxLate       time.Duration
	maxLateSet    bool
	timeout       time.Duration
	lease         time.Duration
	overlap       OverlapPolicy
	catchUp       CatchUpPolicy
	catchUpWindow time.Duration
	// spreadWindow moves each slot by an offset within it (WithSpread).
	spreadWindow time.Duration
	// catchUpConcurrency is how many missed slots catch-up runs at once.
	catchUpConcurrency int
	window             time.Duration
	historySize        int
	historyTTL         time.Duration
	location           *time.Location
	maxManual          int
	// start and end bound the job's slots (WithStartAt, WithEndAt); zero: open.
	start, end time.Time
	// retry is the job's retry policy (WithRetry); nil: no retries.
	retry *RetryPolicy
	// pauseAfter pauses the job after that many failed slots in a row; 0: never.
	pauseAfter int
	// bufferCap is how many slots OverlapBufferAll keeps buffered (WithBufferCap);
	// 0: backend.DefaultBufferCap.
	bufferCap int
	// concurrency is how many of the job's slots may run at once under
	// OverlapSkip or a buffer policy (WithConcurrency); 0: one.
	concurrency int
	// maxRuns is the job's fleet-wide run limit (WithMaxRuns); 0: none.
	maxRuns int
	// deadline is how long after its slot a slot must have ended ok
	// (WithDeadline); 0: none.
	deadline time.Duration
	// deadlineGap is the schedule's shortest gap, for a job with a deadline
	// (checkDeadline); MaxDuration for a one-time schedule.
	deadlineGap time.Duration
	// dst is the cron schedule's DST policy (WithDST); dstSet says it was given.
	dst    DSTPolicy
	dstSet bool
	// calendars name the calendars whose days the job's slots are excluded on
	// (WithCalendars).
	calendars []string
}

func optErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// WithJitter delays each claim by a random duration in [0, d), spreading load. It must
// be below the job's max lateness.
func WithJitter(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d < 0 {
			return optErr("jitter %v is negative", d)
		}
		c.jitter = d
		return nil
	}
}

// WithMaxLate sets how late after its slot a run may still start. Past it the slot is
// not claimed and counts as late. Defaults to DefaultMaxLate, or the gap between slots
// when that is shorter.
func WithMaxLate(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d <= 0 {
			return optErr("max lateness %v must be positive", d)
		}
		c.maxLate, c.maxLateSet = d, true
		return nil
	}
}

// WithTimeout cancels the handler's context after d. Zero (the default) means no
// timeout.
func WithTimeout(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d < 0 {
			return optErr("timeout %v is negative", d)
		}
		c.timeout = d
		return nil
	}
}

// WithLease sets the lease of each run on a backend with leases. Defaults to
// DefaultLease; at least MinLease.
func WithLease(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d < MinLease {
			return optErr("lease %v is below the minimum %v", d, MinLease)
		}
		c.lease = d
		return nil
	}
}

// WithOverlap sets the overlap policy: OverlapAllow (the default), OverlapSkip,
// OverlapCancelOther, OverlapBufferOne or OverlapBufferAll. All but the first
// need a backend with leases, OverlapCancelOther one whose run store implements it
// (backend.OverlapCanceller), the buffer policies one that stores buffered slots
// (backend.OverlapBufferer).
//
// With OverlapCancelOther a slot due while an earlier one runs, on any instance,
// asks that run to end. Its holder learns it at once through its watch of the run
// (backend.LeaseWatcher), else at its next heartbeat (within a third of the
// lease). It then cancels the handler's context with a cause matching
// ErrOverlapCancelled. The new slot starts once the old run finished, or its lease
// ended. A handler that ignores its context keeps its run, and the new slot, still
// unstarted at its max lateness, is recorded late. A slot due while a later one
// runs (a catch-up slot) is skipped. A slot that falls while the job is paused
// asks nothing (it is recorded paused), and a backfilled slot keeps out of
// another run's way as with OverlapSkip.
//
// With OverlapBufferOne a slot due while another slot of the job runs (on any
// instance, its retries included) is stored buffered. It runs once that run has
// ended, whenever that is: a buffered slot is not late. One slot at most is
// buffered; a further slot due meanwhile is skipped. OverlapBufferAll buffers up
// to WithBufferCap slots (DefaultBufferCap by default), run oldest first.
// A buffered slot survives the instances that buffered it: every instance
// declaring the job claims it once the run ends, one runs it. A slot that falls
// while the job is paused is recorded paused, not buffered, and a backfilled slot
// keeps out of another run's way as with OverlapSkip.
func WithOverlap(p OverlapPolicy) JobOption {
	return func(c *jobConfig) error {
		if p < OverlapAllow || p > OverlapBufferAll {
			return optErr("unknown overlap policy %d", int(p))
		}
		c.overlap = p
		return nil
	}
}

// WithBufferCap sets how many slots of the job OverlapBufferAll keeps buffered at
// once, across the fleet: 1 to MaxBufferCap. A slot due while that many
// are buffered is skipped. It needs OverlapBufferAll. A store may hold fewer:
// kvlease keeps about 4,000 to 6,000, by the length of the instance names
// (docs/backends.md).
func WithBufferCap(n int) JobOption {
	return func(c *jobConfig) error {
		if n < 1 || n > MaxBufferCap {
			return optErr("buffer cap %d must be 1 to %d", n, MaxBufferCap)
		}
		c.bufferCap = n
		return nil
	}
}

// WithConcurrency lets up to n of the job's slots run at once across the
// fleet under OverlapSkip or a buffer policy (WithOverlap), instead of one: a
// slot that finds n others still running is skipped, or buffered and run once
// fewer are, oldest slot first. Each schedule entry of the job has its own n.
// n is 1 to backend.MaxConcurrency; above 1 it needs OverlapSkip,
// OverlapBufferOne or OverlapBufferAll, and a run store that applies it
// (backend.ConcurrencyCapper).
func WithConcurrency(n int) JobOption {
	return func(c *jobConfig) error {
		if n < 1 || n > backend.MaxConcurrency {
			return optErr("concurrency %d must be 1 to %d", n, backend.MaxConcurrency)
		}
		c.concurrency = n
		return nil
	}
}

// WithMaxRuns runs at most n scheduled slots of the job, counted fleet-wide by the
// run store (backend.RunCounter), not per process: every instance declaring the job
// claims against one count. Each slot won first counts, catch-up slots too. So does
// a slot won just before a pause reached its instance and so recorded paused
// unrun; only CatchUpAll runs it once the pause ends, so otherwise it uses up a
// run. So does a slot stored buffered (OverlapBufferOne, OverlapBufferAll), which
// the fleet decided to run. Retries, takeovers, manual runs (RunNow) and Backfill
// do not count, nor do slots skipped, late or excluded, nor slots recorded paused
// as they fell (catch-up that runs one later counts it then). Once n are counted every later slot is recorded StatusLimit, a stored
// decision like skipped or late, and the job's loop ends on every instance
// (EventLimitReached, once per instance; Jobs shows no next slot). RunNow still
// runs an ended job, as a manual run, and Backfill still runs its past slots. A
// store may count a slot that never ran, after a crash (kvlease counts before it
// creates the run), never fewer than ran. A bigger n declared later lets slots run
// again.
//
// n must be at least 1, and the job needs a backend with leases whose run store
// counts runs (backend.RunCounter). With a buffer policy, the run store must
// count a buffered slot as it stores it (backend.BufferedRunCounter: not kvlease).
func WithMaxRuns(n int) JobOption {
	return func(c *jobConfig) error {
		if n < 1 {
			return optErr("max runs %d must be at least 1", n)
		}
		c.maxRuns = n
		return nil
	}
}

// WithCatchUp sets what runs at Start for slots missed while no instance was up:
// CatchUpNone (the default), CatchUpLatest or CatchUpAll within window (zero window:
// DefaultCatchUpWindow). Needs a backend with leases. Missed slots run oldest first,
// one at a time unless WithCatchUpConcurrency says otherwise; a slot stored skipped
// or late never runs. CatchUpLatest takes the newest slot no calendar excludes. At most MaxCatchUpSlots run per Start; older ones in the
// window are recorded late.
func WithCatchUp(p CatchUpPolicy, window time.Duration) JobOption {
	return func(c *jobConfig) error {
		if p != CatchUpNone && p != CatchUpLatest && p != CatchUpAll {
			return optErr("unknown catch-up policy %d", int(p))
		}
		if window < 0 {
			return optErr("catch-up window %v is negative", window)
		}
		if window == 0 {
			window = DefaultCatchUpWindow
		}
		c.catchUp, c.catchUpWindow = p, window
		return nil
	}
}

// WithCatchUpConcurrency sets how many missed slots catch-up claims and runs at a
// time, oldest first. Defaults to 1: one after the other, so that catch-up after a
// long outage never starts a burst of handlers. At most MaxCatchUpSlots.
func WithCatchUpConcurrency(n int) JobOption {
	return func(c *jobConfig) error {
		if n < 1 || n > MaxCatchUpSlots {
			return optErr("catch-up concurrency %d is not between 1 and %d", n, MaxCatchUpSlots)
		}
		c.catchUpConcurrency = n
		return nil
	}
}

// WithDedupeWindow asks the backend for a dedupe window of d for this job, on
// backends that have per-job windows. Zero means the backend's default.
func WithDedupeWindow(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d < 0 {
			return optErr("dedupe window %v is negative", d)
		}
		c.window = d
		return nil
	}
}

// WithHistory sets how many results the backend keeps for the job (size > 0;
// DefaultHistorySize by default) and, when ttl > 0, for how long.
func WithHistory(size int, ttl time.Duration) JobOption {
	return func(c *jobConfig) error {
		if size <= 0 {
			return optErr("history size %d must be positive", size)
		}
		if ttl < 0 {
			return optErr("history TTL %v is negative", ttl)
		}
		c.historySize, c.historyTTL = size, ttl
		return nil
	}
}

// WithLocation sets the time zone a Cron expression is read in. Defaults to UTC,
// never the host's zone. An expression may name its zone itself with a CRON_TZ=
// (or TZ=) prefix; given both, the two must give the same zone name, or Cron
// returns an error wrapping ErrInvalidSchedule. It has no effect on an Every job,
// whose slots are aligned to the Unix epoch.
func WithLocation(loc *time.Location) JobOption {
	return func(c *jobConfig) error {
		if loc == nil {
			return optErr("nil location")
		}
		c.location = loc
		return nil
	}
}

// WithMaxManualRuns bounds how many manual runs (RunNow, a trigger) of the job may
// be in progress at once on this instance; RunNow beyond it returns an error
// matching ErrTooManyManualRuns and runs nothing. Defaults to DefaultMaxManualRuns.
// A job that forbids overlap (OverlapSkip) also refuses a manual run while any run
// of it is in progress, on any instance (ErrJobBusy).
func WithMaxManualRuns(n int) JobOption {
	return func(c *jobConfig) error {
		if n < 1 {
			return optErr("max manual runs %d must be at least 1", n)
		}
		c.maxManual = n
		return nil
	}
}
