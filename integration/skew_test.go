package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// Instances whose clocks are offset from each other by up to half the max lateness
// still run each slot exactly once: the slot's identity comes from the schedule, not
// from the local clock.
func TestClockSkew(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	const job, interval, maxLate = "skew", time.Second, 800 * time.Millisecond
	log := newLedger()
	offsets := []time.Duration{-maxLate / 2, 0, maxLate / 2}
	var scheds []*scheduler.Scheduler
	for i, off := range offsets {
		s := newSched(t, plainBackend(t, dial(t, srv.ClientURL())), fmt.Sprintf("skew%+v", off), scheduler.OffsetClock{Offset: off})
		assert.NoError(t, s.Every(job, interval, log.handler, scheduler.WithMaxLate(maxLate)))
		assert.NoError(t, s.Start(ctxT(t, 10*time.Second)), "instance %d", i)
		scheds = append(scheds, s)
	}
	start := time.Now()
	sleepCtx(t, 6*time.Second)
	stopAll(t, scheds)
	end := time.Now()
	assert.Empty(t, log.duplicates(job))
	c := log.count(job, interval, start.Add(maxLate), end.Add(-interval-maxLate))
	assert.Zero(t, c.dups)
	assert.Zero(t, c.missed, "%v", c)
	t.Logf("clock skew ±%v: %v", maxLate/2, c)
}
