package kvlease

import (
	"errors"
	"regexp"
	"time"

	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/internal/option"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of a Store's options.
const (
	// DefaultBucket is the KV bucket holding the leases.
	DefaultBucket = "anarchon_leases"
	// DefaultReplicas is the bucket's replica count.
	DefaultReplicas = 1
	// DefaultStorage is the bucket's storage.
	DefaultStorage = jetstream.FileStorage
	// DefaultCallTimeout bounds a call whose context has no deadline.
	DefaultCallTimeout = 5 * time.Second
	// DefaultTimeout is DefaultCallTimeout.
	//
	// Deprecated: use DefaultCallTimeout.
	DefaultTimeout = DefaultCallTimeout
	// DefaultAttemptTimeout bounds one request to the server inside a call. A request
	// left unanswered is sent again after it, while the call's context allows. That
	// happens when a leader steps down or dies with it in flight; nats.go does not
	// fail pending requests on reconnect. Every write is a compare-and-set, so
	// sending it again is safe.
	DefaultAttemptTimeout = time.Second
	// MaxReplicas is the most replicas JetStream allows.
	MaxReplicas = natsutil.MaxReplicas
	// DefaultMaxClaimsInFlight is how many claims a Store sends to the server at
	// once; more wait their turn in the Store (see WithMaxClaimsInFlight).
	DefaultMaxClaimsInFlight = 256
)

// Option changes a Store's configuration. An invalid value makes New return an error
// wrapping ErrInvalidOption (which matches backend.ErrInvalidOption) that names
// the option; nothing is silently replaced. A nil Option is skipped.
type Option func(*options) error

type options struct {
	bucket      string
	replicas    int
	storage     jetstream.StorageType
	callTimeout time.Duration
	attempt     time.Duration
	inFlight    int
}

func defaultOptions() options {
	return options{bucket: DefaultBucket, replicas: DefaultReplicas, storage: DefaultStorage, callTimeout: DefaultCallTimeout, attempt: DefaultAttemptTimeout, inFlight: DefaultMaxClaimsInFlight}
}

var validBucket = regexp.MustCompile(`\A[a-zA-Z0-9_-]+\z`)

func checked[V any](name string, v V, check func(V) error, set func(*options, V)) Option {
	return option.Checked(ErrInvalidOption, name, v, check, set)
}

// WithBucket sets the KV bucket's name: letters, digits, '-' and '_'. Defaults to
// DefaultBucket.
func WithBucket(name string) Option {
	return checked("WithBucket", name, func(name string) error {
		if !validBucket.MatchString(name) {
			return errors.New("a bucket name is letters, digits, '-' and '_'")
		}
		return nil
	}, func(o *options, name string) { o.bucket = name })
}

// WithReplicas sets the bucket's replica count, 1 to MaxReplicas; use 3 in a cluster.
// Defaults to DefaultReplicas. Init applies it to an existing bucket too.
func WithReplicas(n int) Option {
	return checked("WithReplicas", n, natsutil.CheckReplicas, func(o *options, n int) { o.replicas = n })
}

// WithStorage sets the bucket's storage, jetstream.FileStorage or
// jetstream.MemoryStorage. Defaults to DefaultStorage. A memory bucket loses its
// leases when the server restarts.
func WithStorage(st jetstream.StorageType) Option {
	return checked("WithStorage", st, natsutil.CheckStorage, func(o *options, st jetstream.StorageType) { o.storage = st })
}

// WithCallTimeout sets how long a call may take when its context has no deadline:
// the whole call, its retries included (WithAttemptTimeout bounds each request
// inside it). Defaults to DefaultCallTimeout.
func WithCallTimeout(d time.Duration) Option {
	return checked("WithCallTimeout", d, option.Positive, func(o *options, d time.Duration) { o.callTimeout = d })
}

// WithTimeout is WithCallTimeout. It is not the handler's timeout
// (scheduler.WithTimeout), hence the new name.
//
// Deprecated: use WithCallTimeout.
func WithTimeout(d time.Duration) Option { return WithCallTimeout(d) }

// WithAttemptTimeout sets how long one request to the server may go unanswered
// before it is sent again (within the call's own deadline). Defaults to
// DefaultAttemptTimeout.
func WithAttemptTimeout(d time.Duration) Option {
	return checked("WithAttemptTimeout", d, option.Positive, func(o *options, d time.Duration) { o.attempt = d })
}

// WithAtomicBatches changes nothing: a store writes one key at a time.
//
// Deprecated: atomic batches cost more than they saved on nats-server 2.15
// (docs/backends.md); the option is kept so that programs keep compiling.
func WithAtomicBatches() Option { return func(*options) error { return nil } }

// WithMaxClaimsInFlight bounds how many claims the Store has at the server at once,
// at least 1; the others wait in the Store, within their call's deadline. Defaults
// to DefaultMaxClaimsInFlight.
//
// A burst of claims larger than the server answers within the attempt timeout (a
// fleet with thousands of jobs on one schedule and no jitter) would otherwise time
// out at the back of the server's queue. Each would be sent again, and read again
// once retried. The server would then spend the next slots on requests nobody
// waits for any more. Waiting in the Store costs the same time without the repeats.
func WithMaxClaimsInFlight(n int) Option {
	return checked("WithMaxClaimsInFlight", n, func(n int) error {
		if n < 1 {
			return errors.New("at least 1")
		}
		return nil
	}, func(o *options, n int) { o.inFlight = n })
}
