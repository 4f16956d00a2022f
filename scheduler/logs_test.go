package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/scheduler"
)

// logged is one log record, its attributes as text.
type logged struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// captureLog is a slog.Handler that keeps every record, at every level.
type captureLog struct {
	mu      sync.Mutex
	records *[]logged
	with    []slog.Attr
}

func newCaptureLog() *captureLog { return &captureLog{records: &[]logged{}} }

func (c *captureLog) Enabled(context.Context, slog.Level) bool { return true }

func (c *captureLog) Handle(_ context.Context, r slog.Record) error {
	l := logged{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range c.with {
		l.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		v := a.Value.Resolve()
		if v.Kind() == slog.KindTime {
			l.attrs[a.Key] = v.Time().UTC().Format(time.RFC3339Nano)
		} else {
			l.attrs[a.Key] = v.String()
		}
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.records = append(*c.records, l)
	return nil
}

func (c *captureLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureLog{records: c.records, with: append(append([]slog.Attr(nil), c.with...), as...)}
}

func (c *captureLog) WithGroup(string) slog.Handler { return c }

func (c *captureLog) all() []logged {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]logged(nil), *c.records...)
}

// TestLogLevels runs two instances, each logging through one logger as Config.Logger
// and LogEvents, as the docs advise: a slot lost to the other instance is logged
// at debug level only; a handler's error and timeout at warn ("run failed"); a
// panic at error with its stack, once; "run finished" at info whatever the status.
func TestLogLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		logs := map[string]*captureLog{}
		var scheds []*scheduler.Scheduler
		for _, id := range []string{"A", "B"} {
			c := newCaptureLog()
			logs[id] = c
			log := slog.New(c)
			s := newScheduler(t, b, id, func(cfg *scheduler.Config) {
				cfg.Logger, cfg.OnEvent = log, scheduler.LogEvents(log)
			})
			require.NoError(t, s.Every("ok", 10*time.Second, func(context.Context, scheduler.Run) error { return nil }))
			require.NoError(t, s.Every("fails", time.Hour, func(context.Context, scheduler.Run) error {
				return fmt.Errorf("write report: %w", errDiskFull)
			}))
			require.NoError(t, s.Every("panics", time.Hour, func(context.Context, scheduler.Run) error { panic("kaboom") }))
			require.NoError(t, s.Every("slow", time.Hour, func(ctx context.Context, _ scheduler.Run) error {
				<-ctx.Done()
				return ctx.Err()
			}, scheduler.WithTimeout(time.Second)))
			scheds = append(scheds, s)
		}
		time.Sleep(time.Minute)
		for _, s := range scheds {
			require.NoError(t, s.Start(t.Context()))
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		before := map[string]int{} // the lines logged before Stop
		for id, c := range logs {
			before[id] = len(c.all())
		}
		for _, s := range scheds {
			require.NoError(t, s.Stop(t.Context()))
		}

		// Who ran which slot, by the runs' own lines.
		ranBy := map[string]string{} // job+slot → instance
		for id, c := range logs {
			for _, l := range c.all() {
				if l.msg == "run started" {
					ranBy[l.attrs["job"]+" "+l.attrs["slot"]] = id
				}
			}
		}
		lostAt := 0
		var failed, panicked, stacks []logged
		for id, c := range logs {
			for i, l := range c.all() {
				key := l.attrs["job"] + " " + l.attrs["slot"]
				// Before Stop (which may hand a run over, and cut calls short).
				if by, ok := ranBy[key]; ok && by != id && l.attrs["slot"] != "" && i < before[id] {
					assert.Equal(t, slog.LevelDebug, l.level, "%s logs a slot %s ran (%s) at debug level only: %s %v", id, by, key, l.msg, l.attrs)
					if l.msg == "claim lost" {
						lostAt++
					}
				}
				if l.msg == "run finished" {
					assert.Equal(t, slog.LevelInfo, l.level, "run finished: %v", l.attrs)
				}
				switch l.msg {
				case "run failed":
					failed = append(failed, l)
				case "handler panicked":
					panicked = append(panicked, l)
				}
				for _, v := range l.attrs {
					if strings.Contains(v, "goroutine ") {
						stacks = append(stacks, l)
					}
				}
			}
		}
		assert.Positive(t, lostAt, "the instance that lost a slot says so, at debug level")

		require.Len(t, failed, 2, "the error and the timeout: %v", failed)
		byJob := map[string]logged{}
		for _, l := range failed {
			assert.Equal(t, slog.LevelWarn, l.level)
			byJob[l.attrs["job"]] = l
		}
		assert.Equal(t, "error", byJob["fails"].attrs["status"])
		assert.Equal(t, "write report: disk full", byJob["fails"].attrs["err"])
		assert.Equal(t, "timeout", byJob["slow"].attrs["status"])
		assert.Equal(t, "context deadline exceeded", byJob["slow"].attrs["err"], "what the handler returned")

		require.Len(t, panicked, 1, "one line for the panic")
		assert.Equal(t, slog.LevelError, panicked[0].level)
		assert.Equal(t, "kaboom", panicked[0].attrs["panic"])
		assert.Equal(t, "panics", panicked[0].attrs["job"])
		require.Len(t, stacks, 1, "the stack is logged once")
		assert.Contains(t, stacks[0].attrs["stack"], "panic(")
	})
}

// Without LogEvents, the configured logger alone still gets a run's failure.
func TestLoggerAloneGetsFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCaptureLog()
		s := newScheduler(t, memory.New(), "A", func(cfg *scheduler.Config) { cfg.Logger = slog.New(c) })
		require.NoError(t, s.Every("fails", time.Hour, func(context.Context, scheduler.Run) error { return errors.New("disk full") }))
		time.Sleep(time.Minute)
		require.NoError(t, s.Start(t.Context()))
		time.Sleep(time.Hour)
		require.NoError(t, s.Stop(t.Context()))
		var warns []string
		for _, l := range c.all() {
			if l.level >= slog.LevelWarn {
				warns = append(warns, l.msg+": "+l.attrs["err"])
			}
		}
		assert.Equal(t, []string{"run failed: disk full"}, warns)
	})
}
