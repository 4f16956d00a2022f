package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

const interval = time.Second

// tally counts the runs of each slot, as the handlers report them, and the slots
// recorded paused, as the scheduler's events report them.
type tally struct {
	mu     sync.Mutex
	runs   map[int64][]string
	paused map[int64]bool
	out    io.Writer
}

// onEvent notes the slots that fell while the job was paused.
func (t *tally) onEvent(e scheduler.Event) {
	if e.Kind != scheduler.EventPaused {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.paused[e.Slot.UnixMilli()] = true
}

func (t *tally) handler(_ context.Context, r scheduler.Run) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs[r.Slot.UnixMilli()] = append(t.runs[r.Slot.UnixMilli()], r.Instance)
	manual := ""
	if r.Manual {
		manual = ", manual"
	}
	fmt.Fprintf(t.out, "slot %s ran on %s (attempt %d%s)\n", r.Slot.Format("15:04:05"), r.Instance, r.Attempt, manual)
	return nil
}

// counts is the summary line's numbers.
type counts struct {
	slots   int // slots that ran, plus the slots due while all three instances ran that did not
	runs    int // "slot … ran on …" lines printed
	dups    int // runs beyond the first of a slot
	missed  int // slots due while all three instances ran that did not run and were not paused
	paused  int // slots due while all three instances ran that were recorded paused
	checked int // slots due while all three instances ran
}

// summary counts what was printed: every run of every slot, including the slot just
// before Start (an instance started just after a slot still runs it) and the slots
// that ran just before Stop. A slot counts as missed only if it was due in [from,
// to], while all three instances ran: a slot that had not run when Stop came was
// not missed, it was cut short.
func (t *tally) summary(from, to time.Time) counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	var c counts
	for _, who := range t.runs {
		c.slots++
		c.runs += len(who)
		c.dups += len(who) - 1
	}
	sched, _ := scheduler.NewIntervalSchedule(interval)
	for s := sched.Next(from.Add(-time.Millisecond)); !s.After(to); s = sched.Next(s) {
		c.checked++
		switch {
		case len(t.runs[s.UnixMilli()]) > 0:
		case t.paused[s.UnixMilli()]:
			c.paused++
			c.slots++
		default:
			c.missed++
			c.slots++
		}
	}
	return c
}

// gate holds the lines written to it until it is opened, then passes them on:
// the runs' lines, which may start before the quickstart has printed where to
// look, come after those lines.
type gate struct {
	mu     sync.Mutex
	opened bool
	held   []byte
	w      io.Writer
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		g.held = append(g.held, p...)
		return len(p), nil
	}
	return g.w.Write(p)
}

// open writes the lines held so far and lets every later one through.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		g.opened = true
		_, _ = g.w.Write(g.held)
		g.held = nil
	}
}

// syncWriter lets handlers on many goroutines print to one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func run(ctx context.Context, args []string, w io.Writer) error {
	out := &syncWriter{w: w}
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	connect, url, serverLine, cleanup, err := server(ctx, cfg)
	if err != nil {
		return err
	}
	defer cleanup()
	runs := &gate{w: out} // the runs' lines, after the lines that say where to look
	defer runs.open()

	stopMetrics, onEvent, err := serveMetrics(cfg.metricsAddr, out)
	if err != nil {
		return err
	}
	defer stopMetrics()

	t := &tally{runs: map[int64][]string{}, paused: map[int64]bool{}, out: runs}
	var scheds []*scheduler.Scheduler
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for _, id := range []string{"instance-a", "instance-b", "instance-c"} {
		nc, err := connect()
		if err != nil {
			return fmt.Errorf("connect %s: %w", id, err)
		}
		conns = append(conns, nc)
		b, closeRuns, err := newBackend(nc)
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		defer closeRuns()
		// Each instance publishes its events for `anarchon watch`.
		events, err := fleet.Events(nc)
		if err != nil {
			return err
		}
		s, err := scheduler.New(scheduler.Config{Backend: b, Instance: id, OnEvent: scheduler.Chain(onEvent, events, t.onEvent)})
		if err != nil {
			return err
		}
		if err := s.Every(cfg.job, interval, t.handler, scheduler.WithJitter(200*time.Millisecond), scheduler.WithLease(2*time.Second)); err != nil {
			return err
		}
		scheds = append(scheds, s)
	}
	start := time.Now()
	for i, s := range scheds {
		if err := s.Start(ctx); err != nil {
			for _, started := range scheds[:i] {
				_ = started.Stop(context.WithoutCancel(ctx))
			}
			return err
		}
	}
	// Each instance serves the fleet service on its connection, for the anarchon
	// command: stopped before the schedulers.
	var svcs []*fleet.Service
	defer func() {
		for _, svc := range svcs {
			_ = svc.Stop(context.WithoutCancel(ctx))
		}
	}()
	for i, s := range scheds {
		svc, err := fleet.Serve(ctx, conns[i], s)
		if err != nil {
			return fmt.Errorf("serve the fleet service of %s: %w", s.Instance(), err)
		}
		svcs = append(svcs, svc)
	}
	// The status page reads the fleet service through a client on a connection of
	// its own; it is stopped first.
	webConn, err := connect()
	if err != nil {
		return fmt.Errorf("connect the status page: %w", err)
	}
	conns = append(conns, webConn)
	webURL, stopWeb, err := serveWeb(cfg.web, webConn, out)
	if err != nil {
		return err
	}
	defer stopWeb()
	// Where to look first, then what runs.
	if webURL != "" {
		fmt.Fprintf(out, "quickstart: status page at %s\n", webURL)
	}
	fmt.Fprintf(out, "quickstart: fleet service up; in another terminal: anarchon --server %s jobs (install it: go install -C cmd/anarchon .)\n", url)
	fmt.Fprintf(out, "quickstart: %s\n", serverLine)
	until := "until interrupted (Ctrl-C)"
	if cfg.duration > 0 {
		until = "for " + cfg.duration.String()
	}
	fmt.Fprintf(out, "quickstart: 3 instances share job %q every %v, %s\n", cfg.job, interval, until)
	runs.open()
	var timeout <-chan time.Time
	if cfg.duration > 0 {
		timer := time.NewTimer(cfg.duration)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-ctx.Done():
	case <-timeout:
	}
	end := time.Now()
	stopWeb()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, svc := range svcs {
		if err := svc.Stop(stopCtx); err != nil {
			fmt.Fprintf(out, "stop the fleet service: %v\n", err)
		}
	}
	for _, s := range scheds {
		if err := s.Stop(stopCtx); err != nil {
			fmt.Fprintf(out, "stop %s: %v\n", s.Instance(), err)
		}
	}

	const historyLimit = 10
	hist, err := scheds[0].History(stopCtx, cfg.job, historyLimit)
	if err != nil {
		return fmt.Errorf("read history: %w", err)
	}
	fmt.Fprintf(out, "history of %q, newest first (at most %d), read back from the stream:\n", cfg.job, historyLimit)
	for _, r := range hist {
		fmt.Fprintf(out, "  %s  %-10s  %-10s  attempt %d  %v\n", r.Slot.Format("15:04:05.000"), r.Instance, r.Status, r.Attempt, r.Duration.Round(time.Microsecond))
	}
	// Missed is judged on the slots due while all three ran: from the first one after
	// start up to the last whose deadline (slot + max lateness) had passed before Stop.
	c := t.summary(start.Add(time.Millisecond), end.Add(-interval))
	fmt.Fprintf(out, "quickstart: %d slots, %d runs, %d duplicates, %d missed, %d paused\n", c.slots, c.runs, c.dups, c.missed, c.paused)
	if c.checked == 0 && cfg.duration > 0 {
		return fmt.Errorf("no slot was due while all three instances ran: run longer")
	}
	return nil
}

// server returns how to connect to the server the quickstart uses, its URL for
// the anarchon command and a line that describes it: an embedded one listening on
// a free loopback port, or the one at -url.
func server(ctx context.Context, cfg config) (connect func() (*nats.Conn, error), url, line string, cleanup func(), err error) {
	if cfg.url != "" {
		connect = func() (*nats.Conn, error) { return nats.Connect(cfg.url, nats.Name("anarchon-quickstart")) }
		return connect, cfg.url, "NATS server at " + cfg.url, func() {}, nil
	}
	srv, err := embedded.Start(ctx, embedded.Options{StoreDir: cfg.store, Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, "", "", nil, fmt.Errorf("start embedded server: %w", err)
	}
	line = fmt.Sprintf("embedded JetStream server at %s, store %s", srv.ClientURL(), srv.StoreDir())
	return func() (*nats.Conn, error) { return srv.Connect(nats.Name("anarchon-quickstart")) }, srv.ClientURL(), line, srv.Shutdown, nil
}

// newBackend is the JetStream backend every instance builds on its own connection:
// history in the job's stream, leases in a KV bucket (so a backup takes over a run
// whose instance dies).
func newBackend(nc *nats.Conn) (backend.Backend, func(), error) {
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, nil, err
	}
	runs, err := kvlease.New(js)
	if err != nil {
		return nil, nil, err
	}
	b, err := jetstream.NewLeased(js, runs)
	if err != nil {
		runs.Close()
		return nil, nil, err
	}
	return b, runs.Close, nil
}
