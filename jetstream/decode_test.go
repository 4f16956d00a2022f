package jetstream

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// agree checks that the strict readers of decode.go give what encoding/json gives
// for data, as a claim and as a result: the same record when they read it
// (json.Unmarshal then succeeds too), nothing when they leave it. It returns what
// each said.
func agree(t *testing.T, data []byte) (claimOK, resultOK bool) {
	t.Helper()
	var sc, jc claimRecord
	claimOK = strictClaim(data, &sc)
	jerr := json.Unmarshal(data, &jc)
	if claimOK {
		require.NoError(t, jerr, "the strict reader read a claim encoding/json refuses: %q", data)
		sameClaim(t, jc, sc, data)
	}
	var sr, jr resultRecord
	resultOK = strictResult(data, &sr)
	jerr = json.Unmarshal(data, &jr)
	if resultOK {
		require.NoError(t, jerr, "the strict reader read a result encoding/json refuses: %q", data)
		sameResult(t, jr, sr, data)
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

// realRecords are bodies as this code writes them: claims (with and without each
// optional field) and results whose strings need no escape in JSON, which the
// strict readers read, and then the same with strings that do, which they leave to
// encoding/json. It returns how many of them come first.
func realRecords() (records [][]byte, plain int) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600700800, time.FixedZone("x", 3600))
	slot := time.UnixMilli(1_767_225_600_123)
	claims := func(in backend.ClaimInput) {
		for _, flags := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			records = append(records, encodeClaimAs(in, flags[0], flags[1], at))
		}
	}
	claims(backend.ClaimInput{Job: "j", Slot: slot, Token: "abc", Attempt: 1, At: at})
	claims(backend.ClaimInput{Job: "nightly report.v2 > *", Slot: time.UnixMilli(-5), Token: "kq3v7ah2xq", Instance: "host-1",
		Attempt: 3, Manual: true, RequestedBy: "ana", HistoryTTL: 90 * time.Second})
	claims(backend.ClaimInput{Job: "jöb ☃ 😀", Slot: time.UnixMilli(0), Token: "t", Instance: "ïnstance", RequestedBy: "é"})
	results := []backend.StoredResult{
		{Slot: slot, Token: "abc", Instance: "i", Attempt: 1, Status: backend.StatusOK, StartedAt: at, FinishedAt: at.Add(time.Second)},
		{Slot: slot, Status: backend.StatusSkipped},
		{Slot: time.UnixMilli(-1), Token: "t", Attempt: 2, Manual: true, Status: backend.StatusError, StartedAt: at,
			FinishedAt: at.Add(time.Hour), Error: "open /x: no such file ☃ \x7f", Fence: 1<<64 - 1},
	}
	for _, r := range results {
		records = append(records, encodeResult("j", r))
	}
	plain = len(records)
	claims(backend.ClaimInput{Job: "j", Slot: slot, Token: "t\x01\x7f \"q\" \\", Instance: "<&> \u2028", Attempt: 3, Manual: true,
		At: at, RequestedBy: "ana\n\xff", HistoryTTL: 90 * time.Second})
	records = append(records, encodeResult("j <b>", backend.StoredResult{Slot: slot, Token: "t", Status: backend.StatusError,
		Error: "open \"/x\": <no such file> \xff"}))
	return records, plain
}

// The strict readers read what this code writes with plain strings (History's speed
// depends on it), and give what encoding/json gives; with strings JSON escapes they
// leave the record to encoding/json.
func TestStrictDecodeReadsRealRecords(t *testing.T) {
	records, plain := realRecords()
	for i, data := range records {
		var c claimRecord
		isClaim := json.Unmarshal(data, &c) == nil && !c.At.IsZero() // a result has no "at"
		claimOK, resultOK := agree(t, data)
		read := resultOK
		if isClaim {
			read = claimOK
		}
		assert.Equal(t, i < plain, read, "record %d read by the strict reader: %s", i, data)
	}
}

// trickyRecord is an input of TestStrictDecodeTricky (and a seed of
// FuzzDecodeRecords): the strict readers read it as a claim (claim true), as a
// result (result true), or leave it to encoding/json.
type trickyRecord struct {
	name          string
	data          string
	claim, result bool
}

func trickyRecords() []trickyRecord {
	const claim = `"v":1,"job":"j","slot_ms":5,"token":"t"`
	const base = claim + `,"status":"ok"`
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	return []trickyRecord{
		{"a claim's fields", `{` + claim + `,"instance":"i","attempt":2,"manual":true,"at":"2030-01-02T03:04:05.5Z","by":"b","history_ttl_ms":90000,"leased":true}`, true, false},
		{"a result's fields", `{` + claim + `,"instance":"i","attempt":2,"manual":true,"status":"ok","started_at":"2030-01-02T03:04:05Z","finished_at":"2030-01-02T03:04:06Z","error":"e","fence":7}`, false, true},
		{"empty object", `{}`, true, true},
		{"only some fields", `{"job":"j","leased":false}`, true, false},
		{"white space everywhere", " \t\r\n{ \"v\" : 1 ,\n\"job\":\"j\" , \"slot_ms\" :\t5,\"token\":\"t\" } \n", false, false},
		{"white space after a colon", `{"v": 1}`, false, false},
		{"another order", `{"token":"t","status":"ok","slot_ms":5,"job":"j","v":1}`, false, false},
		{"unknown fields of every type", `{` + base + `,"s":"x\"y","n":-1.5e+3,"b":true,"f":false,"z":null,"o":{"a":[1,{"b":{}}],"c":""},"a":[],"e":{},"":0}`, false, false},
		{"an unknown field", `{` + claim + `,"new_field":1}`, false, false},
		{"a deeply nested unknown field", `{` + base + `,"x":` + deep + `}`, false, false},
		{"escapes", `{` + base + `,"error":"\"\\\/\b\f\n\r\t\u00e9\u00E9\u2028"}`, false, false},
		{"surrogate pair", `{` + base + `,"error":"\ud83d\ude00"}`, false, false},
		{"lone high surrogate", `{` + base + `,"error":"a\ud800b"}`, false, false},
		{"lone low surrogate", `{` + base + `,"error":"\udc00\ud800"}`, false, false},
		{"invalid UTF-8", "{" + base + ",\"error\":\"a\xffb\xed\xa0\x80c\xe2\x82\"}", false, false},
		{"invalid UTF-8 in a time", "{" + claim + ",\"at\":\"2030-01-02T03:04:05Z\xff\"}", false, false},
		{"valid UTF-8", `{` + base + `,"error":"☃ é 😀 ` + "\u2028" + `"}`, false, true},
		{"DEL", "{" + base + ",\"error\":\"\x7f\"}", false, true},
		{"an escape in an unknown field", `{` + base + `,"x":"\u0000\""}`, false, false},
		{"nulls", `{"v":1,"job":"j","slot_ms":5,"token":"t","status":"ok","v":null,"job":null,"attempt":null,"manual":null,"at":null,"started_at":null,"fence":null,"history_ttl_ms":null}`, false, false},
		{"a null", `{"v":null}`, false, false},
		{"null slot", `{"v":1,"job":"j","slot_ms":null,"token":"t"}`, false, false},
		{"duplicate keys", `{"v":1,"v":2,"job":"x","job":"j","slot_ms":5,"token":"a","token":"t","manual":true,"manual":false}`, false, false},
		{"booleans", `{` + claim + `,"manual":true,"leased":false}`, true, false},
		{"integers at their limits", `{"v":1,"job":"j","slot_ms":-9223372036854775808,"token":"t","attempt":-0,"history_ttl_ms":9223372036854775807}`, true, false},
		{"the largest fence", `{` + base + `,"fence":18446744073709551615}`, false, true},
		{"times", `{` + base + `,"started_at":"2030-01-02T03:04:05.123456789+05:30","finished_at":"2030-01-02T03:04:05.1-00:00"}`, false, true},
		{"a time with a lowercase t", `{` + claim + `,"at":"2030-01-02t03:04:05Z"}`, false, false},
		{"a time zone hour of 24", `{` + base + `,"started_at":"2030-01-02T03:04:05+24:00"}`, false, true},
		{"a comma in a time", `{` + base + `,"started_at":"2030-01-02T03:04:05,5Z"}`, false, true},
		{"an escape in a time", `{` + claim + `,"at":"2030-01-02T03:04:05\u005a"}`, false, false},
		{"a time of year 0", `{` + claim + `,"at":"0000-01-01T00:00:00Z"}`, true, false},
		{"a time as a number", `{` + claim + `,"at":5}`, false, false},
		{"a time as an object", `{` + base + `,"started_at":{}}`, false, false},
		{"a key in another case", `{` + claim + `,"Job":"k","JOB":"k"}`, false, false},
		{"a key matching when folded by Unicode", `{"v":1,"job":"j","ſlot_ms":5,"token":"t","status":"ok"}`, false, false},
		{"a Kelvin sign", `{"v":1,"job":"j","slot_ms":5,"to` + "\u212a" + `en":"t","status":"ok"}`, false, false},
		{"an escaped key", `{"v":1,"\u006aob":"j","slot_ms":5,"token":"t","status":"ok"}`, false, false},
		{"a key that begins like a field", `{"v":1,"jobs":"j"}`, false, false},
		{"a fraction", `{"v":1.0}`, false, false},
		{"an exponent", `{"v":1,"job":"j","slot_ms":1e3}`, false, false},
		{"a number as a string", `{"v":"1"}`, false, false},
		{"a string as a number", `{"v":1,"job":1}`, false, false},
		{"a bool as a string", `{` + claim + `,"manual":"true"}`, false, false},
		{"an array for a field", `{"v":1,"job":"j","slot_ms":5,"token":["t"]}`, false, false},
		{"an object for a field", `{"v":1,"job":"j","slot_ms":{}}`, false, false},
		{"overflow", `{"v":1,"job":"j","slot_ms":9223372036854775808}`, false, false},
		{"an int overflowing 32 bits", `{"v":4294967296}`, strconv.IntSize == 64, strconv.IntSize == 64},
		{"a negative fence", `{` + base + `,"fence":-1}`, false, false},
		{"a fence of minus zero", `{` + base + `,"fence":-0}`, false, false},
		{"a leading zero", `{"v":01}`, false, false},
		{"a zero", `{"v":0}`, true, true},
		{"a lone minus", `{"v":-}`, false, false},
		{"a plus", `{"v":+1}`, false, false},
		{"a fraction without digits", `{"v":1.}`, false, false},
		{"trailing garbage", `{` + base + `}x`, false, false},
		{"two objects", `{` + base + `}{}`, false, false},
		{"a trailing comma", `{` + claim + `,}`, false, false},
		{"a leading comma", `{,"v":1}`, false, false},
		{"a missing comma", `{"v":1"job":"j"}`, false, false},
		{"a missing colon", `{"v" 1}`, false, false},
		{"a missing value", `{"v":}`, false, false},
		{"a missing value at the end", `{"v":1,"job":}`, false, false},
		{"a key alone", `{"v"}`, false, false},
		{"an unterminated string", `{"v":1,"job":"j`, false, false},
		{"a string ending at the brace", `{"v":1,"job":"j}`, false, false},
		{"an unterminated object", `{` + claim, false, false},
		{"a control character", "{" + base + ",\"error\":\"a\tb\"}", false, false},
		{"a bad escape", `{` + base + `,"error":"\x41"}`, false, false},
		{"truex", `{` + claim + `,"manual":truex}`, false, false},
		{"tru", `{` + claim + `,"manual":tru}`, false, false},
		{"fals at the end", `{"v":1,"manual":fals}`, false, false},
		{"nul", `{` + claim + `,"manual":nul}`, false, false},
		{"null at the top", `null`, false, false},
		{"an array at the top", `[]`, false, false},
		{"a brace", `{`, false, false},
		{"a closing brace", `}`, false, false},
		{"empty", ``, false, false},
		{"a byte order mark", "\xef\xbb\xbf{" + base + "}", false, false},
		{"not json", `not json`, false, false},
	}
}

// Tricky inputs: the strict readers read them or leave them to encoding/json, as
// trickyRecords says, and agree with it either way.
func TestStrictDecodeTricky(t *testing.T) {
	for _, c := range trickyRecords() {
		t.Run(c.name, func(t *testing.T) {
			claimOK, resultOK := agree(t, []byte(c.data))
			assert.Equal(t, c.claim, claimOK, "read by the strict claim reader")
			assert.Equal(t, c.result, resultOK, "read by the strict result reader")
		})
	}
}

func BenchmarkDecodeRecords(b *testing.B) {
	at := time.Now()
	claim := encodeClaim(backend.ClaimInput{Job: "nightly-report", Slot: at, Token: "kq3v7ah2xq2mqsqdx4l7yyhmnq", Instance: "host-1", Attempt: 1, At: at}, false, at)
	result := encodeResult("nightly-report", backend.StoredResult{
		Slot: at, Token: "kq3v7ah2xq2mqsqdx4l7yyhmnq", Instance: "host-1", Attempt: 1, Status: backend.StatusOK, StartedAt: at, FinishedAt: at,
	})
	b.Run("strict", func(b *testing.B) {
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
