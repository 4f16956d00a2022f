package jetstream

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/scheduler"
)

// Defaults and limits of the options. Each option's documentation names its default.
const (
	// DefaultStreamPrefix starts every job stream's name: <prefix>_<encoded job>.
	DefaultStreamPrefix = "ANARCHON"
	// DefaultSubjectPrefix starts every job subject: <prefix>.<encoded job>.<kind>.
	DefaultSubjectPrefix = "anarchon"
	// DefaultReplicas is the number of replicas of each job stream.
	DefaultReplicas = 1
	// DefaultDedupeWindow is the duplicate window of a job that does not ask for its own.
	DefaultDedupeWindow = 10 * time.Minute
	// MinDedupeWindow is the smallest duplicate window nats-server accepts.
	MinDedupeWindow = 100 * time.Millisecond
	// DefaultTimeout bounds every call whose context has no deadline.
	DefaultTimeout = 10 * time.Second
	// DefaultAttemptTimeout bounds one publish or read inside Claim, which retries
	// (with the same message id and token) until its context ends, and one request
	// inside PrepareJob, which asks again until its context ends.
	DefaultAttemptTimeout = 2 * time.Second
	// MaxPrefixLen bounds both prefixes, so that every job name still encodes into a
	// stream name within nats-server's 255-byte limit.
	MaxPrefixLen = 128
	// MaxJobNameLen is the longest job name the backend accepts (in bytes): the name
	// travels in every record and in the stream's metadata.
	MaxJobNameLen = 16 << 10
)

// Option configures a Backend. Options return errors wrapping
// scheduler.ErrInvalidOption for invalid values; nothing is silently replaced.
type Option func(*config) error

type config struct {
	streamPrefix   string
	subjectPrefix  string
	replicas       int
	storage        natsjs.StorageType
	window         time.Duration
	maxBytes       int64
	timeout        time.Duration
	attemptTimeout time.Duration
	verifyAll      bool
	log            *slog.Logger
}

func defaultConfig() config {
	return config{
		streamPrefix:   DefaultStreamPrefix,
		subjectPrefix:  DefaultSubjectPrefix,
		replicas:       DefaultReplicas,
		storage:        natsjs.FileStorage,
		window:         DefaultDedupeWindow,
		maxBytes:       -1,
		timeout:        DefaultTimeout,
		attemptTimeout: DefaultAttemptTimeout,
		log:            slog.New(slog.DiscardHandler),
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("jetstream: %w: "+format, append([]any{scheduler.ErrInvalidOption}, args...)...)
}

// WithStreamPrefix sets the first part of every job stream's name. Defaults to
// DefaultStreamPrefix. It may hold ASCII letters, digits, '_' and '-', at most
// MaxPrefixLen of them.
func WithStreamPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" || len(prefix) > MaxPrefixLen {
			return invalid("WithStreamPrefix: %q must be 1 to %d bytes", prefix, MaxPrefixLen)
		}
		for _, r := range prefix {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				return invalid("WithStreamPrefix: %q may hold only ASCII letters, digits, '_' and '-' (it names files on the server)", prefix)
			}
		}
		c.streamPrefix = prefix
		return nil
	}
}

// WithSubjectPrefix sets the first tokens of every job subject. Defaults to
// DefaultSubjectPrefix. It must be a literal subject (dot-separated, non-empty
// tokens, no wildcards or whitespace) of at most MaxPrefixLen bytes, and no other
// stream may listen on <prefix>.>.
func WithSubjectPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" || len(prefix) > MaxPrefixLen {
			return invalid("WithSubjectPrefix: %q must be 1 to %d bytes", prefix, MaxPrefixLen)
		}
		for tok := range strings.SplitSeq(prefix, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f") || !printable(tok) {
				return invalid("WithSubjectPrefix: %q is not a literal subject (empty token, wildcard, whitespace or control character)", prefix)
			}
		}
		c.subjectPrefix = prefix
		return nil
	}
}

// WithReplicas sets the number of replicas of each job stream, 1 to 5. Defaults to
// DefaultReplicas. Use 3 on a cluster so claims survive the loss of a server.
func WithReplicas(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 5 {
			return invalid("WithReplicas: %d is not between 1 and 5", n)
		}
		c.replicas = n
		return nil
	}
}

// WithStorage sets where job streams keep their messages. Defaults to file storage,
// which keeps claims (and so the duplicate table) across a server restart; memory
// storage forgets every claim when the server restarts.
func WithStorage(st natsjs.StorageType) Option {
	return func(c *config) error {
		if st != natsjs.FileStorage && st != natsjs.MemoryStorage {
			return invalid("WithStorage: unknown storage type %d", st)
		}
		c.storage = st
		return nil
	}
}

// WithDedupeWindow sets the duplicate window of jobs that do not ask for their own.
// Defaults to DefaultDedupeWindow; at least MinDedupeWindow. A longer window lets
// instances claim later (jitter + max lateness must stay below it) at the cost of
// server memory for the duplicate table and of claims stored for as long.
func WithDedupeWindow(d time.Duration) Option {
	return func(c *config) error {
		if d < MinDedupeWindow {
			return invalid("WithDedupeWindow: %v is below the server minimum %v", d, MinDedupeWindow)
		}
		c.window = d
		return nil
	}
}

// WithMaxBytes caps the size of each job stream in bytes. Defaults to no cap (-1).
// Needed when the account requires streams to set a size (max_bytes_required). A cap
// that evicts claims younger than the duplicate window weakens exactly-once after a
// server restart, so leave room.
func WithMaxBytes(n int64) Option {
	return func(c *config) error {
		if n == 0 || n < -1 {
			return invalid("WithMaxBytes: %d must be positive, or -1 for no cap", n)
		}
		c.maxBytes = n
		return nil
	}
}

// WithTimeout bounds every call whose context has no deadline. Defaults to
// DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("WithTimeout: %v must be positive", d)
		}
		c.timeout = d
		return nil
	}
}

// WithAttemptTimeout bounds one request inside Claim and PrepareJob; they send it
// again after it (Claim with the same message id and token) until their context
// ends. Defaults to DefaultAttemptTimeout.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("WithAttemptTimeout: %v must be positive", d)
		}
		c.attemptTimeout = d
		return nil
	}
}

// WithVerifyEveryDuplicate makes Claim read the stored claim back on every duplicate
// answer. By default it reads back only when this process has published the same
// (job, slot, token) before: a token it never sent cannot be the stored one, so such
// a claim is lost without a second round trip. Use this option when the same token
// may be claimed from more than one process (the contract says tokens are unique
// per attempt, so the scheduler never does that).
func WithVerifyEveryDuplicate() Option {
	return func(c *config) error {
		c.verifyAll = true
		return nil
	}
}

// WithLogger sets the logger for warnings (skipped foreign records, stream updates).
// Defaults to a logger that discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return invalid("WithLogger: nil logger (leave the option out for silence)")
		}
		c.log = l
		return nil
	}
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
