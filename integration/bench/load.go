package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// loadInterval is the interval of every job of the load sections.
const loadInterval = time.Second

// instances is the number of replicas in the takeover and peer sections, and
// the load sections' by default (-instances).
const instances = 3

// tally counts, for every (job, slot) of the measured window, how many handlers ran
// it, and keeps the slot lag (start − slot) of its first run. It is lock-free so the
// handlers of thousands of jobs do not queue on it.
type tally struct {
	idx      map[string]int // job name → row; read-only once built
	slots    int
	interval time.Duration // of every job
	fromMS   atomic.Int64  // first slot of the window (Unix ms); 0 until the window is set
	counts   []atomic.Int32
	lags     []atomic.Int64
	before   atomic.Int64 // runs of slots before the window (warm-up)
	after    atomic.Int64 // runs of slots after the window
	other    atomic.Int64 // runs of a job the tally does not know
}

func newTally(jobs []string, slots int, interval time.Duration) *tally {
	t := &tally{idx: make(map[string]int, len(jobs)), slots: slots, interval: interval}
	for i, j := range jobs {
		t.idx[j] = i
	}
	t.counts = make([]atomic.Int32, len(jobs)*slots)
	t.lags = make([]atomic.Int64, len(jobs)*slots)
	return t
}

// open sets the window's first slot; runs of earlier slots count as warm-up.
func (t *tally) open(from time.Time) { t.fromMS.Store(from.UnixMilli()) }

func (t *tally) record(job string, slot, started time.Time) {
	row, ok := t.idx[job]
	if !ok {
		t.other.Add(1)
		return
	}
	from := t.fromMS.Load()
	ms := slot.UnixMilli()
	if from == 0 || ms < from {
		t.before.Add(1)
		return
	}
	k := int((ms - from) / t.interval.Milliseconds())
	if k >= t.slots || (ms-from)%t.interval.Milliseconds() != 0 {
		t.after.Add(1)
		return
	}
	i := row*t.slots + k
	if t.counts[i].Add(1) == 1 {
		t.lags[i].Store(int64(started.Sub(slot)))
	}
}

// inWindow reports whether slot is one the tally counts.
func (t *tally) inWindow(slot time.Time) bool {
	from := t.fromMS.Load()
	ms := slot.UnixMilli()
	return from != 0 && ms >= from && ms < from+int64(t.slots)*t.interval.Milliseconds()
}

// loadResult is one load run: section 2 for anarchon, and a column of section 5.
type loadResult struct {
	name       string
	jobs       int
	duration   time.Duration
	interval   time.Duration
	jitter     time.Duration
	instances  int
	startup    time.Duration // until every instance had started (all jobs prepared)
	rssStarted int64         // process RSS growth over Start

	slotsDue, runs, once, dups, missed int
	runsByCount                        map[int]int // slots by number of runs (2, 3, …)
	lag                                durations
	cpu                                time.Duration
	wall                               time.Duration
	clientMsgs                         msgs
	serverIn, serverOut                int64
	rssStart, rssPeak, rssEnd          int64
	// By whole minute of the window (a window of two minutes or more): the slot
	// lags of the slots that fell in it, and the RSS at its end.
	lagByMinute []durations
	rssByMinute []int64
	heapEnd     uint64
	goroutines  int
	events      map[string]int64
	api         map[string]int64 // JetStream API requests in the window, by kind
	apiSeen     int64
	errSample   string
	notes       []string
}

func (l *loadResult) cpuPerSlot() time.Duration {
	if l.slotsDue == 0 {
		return 0
	}
	return l.cpu / time.Duration(l.slotsDue)
}

// A span places a measured window: it opens lead from now, at the next slot, and
// is read settle after its last slot.
type span struct{ lead, settle time.Duration }

// observe measures t's window, placed by w, into l while the instances run. It
// returns when the window's last slot is past its deadline plus w.settle.
func (l *loadResult) observe(ctx context.Context, srv *embedded.Server, conns []*nats.Conn, t *tally, w span) error {
	from := time.Now().Add(w.lead).Truncate(t.interval).Add(t.interval)
	t.open(from)
	to := from.Add(time.Duration(t.slots) * t.interval)
	sniff, err := sniffAPI(srv)
	if err != nil {
		return err
	}
	defer sniff.close()
	if err := waitUntil(ctx, from); err != nil {
		return err
	}
	sniff.reset()
	p0 := readProc()
	m0 := sumCounters(conns)
	v0, err := srv.NATS().Varz(nil)
	if err != nil {
		return err
	}
	sampler := sampleRSS(250*time.Millisecond, time.Minute)
	if err := waitUntil(ctx, to); err != nil {
		sampler.Stop()
		return err
	}
	p1 := readProc()
	l.api, l.apiSeen = sniff.snapshot()
	m1 := sumCounters(conns)
	v1, err := srv.NATS().Varz(nil)
	if err != nil {
		sampler.Stop()
		return err
	}
	// The last slot may start until its deadline (slot + max lateness = the interval).
	err = waitUntil(ctx, to.Add(w.settle))
	l.rssPeak, l.rssByMinute = sampler.Stop()
	if err != nil {
		return err
	}
	p2 := readProc()

	l.wall = p1.at.Sub(p0.at)
	l.cpu = p1.cpu - p0.cpu
	l.clientMsgs = m1.sub(m0)
	// The sniffer's own copies of the API requests are not the load's.
	l.serverIn, l.serverOut = v1.InMsgs-v0.InMsgs, v1.OutMsgs-v0.OutMsgs-l.apiSeen
	l.rssStart, l.rssEnd = p0.rss, p2.rss
	l.heapEnd, l.goroutines = p2.heapInuse, p2.goroutines

	l.slotsDue = len(t.counts)
	l.runsByCount = map[int]int{}
	for i := range t.counts {
		n := int(t.counts[i].Load())
		l.runs += n
		switch {
		case n == 0:
			l.missed++
		case n == 1:
			l.once++
		default:
			l.dups += n - 1
			l.runsByCount[n]++
		}
		if n > 0 {
			lag := time.Duration(t.lags[i].Load())
			l.lag = append(l.lag, lag)
			m := int(time.Duration(i%t.slots) * t.interval / time.Minute)
			for len(l.lagByMinute) <= m {
				l.lagByMinute = append(l.lagByMinute, nil)
			}
			l.lagByMinute[m] = append(l.lagByMinute[m], lag)
		}
	}
	return nil
}

func sumCounters(conns []*nats.Conn) msgs {
	var m msgs
	for _, nc := range conns {
		m = m.add(counters(nc))
	}
	return m
}

// eventCounter counts scheduler events of the window's slots by kind (and backend
// errors by operation), keeping one error message as a sample.
type eventCounter struct {
	t      *tally
	mu     sync.Mutex
	counts map[string]int64
	sample string
}

func (e *eventCounter) on(ev scheduler.Event) {
	if !e.t.inWindow(ev.Slot) {
		return
	}
	key := string(ev.Kind)
	switch ev.Kind {
	case scheduler.EventScheduled, scheduler.EventStarted, scheduler.EventFinished:
		return
	case scheduler.EventBackendError:
		key += " (" + ev.Op + ")"
	case scheduler.EventLost:
		key += " (" + string(ev.Outcome) + ")"
	}
	e.mu.Lock()
	e.counts[key]++
	if ev.Err != nil && e.sample == "" {
		e.sample = ev.Err.Error()
	}
	e.mu.Unlock()
}

func (e *eventCounter) snapshot() (map[string]int64, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int64, len(e.counts))
	for k, v := range e.counts {
		out[k] = v
	}
	return out, e.sample
}

func jobNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return names
}

// anarchonInstance is one replica: its connection, lease store and scheduler.
type anarchonInstance struct {
	c     *client
	store *kvlease.Store
	s     *scheduler.Scheduler
}

// newInstance builds a replica on its own TCP connection: jetstream.NewLeased on a
// kvlease store when leases is set, plain jetstream.New otherwise.
func newInstance(ctx context.Context, srv *embedded.Server, id string, leases, turns bool, onEvent func(scheduler.Event)) (*anarchonInstance, error) {
	c, err := dial(srv, id)
	if err != nil {
		return nil, err
	}
	in := &anarchonInstance{c: c}
	var b backend.Backend
	if leases {
		if in.store, err = newStore(ctx, c); err != nil {
			c.nc.Close()
			return nil, err
		}
		// Every instance of the fleet uses leases: a won lease records nothing
		// before the handler.
		b, err = jetstream.NewLeased(c.js, in.store)
	} else {
		b, err = jetstream.New(c.js)
	}
	if err != nil {
		in.close()
		return nil, err
	}
	in.s, err = scheduler.New(scheduler.Config{Backend: b, Instance: id, OnEvent: onEvent, Turns: turns && leases})
	if err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

func (in *anarchonInstance) close() {
	if in.store != nil {
		in.store.Close()
	}
	in.c.nc.Close()
}

// stopAll stops the schedulers in parallel, each within timeout.
func stopAll(ins []*anarchonInstance, timeout time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ins))
	for i, in := range ins {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			errs[i] = in.s.Stop(ctx)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func startAll(ctx context.Context, ins []*anarchonInstance) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ins))
	for i, in := range ins {
		wg.Go(func() { errs[i] = in.s.Start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// turnsName names a fleet with Config.Turns.
func turnsName(turns bool) string {
	if turns {
		return ", turns"
	}
	return ""
}

func backendName(leases bool) string {
	if leases {
		return "jetstream + kvlease leases"
	}
	return "jetstream, no leases"
}

// runLoad is section 2: cfg.jobs jobs every second on three anarchon instances,
// with kvlease leases or on the plain JetStream backend.
func runLoad(ctx context.Context, cfg config, leases bool) (*loadResult, error) {
	return runFleet(ctx, cfg, fleet{jobs: cfg.jobs, interval: loadInterval, window: cfg.duration, span: span{lead: cfg.warmup, settle: cfg.warmup}, entries: cfg.entries && leases}, leases)
}

// fleet is the shape of one load run: jobs every interval, measured for window
// (whole intervals), opening lead after Start, settling for settle after it.
type fleet struct {
	jobs             int
	interval, window time.Duration
	span
	jitter time.Duration // of every job (0: cfg's)
	// entries makes the jobs schedule entries of one declared job.
	entries bool
}

// runFleet runs f's jobs on three anarchon instances, with kvlease leases or on the
// plain JetStream backend, each instance on its own connection to a fresh server.
func runFleet(ctx context.Context, cfg config, f fleet, leases bool) (*loadResult, error) {
	srv, err := startServer(ctx, "")
	if err != nil {
		return nil, err
	}
	defer cfg.phase("server shut down", srv.Shutdown)

	names := jobNames("load", f.jobs)
	slots := int(f.window / f.interval)
	t := newTally(names, slots, f.interval)
	ev := &eventCounter{t: t, counts: map[string]int64{}}
	res := &loadResult{name: "anarchon, " + backendName(leases) + turnsName(cfg.turns && leases), jobs: f.jobs, duration: f.window, interval: f.interval, jitter: f.jitter, instances: cfg.instances}
	if f.entries {
		res.name += ", schedule entries of one job"
	}

	handler := func(_ context.Context, run scheduler.Run) error {
		name := run.Job
		if run.Entry != "" {
			name = run.Entry
		}
		t.record(name, run.Slot, time.Now())
		return nil
	}
	var ins []*anarchonInstance
	defer cfg.phase("connections closed", func() {
		for _, in := range ins {
			in.close()
		}
	})
	for i := range cfg.instances {
		in, err := newInstance(ctx, srv, fmt.Sprintf("instance-%02d", i+1), leases, cfg.turns, ev.on)
		if err != nil {
			return nil, err
		}
		ins = append(ins, in)
		if f.entries {
			opts := cfg.jobOptions()
			if f.jitter > 0 {
				opts = []scheduler.JobOption{scheduler.WithJitter(f.jitter)}
			}
			if err := in.s.Declare(entriesJob, handler, append(opts, scheduler.WithMaxLate(f.interval))...); err != nil {
				return nil, err
			}
			continue
		}
		for _, name := range names {
			opts := cfg.jobOptions()
			if f.jitter > 0 {
				opts = []scheduler.JobOption{scheduler.WithJitter(f.jitter)}
			}
			if err := in.s.Every(name, f.interval, handler, opts...); err != nil {
				return nil, err
			}
		}
	}
	t0 := time.Now()
	rss0 := rssBytes()
	if err := startAll(ctx, ins); err != nil {
		_ = stopAll(ins, 5*time.Second)
		return nil, err
	}
	if f.entries {
		if err := addEntries(ctx, ins, names, f.interval); err != nil {
			_ = stopAll(ins, 5*time.Second)
			return nil, err
		}
	}
	res.startup = time.Since(t0)
	res.rssStarted = rssBytes() - rss0
	cfg.logf("%d instances started in %v", len(ins), res.startup.Round(time.Millisecond))

	conns := make([]*nats.Conn, len(ins))
	for i, in := range ins {
		conns[i] = in.c.nc
	}
	// Warm-up before the window: the first slots after Start pay for cold caches and
	// stream look-ups.
	obsErr := res.observe(ctx, srv, conns, t, f.span)
	res.events, res.errSample = ev.snapshot()
	if cfg.memProfile != "" {
		writeHeapProfile(cfg, fmt.Sprintf("%s-%s-%djobs", cfg.memProfile, strings.ReplaceAll(backendName(leases), " ", ""), f.jobs))
	}
	cfg.phase("instances stopped", func() {
		if err := stopAll(ins, 10*time.Second); err != nil {
			res.notes = append(res.notes, "Stop (10s each): "+err.Error())
		}
	})
	if obsErr != nil {
		return nil, obsErr
	}
	if n := t.other.Load(); n > 0 {
		res.notes = append(res.notes, fmt.Sprintf("%d runs of unknown jobs", n))
	}
	return res, nil
}

func (l *loadResult) eventsLine() string {
	if len(l.events) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(l.events))
	for k := range l.events {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, l.events[k])
	}
	return strings.Join(parts, ", ")
}

func (l *loadResult) dupLine() string {
	if l.dups == 0 {
		return "0"
	}
	var ks []int
	for k := range l.runsByCount {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%d slots ran %d×", l.runsByCount[k], k)
	}
	return fmt.Sprintf("%d (%s)", l.dups, strings.Join(parts, ", "))
}

func pctOf(n, of int) string {
	if of == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2f%%)", 100*float64(n)/float64(of))
}

// loadMarkdown is section 2's table: one column per run.
func loadMarkdown(runs []*loadResult) string {
	t, row := runColumns("metric", runs)
	row("start-up: Start of the instances in parallel (each prepares every job)", func(l *loadResult) string { return dur(l.startup) })
	row("window measured", func(l *loadResult) string { return dur(l.wall) })
	row("slots due", func(l *loadResult) string { return fmt.Sprint(l.slotsDue) })
	row("runs", func(l *loadResult) string { return fmt.Sprint(l.runs) })
	row("duplicates (must be 0)", func(l *loadResult) string { return fmt.Sprintf("%s %s", l.dupLine(), mark(l.dups == 0)) })
	row("missed (must be 0)", func(l *loadResult) string {
		return fmt.Sprintf("%d%s %s", l.missed, pctOf(l.missed, l.slotsDue), mark(l.missed == 0))
	})
	row("slot lag (handler start − slot) p50 / p99 / max", func(l *loadResult) string {
		if len(l.lag) == 0 {
			return "n/a (nothing ran)"
		}
		return fmt.Sprintf("%s / %s / %s", dur(l.lag.pct(50)), dur(l.lag.pct(99)), dur(l.lag.max()))
	})
	row("CPU per slot (whole process: server + the instances)", func(l *loadResult) string { return dur(l.cpuPerSlot()) })
	row("CPU used (of 2 cores on the reference machine)", func(l *loadResult) string {
		return fmt.Sprintf("%.2f cores", l.cpu.Seconds()/l.wall.Seconds())
	})
	row("client messages per slot, out / in (every instance's connection)", func(l *loadResult) string {
		return perOp(l.clientMsgs.out, l.slotsDue) + " / " + perOp(l.clientMsgs.in, l.slotsDue)
	})
	row("JetStream API requests per slot, by kind (publishes not counted)", func(l *loadResult) string { return l.apiLine() })
	row("process RSS at window start / peak / end", func(l *loadResult) string {
		return fmt.Sprintf("%s / %s / %s", mib(l.rssStart), mib(l.rssPeak), mib(l.rssEnd))
	})
	row("by minute of the window: slot lag p99 / RSS at the minute's end", func(l *loadResult) string { return l.byMinuteLine() })
	row("Go heap in use / goroutines at the end", func(l *loadResult) string {
		return fmt.Sprintf("%s / %d", mib(int64(l.heapEnd)), l.goroutines)
	})
	row("scheduler events of the window's slots", func(l *loadResult) string { return l.eventsLine() })
	row("first error seen", func(l *loadResult) string { return truncate(l.errSample, 240) })
	row("notes", func(l *loadResult) string { return truncate(strings.Join(l.notes, "; "), 240) })
	return t.String()
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// apiSniffer counts the JetStream API requests the server receives, by kind
// ("STREAM.INFO", "STREAM.MSG.GET", "CONSUMER.CREATE", …), on its own connection.
// Publishes to streams are not API requests and are not seen.
type apiSniffer struct {
	c     *client
	sub   *nats.Subscription
	mu    sync.Mutex
	kinds map[string]int64
	n     int64
}

func sniffAPI(srv *embedded.Server) (*apiSniffer, error) {
	c, err := dial(srv, "api-sniffer")
	if err != nil {
		return nil, err
	}
	a := &apiSniffer{c: c, kinds: map[string]int64{}}
	a.sub, err = c.nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		kind := apiKind(m.Subject)
		a.mu.Lock()
		a.kinds[kind]++
		a.n++
		a.mu.Unlock()
	})
	if err == nil {
		err = a.sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = c.nc.Flush()
	}
	if err != nil {
		c.nc.Close()
		return nil, err
	}
	return a, nil
}

// apiKind is the API operation of a JetStream API subject, without the stream or
// consumer names: $JS.API.STREAM.INFO.<stream> → STREAM.INFO.
func apiKind(subject string) string {
	parts := strings.Split(strings.TrimPrefix(subject, "$JS.API."), ".")
	switch {
	case len(parts) >= 3 && parts[0] == "STREAM" && parts[1] == "MSG":
		return "STREAM.MSG." + parts[2]
	case len(parts) >= 3 && parts[0] == "CONSUMER" && (parts[1] == "CREATE" || parts[1] == "DURABLE"):
		return "CONSUMER." + parts[1]
	case len(parts) >= 2:
		return parts[0] + "." + parts[1]
	default:
		return parts[0]
	}
}

func (a *apiSniffer) reset() {
	a.mu.Lock()
	a.kinds, a.n = map[string]int64{}, 0
	a.mu.Unlock()
}

func (a *apiSniffer) snapshot() (map[string]int64, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int64, len(a.kinds))
	for k, v := range a.kinds {
		out[k] = v
	}
	return out, a.n
}

func (a *apiSniffer) close() { a.c.nc.Close() }

func (l *loadResult) apiLine() string {
	if len(l.api) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(l.api))
	for k := range l.api {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return l.api[keys[i]] > l.api[keys[j]] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %s", k, perOp(uint64(l.api[k]), l.slotsDue))
	}
	return strings.Join(parts, ", ")
}

// fleetMarkdown is section 6's table.
// fleetMarkdown is section 6's table: a column per run of the same slots.
func fleetMarkdown(ls ...*loadResult) string {
	head := []string{"metric"}
	for _, l := range ls {
		head = append(head, l.name)
	}
	t := newTable(head...)
	row := func(name string, cell func(l *loadResult) string) {
		cells := []string{name}
		for _, l := range ls {
			cells = append(cells, cell(l))
		}
		t.add(cells...)
	}
	row("jobs × instances", func(l *loadResult) string {
		return fmt.Sprintf("%d every %v × %d (%.0f slots/s), jitter %v", l.jobs, l.interval, l.instances, float64(l.jobs)/l.interval.Seconds(), l.jitter)
	})
	row("start-up: Start of the instances in parallel (each prepares every job); the schedules stored", func(l *loadResult) string { return dur(l.startup) })
	row("process RSS growth over Start / at window start / peak", func(l *loadResult) string {
		return fmt.Sprintf("%s / %s / %s", mib(l.rssStarted), mib(l.rssStart), mib(l.rssPeak))
	})
	row("window measured / slots due / runs", func(l *loadResult) string { return fmt.Sprintf("%s / %d / %d", dur(l.wall), l.slotsDue, l.runs) })
	row("duplicates (must be 0)", func(l *loadResult) string { return fmt.Sprintf("%s %s", l.dupLine(), mark(l.dups == 0)) })
	row("missed (must be 0)", func(l *loadResult) string {
		return fmt.Sprintf("%d%s %s", l.missed, pctOf(l.missed, l.slotsDue), mark(l.missed == 0))
	})
	row("slot lag p50 / p99 / max", func(l *loadResult) string {
		if len(l.lag) == 0 {
			return "n/a (nothing ran)"
		}
		return fmt.Sprintf("%s / %s / %s", dur(l.lag.pct(50)), dur(l.lag.pct(99)), dur(l.lag.max()))
	})
	row("CPU per slot (whole process)", func(l *loadResult) string { return dur(l.cpuPerSlot()) })
	row("client messages per slot, out / in", func(l *loadResult) string {
		return perOp(l.clientMsgs.out, l.slotsDue) + " / " + perOp(l.clientMsgs.in, l.slotsDue)
	})
	row("JetStream API requests per slot", func(l *loadResult) string { return l.apiLine() })
	row("scheduler events of the window's slots", func(l *loadResult) string { return l.eventsLine() })
	row("first error seen", func(l *loadResult) string { return truncate(l.errSample, 240) })
	row("notes", func(l *loadResult) string { return truncate(strings.Join(l.notes, "; "), 240) })
	return t.String()
}

// byMinuteLine is the slot lag p99 and the RSS of each whole minute of a window of
// two minutes or more ("" for a shorter one): how they change as the window's
// stored records, duplicate tables and TTL timers fill up to the duplicate window.
func (l *loadResult) byMinuteLine() string {
	if l.duration < 2*time.Minute {
		return ""
	}
	var parts []string
	for m, lags := range l.lagByMinute {
		if time.Duration(m+1)*time.Minute > l.duration {
			break // a part minute
		}
		rss := "–"
		if m < len(l.rssByMinute) {
			rss = mib(l.rssByMinute[m])
		}
		parts = append(parts, fmt.Sprintf("%d: %s / %s", m+1, dur(lags.pct(99)), rss))
	}
	return strings.Join(parts, "; ")
}

// entriesJob is the one job of a load run on schedule entries.
const entriesJob = "load-entries"

// addEntries stores one entry per name, every interval, through the first
// instance, and waits until every instance follows them all.
func addEntries(ctx context.Context, ins []*anarchonInstance, names []string, interval time.Duration) error {
	sem := make(chan struct{}, 64)
	errs := make(chan error, len(names))
	for _, name := range names {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_, err := ins[0].s.AddEntry(ctx, entriesJob, name, scheduler.EntrySpec{Every: interval})
			errs <- err
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			return fmt.Errorf("add entry: %w", err)
		}
	}
	for _, in := range ins {
		for {
			if n, _ := in.s.EntryCounts(); n == len(names) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}
