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
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidJobName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidJobName, name)
	case len(name) > MaxJobNameLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidJobName, len(name), MaxJobNameLen)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: %q has leading or trailing space", ErrInvalidJobName, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %q contains a control character", ErrInvalidJobName, name)
	}
	return nil
}

// MaxJobNameLen is the longest job name accepted, in bytes.
const MaxJobNameLen = 1024
