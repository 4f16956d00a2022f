package integration

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// On JetStream with leases, three instances: a job bounded by WithStartAt and
// WithEndAt runs the slots between them once each and no other, and a job At an
// instant runs once, at it.
func TestBoundsAndAtNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	log := newLedger()
	waitSlotBoundary(t, time.Second)
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	end := start.Add(3 * time.Second)
	at := start.Add(1500 * time.Millisecond)
	f := startFleet(t, srv.ClientURL(), func(s *scheduler.Scheduler) error {
		if err := s.Every("bounded", time.Second, log.handler, scheduler.WithStartAt(start), scheduler.WithEndAt(end)); err != nil {
			return err
		}
		return s.At("once", at, log.handler)
	})
	sleepCtx(t, time.Until(end.Add(2*time.Second)))
	stopAll(t, f.scheds)

	log.mu.Lock()
	defer log.mu.Unlock()
	var slots []time.Time
	for ms, runs := range log.runs["bounded"] {
		slots = append(slots, time.UnixMilli(ms).UTC())
		assert.Len(t, runs, 1, "slot %v", time.UnixMilli(ms).UTC())
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	assert.Equal(t, []time.Time{start.UTC(), start.Add(time.Second).UTC(), start.Add(2 * time.Second).UTC()}, slots,
		"the slots from the start until the end, no other")
	require.Len(t, log.runs["once"], 1, "the instant is one slot")
	assert.Len(t, log.runs["once"][at.UnixMilli()], 1, "run once, at the instant")
	hist, err := f.scheds[1].History(ctxT(t, 5*time.Second), "once", 10)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	assert.Equal(t, scheduler.StatusOK, hist[0].Status)
	for _, s := range f.scheds {
		for _, j := range s.Jobs() {
			assert.True(t, j.Next.IsZero(), "%s on %s has no next slot once its schedule ended", j.Job, s.Instance())
		}
	}
}
