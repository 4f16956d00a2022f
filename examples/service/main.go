// Command service is one replica of a service with scheduled jobs. Start it as many
// times as you like, on one machine or many, against the same NATS server: every
// slot of every job runs on exactly one replica, and a replica that shuts down hands
// its running jobs over to the others at once.
//
// It connects to an existing NATS server with JetStream, by URL or through a NATS CLI
// context, keeps history in per-job streams (package jetstream) and leases in a KV
// bucket (package kvlease), serves Prometheus metrics, serves the fleet service
// (package fleet: the anarchon command finds it) and publishes its events, serves
// the status page (package web) with -web, and logs with log/slog to stderr. Its jobs show the scheduler's options:
//
//	tick     every -interval, with jitter and a timeout
//	report   on the cron expression -cron (with seconds) in the zone -zone
//	flaky    every -interval; fails on every third slot, to show errors in history and metrics
//	compact  every -interval, runs for 2.5 intervals; overlap is forbidden, so the
//	         slots that fall inside a run are skipped (and recorded as skipped)
//	retried  every 6 intervals; the first two attempts of a slot fail and are retried,
//	         on any replica
//	refresh  every 4 intervals, runs for 6; the next slot cancels the run (cancel-other)
//	digest   every 2 intervals, runs for 3; the slot due meanwhile is buffered
//	warmup   every -interval, five runs across the fleet, then ended by its run limit
//
// On SIGINT or SIGTERM it stops claiming, gives running jobs -stop-timeout to finish,
// cancels the rest and releases their leases (another replica takes them over), prints
// each job's recent history to stdout and exits 0. A second signal kills it at once.
//
// Usage:
//
//	go run -C examples/service . [-url nats://127.0.0.1:4222 | -context NAME] [-instance NAME]
//	    [-metrics-addr 127.0.0.1:9464 | -metrics-addr ""] [-web 127.0.0.1:8080 [-web-actions] [-web-hosts NAMES]]
//	    [-otel log|otlp] [-log-format text|json] [-log-level info]
//	    [-interval 5s] [-cron '*/10 * * * * *'] [-zone Europe/Athens]
//	    [-stop-timeout 10s] [-duration 0] [-replicas 1] [-history 5]
//	    [-retried-run 0] [-tenant-run 10ms]
//
// To see it work, start a JetStream server (nats-server -js) and two replicas:
//
//	go run -C examples/service . -instance a
//	go run -C examples/service . -instance b -web 127.0.0.1:8080 -otel log
//
// With -otel every attempt of every job is a span (package otel's middleware),
// a trigger from the status page or the anarchon command is linked to its run,
// and log lines a job makes with its run's context carry the trace_id: -otel log
// prints the spans on stderr, -otel otlp sends them to the OpenTelemetry
// collector that OTEL_EXPORTER_OTLP_ENDPOINT names. Metrics and tracing are
// wired as a service of yours would wire them: see run.go, metrics.go and
// tracing.go.
//
// This directory is a Go module of its own (so the library's users download no
// OpenTelemetry); run it from the repository's root with go run -C
// examples/service . (flags after the dot).
//
// Each serves /metrics on a free loopback port unless -metrics-addr names one, and
// logs where ("serving metrics" addr=127.0.0.1:PORT), so any number of replicas run
// on one machine. Open http://127.0.0.1:8080/anarchon/ (read-only; -web-actions allows run now,
// pause and resume from this machine, to a page opened by a loopback name unless
// -web-hosts lists the names the page answers to: web.Config.Hosts).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, the default handling comes back: a second Ctrl-C
		// ends a shutdown that takes too long.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed
		}
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	url         string
	natsContext string
	instance    string
	turns       bool
	metricsAddr string
	web         string
	webActions  bool
	webHosts    []string
	otel        string
	logFormat   string
	logLevel    slog.Level
	interval    time.Duration
	cron        string
	zone        *time.Location
	stopTimeout time.Duration
	duration    time.Duration
	replicas    int
	history     int
	extra       []string
	jobsFile    string
	// seedEntries tenants' entries, every entryEvery, are added at start.
	seedEntries int
	entryEvery  time.Duration
	// retriedRun and tenantRun are how long a run of retried and tenants works.
	retriedRun time.Duration
	tenantRun  time.Duration
}

// DefaultMetricsAddr is where /metrics is served unless -metrics-addr says
// otherwise: a free loopback port, picked at start and logged ("serving metrics",
// with its addr and url), so that several replicas run on one machine. Give a
// fixed address (-metrics-addr 127.0.0.1:9464) for Prometheus to scrape.
const DefaultMetricsAddr = "127.0.0.1:0"

func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := config{logLevel: slog.LevelInfo}
	var zone string
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.url, "url", "", "NATS server `URLs`, comma-separated (default "+nats.DefaultURL+" unless -context is given)")
	fs.StringVar(&c.natsContext, "context", "", "connect through the NATS CLI context called `NAME` (see: nats context ls) instead of -url")
	fs.StringVar(&c.instance, "instance", "", "this replica's name in claims, history and logs (default: host name, process ID and a random suffix)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", DefaultMetricsAddr, `serve Prometheus /metrics on this address (default: a free loopback port, logged; "" = off)`)
	fs.StringVar(&c.web, "web", "", `serve the status page on this address, at /anarchon/ ("" = off)`)
	fs.BoolVar(&c.webActions, "web-actions", false, "let the status page run, pause and resume jobs for requests from this machine (default: read-only)")
	fs.Func("web-hosts", "comma-separated `NAMES` the status page answers to, refusing any other Host (default: any Host; actions only by a loopback name)", func(s string) error {
		for name := range strings.SplitSeq(s, ",") {
			c.webHosts = append(c.webHosts, strings.TrimSpace(name))
		}
		return nil
	})
	fs.StringVar(&c.otel, "otel", "", "trace every run with OpenTelemetry: log (spans as JSON on stderr) or otlp (to the collector OTEL_EXPORTER_OTLP_ENDPOINT names); log lines made in a run carry its trace_id")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	fs.DurationVar(&c.interval, "interval", 5*time.Second, "interval of the tick, flaky and compact jobs")
	fs.StringVar(&c.cron, "cron", "*/10 * * * * *", "cron expression of the report job (5 fields, or 6 with seconds first)")
	fs.StringVar(&zone, "zone", "Europe/Athens", "time zone the report job's cron expression is read in")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 10*time.Second, "on shutdown, how long running jobs may finish before they are cancelled and handed over")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0 = run until SIGINT or SIGTERM)")
	fs.BoolVar(&c.turns, "turns", false, "share the slots out among the replicas (scheduler.Config.Turns): one claims each slot, a second a moment later, the rest only when those are gone")
	fs.IntVar(&c.replicas, "replicas", 1, "replicas of the job streams and the lease bucket (3 on a cluster)")
	fs.IntVar(&c.history, "history", 5, "on exit, print each job's last N runs (from all replicas) to stdout; 0 = none")
	fs.IntVar(&c.seedEntries, "seed-entries", 0, "at start, add this many schedule entries (tenant-0000001, …) to the tenants job, keeping those already stored")
	fs.DurationVar(&c.entryEvery, "entry-every", 10*time.Minute, "interval of the entries -seed-entries adds, spread over it (entry i at second i mod 60, and minute i/60 mod the interval's minutes)")
	fs.DurationVar(&c.retriedRun, "retried-run", 0, "how long each attempt of the retried job works before it fails or succeeds (0: the failing attempts fail at once)")
	fs.DurationVar(&c.tenantRun, "tenant-run", 10*time.Millisecond, "how long a run of the tenants job works")
	fs.Func("extra-jobs", "comma-separated `NAMES` of more jobs to declare (every interval, short work): any name, a fleet verb such as history included", func(s string) error {
		for name := range strings.SplitSeq(s, ",") {
			c.extra = append(c.extra, strings.TrimSpace(name))
		}
		return nil
	})
	fs.StringVar(&c.jobsFile, "jobs-file", "", "declare one more job per line of the file at `PATH` (like -extra-jobs), read again on SIGHUP: jobs added are registered, jobs gone are removed, while the replica runs")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.url != "" && c.natsContext != "" {
		return c, errors.New("-url and -context: give one of them")
	}
	if c.url == "" && c.natsContext == "" {
		c.url = nats.DefaultURL
	}
	if (c.webActions || c.webHosts != nil) && c.web == "" {
		return c, errors.New("-web-actions and -web-hosts need -web")
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return c, fmt.Errorf("-log-format %q: text or json", c.logFormat)
	}
	// Interval, cron expression and replicas are checked by the scheduler and the
	// backends, which name what is wrong; these are the ones only this program uses.
	if c.interval < 20*time.Millisecond {
		return c, fmt.Errorf("-interval %v: at least 20ms (the jobs' jitter and timeout are fractions of it)", c.interval)
	}
	if c.stopTimeout < 0 || c.duration < 0 || c.history < 0 || c.retriedRun < 0 || c.tenantRun < 0 {
		return c, errors.New("-stop-timeout, -duration, -history, -retried-run and -tenant-run cannot be negative")
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return c, fmt.Errorf("-zone %q: %w", zone, err)
	}
	c.zone = loc
	return c, nil
}

// newLogger logs to w in the format and at the level the flags ask for.
func newLogger(c config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.logLevel}
	if strings.EqualFold(c.logFormat, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
