// Command quickstart shows anarchon working: an embedded JetStream server, three
// scheduler instances (each with its own connection) sharing one job every second,
// until interrupted (Ctrl-C) or for -duration. It first prints where to look (the
// status page's URL, the anarchon command to point at its server), then which
// instance ran each slot; when it stops, the job's history read back from the
// stream, and one summary line:
//
//	quickstart: <S> slots, <R> runs, <D> duplicates, <M> missed, <P> paused
//
// R is the number of "slot … ran on …" lines printed and S the slots they name (the
// slot just before the instances started, which is still theirs to run, and slots
// that ran just before they stopped included), so with no duplicates S = R. D counts
// the runs beyond one per slot; M the slots due while all three instances ran that
// did not run at all and were not paused, P those recorded paused (both count in
// S too).
//
// Each instance also serves the fleet service (package fleet) and publishes its
// events, so the anarchon command can list, pause, trigger and watch the job while
// the quickstart runs; it prints the command to point at its server:
//
//	quickstart: status page at http://127.0.0.1:PORT/anarchon/
//	quickstart: fleet service up; in another terminal: anarchon --server nats://127.0.0.1:PORT jobs (install it: go install -C cmd/anarchon .)
//	quickstart: embedded JetStream server at nats://127.0.0.1:PORT, store /tmp/…
//	quickstart: 3 instances share job "quickstart-tick" every 1s, until interrupted (Ctrl-C)
//	slot 10:41:07 ran on instance-b (attempt 1)
//
// A run triggered that way prints "(attempt 1, manual)" and counts as a slot and a
// run in the summary. A slot that falls while the job is paused is recorded
// paused and counted as paused (P), not missed.
//
// It also serves the status page (package web) on -web, a free loopback port by
// default, and prints its URL first; run now, pause and resume are allowed from
// this machine, to a page opened by a loopback name such as the URL printed (a
// page of another site re-pointed at 127.0.0.1 is refused: web.Config.Hosts).
//
// Usage:
//
//	go run ./examples/quickstart [-duration 0] [-url nats://…] [-store DIR] [-metrics-addr 127.0.0.1:9464] [-web 127.0.0.1:0]
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
		// After the first signal the default handling comes back: a second Ctrl-C
		// ends a shutdown that takes too long.
		<-ctx.Done()
		stop()
	}()
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // interrupted during start-up: a graceful stop
		}
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	duration    time.Duration
	url         string
	store       string
	metricsAddr string
	web         string
	job         string
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(&c.duration, "duration", 0, "how long the three instances run (default: until interrupted)")
	fs.StringVar(&c.url, "url", "", "use the NATS server at this URL instead of an embedded one")
	fs.StringVar(&c.store, "store", "", "keep the embedded server's data in this directory (default: a temp dir)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address while running (e.g. 127.0.0.1:9464)")
	fs.StringVar(&c.web, "web", "127.0.0.1:0", `serve the status page on this address ("" = off)`)
	fs.StringVar(&c.job, "job", "quickstart-tick", "the job's name")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.duration != 0 && c.duration < 2*time.Second {
		return c, fmt.Errorf("-duration %v: at least 2s, so that some slot can run (or none: until interrupted)", c.duration)
	}
	if c.url != "" && c.store != "" {
		return c, errors.New("-store applies to the embedded server; it cannot be used with -url")
	}
	return c, nil
}
