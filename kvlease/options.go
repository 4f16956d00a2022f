package kvlease

import (
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/scheduler"
)

// Defaults of a Store's options.
const (
	// DefaultBucket is the KV bucket holding the leases.
	DefaultBucket = "anarchon_leases"
	// DefaultReplicas is the bucket's replica count.
	DefaultReplicas = 1
	// DefaultStorage is the bucket's storage.
	DefaultStorage = jetstream.FileStorage
	// DefaultTimeout bounds a call whose context has no deadline.
	DefaultTimeout = 5 * time.Second
	// DefaultAttemptTimeout bounds one request to the server inside a call. A request
	// left unanswered (a leader stepping down or dying with it in flight; nats.go does
	// not fail pending requests on reconnect) is sent again after it, while the call's
	// context allows: every write is a compare-and-set, so sending it again is safe.
	DefaultAttemptTimeout = time.Second
	// MaxReplicas is the most replicas JetStream allows.
	MaxReplicas = 5
)

// Option changes a Store's configuration. An invalid value makes New return an error
// wrapping scheduler.ErrInvalidOption that names the option.
type Option func(*options) error

type options struct {
	bucket   string
	replicas int
	storage  jetstream.StorageType
	timeout  time.Duration
	attempt  time.Duration
}

func defaultOptions() options {
	return options{bucket: DefaultBucket, replicas: DefaultReplicas, storage: DefaultStorage, timeout: DefaultTimeout, attempt: DefaultAttemptTimeout}
}

var validBucket = regexp.MustCompile(`\A[a-zA-Z0-9_-]+\z`)

func optErr(format string, args ...any) error {
	return fmt.Errorf("%w: kvlease: %s", scheduler.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// WithBucket sets the KV bucket's name: letters, digits, '-' and '_'. Defaults to
// DefaultBucket.
func WithBucket(name string) Option {
	return func(o *options) error {
		if !validBucket.MatchString(name) {
			return optErr("WithBucket(%q): a bucket name is letters, digits, '-' and '_'", name)
		}
		o.bucket = name
		return nil
	}
}

// WithReplicas sets the bucket's replica count, 1 to MaxReplicas; use 3 in a cluster.
// Defaults to DefaultReplicas. Init applies it to an existing bucket too.
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxReplicas {
			return optErr("WithReplicas(%d): replicas are 1 to %d", n, MaxReplicas)
		}
		o.replicas = n
		return nil
	}
}

// WithStorage sets the bucket's storage, jetstream.FileStorage or
// jetstream.MemoryStorage. Defaults to DefaultStorage. A memory bucket loses its
// leases when the server restarts.
func WithStorage(st jetstream.StorageType) Option {
	return func(o *options) error {
		if st != jetstream.FileStorage && st != jetstream.MemoryStorage {
			return optErr("WithStorage(%v): storage is file or memory", st)
		}
		o.storage = st
		return nil
	}
}

// WithTimeout sets how long a call may take when its context has no deadline.
// Defaults to DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return optErr("WithTimeout(%v): the timeout must be positive", d)
		}
		o.timeout = d
		return nil
	}
}

// WithAttemptTimeout sets how long one request to the server may go unanswered
// before it is sent again (within the call's own deadline). Defaults to
// DefaultAttemptTimeout.
func WithAttemptTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return optErr("WithAttemptTimeout(%v): the timeout must be positive", d)
		}
		o.attempt = d
		return nil
	}
}
