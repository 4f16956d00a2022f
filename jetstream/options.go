package jetstream

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
	"github.com/anarchon/anarchon/internal/option"
)

// Defaults and limits of the options. Each option's documentation names its default.
const (
	// DefaultStreamPrefix starts every job stream's name: <prefix>_<encoded job>.
	DefaultStreamPrefix = "ANARCHON"
	// DefaultSubjectPrefix starts every job subject: <prefix>.<encoded job>.<kind>.
	DefaultSubjectPrefix = "anarchon"
	// DefaultReplicas is the number of replicas of each job stream.
	DefaultReplicas = 1
	// MinFittedWindow is the shortest duplicate window FitWindow gives a job.
	MinFittedWindow = 30 * time.Second
	// MinDedupeWindow is the smallest duplicate window nats-server accepts.
	MinDedupeWindow = 100 * time.Millisecond
	// DefaultCallTimeout bounds every call whose context has no deadline.
	DefaultCallTimeout = 10 * time.Second
	// DefaultTimeout is DefaultCallTimeout.
	//
	// Deprecated: use DefaultCallTimeout.
	DefaultTimeout = DefaultCallTimeout
	// DefaultAttemptTimeout bounds one publish or read inside Claim, which retries
	// (with the same message id and token) until its context ends, and one request
	// inside PrepareJob, which asks again until its context ends.
	DefaultAttemptTimeout = 2 * time.Second
	// MaxPrefixLen bounds both prefixes, so that every job name still encodes into a
	// stream name within nats-server's 255-byte limit.
	MaxPrefixLen = 128
	// MaxJobNameLen is the longest job name the backend accepts, in bytes: the
	// scheduler's limit, since claims and CheckJob validate names with
	// backend.ValidateJobName. Longer names are not refused for the server's sake
	// (a name is encoded into the stream name and hashed when long, and travels in
	// every record and in the stream's metadata): there is one limit for every
	// backend.
	MaxJobNameLen = backend.MaxJobNameLen
)

// Option configures a Backend. An invalid value makes New return an error wrapping
// ErrInvalidOption (which matches backend.ErrInvalidOption) that names the
// option; nothing is silently replaced. A nil Option is skipped.
type Option func(*config) error

type config struct {
	streamPrefix   string
	subjectPrefix  string
	replicas       int
	storage        natsjs.StorageType
	window         time.Duration
	maxBytes       int64
	callTimeout    time.Duration
	attemptTimeout time.Duration
	verifyAll      bool
	mixedFleet     bool
	leased         bool // set by NewLeased
	log            *slog.Logger
}

func defaultConfig() config {
	return config{
		streamPrefix:   DefaultStreamPrefix,
		subjectPrefix:  DefaultSubjectPrefix,
		replicas:       DefaultReplicas,
		storage:        natsjs.FileStorage,
		maxBytes:       -1,
		callTimeout:    DefaultCallTimeout,
		attemptTimeout: DefaultAttemptTimeout,
		log:            slog.New(slog.DiscardHandler),
	}
}

func checked[V any](name string, v V, check func(V) error, set func(*config, V)) Option {
	return option.Checked(ErrInvalidOption, name, v, check, set)
}

// WithStreamPrefix sets the first part of every job stream's name. Defaults to
// DefaultStreamPrefix. It may hold ASCII letters, digits, '_' and '-', at most
// MaxPrefixLen of them.
func WithStreamPrefix(prefix string) Option {
	return checked("WithStreamPrefix", prefix, func(prefix string) error {
		if prefix == "" || len(prefix) > MaxPrefixLen {
			return fmt.Errorf("must be 1 to %d bytes", MaxPrefixLen)
		}
		for _, r := range prefix {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				return errors.New("may hold only ASCII letters, digits, '_' and '-' (it names files on the server)")
			}
		}
		return nil
	}, func(c *config, prefix string) { c.streamPrefix = prefix })
}

// WithSubjectPrefix sets the first tokens of every job subject. Defaults to
// DefaultSubjectPrefix. It must be a literal subject (dot-separated, non-empty
// tokens, no wildcards or whitespace) of at most MaxPrefixLen bytes, and no other
// stream may listen on <prefix>.>.
func WithSubjectPrefix(prefix string) Option {
	return checked("WithSubjectPrefix", prefix, func(prefix string) error {
		if prefix == "" || len(prefix) > MaxPrefixLen {
			return fmt.Errorf("must be 1 to %d bytes", MaxPrefixLen)
		}
		for tok := range strings.SplitSeq(prefix, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f") || !printable(tok) {
				return errors.New("not a literal subject (empty token, wildcard, whitespace or control character)")
			}
		}
		return nil
	}, func(c *config, prefix string) { c.subjectPrefix = prefix })
}

// WithReplicas sets the number of replicas of each job stream, 1 to 5 (MaxReplicas). Defaults to
// DefaultReplicas. Use 3 on a cluster so claims survive the loss of a server.
func WithReplicas(n int) Option {
	return checked("WithReplicas", n, natsutil.CheckReplicas, func(c *config, n int) { c.replicas = n })
}

// WithStorage sets where job streams keep their messages. Defaults to file storage,
// which keeps claims (and so the duplicate table) across a server restart; memory
// storage forgets every claim when the server restarts.
func WithStorage(st natsjs.StorageType) Option {
	return checked("WithStorage", st, natsutil.CheckStorage, func(c *config, st natsjs.StorageType) { c.storage = st })
}

// WithDedupeWindow sets the duplicate window of jobs that do not ask for their own,
// at least MinDedupeWindow, instead of the window fitted to each job's timing
// (FitWindow, the default). A longer window lets instances claim later (jitter + max
// lateness must stay below it) at the cost of server memory for the duplicate table
// and of claims stored for as long. A window set here, or by the job, is applied to
// an existing stream whether it is wider or narrower; a fitted one only widens it.
func WithDedupeWindow(d time.Duration) Option {
	return checked("WithDedupeWindow", d, func(d time.Duration) error {
		if d < MinDedupeWindow {
			return fmt.Errorf("below the server minimum %v", MinDedupeWindow)
		}
		return nil
	}, func(c *config, d time.Duration) { c.window = d })
}

// WithMaxBytes caps the size of each job stream in bytes. Defaults to no cap (-1).
// Needed when the account requires streams to set a size (max_bytes_required). A cap
// that evicts claims younger than the duplicate window weakens exactly-once after a
// server restart, so leave room.
func WithMaxBytes(n int64) Option {
	return checked("WithMaxBytes", n, func(n int64) error {
		if n == 0 || n < -1 {
			return errors.New("must be positive, or -1 for no cap")
		}
		return nil
	}, func(c *config, n int64) { c.maxBytes = n })
}

// WithCallTimeout bounds every call whose context has no deadline: the whole call,
// its retries included (WithAttemptTimeout bounds each request inside it). Defaults
// to DefaultCallTimeout.
func WithCallTimeout(d time.Duration) Option {
	return checked("WithCallTimeout", d, option.Positive, func(c *config, d time.Duration) { c.callTimeout = d })
}

// WithTimeout is WithCallTimeout. It is not the handler's timeout
// (scheduler.WithTimeout), hence the new name.
//
// Deprecated: use WithCallTimeout.
func WithTimeout(d time.Duration) Option { return WithCallTimeout(d) }

// WithAttemptTimeout bounds one request inside Claim and PrepareJob; they send it
// again after it (Claim with the same message id and token) until their context
// ends. Defaults to DefaultAttemptTimeout.
func WithAttemptTimeout(d time.Duration) Option {
	return checked("WithAttemptTimeout", d, option.Positive, func(c *config, d time.Duration) { c.attemptTimeout = d })
}

// WithVerifyEveryDuplicate makes Claim read the stored claim back on every duplicate
// answer. By default it reads back only when the token may be the stored one by
// what this Backend has seen (see Claim): it published the same (job, slot, token)
// before, or it already answered another token of the slot. The first token of a
// slot on a Backend that it never sent is lost without a second round trip. Use
// this option when the same token may be claimed through more than one Backend
// value or process as its first claim of the slot (the contract says tokens are
// unique per attempt, so the scheduler never does that).
func WithVerifyEveryDuplicate() Option {
	return func(c *config) error {
		c.verifyAll = true
		return nil
	}
}

// WithMixedFleet makes a LeasedBackend fit for a rolling upgrade, in which
// instances with leases (NewLeased) and without (New) share jobs. It records each
// won lease on the slot's claim subject before the handler (RecordClaim, one
// round trip more), so whichever kind claims a slot first runs it. Its PrepareJob
// marks each job's stream "mixed", which instances of either kind accept.
//
// Without it a LeasedBackend writes no record before the handler, marks the
// stream "leases", and refuses a stream marked "plain". A plain Backend marks it
// "plain" and refuses "leases"; on New the option changes nothing, as a plain
// claim is always the one the others meet. docs/backends.md ("Mixed fleets")
// gives the steps of an upgrade in either direction.
func WithMixedFleet() Option {
	return func(c *config) error {
		c.mixedFleet = true
		return nil
	}
}

// WithLeasedFleet changes nothing: a LeasedBackend without WithMixedFleet
// writes no record before the handler.
//
// Deprecated: leave it out; WithMixedFleet is the option of a rolling upgrade.
func WithLeasedFleet() Option { return nil }

// WithLogger sets the logger for warnings (skipped foreign records, stream updates).
// Defaults to a logger that discards everything.
func WithLogger(l *slog.Logger) Option {
	return checked("WithLogger", l, func(l *slog.Logger) error {
		if l == nil {
			return errors.New("nil logger (leave the option out for silence)")
		}
		return nil
	}, func(c *config, l *slog.Logger) { c.log = l })
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
