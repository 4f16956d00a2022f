package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

func TestRecordsRoundTrip(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	in := scheduler.ClaimInput{
		Job: "j", Slot: time.UnixMilli(1_900_000_000_123), Token: "tok", Instance: "i", Attempt: 3,
		At: at, HistoryTTL: 90 * time.Second,
	}
	c, ttl, err := decodeClaim("j", kindClaim, encodeClaim(in, false, time.Now()))
	require.NoError(t, err)
	assert.True(t, c.Slot.Equal(in.Slot))
	assert.True(t, c.At.Equal(at))
	assert.Equal(t, "tok", c.Token)
	assert.Equal(t, "i", c.Instance)
	assert.Equal(t, 3, c.Attempt)
	assert.False(t, c.Manual)
	assert.Equal(t, 90*time.Second, ttl)

	c, _, err = decodeClaim("j", kindManual, encodeClaim(in, true, time.Now()))
	require.NoError(t, err)
	assert.True(t, c.Manual)

	r := scheduler.StoredResult{
		Slot: in.Slot, Token: "tok", Instance: "i", Attempt: 2, Manual: true, Status: scheduler.StatusTimeout,
		StartedAt: at, FinishedAt: at.Add(time.Second), Error: "slow", Fence: 7,
	}
	got, err := decodeResult("j", encodeResult("j", r))
	require.NoError(t, err)
	assert.True(t, got.Slot.Equal(r.Slot))
	assert.True(t, got.StartedAt.Equal(r.StartedAt))
	assert.True(t, got.FinishedAt.Equal(r.FinishedAt))
	got.Slot, got.StartedAt, got.FinishedAt = r.Slot, r.StartedAt, r.FinishedAt
	assert.Equal(t, r, got)

	_, err = decodeResult("other", encodeResult("j", r))
	require.ErrorIs(t, err, errNotOurs, "a record of another job is not ours")
	_, _, err = decodeClaim("j", kindClaim, []byte(`{"job":"j","slot_ms":1,"token":"t"}`))
	require.ErrorIs(t, err, errNotOurs, "a record without a version is not ours")
	_, _, err = decodeClaim("j", kindClaim, []byte(`{"v":2,"job":"j","slot_ms":1,"token":"t","new_field":true}`))
	require.NoError(t, err, "a newer version is read for the fields this one knows")
}

func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":5,"token":"t","at":"2030-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":5,"status":"ok","started_at":"bad"}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":-9223372036854775808,"token":"t","history_ttl_ms":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, ttl, err := decodeClaim("j", kindClaim, data); err == nil {
			assert.NotEmpty(t, c.Token)
			assert.GreaterOrEqual(t, ttl, time.Duration(0))
			assert.GreaterOrEqual(t, c.Attempt, 1)
		}
		if r, err := decodeResult("j", data); err == nil {
			assert.NotEmpty(t, r.Status)
		}
	})
}
