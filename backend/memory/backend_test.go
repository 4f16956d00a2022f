package memory_test

import (
	"testing"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/backend/memory"
)

// memoryProcess is one process's view of a shared Backend: a value of its own,
// as the suite asks of the backends its constructor returns, deciding in the one
// shared store (as processes share a server).
type memoryProcess struct{ *memory.Backend }

func TestMemoryBackendConformance(t *testing.T) {
	shared := memory.New()
	backendtest.Run(t, func(t *testing.T) backend.Backend { return &memoryProcess{shared} })
}

func TestMemoryBackendPauses(t *testing.T) {
	shared := memory.New()
	backendtest.RunPauses(t, func(t *testing.T) backend.Backend { return &memoryProcess{shared} })
}

func TestMemoryBackendEntries(t *testing.T) {
	shared := memory.New()
	backendtest.RunEntries(t, func(t *testing.T) backend.Backend { return &memoryProcess{shared} })
}

func TestMemoryBackendCalendars(t *testing.T) {
	shared := memory.New()
	backendtest.RunCalendars(t, func(t *testing.T) backend.Backend { return &memoryProcess{shared} })
}

func TestMemoryBackendMembers(t *testing.T) {
	shared := memory.New()
	backendtest.RunMembers(t, func(t *testing.T) backend.Backend { return &memoryProcess{shared} })
}
