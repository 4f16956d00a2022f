package backendtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

const (
	// historyKeepSize is the history size RetentionSize saves results with.
	historyKeepSize = 3
	// historyTTL is the history TTL of RetentionTTL: short, and whole seconds, since
	// a server's message TTLs are.
	historyTTL = 2 * time.Second
	// historyTTLBound bounds the wait, after the TTL, for an expired result to leave
	// History: a server removes expired messages a little late.
	historyTTLBound = 15 * time.Second
)

// findToken returns History's record of token.
func findToken(hist []backend.RunRecord, token string) (backend.RunRecord, bool) {
	for _, r := range hist {
		if r.Token == token {
			return r, true
		}
	}
	return backend.RunRecord{}, false
}

// SaveResult with a history size keeps at most that many results, the newest. The
// job is prepared with a bigger history (50): the size SaveResult is given is the
// one that applies (a job re-registered with a smaller history).
func testRetentionSize(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("keep-size")
	prepare(t, b, job)
	ctx := Context(t)
	keep := backend.Retention{Size: historyKeepSize}
	const runs = 2*historyKeepSize + 1
	slotOf := map[string]int{}
	newest := ""
	for k := range runs {
		in := claim(job, slotAt(k), Token(), fmt.Sprintf("i%d", k%2))
		in.HistorySize = keep.Size
		won, err := b.Claim(ctx, in)
		require.NoError(t, err)
		require.True(t, won)
		now := time.Now()
		require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
			Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: 1,
			Status: backend.StatusOK, StartedAt: now, FinishedAt: now,
		}, keep), "SaveResult of slot %d", k)
		slotOf[in.Token] = k
		newest = in.Token
	}
	hist, err := b.History(ctx, job, 100)
	require.NoError(t, err)
	var results []backend.RunRecord
	for _, r := range hist {
		if r.Status.Finished() {
			results = append(results, r)
		}
	}
	assert.LessOrEqual(t, len(results), keep.Size,
		"SaveResult with a history size of %d keeps at most %d results; History shows %d: %+v", keep.Size, keep.Size, len(results), results)
	for _, r := range results {
		assert.GreaterOrEqual(t, slotOf[r.Token], runs-keep.Size,
			"the results kept are the newest %d; the result of slot %d (of %d) is still shown", keep.Size, slotOf[r.Token], runs)
	}
	r, ok := findToken(hist, newest)
	require.True(t, ok, "the newest run is shown: %+v", hist)
	assert.Equal(t, backend.StatusOK, r.Status, "the newest result is kept")
}

// SaveResult with a history TTL: a result older than the TTL leaves History; so does
// its run, whose claim carried the same history TTL.
func testRetentionTTL(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("keep-ttl")
	prepare(t, b, job)
	ctx := Context(t)
	keep := backend.Retention{Size: 50, TTL: historyTTL}
	in := claim(job, slotAt(0), Token(), "a")
	in.HistoryTTL = historyTTL
	won, err := b.Claim(ctx, in)
	require.NoError(t, err)
	require.True(t, won)
	saved := time.Now()
	require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
		Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: 1,
		Status: backend.StatusOK, StartedAt: saved, FinishedAt: saved,
	}, keep))

	// The control: a result younger than the TTL is shown. Checked only while it is
	// clearly younger (a slow machine may take longer than the TTL to get here).
	hist, err := b.History(ctx, job, 10)
	require.NoError(t, err)
	if time.Since(saved) < historyTTL/2 {
		r, ok := findToken(hist, in.Token)
		require.True(t, ok, "a result younger than its TTL is shown: %+v", hist)
		require.Equal(t, backend.StatusOK, r.Status, "a result younger than its TTL is shown")
	} else {
		t.Logf("History answered %v after SaveResult: too late to check that a fresh result is shown", time.Since(saved))
	}

	// Poll, within a bound, until the result is gone.
	deadline := saved.Add(historyTTL + historyTTLBound)
	for {
		hist, err = b.History(ctx, job, 10)
		require.NoError(t, err)
		r, ok := findToken(hist, in.Token)
		if !ok || !r.Status.Finished() {
			break
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "an expired result is still shown",
				"result saved with a history TTL of %v still in History %v later: %+v", historyTTL, time.Since(saved), r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r, ok := findToken(hist, in.Token)
	assert.False(t, ok, "the result expired, and so did the run's claim (recorded with the same history TTL); "+
		"History still shows the run as %q: %+v", r.Status, r)
}

// A takeover is visible in History: both attempts at one slot, the first lost and the
// second ok, each with its attempt number and instance. Recorded as the scheduler
// records a takeover: each won lease with RecordClaim (when the backend is a
// backend.ClaimRecorder; otherwise the first attempt's claim with Claim), the
// taken-over attempt saved lost, and the new holder's result.
func testTakeoverHistory(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("takeover")
	l := prepare(t, b, job)
	ctx := Context(t)
	slot := slotAt(3)
	first := claim(job, slot, Token(), "instance-a")
	second := claim(job, slot, Token(), "instance-b")
	second.Attempt = 2
	rec, recorder := b.(backend.ClaimRecorder)
	if recorder {
		require.NoError(t, rec.RecordClaim(ctx, first), "RecordClaim of attempt 1")
	} else {
		won, err := b.Claim(ctx, first)
		require.NoError(t, err)
		require.True(t, won)
	}
	started := time.Now().Add(-2 * time.Second).Truncate(time.Millisecond)
	lostAt := time.Now().Truncate(time.Millisecond)
	require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
		Slot: slot, Token: first.Token, Instance: first.Instance, Attempt: 1,
		Status: backend.StatusLost, FinishedAt: lostAt, Error: "taken over by instance-b",
	}, l.Retention), "SaveResult of the lost attempt")
	if recorder {
		require.NoError(t, rec.RecordClaim(ctx, second), "RecordClaim of attempt 2")
	}
	finished := time.Now().Truncate(time.Millisecond)
	require.NoError(t, b.SaveResult(ctx, job, backend.StoredResult{
		Slot: slot, Token: second.Token, Instance: second.Instance, Attempt: 2,
		Status: backend.StatusOK, StartedAt: started, FinishedAt: finished,
	}, l.Retention), "SaveResult of attempt 2")

	hist, err := b.History(ctx, job, 10)
	require.NoError(t, err)
	require.Len(t, hist, 2, "each attempt is one record: %+v", hist)
	for i, want := range []struct {
		token, instance string
		attempt         int
		status          backend.Status
	}{
		{second.Token, "instance-b", 2, backend.StatusOK},
		{first.Token, "instance-a", 1, backend.StatusLost},
	} {
		r := hist[i]
		assert.True(t, r.Slot.Equal(slot), "record %d: slot %v, want %v", i, r.Slot, slot)
		assert.Equal(t, want.token, r.Token, "record %d (the newer attempt first)", i)
		assert.Equal(t, want.attempt, r.Attempt, "record %d: attempt", i)
		assert.Equal(t, want.instance, r.Instance, "record %d: instance", i)
		assert.Equal(t, want.status, r.Status, "record %d: status", i)
	}
}

// Claim rejects a claim without a token or with an invalid job name with an error
// matching backend.ErrInvalidClaim, whatever the backend, and stores nothing.
func testInvalidClaims(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := setup(t, newBackend)
	job := JobName("invalid")
	prepare(t, b, job)
	ctx := Context(t)
	slot := slotAt(0)
	for _, c := range []struct {
		name string
		in   backend.ClaimInput
	}{
		{"no token", claim(job, slot, "", "a")},
		{"no job", claim("", slot, Token(), "a")},
		{"a job name with a control character", claim(job+"\x01", slot, Token(), "a")},
		{"a job name with a leading space", claim(" "+job, slot, Token(), "a")},
		{"a job name that is not UTF-8", claim(job+"\xff", slot, Token(), "a")},
	} {
		won, err := b.Claim(ctx, c.in)
		assert.ErrorIs(t, err, backend.ErrInvalidClaim, "Claim with %s", c.name)
		assert.False(t, won, "Claim with %s", c.name)
	}
	won, err := b.Claim(ctx, claim(job, slot, Token(), "b"))
	require.NoError(t, err)
	assert.True(t, won, "the invalid claims stored nothing: the slot is still free")
}
