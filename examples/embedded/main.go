// Command embedded is a single-node setup: the program runs its own JetStream server
// in-process, on a store directory that outlives it, and schedules its jobs on it.
// No NATS server to install, and the guarantees of a fleet: restart it and the
// history is still there, and no slot that already ran runs again.
//
// Its jobs:
//
//	cleanup  every -interval; after a restart, the latest slot missed while it was
//	         down (within -catch-up) runs once at start
//	digest   on the cron expression -cron (with seconds), in UTC
//
// It prints each run as it ends, and each job's recent history (read back from the
// store) when it starts and when it stops. With -listen the server also accepts NATS
// clients over TCP: the nats CLI can look at the job streams (ANARCHON_*) and the lease
// bucket, and examples/service -url can schedule its own jobs on this server.
//
// Usage:
//
//	go run ./examples/embedded [-store ./anarchon-data] [-listen 127.0.0.1:4222]
//	    [-interval 5s] [-cron '*/15 * * * * *'] [-catch-up 1m] [-duration 0] [-history 5]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills a shutdown that takes too long.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed
		}
		fmt.Fprintln(os.Stderr, "embedded:", err)
		os.Exit(1)
	}
}

// DefaultStore is the store directory unless -store says otherwise.
const DefaultStore = "./anarchon-data"

// config is what the flags say.
type config struct {
	store       string
	listen      string
	instance    string
	interval    time.Duration
	cron        string
	catchUp     time.Duration
	duration    time.Duration
	stopTimeout time.Duration
	history     int
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("embedded", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.store, "store", DefaultStore, "JetStream store directory: history and leases live here, across restarts")
	fs.StringVar(&c.listen, "listen", "", `also accept NATS clients on this address, e.g. 127.0.0.1:4222 ("" = in-process only)`)
	fs.StringVar(&c.instance, "instance", "", "this instance's name in history (default: host name, process ID and a random suffix)")
	fs.DurationVar(&c.interval, "interval", 5*time.Second, "interval of the cleanup job")
	fs.StringVar(&c.cron, "cron", "*/15 * * * * *", "cron expression of the digest job (5 fields, or 6 with seconds first), in UTC")
	fs.DurationVar(&c.catchUp, "catch-up", time.Minute, "at start, run the latest cleanup slot missed within this window (0 = no catch-up)")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0 = run until SIGINT or SIGTERM)")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 10*time.Second, "on shutdown, how long running jobs may finish before they are cancelled")
	fs.IntVar(&c.history, "history", 5, "print each job's last N runs at start and at exit; 0 = none")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.store == "" {
		return c, errors.New("-store: a directory is needed; the history lives there")
	}
	if c.catchUp < 0 || c.duration < 0 || c.stopTimeout < 0 || c.history < 0 {
		return c, errors.New("-catch-up, -duration, -stop-timeout and -history cannot be negative")
	}
	return c, nil
}
