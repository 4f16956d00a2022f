// Package option is the one rule for the options of anarchon's packages: they are
// applied in order and a nil one is skipped; an invalid value is an error that
// names the option and the value, and that matches both the package's own
// ErrInvalidOption and backend.ErrInvalidOption with errors.Is, so that one check
// covers every package and each message still says where it came from.
package option

import (
	"fmt"
	"strconv"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Sentinel returns pkg's ErrInvalidOption: "<pkg>: invalid option" in messages,
// and matching backend.ErrInvalidOption.
func Sentinel(pkg string) error {
	return &sentinel{msg: pkg + ": invalid option"}
}

type sentinel struct{ msg string }

func (e *sentinel) Error() string { return e.msg }

// Unwrap makes the sentinel match backend.ErrInvalidOption.
func (e *sentinel) Unwrap() error { return backend.ErrInvalidOption }

// Apply applies opts to c in order, skipping nil ones, and returns the first error.
func Apply[C any, O ~func(*C) error](c *C, opts []O) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// Checked returns an option that sets v with set once check accepts it. A value
// check refuses is an error wrapping invalid (the package's ErrInvalidOption) and
// check's error, naming the option: "<pkg>: invalid option: WithReplicas(7): ...".
func Checked[C, V any](invalid error, name string, v V, check func(V) error, set func(*C, V)) func(*C) error {
	return func(c *C) error {
		if err := check(v); err != nil {
			return fmt.Errorf("%w: %s(%s): %w", invalid, name, show(v), err)
		}
		set(c, v)
		return nil
	}
}

// Positive accepts durations above zero.
func Positive(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("must be positive")
	}
	return nil
}

// show formats an option's value for a message: strings quoted, so that an empty
// one or one with spaces shows.
func show(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}
