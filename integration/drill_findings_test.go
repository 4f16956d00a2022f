package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// Found by integration/drill/faults.sh. A cancel request leaves the holder's
// lease as it was: a dead holder's run is ended by its backup one lease after
// its claim, whenever the next slot asked.
func TestCancelRequestKeepsTheDeadHoldersLeaseNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	store, err := kvlease.New(natstest.JetStream(t, dial(t, srv.ClientURL())))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	require.NoError(t, store.Init(ctxT(t, 10*time.Second)))

	const lease = 2 * time.Second
	slot := time.Now().Truncate(time.Second)
	claim := func(s time.Time, token string) backend.RunClaim {
		return backend.RunClaim{Job: "refresh", Slot: s, Token: token, Instance: "i-" + token, Lease: lease,
			Deadline: time.Now().Add(time.Hour), Keep: time.Hour, Overlap: backend.OverlapCancelOther}
	}
	claimed := time.Now()
	res, err := store.Claim(ctxT(t, 5*time.Second), claim(slot, "dead"))
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeWon, res.Outcome)
	// The holder dies: no heartbeat, no settle. Half a lease later the next slot asks.
	sleepCtx(t, lease/2)
	res, err = store.Claim(ctxT(t, 5*time.Second), claim(slot.Add(8*time.Second), "next"))
	require.NoError(t, err)
	require.Equal(t, backend.OutcomeRunning, res.Outcome, "it waits for the run it asked to end")
	// A backup of the dead slot claims it until its lease has ended: it ends it cancelled.
	backup := claim(slot, "backup")
	for res.Outcome == backend.OutcomeRunning && time.Since(claimed) < 3*lease {
		res, err = store.Claim(ctxT(t, 5*time.Second), backup)
		require.NoError(t, err)
		sleepCtx(t, 20*time.Millisecond)
	}
	ended := time.Since(claimed)
	t.Logf("lease %v, asked %v after the claim: the backup ended the dead run %v after its claim (%s %s)",
		lease, lease/2, ended.Round(time.Millisecond), res.Outcome, res.Status)
	assert.Equal(t, backend.OutcomeDone, res.Outcome)
	assert.Less(t, ended, lease+lease/4, "the dead holder's lease ends one lease after its claim, not one lease after the request")
}

// Found by integration/drill/faults.sh. With the server gone, Stop returns
// about when its context ends: the handler is cancelled then, and the records
// that could not be stored are reported (ErrNotStored), not waited for.
func TestStopWithTheServerGoneReturnsByItsDeadlineNATS(t *testing.T) {
	srv := natstest.Server(t, embedded.Options{Listen: "127.0.0.1:0"})
	s := newSched(t, leased(t, dial(t, srv.ClientURL()), 1), "a", nil)
	started := make(chan struct{}, 1)
	require.NoError(t, s.Every("long", time.Second, func(ctx context.Context, _ scheduler.Run) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	require.NoError(t, s.Start(ctxT(t, 15*time.Second)))
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("the handler did not start")
	}
	srv.Shutdown()
	const grace = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	begin := time.Now()
	err := s.Stop(ctx)
	took := time.Since(begin)
	t.Logf("Stop with a %v context and the server gone took %v: %v", grace, took.Round(time.Millisecond), err)
	assert.ErrorIs(t, err, scheduler.ErrNotStored)
	assert.Less(t, took, grace+2*time.Second, "Stop returns about when its context ends")
}
