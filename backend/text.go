package backend

import (
	"strconv"
	"unicode/utf8"
)

// MaxErrorText bounds the error text of a stored result, in bytes. A longer text
// (a handler's error, a cause) is cut at a UTF-8 boundary and ends with a mark that
// says how many bytes were cut, so that every record fits in one message of the
// smallest store the backends support, and a history of many failures in a few.
const MaxErrorText = 8 << 10

// TruncateText returns s if it is at most max bytes, else its first bytes cut at a
// UTF-8 boundary and followed by the mark " …[cut from N bytes]", the whole at
// most max bytes. Invalid UTF-8 is kept as is. When max is too small for the mark,
// the text is cut to max bytes without it.
func TruncateText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	mark := " …[cut from " + strconv.Itoa(len(s)) + " bytes]"
	if len(mark) >= max {
		return cutAtRune(s, max)
	}
	return cutAtRune(s, max-len(mark)) + mark
}

// cutAtRune returns the first n bytes of s (len(s) > n), backed up to the start of
// a rune so that the kept part stays valid UTF-8 where s was.
func cutAtRune(s string, n int) string {
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
