package scheduler_test

import (
	"testing"

	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/scheduler/backendtest"
)

func TestMemoryBackendConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) scheduler.Backend { return scheduler.NewMemoryBackend() })
}
