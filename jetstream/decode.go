package jetstream

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// A fast reader of the two record bodies, claimRecord and resultRecord.
//
// encoding/json was most of History's client CPU (its reflection, per field, per
// record). These read a flat JSON object by hand instead, and their rule is: give
// EXACTLY the record json.Unmarshal gives, or give up (ok false) and let
// json.Unmarshal decide. They give up on anything they do not handle: invalid JSON,
// a value of the wrong type for a known field (json.Unmarshal's error then),
// a key with an escape or a non-ASCII byte or one matching a known field only when
// case is ignored (encoding/json matches keys case-insensitively, Unicode folds
// included), nesting deeper than maxSkipDepth. Unknown fields are skipped, whatever
// their type, after checking their syntax as encoding/json's scanner does. Time
// fields go through time.Time's own UnmarshalJSON, as in encoding/json. FuzzDecodeRecords
// checks the rule against encoding/json on arbitrary bytes.

// maxSkipDepth bounds the nesting of an unknown field's value read by hand.
const maxSkipDepth = 32

// recordReader reads one JSON text. Strings without escapes are slices of s (one
// allocation per record for them all).
type recordReader struct {
	data []byte
	s    string // data as a string
	i    int
}

func newRecordReader(data []byte) recordReader {
	return recordReader{data: data, s: string(data)}
}

func (r *recordReader) ws() {
	for r.i < len(r.s) {
		switch r.s[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// begin reads the opening brace of the object that must be the whole text.
func (r *recordReader) begin() bool {
	r.ws()
	if r.i >= len(r.s) || r.s[r.i] != '{' {
		return false
	}
	r.i++
	r.ws()
	return true
}

// closing reads the closing brace of the object if it is next.
func (r *recordReader) closing() bool {
	if r.i < len(r.s) && r.s[r.i] == '}' {
		r.i++
		return true
	}
	return false
}

// field reads a key and its colon: a key made of printable ASCII without escapes
// (else false), the reader then at its value.
func (r *recordReader) field() (string, bool) {
	key, ok := r.key()
	if !ok {
		return "", false
	}
	r.ws()
	if r.i >= len(r.s) || r.s[r.i] != ':' {
		return "", false
	}
	r.i++
	r.ws()
	return key, true
}

// after reads what follows a field's value: a comma and the next key's quote, or
// the closing brace, left for closing.
func (r *recordReader) after() bool {
	r.ws()
	if r.i >= len(r.s) {
		return false
	}
	switch r.s[r.i] {
	case ',':
		r.i++
		r.ws()
		return r.i < len(r.s) && r.s[r.i] == '"'
	case '}':
		return true
	}
	return false
}

// end reports whether nothing but white space follows.
func (r *recordReader) end() bool {
	r.ws()
	return r.i == len(r.s)
}

// key reads an object key made of printable ASCII without escapes (for ASCII, the
// folding encoding/json matches keys with is ASCII's).
func (r *recordReader) key() (string, bool) {
	if r.i >= len(r.s) || r.s[r.i] != '"' {
		return "", false
	}
	start := r.i + 1
	for j := start; j < len(r.s); j++ {
		switch c := r.s[j]; {
		case c == '"':
			r.i = j + 1
			return r.s[start:j], true
		case c < 0x20 || c >= utf8.RuneSelf || c == '\\':
			return "", false
		}
	}
	return "", false
}

// unknown reports whether key is no field of names, not even ignoring case: its
// value may then be skipped. Keys are ASCII (key).
func unknown(key string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(key, n) {
			return false
		}
	}
	return true
}

// null reads a null if one is next.
func (r *recordReader) null() bool {
	if strings.HasPrefix(r.s[r.i:], "null") {
		r.i += len("null")
		return true
	}
	return false
}

// integer reads a JSON number that is an integer: -?(0|[1-9][0-9]*), with no
// fraction or exponent (those give up: encoding/json refuses them for integer
// fields, and skip reads them for unknown ones).
func (r *recordReader) integer() (string, bool) {
	start := r.i
	j := r.i
	if j < len(r.s) && r.s[j] == '-' {
		j++
	}
	switch {
	case j < len(r.s) && r.s[j] == '0':
		j++
	case j < len(r.s) && r.s[j] >= '1' && r.s[j] <= '9':
		for j < len(r.s) && r.s[j] >= '0' && r.s[j] <= '9' {
			j++
		}
	default:
		return "", false
	}
	if j < len(r.s) {
		switch r.s[j] {
		case '.', 'e', 'E':
			return "", false
		}
	}
	r.i = j
	return r.s[start:j], true
}

// int reads an int field's value into *v; null leaves it.
func (r *recordReader) int(v *int) bool { return readSigned(r, v, strconv.IntSize) }

// int64 reads an int64 field's value into *v; null leaves it.
func (r *recordReader) int64(v *int64) bool { return readSigned(r, v, 64) }

// readSigned reads a signed integer field's value of bits bits into *v; null
// leaves it.
func readSigned[T int | int64](r *recordReader, v *T, bits int) bool {
	if r.null() {
		return true
	}
	s, ok := r.integer()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return false
	}
	*v = T(n)
	return true
}

// int64Ptr reads a *int64 field's value into *v; null sets it to nil.
func (r *recordReader) int64Ptr(v **int64) bool {
	if r.null() {
		*v = nil
		return true
	}
	var n int64
	if !r.int64(&n) {
		return false
	}
	*v = &n
	return true
}

// uint64 reads a uint64 field's value into *v; null leaves it.
func (r *recordReader) uint64(v *uint64) bool {
	if r.null() {
		return true
	}
	s, ok := r.integer()
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return false
	}
	*v = n
	return true
}

// bool reads a bool field's value into *v; null leaves it.
func (r *recordReader) bool(v *bool) bool {
	switch {
	case r.null():
	case strings.HasPrefix(r.s[r.i:], "true"):
		r.i += len("true")
		*v = true
	case strings.HasPrefix(r.s[r.i:], "false"):
		r.i += len("false")
		*v = false
	default:
		return false
	}
	return true
}

// time reads a time.Time field's value into *v with time.Time's UnmarshalJSON, given
// the string's raw bytes as encoding/json gives them; null leaves it.
func (r *recordReader) time(v *time.Time) bool {
	if r.null() {
		return true
	}
	start := r.i
	if _, ok := r.rawString(); !ok {
		return false
	}
	var t time.Time
	if t.UnmarshalJSON(r.data[start:r.i]) != nil {
		return false
	}
	*v = t
	return true
}

// string reads a string field's value into *v; null leaves it.
func (r *recordReader) string(v *string) bool {
	if r.null() {
		return true
	}
	start := r.i
	plain, ok := r.rawString()
	if !ok {
		return false
	}
	if plain {
		*v = r.s[start+1 : r.i-1]
	} else {
		*v = unquote(r.s[start+1 : r.i-1])
	}
	return true
}

// rawString reads a JSON string, checking it as encoding/json's scanner does (no
// control characters, valid escapes; any other byte goes). plain says it needs no
// unquoting: no escapes, valid UTF-8.
func (r *recordReader) rawString() (plain, ok bool) {
	if r.i >= len(r.s) || r.s[r.i] != '"' {
		return false, false
	}
	plain = true
	ascii := true
	start := r.i + 1
	for j := start; j < len(r.s); j++ {
		for j < len(r.s) && !stringSpecial[r.s[j]] {
			j++
		}
		if j >= len(r.s) {
			break
		}
		c := r.s[j]
		switch {
		case c == '"':
			r.i = j + 1
			if !ascii && plain {
				plain = utf8.ValidString(r.s[start:j])
			}
			return plain, true
		case c < 0x20:
			return false, false
		case c >= utf8.RuneSelf:
			ascii = false
		case c == '\\':
			plain = false
			j++
			if j >= len(r.s) {
				return false, false
			}
			switch r.s[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(r.s) {
					return false, false
				}
				for _, h := range []byte(r.s[j+1 : j+5]) {
					if hexDigit(h) < 0 {
						return false, false
					}
				}
				j += 4
			default:
				return false, false
			}
		}
	}
	return false, false
}

// stringSpecial marks the bytes a string's plain run stops at: its end, an
// escape, a control character, a byte of a multi-byte UTF-8 sequence.
var stringSpecial = func() (t [256]bool) {
	for c := range t {
		t[c] = c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf
	}
	return t
}()

func hexDigit(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// getu4 reads the \uXXXX at the start of s, or says -1.
func getu4(s string) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for i := 2; i < 6; i++ {
		d := hexDigit(s[i])
		if d < 0 {
			return -1
		}
		r = r*16 + d
	}
	return r
}

// unquote is encoding/json's unquoting of the inside of a string rawString has
// checked: escapes decoded, a \u surrogate that is not half of a pair and every
// byte of invalid UTF-8 turned into U+FFFD.
func unquote(s string) string {
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch e := s[i+1]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := getu4(s[i:])
				i += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(s[i:])); dec != unicode.ReplacementChar {
						i += 6
						b = utf8.AppendRune(b, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			rr, size := utf8.DecodeRuneInString(s[i:])
			b = utf8.AppendRune(b, rr)
			i += size
		}
	}
	return string(b)
}

// skip reads any JSON value, checking its syntax.
func (r *recordReader) skip(depth int) bool {
	if r.i >= len(r.s) || depth > maxSkipDepth {
		return false
	}
	switch c := r.s[r.i]; {
	case c == '"':
		_, ok := r.rawString()
		return ok
	case c == '{':
		r.i++
		r.ws()
		if r.i < len(r.s) && r.s[r.i] == '}' {
			r.i++
			return true
		}
		for {
			r.ws()
			if _, ok := r.rawString(); !ok {
				return false
			}
			r.ws()
			if r.i >= len(r.s) || r.s[r.i] != ':' {
				return false
			}
			r.i++
			r.ws()
			if !r.skip(depth + 1) {
				return false
			}
			r.ws()
			if r.i >= len(r.s) {
				return false
			}
			switch r.s[r.i] {
			case ',':
				r.i++
			case '}':
				r.i++
				return true
			default:
				return false
			}
		}
	case c == '[':
		r.i++
		r.ws()
		if r.i < len(r.s) && r.s[r.i] == ']' {
			r.i++
			return true
		}
		for {
			r.ws()
			if !r.skip(depth + 1) {
				return false
			}
			r.ws()
			if r.i >= len(r.s) {
				return false
			}
			switch r.s[r.i] {
			case ',':
				r.i++
			case ']':
				r.i++
				return true
			default:
				return false
			}
		}
	case c == '-' || ('0' <= c && c <= '9'):
		return r.number()
	case c == 't':
		return r.literal("true")
	case c == 'f':
		return r.literal("false")
	case c == 'n':
		return r.literal("null")
	}
	return false
}

func (r *recordReader) literal(lit string) bool {
	if strings.HasPrefix(r.s[r.i:], lit) {
		r.i += len(lit)
		return true
	}
	return false
}

// number reads any JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *recordReader) number() bool {
	j := r.i
	digits := func() bool {
		k := j
		for j < len(r.s) && r.s[j] >= '0' && r.s[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(r.s) && r.s[j] == '-' {
		j++
	}
	switch {
	case j < len(r.s) && r.s[j] == '0':
		j++
	case !digits():
		return false
	}
	if j < len(r.s) && r.s[j] == '.' {
		j++
		if !digits() {
			return false
		}
	}
	if j < len(r.s) && (r.s[j] == 'e' || r.s[j] == 'E') {
		j++
		if j < len(r.s) && (r.s[j] == '+' || r.s[j] == '-') {
			j++
		}
		if !digits() {
			return false
		}
	}
	r.i = j
	return true
}

// recordHead points at the fields claims and results share, in either record.
type recordHead struct {
	v, attempt           *int
	job, token, instance *string
	slot                 **int64
	manual               *bool
}

// headField reads the value of key into h when key is one of the shared fields;
// known reports whether it is.
func (r *recordReader) headField(key string, h recordHead) (ok, known bool) {
	switch key {
	case "v":
		return r.int(h.v), true
	case "job":
		return r.string(h.job), true
	case "slot_ms":
		return r.int64Ptr(h.slot), true
	case "token":
		return r.string(h.token), true
	case "instance":
		return r.string(h.instance), true
	case "attempt":
		return r.int(h.attempt), true
	case "manual":
		return r.bool(h.manual), true
	}
	return false, false
}

var claimFields = []string{"v", "job", "slot_ms", "token", "instance", "attempt", "manual", "at", "by", "history_ttl_ms", "leased"}

// fastClaim reads data into *c as json.Unmarshal would, or reports false (*c is then
// partly set).
func fastClaim(data []byte, c *claimRecord) bool {
	r := newRecordReader(data)
	if !r.begin() {
		return false
	}
	h := recordHead{v: &c.V, job: &c.Job, slot: &c.Slot, token: &c.Token, instance: &c.Instance, attempt: &c.Attempt, manual: &c.Manual}
	for !r.closing() {
		key, ok := r.field()
		if !ok {
			return false
		}
		if ok, known := r.headField(key, h); known {
			if !ok || !r.after() {
				return false
			}
			continue
		}
		switch key {
		case "at":
			ok = r.time(&c.At)
		case "by":
			ok = r.string(&c.By)
		case "history_ttl_ms":
			ok = r.int64(&c.HistoryTTL)
		case "leased":
			ok = r.bool(&c.Leased)
		default:
			ok = unknown(key, claimFields) && r.skip(0)
		}
		if !ok || !r.after() {
			return false
		}
	}
	return r.end()
}

var resultFields = []string{"v", "job", "slot_ms", "token", "instance", "attempt", "manual", "status", "started_at", "finished_at", "error", "fence"}

// fastResult reads data into *res as json.Unmarshal would, or reports false (*res is
// then partly set).
func fastResult(data []byte, res *resultRecord) bool {
	r := newRecordReader(data)
	if !r.begin() {
		return false
	}
	h := recordHead{v: &res.V, job: &res.Job, slot: &res.Slot, token: &res.Token, instance: &res.Instance, attempt: &res.Attempt, manual: &res.Manual}
	for !r.closing() {
		key, ok := r.field()
		if !ok {
			return false
		}
		if ok, known := r.headField(key, h); known {
			if !ok || !r.after() {
				return false
			}
			continue
		}
		switch key {
		case "status":
			ok = r.string(&res.Status)
		case "started_at":
			ok = r.time(&res.StartedAt)
		case "finished_at":
			ok = r.time(&res.FinishedAt)
		case "error":
			ok = r.string(&res.Error)
		case "fence":
			ok = r.uint64(&res.Fence)
		default:
			ok = unknown(key, resultFields) && r.skip(0)
		}
		if !ok || !r.after() {
			return false
		}
	}
	return r.end()
}
