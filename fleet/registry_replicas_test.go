package fleet_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// On a cluster, WithRegistryReplicas places the registry's bucket on that many
// servers, so that it outlives one of them; a client only reads it.
func TestRegistryReplicas(t *testing.T) {
	c := natstest.Cluster(t, embedded.ClusterOptions{})
	nc := natstest.Dial(t, c.Connect)
	s, err := scheduler.New(scheduler.Config{Backend: memory.New()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	svc, err := fleet.Serve(ctx, nc, s, fleet.WithRegistryReplicas(3))
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	str, err := js.Stream(ctx, "KV_"+fleet.DefaultRegistryBucket)
	require.NoError(t, err)
	assert.Equal(t, 3, str.CachedInfo().Config.Replicas)
}
