package metrics

import (
	"fmt"
	"math"
	"regexp"
	"slices"
)

// DefaultNamespace prefixes every metric name: anarchon_runs_total.
const DefaultNamespace = "anarchon"

// Default histogram buckets, in seconds. New copies them; changing these variables
// after New has no effect on an existing Metrics.
var (
	// DefaultRunDurationBuckets span 10ms to 1h: jobs range from quick
	// reconciliations to long reports.
	DefaultRunDurationBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	// DefaultSlotLagBuckets span 1ms to 5min. Lag includes the job's jitter, so a
	// job with WithJitter(d) spreads its lag over [0, d) by design.
	DefaultSlotLagBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
)

// Option configures New and Wire. An invalid value is an error wrapping
// ErrInvalidOption (which matches scheduler.ErrInvalidOption); nothing is silently
// replaced. A nil Option is skipped.
type Option func(*config) error

type config struct {
	namespace       string
	durationBuckets []float64
	lagBuckets      []float64
}

func defaultConfig() config {
	return config{
		namespace:       DefaultNamespace,
		durationBuckets: slices.Clone(DefaultRunDurationBuckets),
		lagBuckets:      slices.Clone(DefaultSlotLagBuckets),
	}
}

var namespaceRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// WithNamespace sets the prefix of every metric name. It must be a valid Prometheus
// metric name without colons (colons are for recording rules). Defaults to
// DefaultNamespace.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !namespaceRE.MatchString(ns) {
			return fmt.Errorf("%w: WithNamespace(%q): must match %s", ErrInvalidOption, ns, namespaceRE)
		}
		c.namespace = ns
		return nil
	}
}

// WithRunDurationBuckets sets the upper bounds, in seconds, of the
// run_duration_seconds histogram: at least one, strictly increasing, not NaN.
// Defaults to DefaultRunDurationBuckets.
func WithRunDurationBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := checkBuckets(b); err != nil {
			return fmt.Errorf("%w: WithRunDurationBuckets: %w", ErrInvalidOption, err)
		}
		c.durationBuckets = slices.Clone(b)
		return nil
	}
}

// WithSlotLagBuckets sets the upper bounds, in seconds, of the slot_lag_seconds
// histogram: at least one, strictly increasing, not NaN. Defaults to
// DefaultSlotLagBuckets.
func WithSlotLagBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := checkBuckets(b); err != nil {
			return fmt.Errorf("%w: WithSlotLagBuckets: %w", ErrInvalidOption, err)
		}
		c.lagBuckets = slices.Clone(b)
		return nil
	}
}

func checkBuckets(b []float64) error {
	if len(b) == 0 {
		return fmt.Errorf("no buckets")
	}
	for i, v := range b {
		if math.IsNaN(v) {
			return fmt.Errorf("bucket %d is NaN", i)
		}
		if i > 0 && v <= b[i-1] {
			return fmt.Errorf("buckets must be strictly increasing: %v follows %v", v, b[i-1])
		}
	}
	return nil
}
