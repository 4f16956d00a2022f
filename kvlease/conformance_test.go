package kvlease_test

import (
	"testing"

	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/scheduler/backendtest"
)

func TestConformanceSingleServer(t *testing.T) {
	t.Parallel()
	newStore(t, singleJS(t), kvlease.WithBucket("conformance_r1")) // create the bucket once
	backendtest.RunLeases(t, func(t *testing.T) scheduler.RunStore {
		return newStore(t, singleJS(t), kvlease.WithBucket("conformance_r1"))
	})
}

func TestConformanceR3(t *testing.T) {
	t.Parallel()
	opts := []kvlease.Option{kvlease.WithBucket("conformance_r3"), kvlease.WithReplicas(3)}
	newStore(t, clusterJS(t), opts...)
	backendtest.RunLeases(t, func(t *testing.T) scheduler.RunStore {
		return newStore(t, clusterJS(t), opts...)
	})
}
