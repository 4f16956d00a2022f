package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// LevelTrace is the slog level nats-server trace messages (protocol traces)
// are logged at. They are produced only when the Logger is enabled for it.
const LevelTrace = slog.LevelDebug - 4

// natsLogger adapts a *slog.Logger to server.Logger.
//
// nats-server's own loggers call os.Exit from Fatalf. This one never does:
// it logs the message at slog.LevelError with fatal=true and records the
// first fatal error so Start can return it. nats-server always returns from
// the failing code path after calling Fatalf, leaving a half-started server
// that Start then shuts down.
type natsLogger struct {
	log *slog.Logger

	mu       sync.Mutex
	fatalErr error
	fatalCh  chan struct{} // closed on the first Fatalf
}

var _ server.Logger = (*natsLogger)(nil)

func newNATSLogger(l *slog.Logger) *natsLogger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &natsLogger{log: l, fatalCh: make(chan struct{})}
}

func (l *natsLogger) enabled(level slog.Level) bool {
	return l.log.Enabled(context.Background(), level)
}

func (l *natsLogger) logf(level slog.Level, format string, v []any, attrs ...any) {
	if !l.enabled(level) {
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), attrs...)
}

func (l *natsLogger) Noticef(format string, v ...any) { l.logf(slog.LevelInfo, format, v) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v) }
func (l *natsLogger) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l *natsLogger) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }
func (l *natsLogger) Tracef(format string, v ...any)  { l.logf(LevelTrace, format, v) }

// Fatalf logs and records the error; it never exits the process.
func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg, "fatal", true)

	err := &fatalError{msg: msg}
	for _, a := range v {
		if e, ok := a.(error); ok {
			err.cause = e
			break
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatalErr == nil {
		l.fatalErr = err
		close(l.fatalCh)
	}
}

// err returns the error of the first Fatalf call, nil before one.
func (l *natsLogger) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalErr
}

// fatalError is a nats-server fatal error. It matches ErrStartFailed and
// the error nats-server passed to Fatalf, if any; its message is
// nats-server's, which already includes that error's text.
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return ErrStartFailed.Error() + ": " + e.msg }

func (e *fatalError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrStartFailed}
	}
	return []error{ErrStartFailed, e.cause}
}
