package sqlbackend

import (
	"fmt"
	"regexp"
	"time"

	"github.com/anarchon/anarchon/internal/option"
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

// DefaultCallTimeout bounds a call whose context has no deadline (WithCallTimeout).
const DefaultCallTimeout = 10 * time.Second

// Option configures New. Options apply in order, a nil one is skipped, and an
// invalid one makes New fail with an error matching ErrInvalidOption (and
// backend.ErrInvalidOption) that names it.
type Option func(*options) error

type options struct {
	prefix      string
	poll        time.Duration
	claimKeep   time.Duration
	callTimeout time.Duration
	tombstones  int
}

func checked[V any](name string, v V, check func(V) error, set func(*options, V)) Option {
	return option.Checked(ErrInvalidOption, name, v, check, set)
}

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,30}$`)

// WithTablePrefix sets the prefix of the table names (default "anarchon_"): lower
// case letters, digits and underscores, at most 31 characters, not starting with
// a digit. Backends sharing a database with different prefixes share nothing.
func WithTablePrefix(p string) Option {
	return checked("WithTablePrefix", p, func(p string) error {
		if !prefixRE.MatchString(p) {
			return fmt.Errorf("lower case letters, digits and _, at most 31, not starting with a digit")
		}
		return nil
	}, func(o *options, p string) { o.prefix = p })
}

// WithPollInterval sets how often watchers read the tables again (default
// DefaultPollInterval without notifications, DefaultNotifyPollInterval with them);
// at least MinPollInterval.
func WithPollInterval(d time.Duration) Option {
	return checked("WithPollInterval", d, func(d time.Duration) error {
		if d < MinPollInterval {
			return fmt.Errorf("at least %v", MinPollInterval)
		}
		return nil
	}, func(o *options, d time.Duration) { o.poll = d })
}

// WithClaimRetention makes the backend forget a claimed slot once it was claimed
// longer than d ago (by the database's clock), and report d as its dedupe window:
// a job whose jitter + max lateness is not below d is refused. By default claims
// are kept forever (the window is backend.Forever); a busy fleet may bound the
// table this way. It must be at least a minute.
func WithClaimRetention(d time.Duration) Option {
	return checked("WithClaimRetention", d, func(d time.Duration) error {
		if d < time.Minute {
			return fmt.Errorf("at least 1m")
		}
		return nil
	}, func(o *options, d time.Duration) { o.claimKeep = d })
}

// WithCallTimeout bounds every call made with a context that has no deadline
// (default DefaultCallTimeout); a deadline already set is kept. Watches are not
// bounded: they last until their context ends.
func WithCallTimeout(d time.Duration) Option {
	return checked("WithCallTimeout", d, option.Positive, func(o *options, d time.Duration) { o.callTimeout = d })
}

// DefaultEntryTombstones is how many removed schedule entries the store remembers
// for its watchers (WithEntryTombstones).
const DefaultEntryTombstones = 10_000

// WithEntryTombstones sets how many removed schedule entries the store remembers
// (default DefaultEntryTombstones; at least 1). A removal leaves a tombstone row
// that watchers read as the removal; past n, the oldest are pruned. A watcher
// that fell behind the pruning lists every entry again and learns the removals it
// missed from what is gone, so that a small n costs such a watcher a full read,
// never a lost change.
func WithEntryTombstones(n int) Option {
	return checked("WithEntryTombstones", n, func(n int) error {
		if n < 1 {
			return fmt.Errorf("at least 1")
		}
		return nil
	}, func(o *options, n int) { o.tombstones = n })
}
