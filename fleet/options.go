package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Client defaults.
const (
	// DefaultTimeout bounds a client request whose context has no deadline.
	DefaultTimeout = 5 * time.Second
	// DefaultGatherWindow is how long Client.Jobs collects replicas' answers.
	DefaultGatherWindow = 500 * time.Millisecond
	// DefaultSetupTimeout bounds Serve's set-up (its subscriptions and the
	// registry's bucket) when its context has no deadline: a cluster that has just
	// created a stream for each of thousands of jobs answers a bucket's creation
	// late.
	DefaultSetupTimeout = 30 * time.Second
)

// Option configures Serve, NewClient or Events. An option that does not apply to the call
// it is given to is an error wrapping ErrInvalidOption.
type Option func(*config) error

type role int

const (
	roleService role = iota
	roleClient
	roleEvents
)

type config struct {
	role    role
	prefix  string
	log     *slog.Logger
	timeout time.Duration
	window  time.Duration
	// The registry (Serve; the bucket also NewClient).
	bucket     string
	heartbeat  time.Duration
	noRegistry bool
	// regReplicas is the registry bucket's replicas when Serve creates it.
	regReplicas int
	// Headers: what NewClient adds to its requests, and what Serve makes of them.
	headers func(context.Context, nats.Header)
	reqCtx  func(context.Context, nats.Header) context.Context
	// requestInfo trusts the server's Nats-Request-Info header (WithRequestInfo).
	requestInfo bool
}

func newConfig(r role, opts []Option) (*config, error) {
	c := &config{role: r, prefix: DefaultPrefix, timeout: DefaultTimeout, window: DefaultGatherWindow,
		bucket: DefaultRegistryBucket, heartbeat: DefaultHeartbeat}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *config) only(r role, name string) error {
	if c.role != r {
		return fmt.Errorf("%w: %s applies to %s only", ErrInvalidOption, name, map[role]string{roleService: "Serve", roleClient: "NewClient", roleEvents: "Events"}[r])
	}
	return nil
}

// WithPrefix sets the first subject tokens of every endpoint (one or more tokens,
// no wildcards). Defaults to DefaultPrefix. Replicas and clients of one fleet use
// the same prefix; two fleets in one account use different ones.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := validPrefix(prefix); err != nil {
			return err
		}
		c.prefix = prefix
		return nil
	}
}

// WithLogger sets the logger of the service (Serve only): requests that change
// something (trigger, pause, resume) at info with who asked, failures at warn.
// Defaults to a logger that discards.
func WithLogger(log *slog.Logger) Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithLogger"); err != nil {
			return err
		}
		if log == nil {
			return fmt.Errorf("%w: WithLogger: nil logger", ErrInvalidOption)
		}
		c.log = log
		return nil
	}
}

// WithTimeout bounds each client request whose context has no deadline (NewClient
// only). Defaults to DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(roleClient, "WithTimeout"); err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("%w: WithTimeout: %v is not positive", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithGatherWindow sets how long Client.Jobs collects the replicas' answers
// (NewClient only). Defaults to DefaultGatherWindow. A replica that answers later
// is not listed.
func WithGatherWindow(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(roleClient, "WithGatherWindow"); err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("%w: WithGatherWindow: %v is not positive", ErrInvalidOption, d)
		}
		c.window = d
		return nil
	}
}

// WithRegistryBucket names the key-value bucket of the registry (Serve and
// NewClient). Defaults to DefaultRegistryBucket; one bucket serves every fleet of
// an account, each under its prefix.
func WithRegistryBucket(name string) Option {
	return func(c *config) error {
		if c.role == roleEvents {
			return fmt.Errorf("%w: WithRegistryBucket applies to Serve and NewClient only", ErrInvalidOption)
		}
		if name == "" || strings.IndexFunc(name, func(r rune) bool {
			return !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) >= 0 {
			return fmt.Errorf("%w: WithRegistryBucket: %q is not a bucket name (letters, digits, _ and -)", ErrInvalidOption, name)
		}
		c.bucket = name
		return nil
	}
}

// WithHeartbeat sets how often the replica rewrites its registry entry (Serve
// only); the entry expires three heartbeats after the last rewrite. Defaults to
// DefaultHeartbeat; at least one second (the server keeps a message's TTL in whole
// seconds), at most MaxHeartbeat.
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithHeartbeat"); err != nil {
			return err
		}
		if d < time.Second || d > MaxHeartbeat {
			return fmt.Errorf("%w: WithHeartbeat: %v is not from one second to %v", ErrInvalidOption, d, MaxHeartbeat)
		}
		c.heartbeat = d
		return nil
	}
}

// WithRegistryReplicas sets how many servers of a cluster hold the registry's
// bucket when Serve creates it (Serve only): 3 on a cluster of three, so that the
// registry, and a replica starting, outlive one server. Defaults to 1; 1 to 5. A
// bucket created before keeps its replicas.
func WithRegistryReplicas(n int) Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithRegistryReplicas"); err != nil {
			return err
		}
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: WithRegistryReplicas: %d is not from 1 to 5", ErrInvalidOption, n)
		}
		c.regReplicas = n
		return nil
	}
}

// WithoutRegistry serves the fleet endpoints without the registry (Serve only):
// for an account without JetStream. Then no replica reports the jobs the others
// declare differently, and clients list this replica only while it answers.
func WithoutRegistry() Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithoutRegistry"); err != nil {
			return err
		}
		c.noRegistry = true
		return nil
	}
}

// WithRequestHeaders has the client add headers to every request it sends
// (NewClient only): fn gets the context of the call that sends the request and the
// request's headers, empty, to set. It is how a caller's trace context travels
// to the replica that serves the request (the otel module supplies one, the W3C
// trace context); a replica makes of the headers what WithRequestContext says.
// fn must return quickly. The fleet's own headers are not fn's to set: micro's
// error headers are replies' only.
func WithRequestHeaders(fn func(ctx context.Context, h nats.Header)) Option {
	return func(c *config) error {
		if err := c.only(roleClient, "WithRequestHeaders"); err != nil {
			return err
		}
		if fn == nil {
			return fmt.Errorf("%w: WithRequestHeaders: nil function", ErrInvalidOption)
		}
		c.headers = fn
		return nil
	}
}

// WithRequestContext turns the headers of each request the replica serves into
// the context it is served with (Serve only): fn gets the service's context and
// the request's headers (nil when it has none) and returns that context or one
// derived from it, with values added (a trace context, say). A trigger's RunNow
// gets the context's values, not its cancellation, so the handler of the manual
// run carries them. The headers come from whoever may send requests: fn must
// treat them as untrusted and return quickly. A panic of fn is recovered and
// logged, and the request served with the service's context.
func WithRequestContext(fn func(ctx context.Context, h nats.Header) context.Context) Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithRequestContext"); err != nil {
			return err
		}
		if fn == nil {
			return fmt.Errorf("%w: WithRequestContext: nil function", ErrInvalidOption)
		}
		c.reqCtx = fn
		return nil
	}
}
