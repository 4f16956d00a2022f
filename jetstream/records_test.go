package jetstream

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

func TestRecordsRoundTrip(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	in := backend.ClaimInput{
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

	r := backend.StoredResult{
		Slot: in.Slot, Token: "tok", Instance: "i", Attempt: 2, Manual: true, Status: backend.StatusTimeout,
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
	_, ttl, err = decodeClaim("j", kindClaim, []byte(`{"v":1,"job":"j","slot_ms":1,"token":"t","history_ttl_ms":9223372036854775807}`))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(math.MaxInt64), ttl, "a history TTL too long for a duration is the longest one, not a negative one")
}

// FuzzDecodeRecords: records decode without panics into valid records, and the
// strict readers (decode.go) give what encoding/json gives, or leave the record to
// it. Run it a while after changing decode.go:
// go test -run '^$' -fuzz FuzzDecodeRecords -fuzztime 60s ./jetstream/
func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":5,"token":"t","at":"2030-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":5,"status":"ok","started_at":"bad"}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":-9223372036854775808,"token":"t","history_ttl_ms":-1}`))
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":5,"token":"t","history_ttl_ms":9223372036854775807}`))
	f.Add([]byte(`{"v":1,"job":"j","slot_ms":5,"token":"t","error":"\ud83d\ude00\u00e9\"","x":[{"y":null}],"at":null}`))
	records, _ := realRecords()
	for _, data := range records {
		f.Add(data)
	}
	for _, c := range trickyRecords() {
		f.Add([]byte(c.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		agree(t, data)
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

// The hand-written claim encoding decodes to the record json.Marshal writes, for
// ordinary and odd strings, every optional field set or not.
func TestEncodeClaimMatchesJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600700800, time.FixedZone("x", 3600))
	for _, in := range []backend.ClaimInput{
		{Job: "nightly", Slot: time.UnixMilli(1_767_225_600_123), Token: "abc", Attempt: 1, At: at},
		{Job: "Report.v2 \"quoted\" \\ back", Slot: time.UnixMilli(-5), Token: "t\x01\x7f", Instance: "ïnstance <&>",
			Attempt: 3, Manual: true, At: at, RequestedBy: "ana\n", HistoryTTL: 90 * time.Second},
		{Job: "j", Slot: time.UnixMilli(0), Token: "x", Instance: "i", RequestedBy: "b", HistoryTTL: time.Millisecond},
		{Job: "bad utf8 \xff\xfe", Slot: time.UnixMilli(1), Token: "y"},
	} {
		for _, leased := range []bool{false, true} {
			for _, manual := range []bool{false, true} {
				now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
				got := encodeClaimAs(in, manual, leased, now)
				a := in.At
				if a.IsZero() {
					a = now
				}
				ms := in.Slot.UnixMilli()
				want, err := json.Marshal(claimRecord{
					V: recordVersion, Job: in.Job, Slot: &ms, Token: in.Token, Instance: in.Instance,
					Attempt: max(in.Attempt, 1), Manual: manual || in.Manual, At: a.UTC(),
					HistoryTTL: in.HistoryTTL.Milliseconds(), Leased: leased, By: in.RequestedBy,
				})
				require.NoError(t, err)
				require.True(t, json.Valid(got), "%s", got)
				var g, w map[string]any
				require.NoError(t, json.Unmarshal(got, &g))
				require.NoError(t, json.Unmarshal(want, &w))
				assert.Equal(t, w, g, "job %q leased %v manual %v", in.Job, leased, manual)
			}
		}
	}
}
