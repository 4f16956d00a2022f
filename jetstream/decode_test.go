package jetstream

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

// agree checks that the fast readers of decode.go give what encoding/json gives for
// data, as a claim and as a result: the same record when they read it (json.Unmarshal
// then succeeds too), nothing when they give up. It returns what each said.
func agree(t *testing.T, data []byte) (claimOK, resultOK bool) {
	t.Helper()
	var fc, jc claimRecord
	claimOK = fastClaim(data, &fc)
	jerr := json.Unmarshal(data, &jc)
	if claimOK {
		require.NoError(t, jerr, "the fast path read a claim encoding/json refuses: %q", data)
		sameClaim(t, jc, fc, data)
	}
	var fr, jr resultRecord
	resultOK = fastResult(data, &fr)
	jerr = json.Unmarshal(data, &jr)
	if resultOK {
		require.NoError(t, jerr, "the fast path read a result encoding/json refuses: %q", data)
		sameResult(t, jr, fr, data)
	}
	return claimOK, resultOK
}

// sameTime: the same instant in the same zone (the location itself may be another
// *time.Location made by time.FixedZone for the same offset).
func sameTime(t *testing.T, want, got time.Time, data []byte) {
	t.Helper()
	wantName, wantOff := want.Zone()
	gotName, gotOff := got.Zone()
	require.True(t, want.Equal(got) && wantName == gotName && wantOff == gotOff && want.Location().String() == got.Location().String() &&
		(want.Location() == time.Local) == (got.Location() == time.Local) && want.IsZero() == got.IsZero(),
		"time %v, encoding/json %v: %q", got, want, data)
}

func sameSlot(t *testing.T, want, got *int64, data []byte) {
	t.Helper()
	require.Equal(t, want == nil, got == nil, "slot presence: %q", data)
	if want != nil {
		require.Equal(t, *want, *got, "slot: %q", data)
	}
}

func sameClaim(t *testing.T, want, got claimRecord, data []byte) {
	t.Helper()
	sameSlot(t, want.Slot, got.Slot, data)
	sameTime(t, want.At, got.At, data)
	want.Slot, got.Slot, want.At, got.At = nil, nil, time.Time{}, time.Time{}
	require.Equal(t, want, got, "claim: %q", data)
}

func sameResult(t *testing.T, want, got resultRecord, data []byte) {
	t.Helper()
	sameSlot(t, want.Slot, got.Slot, data)
	sameTime(t, want.StartedAt, got.StartedAt, data)
	sameTime(t, want.FinishedAt, got.FinishedAt, data)
	want.Slot, got.Slot = nil, nil
	want.StartedAt, got.StartedAt, want.FinishedAt, got.FinishedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	require.Equal(t, want, got, "result: %q", data)
}

// realRecords are bodies as this code writes them, plain and odd.
func realRecords() [][]byte {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600700800, time.FixedZone("x", 3600))
	slot := time.UnixMilli(1_767_225_600_123)
	var out [][]byte
	for _, in := range []scheduler.ClaimInput{
		{Job: "j", Slot: slot, Token: "abc", Attempt: 1, At: at},
		{Job: "j", Slot: slot, Token: "t\x01\x7f \"q\" \\", Instance: "ïnstance <&> \u2028", Attempt: 3, Manual: true,
			At: at, RequestedBy: "ana\n\xff", HistoryTTL: 90 * time.Second},
	} {
		out = append(out, encodeClaimAs(in, false, false, at), encodeClaimAs(in, true, true, at))
	}
	for _, r := range []scheduler.StoredResult{
		{Slot: slot, Token: "abc", Instance: "i", Attempt: 1, Status: scheduler.StatusOK, StartedAt: at, FinishedAt: at.Add(time.Second)},
		{Slot: slot, Status: scheduler.StatusSkipped},
		{Slot: slot, Token: "t", Attempt: 2, Manual: true, Status: scheduler.StatusError, StartedAt: at,
			FinishedAt: at.Add(time.Hour), Error: "open \"/x\": <no such file> ☃ \xff", Fence: 1 << 63},
	} {
		out = append(out, encodeResult("j", r))
	}
	return out
}

// The fast path reads what this code writes (History's speed depends on it), and
// gives what encoding/json gives.
func TestFastDecodeReadsRealRecords(t *testing.T) {
	for i, data := range realRecords() {
		claimOK, resultOK := agree(t, data)
		assert.True(t, claimOK && resultOK, "record %d read by encoding/json: %s", i, data)
	}
}

// trickyRecord is an input of TestFastDecodeTricky (and a seed of FuzzDecodeRecords):
// the fast path reads it (fast true) or leaves it to encoding/json.
type trickyRecord struct {
	name string
	data string
	fast bool
}

func trickyRecords() []trickyRecord {
	const base = `"v":1,"job":"j","slot_ms":5,"token":"t","status":"ok"`
	deep := strings.Repeat("[", maxSkipDepth+2) + strings.Repeat("]", maxSkipDepth+2)
	return []trickyRecord{
		{"white space everywhere", " \t\r\n{ \"v\" : 1 ,\n\"job\":\"j\" , \"slot_ms\" :\t5,\"token\":\"t\" } \n", true},
		{"another order", `{"token":"t","status":"ok","slot_ms":5,"job":"j","v":1}`, true},
		{"empty object", `{}`, true},
		{"unknown fields of every type", `{` + base + `,"s":"x\"y","n":-1.5e+3,"b":true,"f":false,"z":null,"o":{"a":[1,{"b":{}}],"c":""},"a":[],"e":{},"":0}`, true},
		{"nesting as deep as the fast path goes", `{` + base + `,"x":` + strings.Repeat("[", maxSkipDepth) + strings.Repeat("]", maxSkipDepth) + `}`, true},
		{"nesting deeper", `{` + base + `,"x":` + deep + `}`, false},
		{"escapes", `{` + base + `,"error":"\"\\\/\b\f\n\r\t\u00e9\u00E9\u2028"}`, true},
		{"surrogate pair", `{` + base + `,"error":"\ud83d\ude00"}`, true},
		{"lone high surrogate", `{` + base + `,"error":"a\ud800b"}`, true},
		{"lone low surrogate", `{` + base + `,"error":"\udc00\ud800"}`, true},
		{"high surrogate then no low one", `{` + base + `,"error":"\ud800\u0041"}`, true},
		{"high surrogate at the end", `{` + base + `,"error":"\ud800"}`, true},
		{"invalid UTF-8", "{" + base + ",\"error\":\"a\xffb\xed\xa0\x80c\xe2\x82\"}", true},
		{"invalid UTF-8 and an escape", "{" + base + ",\"error\":\"\\n\xff\"}", true},
		{"valid UTF-8", `{` + base + `,"error":"☃ é 😀"}`, true},
		{"DEL", "{" + base + ",\"error\":\"\x7f\"}", true},
		{"an escape in an unknown field", `{` + base + `,"x":"\u0000\""}`, true},
		{"nulls", `{"v":1,"job":"j","slot_ms":5,"token":"t","status":"ok","v":null,"job":null,"attempt":null,"manual":null,"at":null,"started_at":null,"fence":null,"history_ttl_ms":null}`, true},
		{"null slot", `{"v":1,"job":"j","slot_ms":5,"slot_ms":null,"token":"t"}`, true},
		{"null then slot", `{"v":1,"job":"j","slot_ms":null,"slot_ms":7,"token":"t"}`, true},
		{"duplicate keys", `{"v":1,"v":2,"job":"x","job":"j","slot_ms":5,"token":"a","token":"t","manual":true,"manual":false}`, true},
		{"booleans", `{` + base + `,"manual":true,"leased":true}`, true},
		{"integers at their limits", `{` + base + `,"slot_ms":-9223372036854775808,"history_ttl_ms":9223372036854775807,"fence":18446744073709551615,"attempt":-0}`, true},
		{"times", `{` + base + `,"at":"2030-01-02T03:04:05Z","started_at":"2030-01-02T03:04:05.123456789+05:30","finished_at":"2030-01-02T03:04:05.1-00:00"}`, true},
		{"a time with a lowercase t", `{` + base + `,"at":"2030-01-02t03:04:05Z","started_at":"2030-01-02t03:04:05Z"}`, false},
		{"a time zone hour of 24", `{` + base + `,"at":"2030-01-02T03:04:05+24:00","started_at":"2030-01-02T03:04:05+24:00"}`, true},
		{"a comma in a time", `{` + base + `,"at":"2030-01-02T03:04:05,5Z","started_at":"2030-01-02T03:04:05,5Z"}`, true},
		{"an escape in a time", `{` + base + `,"at":"2030-01-02T03:04:05\u005a","started_at":"2030-01-02T03:04:05\u005a"}`, false},
		{"a time of year 0", `{` + base + `,"at":"0000-01-01T00:00:00Z","started_at":"0000-01-01T00:00:00Z"}`, true},
		{"a time as a number", `{` + base + `,"at":5,"started_at":5}`, false},
		{"a time as an object", `{` + base + `,"at":{},"started_at":{}}`, false},
		{"a key in another case", `{` + base + `,"Job":"k","JOB":"k"}`, false},
		{"a key matching when folded by Unicode", `{"v":1,"job":"j","ſlot_ms":5,"token":"t","status":"ok"}`, false},
		{"a Kelvin sign", `{"v":1,"job":"j","slot_ms":5,"to` + "\u212a" + `en":"t","status":"ok"}`, false},
		{"an escaped key", `{"v":1,"\u006aob":"j","slot_ms":5,"token":"t","status":"ok"}`, false},
		{"a fraction", `{` + base + `,"v":1.0}`, false},
		{"an exponent", `{` + base + `,"slot_ms":1e3}`, false},
		{"a number as a string", `{` + base + `,"v":"1"}`, false},
		{"a string as a number", `{` + base + `,"job":1}`, false},
		{"a bool as a string", `{` + base + `,"manual":"true"}`, false},
		{"an array for a field", `{` + base + `,"token":["t"]}`, false},
		{"an object for a field", `{` + base + `,"slot_ms":{}}`, false},
		{"overflow", `{` + base + `,"slot_ms":9223372036854775808}`, false},
		{"a negative fence", `{` + base + `,"fence":-1}`, false},
		{"a leading zero", `{` + base + `,"v":01}`, false},
		{"a lone minus", `{` + base + `,"x":-}`, false},
		{"a plus", `{` + base + `,"x":+1}`, false},
		{"a fraction without digits", `{` + base + `,"x":1.}`, false},
		{"an exponent without digits", `{` + base + `,"x":1e}`, false},
		{"trailing garbage", `{` + base + `}x`, false},
		{"two objects", `{` + base + `}{}`, false},
		{"a trailing comma", `{` + base + `,}`, false},
		{"a missing comma", `{"v":1 "job":"j"}`, false},
		{"a missing colon", `{"v" 1}`, false},
		{"an unterminated string", `{"v":1,"job":"j`, false},
		{"an unterminated object", `{` + base, false},
		{"a control character", "{" + base + ",\"error\":\"a\tb\"}", false},
		{"a bad escape", `{` + base + `,"error":"\x41"}`, false},
		{"a short \\u", `{` + base + `,"error":"\u12"}`, false},
		{"a bad hex digit", `{` + base + `,"error":"\u12g4"}`, false},
		{"a single quote escape", `{` + base + `,"error":"\'"}`, false},
		{"truex", `{` + base + `,"manual":truex}`, false},
		{"nul", `{` + base + `,"manual":nul}`, false},
		{"null at the top", `null`, false},
		{"an array at the top", `[]`, false},
		{"empty", ``, false},
		{"a byte order mark", "\xef\xbb\xbf{" + base + "}", false},
		{"not json", `not json`, false},
	}
}

// Tricky inputs: the fast path reads them or leaves them to encoding/json, as
// trickyRecords says, and agrees with it either way.
func TestFastDecodeTricky(t *testing.T) {
	for _, c := range trickyRecords() {
		t.Run(c.name, func(t *testing.T) {
			claimOK, resultOK := agree(t, []byte(c.data))
			assert.Equal(t, c.fast, claimOK && resultOK, "read by the fast path")
		})
	}
}

func BenchmarkDecodeRecords(b *testing.B) {
	at := time.Now()
	claim := encodeClaim(scheduler.ClaimInput{Job: "nightly-report", Slot: at, Token: "kq3v7ah2xq2mqsqdx4l7yyhmnq", Instance: "host-1", Attempt: 1, At: at}, false, at)
	result := encodeResult("nightly-report", scheduler.StoredResult{
		Slot: at, Token: "kq3v7ah2xq2mqsqdx4l7yyhmnq", Instance: "host-1", Attempt: 1, Status: scheduler.StatusOK, StartedAt: at, FinishedAt: at,
	})
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := decodeClaim("nightly-report", kindClaim, claim); err != nil {
				b.Fatal(err)
			}
			if _, err := decodeResult("nightly-report", result); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var c claimRecord
			var r resultRecord
			if json.Unmarshal(claim, &c) != nil || json.Unmarshal(result, &r) != nil {
				b.Fatal("unmarshal")
			}
		}
	})
}
