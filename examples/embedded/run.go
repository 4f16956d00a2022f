package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// jobs is the order in which the history is printed.
var jobs = []string{"cleanup", "digest"}

// run starts the embedded server on the store, schedules the jobs on it and runs
// until ctx ends or -duration has passed. A graceful stop returns nil.
func run(ctx context.Context, args []string, w io.Writer) error {
	out := &syncWriter{w: w}
	c, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	// Warnings and errors of the server and the scheduler go to the same output.
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))

	srv, err := embedded.Start(ctx, embedded.Options{StoreDir: c.store, Listen: c.listen, Logger: log})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	dir, err := filepath.Abs(srv.StoreDir())
	if err != nil {
		dir = srv.StoreDir()
	}
	fmt.Fprintf(out, "embedded: JetStream server on store %s\n", dir)
	if url := srv.ClientURL(); url != "" {
		fmt.Fprintf(out, "embedded: NATS clients can connect to %s\n", url)
	}

	nc, err := srv.Connect(nats.Name("anarchon-embedded"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	// Leases in a KV bucket, history in a stream per job: both on the store, so both
	// survive a restart. A finished slot stays "done" for the leases' keep time, so
	// an instance that restarts right after a slot does not run it again.
	runs, err := kvlease.New(js)
	if err != nil {
		return err
	}
	defer runs.Close()
	if err := runs.Init(ctx); err != nil {
		return fmt.Errorf("lease bucket: %w", err)
	}
	backend, err := jetstream.NewLeased(js, runs, jetstream.WithLogger(log))
	if err != nil {
		return err
	}
	defer backend.Close(context.WithoutCancel(ctx))

	s, err := scheduler.New(scheduler.Config{Backend: backend, Instance: c.instance, Logger: log, OnEvent: printRuns(out)})
	if err != nil {
		return err
	}
	if err := register(s, c); err != nil {
		return err
	}
	if c.history > 0 {
		fmt.Fprintln(out, "embedded: history kept on the store from earlier runs:")
		if err := printHistory(ctx, out, s, c.history); err != nil {
			return err
		}
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "embedded: instance %s runs %q every %v and %q on %q\n", s.Instance(), "cleanup", c.interval, "digest", c.cron)

	var timeout <-chan time.Time
	if c.duration > 0 {
		t := time.NewTimer(c.duration)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
	case <-timeout:
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.stopTimeout)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		fmt.Fprintf(out, "embedded: %v\n", err)
	}
	if c.history > 0 {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := printHistory(hctx, out, s, c.history); err != nil {
			return err
		}
	}
	return nil
}

func register(s *scheduler.Scheduler, c config) error {
	opts := []scheduler.JobOption{scheduler.WithTimeout(c.interval)}
	if c.catchUp > 0 {
		opts = append(opts, scheduler.WithCatchUp(scheduler.CatchUpLatest, c.catchUp))
	}
	err := s.Every("cleanup", c.interval, func(ctx context.Context, run scheduler.Run) error {
		return work(ctx, 20*time.Millisecond)
	}, opts...)
	if err != nil {
		return err
	}
	// A digest may start up to 5 s after its slot. (With the default, a minute, a
	// start would run every digest slot of the last minute at once.)
	return s.Cron("digest", c.cron, func(ctx context.Context, run scheduler.Run) error {
		return work(ctx, 10*time.Millisecond)
	}, scheduler.WithMaxLate(5*time.Second))
}

// work stands for a job's real work: it takes d, or returns early when ctx ends.
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// printRuns is the scheduler's event hook: one line per run that ended, and per slot
// that could not run.
func printRuns(out io.Writer) func(scheduler.Event) {
	return func(e scheduler.Event) {
		switch e.Kind {
		case scheduler.EventFinished:
			line := fmt.Sprintf("ran %s slot %s on %s (attempt %d): %s in %v", e.Job, e.Slot.UTC().Format(time.RFC3339Nano), e.Instance, e.Attempt, e.Status, e.Duration.Round(time.Millisecond))
			if e.Err != nil {
				line += ": " + e.Err.Error()
			}
			fmt.Fprintln(out, line)
		case scheduler.EventLate:
			fmt.Fprintf(out, "late %s slot %s: its deadline passed before it was claimed\n", e.Job, e.Slot.UTC().Format(time.RFC3339Nano))
		}
	}
}

// printHistory prints each job's last n runs, read back from the store.
func printHistory(ctx context.Context, out io.Writer, s *scheduler.Scheduler, n int) error {
	for _, job := range jobs {
		recs, err := s.History(ctx, job, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "history of %q, newest first (%d):\n", job, len(recs))
		for _, r := range recs {
			fmt.Fprintf(out, "  %s  %-24s  attempt %d  %-8s  %v\n", r.Slot.UTC().Format(time.RFC3339Nano), r.Instance, r.Attempt, r.Status, r.Duration.Round(time.Millisecond))
		}
	}
	return nil
}

// syncWriter lets the scheduler's goroutines print to one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
