package machine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// A Retry is repeat-safe also once its retry was claimed (backend.Retrier): its
// repeat stays its own after the retry failed in turn and stored the next retry,
// and that one was claimed too.
func TestRedteamRetryRepeatAfterTwoRetries(t *testing.T) {
	t.Skip("finding: a run remembers only the attempt before its current one (PreviousToken), so a repeat two retries later is answered ErrStaleToken; fixing it needs each attempt's token kept (not small)")
	key := func(tok string) backend.RunKey { return backend.RunKey{Job: "job", Slot: at(10), Token: tok} }
	retry := func(tok string) backend.Settlement {
		return backend.Settlement{Key: key(tok), Status: backend.StatusError, Retry: &backend.RetryWindow{Within: time.Minute}}
	}
	in := func(tok string) backend.RunClaim {
		c := claimOf(takeoverOnly)
		c.Token, c.Instance = tok, "i-"+tok
		return c
	}
	r := Settle(live(10, "a", 1), retry("a"), now).Run // a's answer is lost
	r = Claim(r, in("b"), Job{}, now).Run
	require.Equal(t, Running, r.Phase)
	r = Settle(r, retry("b"), now).Run
	r = Claim(r, in("c"), Job{}, now).Run
	require.Equal(t, 3, r.Attempt)
	assert.NoError(t, Settle(r, retry("a"), now).Err, "a's repeat, two retries later")
}

// A slot reopened (a paused slot run by catch-up, a backfill) starts like a
// first claim under a policy that runs one slot at a time: not while another
// slot is busy, its stored retry pending or its lease ended less than a lease
// ago (a backup about to take it over).
func TestRedteamReopenWaitsForABusySlot(t *testing.T) {
	t.Skip("finding: claim.finished checks otherLive, not busy; using busy breaks TestCancelOtherPausedSlotCancelsNothing (scheduler), so the fix is not small")
	for name, other := range map[string]Run{
		"a pending retry":            retrying(9, "b", 1, -time.Second, time.Minute),
		"a lease ended a second ago": ended(9, "b", 1, time.Second),
	} {
		d := Claim(finished(10, "a", 1, backend.StatusPaused), claimOf(reopenPaused, policy(backend.OverlapSkip)),
			Job{Others: []Run{other}}, now)
		assert.Equal(t, backend.OutcomeRunning, d.Result.Outcome, name)
		assert.False(t, d.Write, name)
	}
}
