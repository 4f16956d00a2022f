package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/connect"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/scheduler"
)

// run is the whole service: it returns when ctx ends (or after -duration) and the
// shutdown is done. A graceful shutdown returns nil, even when running jobs had to
// be cancelled and handed over.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := newLogger(c, stderr)

	// Tracing (-otel): every attempt a span, triggers linked over NATS, and log
	// records made with a run's context carry its trace ID.
	middleware, shutdownTracing, err := setupTracing(ctx, c.otel, c.instance, stderr)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("spans not flushed", "err", err)
		}
	}()
	if c.otel != "" {
		log = traced(log)
	}

	nc, js, err := dial(c, log)
	if err != nil {
		return err
	}
	defer nc.Close()

	// Leases live in a KV bucket; history in one stream per job. With leases, a slot
	// whose replica dies is taken over by a backup, a job can forbid overlapping
	// runs, and Stop hands running jobs over.
	runs, err := kvlease.New(js, kvlease.WithReplicas(c.replicas))
	if err != nil {
		return err
	}
	defer runs.Close()
	if err := runs.Init(ctx); err != nil {
		return startErr(ctx, log, fmt.Errorf("lease bucket: %w", err))
	}
	backend, err := jetstream.NewLeased(js, runs, jetstream.WithReplicas(c.replicas), jetstream.WithLogger(log))
	if err != nil {
		return err
	}
	defer backend.Close(context.WithoutCancel(ctx))

	onEvent := scheduler.LogEvents(log)
	var ms *metricsServer
	if c.metricsAddr != "" {
		ms, err = serveMetrics(c.metricsAddr, log)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			ms.shutdown(sctx)
		}()
		onEvent = scheduler.Chain(ms.m.OnEvent, onEvent)
	}

	// Each replica publishes its events for `anarchon watch`.
	events, err := fleet.Events(nc)
	if err != nil {
		return err
	}
	onEvent = scheduler.Chain(onEvent, events)

	s, err := scheduler.New(scheduler.Config{Backend: backend, Instance: c.instance, Logger: log, OnEvent: onEvent,
		Middleware: middleware, Turns: c.turns})
	if err != nil {
		return err
	}
	if ms != nil {
		ms.m.CountEntries(s) // anarchon_entries{state="followed"|"orphaned"}
	}
	if err := register(s, c, log); err != nil {
		return err
	}
	var reload chan os.Signal // nil without -jobs-file: never ready
	var jobs *jobsFile
	if c.jobsFile != "" {
		jobs = &jobsFile{path: c.jobsFile, c: c, log: log}
		if err := jobs.sync(s, true); err != nil {
			return err
		}
		reload = make(chan os.Signal, 1)
		signal.Notify(reload, syscall.SIGHUP)
		defer signal.Stop(reload)
	}
	if err := s.Start(ctx); err != nil {
		return startErr(ctx, log, err)
	}
	if c.seedEntries > 0 {
		if err := seedEntries(ctx, s, c, log); err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
			return startErr(ctx, log, err)
		}
	}
	// stop ends what started, giving running jobs until the stop timeout.
	stop := func(svc *fleet.Service) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.stopTimeout)
		defer cancel()
		if svc != nil {
			_ = svc.Stop(sctx)
		}
		_ = s.Stop(sctx)
	}
	// The fleet service answers the anarchon command and the status page, for
	// every job this replica declares; it stops before the scheduler.
	svc, err := fleet.Serve(ctx, nc, s, fleet.WithLogger(log), fleet.WithRegistryReplicas(c.replicas), anotel.ServeOption())
	if err != nil {
		stop(nil)
		return startErr(ctx, log, fmt.Errorf("serve the fleet service: %w", err))
	}
	var ws *httpServer
	if c.web != "" {
		if ws, err = serveWeb(c.web, c.webActions, c.webHosts, nc, log); err != nil {
			stop(svc)
			return err
		}
	}

	var timeout <-chan time.Time
	if c.duration > 0 {
		t := time.NewTimer(c.duration)
		defer t.Stop()
		timeout = t.C
	}
wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "reason", context.Cause(ctx), "stop_timeout", c.stopTimeout)
			break wait
		case <-timeout:
			log.Info("shutting down", "reason", "-duration elapsed", "stop_timeout", c.stopTimeout)
			break wait
		case <-reload:
			if err := jobs.sync(s, false); err != nil {
				log.Warn("jobs file not read again; the jobs stay as they were", "err", err)
			}
		}
	}

	// Stop claims nothing more, gives running jobs until the deadline, then cancels
	// them and releases their leases: a backup replica takes each over at once.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.stopTimeout)
	defer cancel()
	if ws != nil {
		ws.shutdown(stopCtx)
	}
	if err := svc.Stop(stopCtx); err != nil {
		log.Warn("stop the fleet service", "err", err)
	}
	if err := s.Stop(stopCtx); err != nil {
		log.Warn("running jobs did not finish in time: cancelled, and their leases released for another replica", "err", err)
	}

	if c.history > 0 {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := printHistory(hctx, stdout, s, c.history); err != nil {
			log.Warn("could not read history", "err", err)
		}
	}
	return nil
}

// dial connects through the NATS context when -context is given, or to -url.
// startErr is what run returns when a start-up step failed with err: nil when
// ctx ended meanwhile, since a signal during start-up is a graceful stop.
func startErr(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() == nil {
		return err
	}
	log.Info("shutting down during start-up", "reason", context.Cause(ctx), "step", err.Error())
	return nil
}

func dial(c config, log *slog.Logger) (*nats.Conn, natsjs.JetStream, error) {
	name := "anarchon-service"
	if c.instance != "" {
		name += " " + c.instance
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1), // a replica rides out server restarts
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", "server", nc.ConnectedUrlRedacted())
		}),
	}
	if c.natsContext != "" {
		nc, js, err := connect.ContextJetStream(c.natsContext, opts...)
		if err != nil {
			return nil, nil, err
		}
		log.Info("connected to NATS", "context", c.natsContext, "server", nc.ConnectedUrlRedacted())
		return nc, js, nil
	}
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", redactURLs(c.url), err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	log.Info("connected to NATS", "server", nc.ConnectedUrlRedacted())
	return nc, js, nil
}

// printHistory prints each job's last n runs, from every replica, as the backend
// stores them, in the order the jobs were registered.
func printHistory(ctx context.Context, w io.Writer, s *scheduler.Scheduler, n int) error {
	for _, j := range s.Jobs() {
		job := j.Job
		recs, err := s.History(ctx, job, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "history of %q, newest first:\n", job)
		for _, r := range recs {
			fmt.Fprintf(w, "  %s  %-12s  attempt %d  %-9s  %8v", r.Slot.Format("15:04:05.000"), r.Instance, r.Attempt, r.Status, r.Duration.Round(time.Millisecond))
			if r.Error != "" {
				fmt.Fprintf(w, "  %s", r.Error)
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// redactURLs hides passwords in a comma-separated list of server URLs.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
