package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// The claim rig: one server, and one TCP connection per role so that the message
// counters of a connection move only for the calls measured on it.
//
//	raw    a plain synchronous JetStream publish (the limit a claim is held to)
//	win    jetstream.Backend.Claim of a fresh slot
//	lose   jetstream.Backend.Claim of the same slot by another instance and token
//	lwin   kvlease.Store.Claim of a fresh slot (+ heartbeat, finish on the same store)
//	lrec   LeasedBackend.RecordClaim: the history record a won lease adds
//	llose  kvlease.Store.Claim of a slot another instance holds or finished
const (
	claimJob   = "bench-claim"
	leaseJob   = "bench-lease"
	historyJob = "bench-history"
	rawStream  = "BENCH_RAW"
	rawSubject = "bench.raw"
	// historyRuns is how many finished runs the history job holds (more than the
	// largest read, so the read stops at its limit, not at the start of the stream).
	historyRuns = 120
	benchLease  = 30 * time.Second
)

type claimRig struct {
	srv               *embedded.Server
	ownServer         bool
	raw, rawd         *client
	win, lose         *client
	lwin, lrec, llose *client
	bwin, blose       *jetstream.Backend
	bhist             *jetstream.Backend
	swin, slose       *kvlease.Store
	leased            *jetstream.LeasedBackend
	payload           []byte
	base              time.Time
	slotN, rawN       int64
	claimTTL          string
	leases            bool
	conns             []*client
	closers           []func()
}

// newClaimRig connects to srv (or starts a server when srv is nil) and prepares the
// jobs and streams the measurements use.
func newClaimRig(ctx context.Context, srv *embedded.Server, leases bool) (_ *claimRig, err error) {
	r := &claimRig{srv: srv, leases: leases}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.srv == nil {
		if r.srv, err = startServer(ctx, ""); err != nil {
			return nil, err
		}
		r.ownServer = true
	}
	for _, c := range []struct {
		to   **client
		name string
	}{{&r.raw, "raw"}, {&r.rawd, "raw-dedupe"}, {&r.win, "win"}, {&r.lose, "lose"}, {&r.lwin, "lease-win"}, {&r.lrec, "lease-record"}, {&r.llose, "lease-lose"}} {
		cl, err := dial(r.srv, "bench-"+c.name)
		if err != nil {
			return nil, err
		}
		*c.to = cl
		r.conns = append(r.conns, cl)
	}
	if _, err := r.raw.js.CreateStream(ctx, natsjs.StreamConfig{
		Name: rawStream, Subjects: []string{rawSubject}, Storage: natsjs.FileStorage, MaxMsgs: 100_000,
	}); err != nil {
		return nil, fmt.Errorf("create the raw stream: %w", err)
	}
	// A payload the size of a claim record, so the raw publish carries as much.
	r.payload = []byte(fmt.Sprintf(`{"v":1,"job":%q,"slot":1767225600000,"token":%q,"instance":"bench-win","attempt":1,"at":"2026-01-01T00:00:00.000000000Z","history":100}`, claimJob, newToken()))

	for _, b := range []struct {
		to **jetstream.Backend
		c  *client
	}{{&r.bwin, r.win}, {&r.blose, r.lose}, {&r.bhist, r.win}} {
		be, err := jetstream.New(b.c.js)
		if err != nil {
			return nil, err
		}
		if err := be.Init(ctx); err != nil {
			return nil, err
		}
		*b.to = be
	}
	for _, job := range []string{claimJob, historyJob} {
		if err := r.bwin.PrepareJob(ctx, jobLimits(job, time.Second, 2*historyRuns)); err != nil {
			return nil, err
		}
	}
	r.base = time.Now().Truncate(time.Second)
	// The claim's own TTL: the stream's duplicate window plus a second (jetstream/claimTTL).
	st, err := r.rawd.js.Stream(ctx, "ANARCHON_"+claimJob)
	if err != nil {
		return nil, fmt.Errorf("the claim stream: %w", err)
	}
	r.claimTTL = fmt.Sprintf("%ds", int64((st.CachedInfo().Config.Duplicates+time.Second-1)/time.Second)+1)

	if leases {
		if r.swin, err = newStore(ctx, r.lwin); err != nil {
			return nil, err
		}
		if r.slose, err = newStore(ctx, r.llose); err != nil {
			return nil, err
		}
		// The losing store is a backup's: its shared watcher runs, as it does in a
		// scheduler from the first time the store stood by (a watch of a slot
		// nobody holds closes at once; the watcher stays).
		if _, err := r.slose.WatchRun(ctx, leaseJob, time.UnixMilli(1)); err != nil {
			return nil, fmt.Errorf("the backup's watcher: %w", err)
		}
		srec, err := newStore(ctx, r.lrec)
		if err != nil {
			return nil, err
		}
		r.closers = append(r.closers, r.swin.Close, r.slose.Close, srec.Close)
		if r.leased, err = jetstream.NewLeased(r.lrec.js, srec); err != nil {
			return nil, err
		}
		if err := r.leased.Init(ctx); err != nil {
			return nil, err
		}
		if err := r.leased.PrepareJob(ctx, jobLimits(leaseJob, time.Second, 100)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func newStore(ctx context.Context, c *client) (*kvlease.Store, error) {
	st, err := kvlease.New(c.js)
	if err != nil {
		return nil, err
	}
	if err := st.Init(ctx); err != nil {
		return nil, fmt.Errorf("kvlease init: %w", err)
	}
	return st, nil
}

func (r *claimRig) close() {
	for _, f := range r.closers {
		f()
	}
	for _, c := range r.conns {
		c.nc.Close()
	}
	if r.ownServer && r.srv != nil {
		r.srv.Shutdown()
	}
}

// nextSlot is a slot nobody has claimed yet: one millisecond after the last.
func (r *claimRig) nextSlot() time.Time {
	r.slotN++
	return r.base.Add(time.Duration(r.slotN) * time.Millisecond)
}

func (r *claimRig) publishRaw(ctx context.Context) error {
	_, err := r.raw.js.Publish(ctx, rawSubject, r.payload)
	return err
}

// publishDedupe is the server's floor for a claim: what Claim publishes (into the
// claim stream, on a subject of its own, with a new Nats-Msg-Id and the claim's
// Nats-TTL), sent with a plain PublishMsg, without anything anarchon does around it.
func (r *claimRig) publishDedupe(ctx context.Context) error {
	r.rawN++
	m := nats.NewMsg("anarchon." + claimJob + ".claim.raw" + strconv.FormatInt(r.rawN, 10))
	m.Data = r.payload
	m.Header.Set(natsjs.MsgIDHeader, "raw:"+strconv.FormatInt(r.rawN, 10))
	m.Header.Set(natsjs.MsgTTLHeader, r.claimTTL)
	_, err := r.rawd.js.PublishMsg(ctx, m)
	return err
}

func (r *claimRig) claim(ctx context.Context, b *jetstream.Backend, slot time.Time, instance string, want bool) error {
	won, err := b.Claim(ctx, claimInput(claimJob, slot, newToken(), instance))
	if err != nil {
		return err
	}
	if won != want {
		return fmt.Errorf("claim of slot %s by %s: won=%v, want %v", slot.Format(time.StampMilli), instance, won, want)
	}
	return nil
}

// leaseClaim claims run for instance on st and checks the outcome is want.
func (r *claimRig) leaseClaim(ctx context.Context, st *kvlease.Store, run backend.RunKey, instance string, want backend.ClaimOutcome) error {
	res, err := st.Claim(ctx, backend.RunClaim{
		Job: run.Job, Slot: run.Slot, Token: run.Token, Instance: instance, Lease: benchLease,
		Deadline: time.Now().Add(time.Hour), Keep: 2 * time.Minute,
	})
	if err != nil {
		return err
	}
	if res.Outcome != want {
		return fmt.Errorf("lease claim of slot %s by %s: %s, want %s", run.Slot.Format(time.StampMilli), instance, res.Outcome, want)
	}
	return nil
}

// fillHistory stores historyRuns finished runs of the history job.
func (r *claimRig) fillHistory(ctx context.Context) error {
	slot := r.base.Add(-time.Hour)
	for i := range historyRuns {
		slot = slot.Add(time.Second)
		in := claimInput(historyJob, slot, newToken(), "bench-win")
		in.HistorySize = 2 * historyRuns
		won, err := r.bhist.Claim(ctx, in)
		if err != nil {
			return err
		}
		if !won {
			return fmt.Errorf("history run %d: claim lost", i)
		}
		now := time.Now()
		if err := r.bhist.SaveResult(ctx, historyJob, backend.StoredResult{
			Slot: slot, Token: in.Token, Instance: in.Instance, Attempt: 1, Status: scheduler.StatusOK,
			StartedAt: now, FinishedAt: now,
		}, backend.Retention{Size: 2 * historyRuns}); err != nil {
			return err
		}
	}
	return nil
}

func (r *claimRig) history(ctx context.Context, limit int) error {
	recs, err := r.bhist.History(ctx, historyJob, limit)
	if err != nil {
		return err
	}
	if len(recs) != limit {
		return fmt.Errorf("history(%d) returned %d records", limit, len(recs))
	}
	return nil
}

func jobLimits(job string, interval time.Duration, history int) backend.JobLimits {
	return backend.JobLimits{
		Job: job, Schedule: "every " + interval.String(), Interval: interval, MaxLate: interval,
		Lease: benchLease, Retention: backend.Retention{Size: history},
	}
}

func claimInput(job string, slot time.Time, token, instance string) backend.ClaimInput {
	return backend.ClaimInput{
		Job: job, Slot: slot, Token: token, Instance: instance, Attempt: 1, At: time.Now(),
		HistorySize: scheduler.DefaultHistorySize,
	}
}

func newToken() string { return strings.ToLower(rand.Text()) }

// op is the latency sample and message count of one measured call.
type op struct {
	name, goal string
	conn       *nats.Conn
	lat        durations
	msgs       msgs
	// spy, when set, counts the requests of each call (a pass apart from the timed
	// one, so the spy's copies cost the timed calls nothing): reqs over reqN calls.
	spy        *reqSpy
	reqs, reqN int64
	// starts are the indexes in lat where each trial's samples begin.
	starts []int
}

// startTrial marks where o's samples of the next trial begin.
func (o *op) startTrial() { o.starts = append(o.starts, len(o.lat)) }

// trial returns o's samples of trial i.
func (o *op) trial(i int) durations {
	end := len(o.lat)
	if i+1 < len(o.starts) {
		end = o.starts[i+1]
	}
	return o.lat[o.starts[i]:end]
}

// reqSpy counts requests on the server: messages with a reply subject on the
// subjects the claim rig uses. A request and its answer are one round trip; a
// message published without a reply (an atomic batch's messages before its commit,
// a purge that asks for no answer) is none, and a batched direct get (many answers
// to one request) is one.
type reqSpy struct {
	nc   *nats.Conn
	subs []*nats.Subscription
	n    int64
}

func newReqSpy(srv *embedded.Server) (*reqSpy, error) {
	c, err := dial(srv, "bench-spy")
	if err != nil {
		return nil, err
	}
	sp := &reqSpy{nc: c.nc}
	for _, subj := range []string{"$JS.API.>", "$KV.>", "anarchon.>", "bench.>"} {
		sub, err := c.nc.SubscribeSync(subj)
		if err != nil {
			c.nc.Close()
			return nil, err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			c.nc.Close()
			return nil, err
		}
		sp.subs = append(sp.subs, sub)
	}
	return sp, c.nc.Flush()
}

// settle returns the count once every request sent on conn so far has been read:
// the server routes them to the spy before it answers conn's flush, and they are
// queued on the spy's synchronous subscriptions before it answers the spy's.
func (sp *reqSpy) settle(conn *nats.Conn) (int64, error) {
	if err := conn.Flush(); err != nil {
		return 0, err
	}
	if err := sp.nc.Flush(); err != nil {
		return 0, err
	}
	for _, sub := range sp.subs {
		n, _, err := sub.Pending()
		if err != nil {
			return 0, err
		}
		for range n {
			m, err := sub.NextMsg(time.Second)
			if err != nil {
				return 0, err
			}
			if m.Reply != "" {
				sp.n++
			}
		}
	}
	return sp.n, nil
}

// roundTrips is the requests per call counted by the spy, -1 when not counted.
func (o *op) roundTrips() float64 {
	if o.reqN == 0 {
		return -1
	}
	return float64(o.reqs) / float64(o.reqN)
}

func (o *op) n() int { return len(o.lat) }

// do times f and counts the messages it moved on o's connection; with a spy set it
// counts f's requests instead of timing it.
func (o *op) do(record bool, f func() error) error {
	if o.spy != nil {
		before, err := o.spy.settle(o.conn)
		if err != nil {
			return err
		}
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
		after, err := o.spy.settle(o.conn)
		if err != nil {
			return err
		}
		o.reqs += after - before
		o.reqN++
		return nil
	}
	before := counters(o.conn)
	t0 := time.Now()
	err := f()
	d := time.Since(t0)
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if record {
		o.lat = append(o.lat, d)
		o.msgs = o.msgs.add(counters(o.conn).sub(before))
	}
	return nil
}

func (m msgs) add(o msgs) msgs { return msgs{out: m.out + o.out, in: m.in + o.in} }

// claimResult is section 1.
type claimResult struct {
	samples   int
	trials    int
	raw       *op
	rawDedupe *op
	win       *op
	lose      *op
	leased    []*op // nil without leases
	// mixedPath is a won lease as the scheduler takes it WithMixedFleet:
	// Store.Claim then RecordClaim, summed per slot.
	mixedPath *op
	// leasedPath is the default path: the lease claim alone before the handler.
	leasedPath    *op
	lloseRun, fin *op
	history       []*op
	lastRuns      *op
}

// countPasses is how many times the counting pass runs every operation.
const countPasses = 20

// measureClaims runs section 1: n interleaved samples of each operation.
func measureClaims(ctx context.Context, cfg config) (*claimResult, error) {
	r, err := newClaimRig(ctx, nil, cfg.leases)
	if err != nil {
		return nil, err
	}
	defer r.close()

	res := &claimResult{
		samples:   cfg.samples,
		raw:       &op{name: "raw synchronous JetStream publish (plain stream, no headers)", conn: r.raw.nc},
		rawDedupe: &op{name: "raw publish of a claim's message (claim stream, new subject, new `Nats-Msg-Id`, `Nats-TTL`), no backend", conn: r.rawd.nc},
		win:       &op{name: "claim won: `jetstream.Backend.Claim`", conn: r.win.nc, goal: "ratio ≤ 1.3, 1 round trip"},
		lose:      &op{name: "claim lost: `jetstream.Backend.Claim`, slot already claimed", conn: r.lose.nc, goal: "1 round trip"},
	}
	plain := func(i int, record bool) error {
		slot := r.nextSlot()
		seq := []func() error{
			func() error { return res.raw.do(record, func() error { return r.publishRaw(ctx) }) },
			func() error { return res.rawDedupe.do(record, func() error { return r.publishDedupe(ctx) }) },
			func() error {
				return res.win.do(record, func() error { return r.claim(ctx, r.bwin, slot, "bench-win", true) })
			},
			func() error {
				return res.lose.do(record, func() error { return r.claim(ctx, r.blose, slot, "bench-lose", false) })
			},
		}
		// Rotate the order so that no operation always runs first after a pause; the
		// lost claim needs the won one before it.
		k := i % len(seq)
		seq = append(seq[k:], seq[:k]...)
		if k == 3 {
			seq[0], seq[len(seq)-1] = seq[len(seq)-1], seq[0]
		}
		for _, f := range seq {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	}

	var lwin, lrec, lloseRun, hb, fin, lloseDone, rtry, rtake *op
	leased := func(bool) error { return nil }
	if cfg.leases {
		lwin = &op{name: "lease claim won: `kvlease.Store.Claim`", conn: r.lwin.nc}
		lrec = &op{name: "history record of a won lease: `LeasedBackend.RecordClaim`", conn: r.lrec.nc}
		lloseRun = &op{name: "lease claim lost, holder running: `Store.Claim` → running (a backup's store, its shared watcher running)", conn: r.llose.nc}
		hb = &op{name: "lease heartbeat: `Store.Heartbeat`", conn: r.lwin.nc}
		fin = &op{name: "lease finish: `Store.Finish`", conn: r.lwin.nc}
		lloseDone = &op{name: "lease claim lost, slot finished: `Store.Claim` → done (the same backup, after the holder's finish reached its watcher)", conn: r.llose.nc}
		rtry = &op{name: "failed attempt stores its retry: `Store.Retry` (lease released, retry due at once)", conn: r.lwin.nc}
		rtake = &op{name: "retry claimed by another replica: `Store.Claim` → won, attempt 2 (compare: lease claim won)", conn: r.llose.nc}
		res.leased = []*op{lwin, lrec, lloseRun, hb, fin, lloseDone, rtry, rtake}
		res.mixedPath = &op{name: "leased win path `WithMixedFleet` (a rolling upgrade): Claim + RecordClaim before the handler"}
		res.leasedPath = &op{name: "leased win path, default options: Claim alone before the handler"}
		leased = func(record bool) error {
			slot := r.nextSlot()
			tok := newToken()
			run := backend.RunKey{Job: leaseJob, Slot: slot, Token: tok}
			steps := []struct {
				o *op
				f func() error
			}{
				{lwin, func() error { return r.leaseClaim(ctx, r.swin, run, "bench-win", backend.OutcomeWon) }},
				{lrec, func() error {
					in := claimInput(leaseJob, slot, tok, "bench-win")
					return r.leased.RecordClaim(ctx, in)
				}},
				{lloseRun, func() error {
					return r.leaseClaim(ctx, r.slose, backend.RunKey{Job: leaseJob, Slot: slot, Token: newToken()}, "bench-lose", backend.OutcomeRunning)
				}},
				{hb, func() error {
					return r.swin.Heartbeat(ctx, run, benchLease)
				}},
				{fin, func() error {
					return r.swin.Finish(ctx, run, scheduler.StatusOK)
				}},
				{lloseDone, func() error {
					return r.leaseClaim(ctx, r.slose, backend.RunKey{Job: leaseJob, Slot: slot, Token: newToken()}, "bench-lose", backend.OutcomeDone)
				}},
			}
			// A second slot whose first attempt fails: its retry, claimed by the backup.
			rslot := r.nextSlot()
			retried := backend.RunKey{Job: leaseJob, Slot: rslot, Token: newToken()}
			steps = append(steps, []struct {
				o *op
				f func() error
			}{
				{rtry, func() error {
					return r.swin.Retry(ctx, retried, 0, time.Minute)
				}},
				{rtake, func() error {
					return r.leaseClaim(ctx, r.slose, backend.RunKey{Job: leaseJob, Slot: rslot, Token: newToken()}, "bench-lose", backend.OutcomeWon)
				}},
			}...)
			if err := r.leaseClaim(ctx, r.swin, retried, "bench-win", backend.OutcomeWon); err != nil {
				return err
			}
			for _, s := range steps {
				if err := s.o.do(record, s.f); err != nil {
					return err
				}
			}
			if record && lwin.spy == nil {
				n := lwin.n() - 1
				res.mixedPath.lat = append(res.mixedPath.lat, lwin.lat[n]+lrec.lat[n])
				res.leasedPath.lat = append(res.leasedPath.lat, lwin.lat[n])
			}
			return nil
		}
	}

	if err := r.fillHistory(ctx); err != nil {
		return nil, fmt.Errorf("fill history: %w", err)
	}
	for _, limit := range []int{10, 100} {
		res.history = append(res.history, &op{name: fmt.Sprintf("history read of %d records: `Backend.History`", limit), conn: r.win.nc})
	}
	res.lastRuns = &op{name: "last run, success and failure of 2 jobs: `Backend.LastRuns` (`backend.LastRunsReader`)", conn: r.win.nc}
	reads := []struct {
		o *op
		n int
		f func() error
	}{
		{res.history[0], max(cfg.samples/10, 20), func() error { return r.history(ctx, 10) }},
		{res.history[1], max(cfg.samples/40, 10), func() error { return r.history(ctx, 100) }},
		{res.lastRuns, max(cfg.samples/10, 20), func() error {
			got, err := r.bhist.LastRuns(ctx, []string{historyJob, claimJob})
			if err == nil && (got[historyJob].Success == nil || len(got) != 2) {
				err = fmt.Errorf("LastRuns: %+v", got)
			}
			return err
		}},
	}

	// Trials: each is the interleaved loop over its share of the samples, after a
	// warm-up (a shorter one once the connections are warm), then the reads.
	all := append([]*op{res.raw, res.rawDedupe, res.win, res.lose}, res.leased...)
	timed := append(slices.Clone(all), res.history...)
	timed = append(timed, res.lastRuns)
	if res.mixedPath != nil {
		timed = append(timed, res.mixedPath, res.leasedPath)
	}
	res.trials = cfg.claimTrials
	warm := firstWarmup(cfg.samples)
	round := 0
	for t := range cfg.claimTrials {
		for _, o := range timed {
			o.startTrial()
		}
		n := share(cfg.samples, cfg.claimTrials, t)
		for i := range warm + n {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			record := i >= warm
			if err := plain(round, record); err != nil {
				return nil, err
			}
			if err := leased(record); err != nil {
				return nil, err
			}
			round++
		}
		for _, rd := range reads {
			if err := timeCalls(rd.o, share(rd.n, cfg.claimTrials, t), rd.f); err != nil {
				return nil, err
			}
		}
		warm = laterWarmup(cfg.samples)
	}

	// A counting pass, untimed: every operation again with the request spy.
	spy, err := newReqSpy(r.srv)
	if err != nil {
		return nil, err
	}
	defer spy.nc.Close()
	for _, o := range all {
		o.spy = spy
	}
	for i := range countPasses {
		if err := plain(i, false); err != nil {
			return nil, err
		}
		if err := leased(false); err != nil {
			return nil, err
		}
	}
	for _, o := range all {
		o.spy = nil
	}
	if res.mixedPath != nil {
		res.mixedPath.msgs = lwin.msgs.add(lrec.msgs)
		res.mixedPath.reqs, res.mixedPath.reqN = lwin.reqs+lrec.reqs, lwin.reqN
		res.leasedPath.msgs = lwin.msgs
		res.leasedPath.reqs, res.leasedPath.reqN = lwin.reqs, lwin.reqN
		res.lloseRun, res.fin = lloseRun, fin
	}
	for _, rd := range reads {
		if err := countCalls(rd.o, spy, 3, rd.f); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// firstWarmup is the warm-up rounds of the first trial, laterWarmup of the others.
func firstWarmup(samples int) int { return min(100, samples/5+1) }
func laterWarmup(samples int) int { return min(20, firstWarmup(samples)) }

// share is trial t's part of n samples split over trials: the parts differ by at
// most one and add up to n.
func share(n, trials, t int) int { return n*(t+1)/trials - n*t/trials }

// timeCalls times n calls of f after 3 warm-up calls.
func timeCalls(o *op, n int, f func() error) error {
	for i := range n + 3 {
		if err := o.do(i >= 3, f); err != nil {
			return err
		}
	}
	return nil
}

// countCalls counts the requests of n calls of f with spy.
func countCalls(o *op, spy *reqSpy, n int, f func() error) error {
	o.spy = spy
	defer func() { o.spy = nil }()
	for range n {
		if err := o.do(false, f); err != nil {
			return err
		}
	}
	return nil
}

// spread is a ratio measured once per trial: the median of the trials and their
// range.
type spread struct {
	med, lo, hi float64
	n           int // trials with a ratio
}

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	s := slices.Sorted(slices.Values(v))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return spread{med: m, lo: s[0], hi: s[len(s)-1], n: len(s)}
}

// String is the median with the range in brackets when the trials differ.
func (s spread) String() string {
	switch {
	case s.n == 0:
		return "n/a"
	case s.lo == s.hi:
		return fmt.Sprintf("%.2f", s.med)
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.med, s.lo, s.hi)
}

// withTrials is String with the number of trials in the brackets, the median to
// three decimals: a goal judged on it never reads as met when it was not.
func (s spread) withTrials() string {
	switch {
	case s.n == 0:
		return "n/a"
	case s.n == 1:
		return fmt.Sprintf("%.3f (1 trial)", s.med)
	}
	return fmt.Sprintf("%.3f (%.2f–%.2f, %d trials)", s.med, s.lo, s.hi, s.n)
}

// trialRatios is a's p-th percentile over b's in each trial that has samples of
// both.
func trialRatios(a, b *op, p float64) spread {
	var v []float64
	for i := range min(len(a.starts), len(b.starts)) {
		x, y := a.trial(i), b.trial(i)
		if len(x) == 0 || len(y) == 0 {
			continue
		}
		if r := ratioOf(x.pct(p), y.pct(p)); r > 0 {
			v = append(v, r)
		}
	}
	return spreadOf(v)
}

// winRatio is a plain claim won's p50 over the claim-shaped raw publish's, per trial.
func (c *claimResult) winRatio() spread { return trialRatios(c.win, c.rawDedupe, 50) }

// winGoalMet: a plain claim won costs at most 5% more than the server's own cost of
// a claim-shaped publish, in the median trial.
func (c *claimResult) winGoalMet() bool {
	r := c.winRatio()
	return r.n > 0 && r.med <= 1.05
}

// leasedRatio is the default leased win path's p50 before the handler over a
// raw publish's, per trial.
func (c *claimResult) leasedRatio() spread {
	if c.leasedPath == nil {
		return spread{}
	}
	return trialRatios(c.leasedPath, c.raw, 50)
}

// leasedGoalMet: the leased win path before the handler within twice a raw publish,
// in the median trial.
func (c *claimResult) leasedGoalMet() bool {
	r := c.leasedRatio()
	return r.n > 0 && r.med <= 2
}

func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func (c *claimResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d samples of each operation in %d trials, interleaved in the same loop (order rotated), each trial after a warm-up "+
		"(%d rounds before the first, %d before the others), the history reads timed at the end of each trial; each role on its own TCP connection. "+
		"p50 and p99 are over all the samples; a ratio is the operation's percentile over the raw publish's in the same trial, "+
		"the median of the trials with their range in brackets. "+
		"Round trips = requests per call (messages sent with a reply subject, counted on the server by a subscriber in a separate untimed pass of %d calls; "+
		"an atomic batch's messages before its commit have none, a batched direct get is one request however many messages answer it); "+
		"messages out / in from `nats.Conn.Stats()` deltas of the timed calls.\n\n", c.samples, c.trials, firstWarmup(c.samples), laterWarmup(c.samples), countPasses)
	t := newTable("operation", "p50", "p99", "p50 / raw", "p99 / raw", "round trips per call", "msgs out / in per call", "goal")
	row := func(o *op, goal string) {
		rt := "n/a"
		if v := o.roundTrips(); v >= 0 {
			rt = fmt.Sprintf("%.2f", v)
		}
		t.add(o.name, dur(o.lat.pct(50)), dur(o.lat.pct(99)), trialRatios(o, c.raw, 50).String(), trialRatios(o, c.raw, 99).String(),
			rt, perOp(o.msgs.out, o.n())+" / "+perOp(o.msgs.in, o.n()), goal)
	}
	row(c.raw, "the limit")
	row(c.rawDedupe, "the server's own cost of a claim")
	row(c.win, fmt.Sprintf("%s p50 ≤ 1.05 × the claim-shaped raw publish: %s; %s 1 round trip",
		mark(c.winGoalMet()), c.winRatio().withTrials(), mark(c.win.roundTrips() == 1)))
	row(c.lose, fmt.Sprintf("%s 1 round trip", mark(c.lose.roundTrips() == 1)))
	for _, o := range c.leased {
		switch o {
		case c.lloseRun:
			row(o, fmt.Sprintf("%s ≤ 2 round trips", mark(o.roundTrips() <= 2)))
		case c.fin:
			row(o, fmt.Sprintf("%s 1 round trip", mark(o.roundTrips() == 1)))
		default:
			row(o, "")
		}
	}
	if c.mixedPath != nil {
		row(c.mixedPath, "")
		row(c.leasedPath, fmt.Sprintf("%s ≤ 2 round trips; %s p50 ≤ 2 × raw: %s", mark(c.leasedPath.roundTrips() <= 2), mark(c.leasedGoalMet()), c.leasedRatio().withTrials()))
	}
	for _, o := range c.history {
		goal := ""
		if strings.Contains(o.name, "100 records") {
			goal = fmt.Sprintf("%s ≤ 3 round trips; %s p50 ≤ 2 ms", mark(o.roundTrips() <= 3), mark(o.lat.pct(50) <= 2*time.Millisecond))
		}
		row(o, goal)
	}
	if c.lastRuns != nil {
		row(c.lastRuns, "")
	}
	b.WriteString(t.String())
	return b.String()
}
