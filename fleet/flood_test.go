package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// slowHistory is a memory backend whose History takes 20ms (a store under load).
type slowHistory struct{ *memory.Backend }

func (b slowHistory) History(ctx context.Context, job string, limit int) ([]scheduler.RunRecord, error) {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.Backend.History(ctx, job, limit)
}

// What a viewer may send cannot keep an operator from pausing: a flood of history
// requests (here 20,000, each read taking 20ms) fills the replica's queue of reads,
// not the one its controls wait in, and the pause of another job is answered.
func TestHistoryFloodDoesNotStarveAPause(t *testing.T) {
	f := startFleet(t, fleetSetup{instances: []string{"A"}, backend: slowHistory{memory.New()}})
	flood := natstest.Dial(t, f.dial)
	subject := f.client.Subject("history", jobReport)
	for range 20000 {
		require.NoError(t, flood.PublishMsg(&nats.Msg{Subject: subject, Reply: "_INBOX.flood.x", Data: []byte(`{"v":1}`)}))
	}
	require.NoError(t, flood.Flush())

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.client.Pause(ctx, jobBackup, fleet.PauseRequest{Reason: "incident", By: "ops"})
	assert.NoError(t, err, "the operator's pause, %v after the flood", time.Since(start).Round(time.Millisecond))
}
