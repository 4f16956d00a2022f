package scheduler_test

import (
	"testing"

	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/scheduler/backendtest"
)

// memoryProcess is one process's view of a shared MemoryBackend: a value of its own,
// as the suite asks of the backends its constructor returns, deciding in the one
// shared store (as processes share a server).
type memoryProcess struct{ *scheduler.MemoryBackend }

func TestMemoryBackendConformance(t *testing.T) {
	shared := scheduler.NewMemoryBackend()
	backendtest.Run(t, func(t *testing.T) scheduler.Backend { return &memoryProcess{shared} })
}

func TestMemoryBackendPauses(t *testing.T) {
	shared := scheduler.NewMemoryBackend()
	backendtest.RunPauses(t, func(t *testing.T) scheduler.Backend { return &memoryProcess{shared} })
}
