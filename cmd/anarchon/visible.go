package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// What the command prints comes from the replicas: a handler's error, a pause's
// reason, a job's or an instance's name. Anyone who can make a replica store a text
// (a job that fails with a crafted error, an operator's reason) must not reach the
// terminal of whoever reads it: an OSC 52 sets the clipboard, an OSC 0 the window
// title, a CSI clears the screen or moves the cursor, a bidi override shows
// "exe.txt" as "txt.exe". So every remote text goes through visible before it is
// printed for a person, and the command's output goes through a terminalSafe
// writer, so that a print that forgot lets nothing through either.

// visible returns s with every control character shown as an escape, so that the
// text reaches the terminal as text and a table row stays one line:
//
//   - tab, newline and carriage return as \t, \n, \r; the other C0 controls and
//     DEL as \x1b, \x7f;
//   - the C1 controls (U+0080–U+009F) and the Unicode bidi controls (U+061C,
//     U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), the line and paragraph
//     separators (U+2028, U+2029) as \u009b, \u202e;
//   - a byte that is not UTF-8 as \xff.
//
// Everything else, backslashes included, is kept: visible(visible(s)) == visible(s).
func visible(s string) string {
	if safeText(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			b.WriteString(escapeRune(r))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether r changes what a terminal does instead of showing a
// character: a C0 or C1 control, DEL, a bidi control or a line separator.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x2028 && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

func escapeRune(r rune) string {
	switch {
	case r == '\t':
		return `\t`
	case r == '\n':
		return `\n`
	case r == '\r':
		return `\r`
	case r < 0x80:
		return fmt.Sprintf(`\x%02x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// shorten returns the first n bytes of s (len(s) > n), backed up to the start of a
// rune: half a rune is a bad byte on the terminal.
func shorten(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// safeText reports whether s prints as it is: valid UTF-8 without an unsafe rune.
func safeText(s string) bool {
	for i, r := range s {
		if unsafeRune(r) || r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") {
			return false
		}
	}
	return true
}

// makeVisible replaces every string reachable from v (a pointer to a reply or an
// event: struct fields, slices, maps and their keys, typed strings such as
// scheduler.Status) with visible's rendering, so that a table is built from text
// that is safe to print, whatever fields a reply grows. Unexported fields are left
// alone (time.Time keeps its own).
func makeVisible(v any) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic(fmt.Sprintf("makeVisible: %T is not a non-nil pointer", v))
	}
	visibleValue(rv.Elem())
}

func visibleValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			v.SetString(visible(v.String()))
		}
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Interface {
			// A value in an interface cannot be set in place: change a copy.
			c := reflect.New(v.Elem().Type()).Elem()
			c.Set(v.Elem())
			visibleValue(c)
			if v.CanSet() {
				v.Set(c)
			}
			return
		}
		visibleValue(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				visibleValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes, not text
		}
		for i := range v.Len() {
			visibleValue(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() || !v.CanSet() {
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.New(v.Type().Key()).Elem()
			k.Set(it.Key())
			visibleValue(k)
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			visibleValue(e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	}
}

// terminalSafe wraps w so that nothing written to it reaches a terminal as a
// control: with layout (tables and lines) it passes tab and newline and writes
// every other unsafe rune as visible does; for JSON it writes DEL, the C1 and the
// bidi controls as JSON escapes (\u009b), which decode to the same strings:
// encoding/json escapes the C0 controls itself but passes those.
type terminalSafe struct {
	mu      sync.Mutex
	w       io.Writer
	json    bool
	pending []byte // the start of a rune the last write cut
}

func newTerminalSafe(w io.Writer, json bool) *terminalSafe { return &terminalSafe{w: w, json: json} }

func (t *terminalSafe) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	buf := append(t.pending, p...)
	t.pending = nil
	out := make([]byte, 0, len(buf))
	for i := 0; i < len(buf); {
		r, size := utf8.DecodeRune(buf[i:])
		switch {
		case r == utf8.RuneError && size <= 1 && !utf8.FullRune(buf[i:]):
			t.pending = append([]byte(nil), buf[i:]...)
			size = len(buf) - i
		case r == utf8.RuneError && size == 1:
			out = t.appendBad(out, buf[i])
		case r == '\n', r == '\t':
			out = append(out, byte(r))
		case unsafeRune(r) && t.json:
			out = fmt.Appendf(out, `\u%04x`, r)
		case unsafeRune(r):
			out = append(out, escapeRune(r)...)
		default:
			out = append(out, buf[i:i+size]...)
		}
		i += size
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t *terminalSafe) appendBad(out []byte, b byte) []byte {
	if t.json {
		return append(out, `\ufffd`...) // encoding/json never writes a bad byte
	}
	return fmt.Appendf(out, `\x%02x`, b)
}

// Flush writes the start of a rune that no write completed, as bad bytes.
func (t *terminalSafe) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []byte
	for _, b := range t.pending {
		out = t.appendBad(out, b)
	}
	t.pending = nil
	if len(out) == 0 {
		return nil
	}
	_, err := t.w.Write(out)
	return err
}
