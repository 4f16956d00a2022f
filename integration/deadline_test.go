package integration

import (
	"testing"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/backendtest"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
)

// Deadlines on kvlease, on one server and on a cluster of three with R3.
func TestDeadlinesOnKV(t *testing.T) {
	onR1AndR3(t, func(t *testing.T, n node) {
		backendtest.RunDeadlines(t, func(t *testing.T) backend.Backend {
			j := natstest.JetStream(t, dial(t, n.url))
			store, err := kvlease.New(j, kvlease.WithReplicas(n.replicas))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			b, err := jetstream.NewLeased(j, store, jetstream.WithReplicas(n.replicas))
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	})
}
