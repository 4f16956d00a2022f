package backend

import "fmt"

// DSTPolicy says which slots a cron schedule has where its zone changes its
// clocks (daylight saving time). The zero value is the default: DSTFirst and
// DSTShift. It is part of the schedule: every instance computes the same slots.
type DSTPolicy struct {
	// Repeated is for a wall time that happens twice, when clocks fall back.
	Repeated DSTRepeated `json:"repeated,omitempty"`
	// Missing is for a wall time that never happens, when clocks spring forward.
	Missing DSTMissing `json:"missing,omitempty"`
}

// DSTRepeated says which occurrences of a repeated wall time are slots.
type DSTRepeated string

// DSTMissing says what a wall time skipped by a jump of the clocks gives.
type DSTMissing string

// The DST policies. Empty values mean the defaults.
const (
	// DSTFirst: the first occurrence (the earlier instant). The default.
	DSTFirst DSTRepeated = "first"
	// DSTLast: the second occurrence (the later instant).
	DSTLast DSTRepeated = "last"
	// DSTBoth: both occurrences, an hour (the size of the change) apart.
	DSTBoth DSTRepeated = "both"

	// DSTShift: the instant the wall time would have been without the jump,
	// so later by the jump (02:30 becomes 03:30). The default.
	DSTShift DSTMissing = "shift"
	// DSTSkip: no slot.
	DSTSkip DSTMissing = "skip"
)

// Normal returns p with empty values replaced by the defaults.
func (p DSTPolicy) Normal() DSTPolicy {
	if p.Repeated == "" {
		p.Repeated = DSTFirst
	}
	if p.Missing == "" {
		p.Missing = DSTShift
	}
	return p
}

// IsDefault reports whether p gives the default slots.
func (p DSTPolicy) IsDefault() bool { return p.Normal() == DSTPolicy{}.Normal() }

// Check refuses a value that is not one of the policies, with an error wrapping
// ErrInvalidOption.
func (p DSTPolicy) Check() error {
	switch p.Repeated {
	case "", DSTFirst, DSTLast, DSTBoth:
	default:
		return fmt.Errorf("%w: DST policy for a repeated wall time %q: want %s, %s or %s", ErrInvalidOption, string(p.Repeated), DSTFirst, DSTLast, DSTBoth)
	}
	switch p.Missing {
	case "", DSTShift, DSTSkip:
	default:
		return fmt.Errorf("%w: DST policy for a missing wall time %q: want %s or %s", ErrInvalidOption, string(p.Missing), DSTShift, DSTSkip)
	}
	return nil
}

// String is the values that differ from the defaults, as "repeated=both
// missing=skip"; empty for the default policy.
func (p DSTPolicy) String() string {
	p = p.Normal()
	var s string
	if p.Repeated != DSTFirst {
		s = "repeated=" + string(p.Repeated)
	}
	if p.Missing != DSTShift {
		if s != "" {
			s += " "
		}
		s += "missing=" + string(p.Missing)
	}
	return s
}
