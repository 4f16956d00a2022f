package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// readyPoll is how often Start re-checks readiness.
const readyPoll = 20 * time.Millisecond

// Server is a running in-process nats-server. Create one with Start and stop
// it with Shutdown.
type Server struct {
	ns        *server.Server
	log       *natsLogger
	storeDir  string
	tempStore bool
	clientURL string

	shutdownOnce sync.Once
}

// Start starts an in-process nats-server and returns once it accepts
// connections and, unless DisableJetStream is set, JetStream is enabled and
// has recovered its store. It fails with an error wrapping ErrInvalidOption,
// ErrStartFailed or ErrNotReady rather than exiting the process, and cleans
// up after itself when it fails. ctx bounds the start only; the server runs
// until Shutdown.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts, la, err := opts.validate()
	if err != nil {
		return nil, err
	}
	return start(ctx, opts, la, nil, true)
}

// start is Start for a validated opts. tune, if not nil, adjusts the
// nats-server options (the cluster uses it for routes). waitHealthy makes it
// wait for a full JetStream health check instead of JetStream being enabled.
func start(ctx context.Context, opts Options, la *listenAddr, tune func(*server.Options), waitHealthy bool) (_ *Server, err error) {
	s := &Server{log: newNATSLogger(opts.Logger), storeDir: opts.StoreDir}

	if !opts.DisableJetStream {
		if s.storeDir, s.tempStore, err = makeDir(s.storeDir, "anarchon-embedded-", "StoreDir"); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil && s.tempStore {
				_ = os.RemoveAll(s.storeDir)
			}
		}()
	}

	sopts := &server.Options{
		ServerName:         opts.ServerName,
		NoSigs:             true, // never install signal handlers (they call os.Exit)
		NoLog:              true, // we set our own logger below
		JetStream:          !opts.DisableJetStream,
		StoreDir:           s.storeDir,
		JetStreamMaxMemory: opts.JetStreamMaxMemory,
		JetStreamMaxStore:  opts.JetStreamMaxStore,
		SyncInterval:       opts.SyncInterval,
		SyncAlways:         opts.SyncAlways,
	}
	if la == nil {
		sopts.DontListen = true
	} else {
		sopts.Host = la.host
		sopts.Port = la.port
		if la.port == 0 {
			// nats-server reads 0 as "the default port 4222".
			sopts.Port = server.RANDOM_PORT
		}
	}
	if tune != nil {
		tune(sopts)
	}

	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStartFailed, err)
	}
	s.ns = ns
	ns.SetLoggerV2(s.log, s.log.enabled(slog.LevelDebug), s.log.enabled(LevelTrace), false)

	// Start returns once the listeners are up (the accept loops run in the
	// server's own goroutines) or right after a fatal error, so this
	// goroutine is short-lived; stop waits for it.
	startDone := make(chan struct{})
	go func() {
		defer close(startDone)
		ns.Start()
	}()
	stop := func() {
		ns.Shutdown()
		<-startDone
		ns.WaitForShutdown()
	}

	hopts := &server.HealthzOptions{JSEnabledOnly: !waitHealthy}
	if err := waitFor(ctx, opts.ReadyTimeout, s.log, func() error {
		select {
		case <-startDone:
		default:
			return errors.New("still starting")
		}
		if h := ns.Healthz(hopts); h.StatusCode != 200 {
			return fmt.Errorf("health check: %s", h.Error)
		}
		return nil
	}); err != nil {
		stop()
		return nil, err
	}
	if err := s.log.err(); err != nil {
		// A fatal error that raced with a passing health check.
		stop()
		return nil, err
	}

	if la != nil {
		addr, ok := ns.Addr().(*net.TCPAddr)
		if !ok {
			stop()
			return nil, fmt.Errorf("%w: no client listener address", ErrStartFailed)
		}
		host := la.host
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			if ip.To4() != nil {
				host = "127.0.0.1"
			} else {
				host = "::1"
			}
		}
		s.clientURL = (&url.URL{Scheme: "nats", Host: net.JoinHostPort(host, strconv.Itoa(addr.Port))}).String()
	}
	return s, nil
}

// waitFor polls check until it returns nil, a fatal error is logged by
// nats-server, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, log *natsLogger, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	var last error
	for {
		var fatal <-chan struct{}
		if log != nil {
			fatal = log.fatalCh
		}
		select {
		case <-fatal:
			return log.err()
		case <-ctx.Done():
			if last == nil {
				last = errors.New("not checked yet")
			}
			return fmt.Errorf("%w: %w (last problem: %w)", ErrNotReady, context.Cause(ctx), last)
		case <-t.C:
			if last = check(); last == nil {
				return nil
			}
		}
	}
}

// ClientURL returns the nats:// URL of the TCP listener, with the real port
// when Options.Listen asked for port 0, or "" when the server has no TCP
// listener. An unspecified listen host (0.0.0.0, ::) is reported as loopback.
func (s *Server) ClientURL() string { return s.clientURL }

// Connect opens a client connection to the server in-process (no TCP),
// which works with or without a TCP listener. opts are applied after the
// in-process option.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.InProcessServer(s.ns)}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("embedded: connect in-process: %w", err)
	}
	return nc, nil
}

// NATS returns the underlying nats-server, for what this package does not
// cover (monitoring, Jsz, Healthz, ...).
func (s *Server) NATS() *server.Server { return s.ns }

// StoreDir returns the JetStream store directory (the temporary one when
// Options.StoreDir was empty), or "" for a server started with
// DisableJetStream and no StoreDir.
func (s *Server) StoreDir() string { return s.storeDir }

// Shutdown stops the server, closing client connections, and waits for it
// to finish. It then removes the store directory if Start created it as a
// temporary one. It is safe to call more than once and concurrently.
func (s *Server) Shutdown() {
	s.shutdownOnce.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		if s.tempStore {
			if err := os.RemoveAll(s.storeDir); err != nil {
				s.log.log.Warn("embedded: remove temporary store", "dir", s.storeDir, "error", err)
			}
		}
	})
}

// makeDir creates dir, or a new temporary directory named with pattern when dir is
// empty (temp reports which); field names the option in errors.
func makeDir(dir, pattern, field string) (_ string, temp bool, err error) {
	if dir == "" {
		dir, err := os.MkdirTemp("", pattern)
		if err != nil {
			return "", false, fmt.Errorf("embedded: create temporary %s: %w", field, err)
		}
		return dir, true, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", false, fmt.Errorf("embedded: create %s: %w", field, err)
	}
	return dir, false, nil
}
