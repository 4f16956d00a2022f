package embedded

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

const (
	// DefaultServerName is the server name used when Options.ServerName is empty.
	DefaultServerName = "anarchon-embedded"
	// DefaultReadyTimeout bounds Start when Options.ReadyTimeout is zero.
	DefaultReadyTimeout = 10 * time.Second
)

// Options configures a single embedded server. The zero value is a usable
// in-process-only server with JetStream on a temporary store.
type Options struct {
	// StoreDir is the JetStream store directory. It is created if missing;
	// nats-server keeps its data in a "jetstream" folder inside it. Empty means
	// a new temporary directory that Shutdown removes. Ignored (and no
	// temporary directory is made) when DisableJetStream is set.
	StoreDir string

	// Listen is an optional TCP address for clients, "host:port". A port of 0
	// picks a free port; ClientURL reports the real one. Empty means no TCP
	// listener at all: clients connect in-process through Server.Connect.
	Listen string

	// ServerName is the nats-server name. Defaults to DefaultServerName.
	ServerName string

	// Logger receives nats-server's log lines: notices at Info, warnings at
	// Warn, errors and fatal errors at Error, debug at Debug and protocol
	// traces at LevelTrace. nats-server produces debug and trace lines only
	// when the Logger is enabled for those levels. Nil means silent.
	Logger *slog.Logger

	// ReadyTimeout bounds how long Start waits for the server to be ready, in
	// addition to the context passed to Start. Defaults to DefaultReadyTimeout.
	ReadyTimeout time.Duration

	// JetStreamMaxMemory and JetStreamMaxStore limit JetStream's memory and
	// file storage in bytes. Zero means the nats-server defaults (a share of
	// system memory and of the store's disk).
	JetStreamMaxMemory, JetStreamMaxStore int64

	// DisableJetStream starts a core NATS server without JetStream.
	DisableJetStream bool

	// SyncInterval is how often JetStream fsyncs file-backed streams. Zero
	// means the nats-server default (2 minutes). Use SyncAlways for an fsync
	// after every write instead; setting both is an error.
	SyncInterval time.Duration

	// SyncAlways makes JetStream fsync after every write: the safest and
	// slowest setting.
	SyncAlways bool
}

// listenAddr is a validated Options.Listen.
type listenAddr struct {
	host string
	port int // 0 = random
}

// validate checks o and returns it with defaults applied.
func (o Options) validate() (Options, *listenAddr, error) {
	if o.ServerName == "" {
		o.ServerName = DefaultServerName
	}
	if o.ReadyTimeout < 0 {
		return o, nil, fmt.Errorf("%w: ReadyTimeout must not be negative, got %s", ErrInvalidOption, o.ReadyTimeout)
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.JetStreamMaxMemory < 0 {
		return o, nil, fmt.Errorf("%w: JetStreamMaxMemory must not be negative, got %d", ErrInvalidOption, o.JetStreamMaxMemory)
	}
	if o.JetStreamMaxStore < 0 {
		return o, nil, fmt.Errorf("%w: JetStreamMaxStore must not be negative, got %d", ErrInvalidOption, o.JetStreamMaxStore)
	}
	if o.SyncInterval < 0 {
		return o, nil, fmt.Errorf("%w: SyncInterval must not be negative, got %s", ErrInvalidOption, o.SyncInterval)
	}
	if o.SyncInterval > 0 && o.SyncAlways {
		return o, nil, fmt.Errorf("%w: SyncInterval and SyncAlways are mutually exclusive", ErrInvalidOption)
	}
	if o.Listen == "" {
		return o, nil, nil
	}
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return o, nil, fmt.Errorf("%w: Listen %q: %w", ErrInvalidOption, o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return o, nil, fmt.Errorf("%w: Listen %q: port must be a number from 0 to 65535", ErrInvalidOption, o.Listen)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return o, &listenAddr{host: host, port: port}, nil
}
