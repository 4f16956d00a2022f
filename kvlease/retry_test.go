package kvlease_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// A stored retry is the run record in state retry, kept for its window and the
// run's keep, with the lease key purged. An older version, which requires token,
// attempt and state and reads every state but running as done, neither fails on it
// nor runs it.
func TestRetryRecord(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job, slot := "retry record "+token(), time.UnixMilli(1_900_000_000_000)
	in := claimOf(job, slot, token(), time.Minute) // Keep: an hour
	won := mustClaim(t, s, in, backend.OutcomeWon)
	require.NoError(t, s.Retry(t.Context(), in.Key(), 2*time.Hour, 3*time.Hour))

	m := lastMsg(t, js, runKey(job, slot))
	require.NotNil(t, m)
	assert.Equal(t, "21600s", m.Header.Get(jetstream.MsgTTLHeader), "delay + within + keep")
	var rec map[string]any
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.UseNumber() // fences are nanoseconds: beyond a float64's precision
	require.NoError(t, dec.Decode(&rec))
	assert.Equal(t, "retry", rec["state"])
	assert.Equal(t, "error", rec["status"], "what an older version answers done with")
	assert.Equal(t, in.Token, rec["token"])
	assert.Equal(t, json.Number("1"), rec["attempt"])
	assert.Equal(t, json.Number(strconv.FormatUint(won.Fence, 10)), rec["fence"], "the failed attempt's fence")
	assert.Equal(t, json.Number("7200000"), rec["retry_delay_ms"])
	assert.Equal(t, json.Number("10800000"), rec["retry_within_ms"])

	if lm := lastMsg(t, js, leaseKey(job, slot)); lm != nil {
		assert.Equal(t, "PURGE", lm.Header.Get("KV-Operation"), "the failed attempt's lease ended")
	}
	active, err := s.Active(t.Context(), job)
	require.NoError(t, err)
	require.Len(t, active, 1)
	assert.False(t, active[0].Live)
	assert.WithinDuration(t, m.Time.Add(2*time.Hour), active[0].RetryAt, time.Millisecond,
		"the window counts from the record's write, by the server's clock")
}

// A store that has not seen the slot claims it blind (its lease key first, from
// revision 0, once the purge marker is gone): finding the retry not yet due, it
// answers retry and purges the lease key it wrote, so that nobody is answered
// running by it.
func TestRetryBlindClaimLeavesNoLease(t *testing.T) {
	t.Parallel()
	js := singleJS(t)
	s := newStore(t, js, kvlease.WithBucket(bucket))
	job, slot := "retry blind "+token(), time.UnixMilli(1_900_000_000_000)
	in := claimOf(job, slot, token(), time.Minute)
	mustClaim(t, s, in, backend.OutcomeWon)
	require.NoError(t, s.Retry(t.Context(), in.Key(), time.Hour, time.Hour))
	deadline := time.Now().Add(10 * time.Second)
	for lastMsg(t, js, leaseKey(job, slot)) != nil {
		require.True(t, time.Now().Before(deadline), "the purge marker never expired")
		time.Sleep(50 * time.Millisecond)
	}

	fresh := newStore(t, singleJS(t), kvlease.WithBucket(bucket))
	res := mustClaim(t, fresh, claimOf(job, slot, token(), time.Minute), backend.OutcomeRetry)
	assert.Equal(t, 1, res.Attempt)
	assert.Equal(t, in.Instance, res.Holder, "the failed attempt's instance")
	assert.Greater(t, res.RetryIn, 59*time.Minute)
	assert.LessOrEqual(t, res.RetryIn, time.Hour)
	if lm := lastMsg(t, js, leaseKey(job, slot)); lm != nil {
		assert.Equal(t, "PURGE", lm.Header.Get("KV-Operation"), "the blind claim's lease key was purged")
	}
	mustClaim(t, newStore(t, singleJS(t), kvlease.WithBucket(bucket)), claimOf(job, slot, token(), time.Minute), backend.OutcomeRetry)
}
