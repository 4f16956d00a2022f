package jetstream

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// A strict reader of the record bodies this package writes (encodeClaimAs's bytes,
// json.Marshal's of a resultRecord). It reads a body only when it is exactly such
// bytes. That is one JSON object without white space, its keys some of the record's
// fields in the order the encoder writes them, each at most once. Its values are
// strings of valid UTF-8 without escapes or control bytes, integers without
// fraction, exponent or leading zero, true or false, and times as time.Time's
// UnmarshalJSON reads them. Anything
// else (an unknown field, another order, an escape, null) reports false and is left
// to encoding/json. What it reads is the record json.Unmarshal gives for the same
// bytes (FuzzDecodeRecords checks it).

// strictField is one field of a record: its JSON key, and a pointer to it (*string,
// *int, *int64, **int64, *uint64, *bool or *time.Time).
type strictField struct {
	key string
	ptr any
}

// strictClaim reads data into *c when it is a claim as encodeClaimAs writes it, and
// reports whether it was (*c may be partly set when not).
func strictClaim(data []byte, c *claimRecord) bool {
	return readStrict(data, []strictField{
		{"v", &c.V}, {"job", &c.Job}, {"slot_ms", &c.Slot}, {"token", &c.Token}, {"instance", &c.Instance},
		{"attempt", &c.Attempt}, {"manual", &c.Manual}, {"at", &c.At}, {"by", &c.By},
		{"history_ttl_ms", &c.HistoryTTL}, {"leased", &c.Leased}, {"backfill", &c.Backfill},
	})
}

// strictResult reads data into *r when it is a result as encodeResult writes it, and
// reports whether it was (*r may be partly set when not).
func strictResult(data []byte, r *resultRecord) bool {
	return readStrict(data, []strictField{
		{"v", &r.V}, {"job", &r.Job}, {"slot_ms", &r.Slot}, {"token", &r.Token}, {"instance", &r.Instance},
		{"attempt", &r.Attempt}, {"manual", &r.Manual}, {"status", &r.Status}, {"started_at", &r.StartedAt},
		{"finished_at", &r.FinishedAt}, {"error", &r.Error}, {"fence", &r.Fence}, {"backfill", &r.Backfill}, {"by", &r.By},
	})
}

// readStrict reads data into fields when it is an object of some of them in their
// order. Strings read are slices of one copy of data.
func readStrict(data []byte, fields []strictField) bool {
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return false
	}
	data = data[:len(data)-1] // the values end before the closing brace
	s := string(data)
	i := 1
	for _, f := range fields {
		k := i
		if i > 1 {
			if k == len(s) || s[k] != ',' {
				break
			}
			k++
		}
		end := k + len(f.key) + 3
		if end > len(s) || s[k] != '"' || s[k+1:end-2] != f.key || s[end-2:end] != `":` {
			continue // not this field: maybe the next one
		}
		next, ok := readValue(data, s, end, f.ptr)
		if !ok {
			return false
		}
		i = next
	}
	return i == len(s)
}

// readValue reads the value at s[i:] (s is data as a string) into ptr, and returns
// where it ends.
func readValue(data []byte, s string, i int, ptr any) (int, bool) {
	num := s[i:integer(s, i)]
	switch p := ptr.(type) {
	case *string:
		end, ok := quoted(s, i)
		if ok {
			*p = s[i+1 : end-1]
		}
		return end, ok && utf8.ValidString(*p)
	case *time.Time:
		end, ok := quoted(s, i)
		return end, ok && p.UnmarshalJSON(data[i:end]) == nil
	case *bool:
		if *p = strings.HasPrefix(s[i:], "true"); *p {
			return i + len("true"), true
		}
		return i + len("false"), strings.HasPrefix(s[i:], "false")
	case *int:
		n, err := strconv.ParseInt(num, 10, strconv.IntSize)
		*p = int(n)
		return i + len(num), err == nil
	case *int64:
		n, err := strconv.ParseInt(num, 10, 64)
		*p = n
		return i + len(num), err == nil
	case **int64:
		n, err := strconv.ParseInt(num, 10, 64)
		*p = &n
		return i + len(num), err == nil
	case *uint64:
		n, err := strconv.ParseUint(num, 10, 64)
		*p = n
		return i + len(num), err == nil
	}
	return i, false
}

// quoted returns the end of the string at s[i:], quotes included, when it has no
// escape or control byte.
func quoted(s string, i int) (int, bool) {
	if i >= len(s) || s[i] != '"' {
		return i, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20 || c == '\\':
			return i, false
		}
	}
	return i, false
}

// integer returns the end of the integer at s[i:] as JSON writes it (an optional
// minus, no leading zero), or i when there is none.
func integer(s string, i int) int {
	j := i
	if j < len(s) && s[j] == '-' {
		j++
	}
	digits := j
	for j < len(s) && '0' <= s[j] && s[j] <= '9' {
		j++
	}
	if j == digits || s[digits] == '0' && j > digits+1 {
		return i
	}
	return j
}
