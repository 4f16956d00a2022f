package metrics_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/metrics"
	"github.com/anarchon/anarchon/scheduler"
)

func TestNewRejectsInvalidOptions(t *testing.T) {
	cases := []struct {
		name string
		opt  metrics.Option
		want string // in the error message
	}{
		{"empty namespace", metrics.WithNamespace(""), "WithNamespace"},
		{"namespace with dash", metrics.WithNamespace("my-app"), "WithNamespace"},
		{"namespace with colon", metrics.WithNamespace("my:app"), "WithNamespace"},
		{"namespace starting with digit", metrics.WithNamespace("1app"), "WithNamespace"},
		{"no duration buckets", metrics.WithRunDurationBuckets(), "WithRunDurationBuckets"},
		{"decreasing duration buckets", metrics.WithRunDurationBuckets(1, 0.5), "WithRunDurationBuckets"},
		{"repeated lag bucket", metrics.WithSlotLagBuckets(1, 1), "WithSlotLagBuckets"},
		{"NaN lag bucket", metrics.WithSlotLagBuckets(0.1, math.NaN()), "WithSlotLagBuckets"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := metrics.New(tc.opt)
			require.Error(t, err)
			assert.ErrorIs(t, err, metrics.ErrInvalidOption)
			assert.ErrorIs(t, err, scheduler.ErrInvalidOption, "one sentinel for every package's invalid options")
			assert.Contains(t, err.Error(), "metrics: invalid option: "+tc.want)
			assert.Nil(t, m)

			m, err = metrics.Wire(prometheus.NewRegistry(), nil, tc.opt)
			assert.ErrorIs(t, err, metrics.ErrInvalidOption)
			assert.ErrorIs(t, err, scheduler.ErrInvalidOption)
			assert.Nil(t, m)
		})
	}
}

func TestOptionsApply(t *testing.T) {
	m, err := metrics.New(
		metrics.WithNamespace("billing"),
		metrics.WithRunDurationBuckets(1, 2),
		metrics.WithSlotLagBuckets(0.5, math.Inf(1)),
		nil, // ignored
	)
	require.NoError(t, err)
	m.OnEvent(finished("job", "ok", false, 1500e6))
	err = testutil.CollectAndCompare(m, strings.NewReader(`
# HELP billing_run_duration_seconds How long handlers ran on this instance, scheduled and manual runs.
# TYPE billing_run_duration_seconds histogram
billing_run_duration_seconds_bucket{job_name="job",le="1"} 0
billing_run_duration_seconds_bucket{job_name="job",le="2"} 1
billing_run_duration_seconds_bucket{job_name="job",le="+Inf"} 1
billing_run_duration_seconds_sum{job_name="job"} 1.5
billing_run_duration_seconds_count{job_name="job"} 1
`), "billing_run_duration_seconds")
	assert.NoError(t, err)
	assert.Equal(t, 2, testutil.CollectAndCount(m, "billing_runs_total"), "the run's ok series and the error series initialised at zero")
}

func TestRegister(t *testing.T) {
	t.Run("nil registerer", func(t *testing.T) {
		m, err := metrics.New()
		require.NoError(t, err)
		err = m.Register(nil)
		assert.ErrorIs(t, err, metrics.ErrInvalidRegisterer)
		assert.Contains(t, err.Error(), "nil")

		m, err = metrics.Wire(nil)
		assert.ErrorIs(t, err, metrics.ErrInvalidRegisterer)
		assert.Nil(t, m)
	})
	t.Run("twice", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := metrics.Wire(reg)
		require.NoError(t, err)
		err = m.Register(reg)
		require.ErrorIs(t, err, metrics.ErrAlreadyRegistered)
		are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
		require.True(t, ok, "the prometheus error stays reachable: %v", err)
		assert.Same(t, m, are.ExistingCollector)
	})
	t.Run("two with the same namespace", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		_, err := metrics.Wire(reg)
		require.NoError(t, err)
		_, err = metrics.Wire(reg)
		assert.ErrorIs(t, err, metrics.ErrAlreadyRegistered)
		_, err = metrics.Wire(reg, metrics.WithNamespace("other"))
		assert.NoError(t, err, "another namespace does not collide")
	})
	t.Run("two schedulers told apart by a wrapping registerer", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		a, err := metrics.Wire(prometheus.WrapRegistererWith(prometheus.Labels{"scheduler": "a"}, reg))
		require.NoError(t, err)
		b, err := metrics.Wire(prometheus.WrapRegistererWith(prometheus.Labels{"scheduler": "b"}, reg))
		require.NoError(t, err)
		a.OnEvent(finished("job", "ok", false, 0))
		b.OnEvent(finished("job", "error", false, 0))
		assert.Equal(t, 1.0, value(t, reg, "anarchon_runs_total", "scheduler", "a", "job_name", "job", "status", "ok", "manual", "false"))
		assert.Equal(t, 1.0, value(t, reg, "anarchon_runs_total", "scheduler", "b", "job_name", "job", "status", "error", "manual", "false"))
	})
	t.Run("all or nothing", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		clash := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "anarchon_runs_total", Help: "not ours"}, []string{"queue"})
		require.NoError(t, reg.Register(clash))
		m, err := metrics.New()
		require.NoError(t, err)
		err = m.Register(reg)
		require.Error(t, err)
		assert.NotErrorIs(t, err, metrics.ErrAlreadyRegistered, "a clash with a foreign metric is not a repeat registration")
		assert.Contains(t, err.Error(), "anarchon_runs_total")

		// Nothing was left registered: anarchon_claims_total, described before the
		// clashing anarchon_runs_total, is still free.
		claims := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "anarchon_claims_total", Help: "someone else's"}, []string{"job_name", "outcome"})
		assert.NoError(t, reg.Register(claims))
	})
}
