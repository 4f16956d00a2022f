package fleet

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// Client defaults.
const (
	// DefaultTimeout bounds a client request whose context has no deadline.
	DefaultTimeout = 5 * time.Second
	// DefaultGatherWindow is how long Client.Jobs collects replicas' answers.
	DefaultGatherWindow = 500 * time.Millisecond
)

// Job is a job a replica declares, as Serve publishes it: the same name and
// schedule as the scheduler's Every or Cron registration.
type Job struct {
	Name string
	// Schedule is the job's schedule, for its words (Schedule.String(), the same as
	// scheduler.JobLimits.Schedule): scheduler.IntervalSchedule{Interval: d} for
	// Every(name, d, ...), the result of scheduler.ParseCron for Cron. May be nil.
	Schedule scheduler.Schedule
}

// Every is the Job of s.Every(name, interval, ...).
func Every(name string, interval time.Duration) Job {
	return Job{Name: name, Schedule: scheduler.IntervalSchedule{Interval: interval}}
}

// Option configures Serve or NewClient. An option that does not apply to the call
// it is given to is an error wrapping ErrInvalidOption.
type Option func(*config) error

type role int

const (
	roleService role = iota
	roleClient
)

type config struct {
	role    role
	prefix  string
	jobs    []Job
	log     *slog.Logger
	timeout time.Duration
	window  time.Duration
}

func newConfig(r role, opts []Option) (*config, error) {
	c := &config{role: r, prefix: DefaultPrefix, timeout: DefaultTimeout, window: DefaultGatherWindow}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *config) only(r role, name string) error {
	if c.role != r {
		return fmt.Errorf("%w: %s applies to %s only", ErrInvalidOption, name, map[role]string{roleService: "Serve", roleClient: "NewClient"}[r])
	}
	return nil
}

// WithPrefix sets the first subject tokens of every endpoint (one or more tokens,
// no wildcards). Defaults to DefaultPrefix. Replicas and clients of one fleet use
// the same prefix; two fleets in one account use different ones.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := validPrefix(prefix); err != nil {
			return err
		}
		c.prefix = prefix
		return nil
	}
}

// WithJobs lists the jobs the replica declares (Serve only): each gets its trigger,
// pause, resume and history endpoints and appears in the jobs reply. The scheduler
// does not list its jobs yet, so the caller passes the same names it registered.
func WithJobs(jobs ...Job) Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithJobs"); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, j := range append(c.jobs, jobs...) {
			if err := scheduler.ValidateJobName(j.Name); err != nil {
				return fmt.Errorf("%w: WithJobs: %w", ErrInvalidOption, err)
			}
			if seen[j.Name] {
				return fmt.Errorf("%w: WithJobs: job %q listed twice", ErrInvalidOption, j.Name)
			}
			seen[j.Name] = true
		}
		c.jobs = append(c.jobs, jobs...)
		return nil
	}
}

// WithLogger sets the logger of the service (Serve only): requests that change
// something (trigger, pause, resume) at info with who asked, failures at warn.
// Defaults to a logger that discards.
func WithLogger(log *slog.Logger) Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithLogger"); err != nil {
			return err
		}
		if log == nil {
			return fmt.Errorf("%w: WithLogger: nil logger", ErrInvalidOption)
		}
		c.log = log
		return nil
	}
}

// WithTimeout bounds each client request whose context has no deadline (NewClient
// only). Defaults to DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(roleClient, "WithTimeout"); err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("%w: WithTimeout: %v is not positive", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithGatherWindow sets how long Client.Jobs collects the replicas' answers
// (NewClient only). Defaults to DefaultGatherWindow. A replica that answers later
// is not listed.
func WithGatherWindow(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(roleClient, "WithGatherWindow"); err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("%w: WithGatherWindow: %v is not positive", ErrInvalidOption, d)
		}
		c.window = d
		return nil
	}
}
