// Command sqlite is a single-binary service that keeps its schedule in a SQLite
// file: no server to run, and its history survives restarts. Start it several
// times on the same file (processes on one machine) and each slot still runs on
// exactly one of them, with a backup taking over a run whose process died.
//
// It runs one job, "report", every -every, for -for (or until interrupted); each run
// works for -work. It prints a line per run it makes, and on start and at the end
// the job's history as the file holds it (every process's runs, from this start
// and earlier ones):
//
//	sqlite: instance web-1 on /home/ana/.cache/anarchon/sqlite-example.db (sql/sqlite), report every 1s
//	history: 2026-11-30T21:40:03Z ok web-2 (attempt 1)
//	slot 2026-11-30T21:41:07Z started on web-1 (attempt 1)
//	sqlite: stopped; 5 runs here, history holds 12 records
//
// The file is kept in the user's cache directory (os.UserCacheDir, or the
// temporary directory when there is none) unless -db names another; its full
// path is on the first line.
//
// Kill a process mid-run (kill -9) and another one takes the run over once its
// lease (-lease) expired: "started on web-2 (attempt 2)".
//
// Usage:
//
//	go run ./examples/sqlite [-db FILE] [-instance NAME] [-every 1s] [-work 0] [-lease 30s] [-for 0] [-history 10]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed
		}
		fmt.Fprintln(os.Stderr, "sqlite:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	db       string
	instance string
	every    time.Duration
	runFor   time.Duration
	work     time.Duration
	lease    time.Duration
	history  int
}

func parse(args []string, w io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("sqlite", flag.ContinueOnError)
	fs.SetOutput(w)
	host, _ := os.Hostname()
	fs.StringVar(&c.db, "db", defaultDB(), "the SQLite file the processes share (created if missing, with its directory)")
	fs.StringVar(&c.instance, "instance", fmt.Sprintf("%s-%d", host, os.Getpid()), "this process's name in history")
	fs.DurationVar(&c.every, "every", time.Second, "the job's interval")
	fs.DurationVar(&c.runFor, "for", 0, "stop after this long (0: until interrupted)")
	fs.DurationVar(&c.work, "work", 0, "how long each run works")
	fs.DurationVar(&c.lease, "lease", scheduler.DefaultLease, "the job's lease: how soon a backup takes over the run of a process that died")
	fs.IntVar(&c.history, "history", 10, "history records printed on start and at the end")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.every <= 0:
		return c, fmt.Errorf("-every %v: must be positive", c.every)
	case c.runFor < 0:
		return c, fmt.Errorf("-for %v: must not be negative", c.runFor)
	case c.work < 0:
		return c, fmt.Errorf("-work %v: must not be negative", c.work)
	case c.history < 0:
		return c, fmt.Errorf("-history %d: must not be negative", c.history)
	}
	return c, nil
}

// defaultDB is where the file is kept unless -db says otherwise: in the user's
// cache directory (os.UserCacheDir: ~/.cache/anarchon on Linux), else in the
// temporary directory; never in the working directory, which is often a clone of
// the repository.
func defaultDB() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "anarchon", "sqlite-example.db")
}

// syncWriter serialises the handler's and main's lines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}

func run(ctx context.Context, args []string, w io.Writer) error {
	cfg, err := parse(args, w)
	if err != nil {
		return err
	}
	out := &syncWriter{w: w}
	if cfg.db, err = filepath.Abs(cfg.db); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.db), 0o700); err != nil {
		return fmt.Errorf("-db: %w", err)
	}
	db, err := sqlbackend.OpenSQLite(cfg.db)
	if err != nil {
		return err
	}
	defer db.Close()
	backend, err := sqlbackend.New(db, sqlbackend.SQLite)
	if err != nil {
		return err
	}
	defer backend.Close(context.Background())
	s, err := scheduler.New(scheduler.Config{Backend: backend, Instance: cfg.instance})
	if err != nil {
		return err
	}
	const job = "report"
	ran := 0
	err = s.Every(job, cfg.every, func(ctx context.Context, r scheduler.Run) error {
		out.printf("slot %s started on %s (attempt %d)\n", r.Slot.UTC().Format(time.RFC3339Nano), r.Instance, r.Attempt)
		out.mu.Lock()
		ran++
		out.mu.Unlock()
		t := time.NewTimer(cfg.work)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done(): // timeout, lease lost, or a hard stop
			return context.Cause(ctx)
		}
	}, scheduler.WithLease(cfg.lease))
	if err != nil {
		return err
	}
	out.printf("sqlite: instance %s on %s (%s), %s every %v\n", cfg.instance, cfg.db, backend.Name(), job, cfg.every)
	if err := printHistory(ctx, s, job, cfg.history, out); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	if cfg.runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.runFor)
		defer cancel()
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		return err
	}
	if err := printHistory(stopCtx, s, job, cfg.history, out); err != nil {
		return err
	}
	all, err := s.History(stopCtx, job, 0)
	if err != nil {
		return err
	}
	out.mu.Lock()
	n := ran
	out.mu.Unlock()
	out.printf("sqlite: stopped; %d runs here, history holds %d records\n", n, len(all))
	return nil
}

// printHistory prints the job's newest records, oldest of them first.
func printHistory(ctx context.Context, s *scheduler.Scheduler, job string, limit int, out *syncWriter) error {
	if limit == 0 {
		return nil
	}
	hist, err := s.History(ctx, job, limit)
	if err != nil {
		return err
	}
	for i := len(hist) - 1; i >= 0; i-- {
		r := hist[i]
		out.printf("history: %s %s %s (attempt %d)\n", r.Slot.UTC().Format(time.RFC3339Nano), r.Status, r.Instance, r.Attempt)
	}
	return nil
}
