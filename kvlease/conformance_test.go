package kvlease_test

import (
	"context"
	"testing"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/kvlease"
)

func TestConformanceSingleServer(t *testing.T) {
	t.Parallel()
	newStore(t, singleJS(t), kvlease.WithBucket("conformance_r1")) // create the bucket once
	backendtest.RunLeases(t, func(t *testing.T) backend.RunStore {
		return newStore(t, singleJS(t), kvlease.WithBucket("conformance_r1"))
	})
}

func TestConformanceR3(t *testing.T) {
	t.Parallel()
	opts := []kvlease.Option{kvlease.WithBucket("conformance_r3"), kvlease.WithReplicas(3)}
	newStore(t, clusterJS(t), opts...)
	backendtest.RunLeases(t, func(t *testing.T) backend.RunStore {
		return newStore(t, clusterJS(t), opts...)
	})
}

// TestConformanceAtomicBatches runs the suite on stores that write a claim's and
// a finish's two keys in one atomic batch (WithAtomicBatches).
func TestConformanceAtomicBatches(t *testing.T) {
	t.Parallel()
	opts := []kvlease.Option{kvlease.WithBucket("conformance_atomic"), kvlease.WithAtomicBatches()}
	newStore(t, singleJS(t), opts...)
	backendtest.RunLeases(t, func(t *testing.T) backend.RunStore {
		return newStore(t, singleJS(t), opts...)
	})
}

func TestPausesConformance(t *testing.T) {
	t.Parallel()
	backendtest.RunPauses(t, func(t *testing.T) backend.Backend {
		s := newStore(t, singleJS(t), kvlease.WithBucket("kvlease_pauses"))
		return pauseBackend{memory.New(), s}
	})
}

// pauseBackend is a backend whose pauses are a kvlease store's (each value its own
// store on its own connection, all on one bucket): RunPauses needs a
// backend.Backend, and kvlease is a RunStore.
type pauseBackend struct {
	backend.Backend
	s *kvlease.Store
}

func (p pauseBackend) Init(ctx context.Context) error { return p.s.Init(ctx) }
func (p pauseBackend) SetPause(ctx context.Context, x backend.Pause) error {
	return p.s.SetPause(ctx, x)
}
func (p pauseBackend) ClearPause(ctx context.Context, job string) error {
	return p.s.ClearPause(ctx, job)
}
func (p pauseBackend) Pauses(ctx context.Context) ([]backend.Pause, error) {
	return p.s.Pauses(ctx)
}
func (p pauseBackend) WatchPauses(ctx context.Context, fn func([]backend.Pause)) error {
	return p.s.WatchPauses(ctx, fn)
}
