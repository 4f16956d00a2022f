package jetstream

import (
	"testing"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
)

// TestConformance runs the claim conformance suite against one embedded server.
func TestConformance(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := New(js)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestConformanceR3 runs the suite against R3 streams in a 3-node cluster (claims from
// several connections at once are in TestClaimRaceAcrossNodes).
func TestConformanceR3(t *testing.T) {
	c := natstest.Cluster(t, embedded.ClusterOptions{Nodes: 3})
	js := natstest.JetStream(t, natstest.Dial(t, c.Connect))
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := New(js, WithReplicas(3))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestConformanceLeased runs the suite against a LeasedBackend: leases change how
// the scheduler claims, not what the backend's own methods promise.
func TestConformanceLeased(t *testing.T) {
	s := natstest.Server(t, embedded.Options{})
	js := natstest.JetStream(t, natstest.Conn(t, s))
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := NewLeased(js, memory.NewRunStore(backend.SystemClock{}))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
