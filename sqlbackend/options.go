package sqlbackend

import (
	"fmt"
	"regexp"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// DefaultTablePrefix is the prefix of the backend's table names.
const DefaultTablePrefix = "anarchon_"

// Default poll intervals of watchers (WatchRun, WatchPauses): with a dialect that
// notifies (PostgreSQL), polling is only the safety net; without one it is how a
// backup learns that a lease ended.
const (
	DefaultPollInterval       = 200 * time.Millisecond
	DefaultNotifyPollInterval = 5 * time.Second
	// MinPollInterval bounds WithPollInterval from below.
	MinPollInterval = 10 * time.Millisecond
)

// Option configures New. An invalid option makes New fail with an error matching
// scheduler.ErrInvalidOption.
type Option func(*options) error

type options struct {
	prefix    string
	poll      time.Duration
	claimKeep time.Duration
}

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,30}$`)

// WithTablePrefix sets the prefix of the table names (default "anarchon_"): lower
// case letters, digits and underscores, at most 31 characters, not starting with
// a digit. Backends sharing a database with different prefixes share nothing.
func WithTablePrefix(p string) Option {
	return func(o *options) error {
		if !prefixRE.MatchString(p) {
			return fmt.Errorf("%w: sqlbackend: WithTablePrefix(%q): lower case letters, digits and _, at most 31, not starting with a digit", scheduler.ErrInvalidOption, p)
		}
		o.prefix = p
		return nil
	}
}

// WithPollInterval sets how often watchers read the tables again (default
// DefaultPollInterval without notifications, DefaultNotifyPollInterval with them).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < MinPollInterval {
			return fmt.Errorf("%w: sqlbackend: WithPollInterval(%v): at least %v", scheduler.ErrInvalidOption, d, MinPollInterval)
		}
		o.poll = d
		return nil
	}
}

// WithClaimRetention makes the backend forget a claimed slot once it was claimed
// longer than d ago (by the database's clock), and report d as its dedupe window:
// a job whose jitter + max lateness is not below d is refused. By default claims
// are kept forever (the window is scheduler.Forever); a busy fleet may bound the
// table this way. It must be at least a minute.
func WithClaimRetention(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Minute {
			return fmt.Errorf("%w: sqlbackend: WithClaimRetention(%v): at least 1m", scheduler.ErrInvalidOption, d)
		}
		o.claimKeep = d
		return nil
	}
}
