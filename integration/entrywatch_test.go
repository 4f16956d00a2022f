package integration

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// A server restarts on its store and port. Each replica then follows the
// changes of entries at once. An every-second entry removed by one of them runs
// no slot more than about a second after the removal, on either. (nats.go's
// ordered consumer alone noticed its loss only at its 10 s activity check.)
func TestEntriesFollowedAtOnceAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.Server(t, embedded.Options{StoreDir: dir, Listen: "127.0.0.1:0"})
	u, err := url.Parse(srv.ClientURL())
	require.NoError(t, err)
	n := node{url: srv.ClientURL(), replicas: 1}
	const job = "tenants"
	var mu sync.Mutex
	var starts []time.Time
	handler := func(_ context.Context, r scheduler.Run) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	}
	var scheds []*scheduler.Scheduler
	for _, id := range []string{"a", "b"} {
		s, _ := n.open(t, id)
		require.NoError(t, s.Declare(job, handler, scheduler.WithLease(2*time.Second), scheduler.WithJitter(0)))
		require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
		require.NoError(t, s.EntriesLoaded(ctxT(t, 15*time.Second)))
		scheds = append(scheds, s)
	}
	remover, follower := scheds[0], scheds[1]
	_, err = remover.AddEntry(ctxT(t, 5*time.Second), job, "x", scheduler.EntrySpec{Every: time.Second})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		followed, _ := follower.EntryCounts()
		mu.Lock()
		defer mu.Unlock()
		return followed == 1 && len(starts) >= 2
	}, 15*time.Second, 10*time.Millisecond, "the follower follows x, and x runs")

	srv.Shutdown()
	natstest.Server(t, embedded.Options{StoreDir: dir, Listen: u.Host})
	require.Eventually(t, func() bool {
		err := remover.RemoveEntry(ctxT(t, 2*time.Second), job, "x", 0)
		return err == nil || errors.Is(err, scheduler.ErrEntryNotFound)
	}, 20*time.Second, 20*time.Millisecond, "x is removed once the server is back")
	removed := time.Now()
	seen := make([]time.Duration, len(scheds))
	require.Eventually(t, func() bool {
		all := true
		for i, s := range scheds {
			if followed, _ := s.EntryCounts(); followed == 0 && seen[i] == 0 {
				seen[i] = time.Since(removed)
			}
			all = all && seen[i] > 0
		}
		return all
	}, 30*time.Second, 10*time.Millisecond, "both replicas see the removal")
	stopAll(t, scheds)

	t.Logf("the remover's view followed the removal %v after it, the other replica's %v", seen[0].Round(time.Millisecond), seen[1].Round(time.Millisecond))
	for i, s := range scheds {
		assert.Less(t, seen[i], 1500*time.Millisecond, "%s's view follows the removal at once", s.Instance())
	}
	mu.Lock()
	defer mu.Unlock()
	var late []time.Duration
	for _, at := range starts {
		if d := at.Sub(removed); d > 1500*time.Millisecond {
			late = append(late, d.Round(time.Millisecond))
		}
	}
	assert.Empty(t, late, "x ran slots this long after its removal")
}
