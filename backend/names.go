package backend

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ValidateJobName reports whether name can name a job: non-empty valid UTF-8, at
// most MaxJobNameLen bytes, no control characters, no leading or trailing space.
// Backends encode the name for their own stores; they do not restrict it further.
func ValidateJobName(name string) error {
	if problem := nameProblem(name, "", MaxJobNameLen); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidJobName, problem)
	}
	return nil
}

// nameProblem says what keeps s from naming a job or an entry (what, e.g. "ID",
// names it in the text), or "" when nothing does.
func nameProblem(s, what string, maxLen int) string {
	named := fmt.Sprintf("%q", s)
	if what != "" {
		named = what + " " + named
	}
	switch {
	case s == "":
		return strings.TrimSpace("empty " + what)
	case !utf8.ValidString(s):
		return named + " is not valid UTF-8"
	case len(s) > maxLen:
		size := fmt.Sprintf("%d bytes, at most %d", len(s), maxLen)
		if what != "" {
			size = what + " of " + size
		}
		return size
	case strings.TrimSpace(s) != s:
		return named + " has leading or trailing space"
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return named + " contains a control character"
	}
	return ""
}

// MaxJobNameLen is the longest job name accepted, in bytes.
const MaxJobNameLen = 1024
