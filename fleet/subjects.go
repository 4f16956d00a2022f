package fleet

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode"
)

// Endpoint verbs: the second subject token.
const (
	verbJobs      = "jobs"
	verbPauseAll  = "pauseall"
	verbResumeAll = "resumeall"
	verbTrigger   = "trigger"
	verbPause     = "pause"
	verbResume    = "resume"
	verbHistory   = "history"
	verbActive    = "active"
	verbEvents    = "events"
)

// JobToken encodes a job name as one subject token: base64url without padding, so
// any job name (dots, spaces, wildcards, any UTF-8) fits in one token made of
// letters, digits, '-' and '_'. Per-job endpoints are <prefix>.<verb>.<JobToken>:
//
//	nats req anarchon.trigger.$(printf %s 'nightly report' | basenc --base64url | tr -d =) '{}'
func JobToken(job string) string { return base64.RawURLEncoding.EncodeToString([]byte(job)) }

// subjects builds the endpoint subjects under one prefix.
type subjects string

func (p subjects) fleet(verb string) string { return string(p) + "." + verb }

func (p subjects) job(verb, job string) string { return string(p) + "." + verb + "." + JobToken(job) }

// validPrefix reports whether prefix is one or more subject tokens without
// wildcards or white space.
func validPrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("%w: empty prefix", ErrInvalidOption)
	}
	for tok := range strings.SplitSeq(prefix, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("%w: prefix %q has an empty token", ErrInvalidOption, prefix)
		case tok == "*" || tok == ">" || strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("%w: prefix %q has a wildcard", ErrInvalidOption, prefix)
		case strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			return fmt.Errorf("%w: prefix %q has white space or a control character", ErrInvalidOption, prefix)
		}
	}
	return nil
}
